// Turning a transport result into what the worker should do with the row.
// Design §1 "Guarantees": an outage defers without spending the retry budget, a rejection spends
// one attempt and backs off, a permanent failure goes to the dead letters at once.
#pragma once

#include <string>

#include "outbox/message.hpp"

namespace outbox {

// HTTP status of a completed exchange: 2xx Delivered; 408, 425, 429, 5xx Retry; everything else
// (1xx, 3xx, other 4xx, and nonsense such as 0 or 600+) Dead.
OutcomeKind ClassifyHttpStatus(long status);

// A libcurl transfer that produced no HTTP status. `curl_code` is a CURLcode. Connection refused,
// DNS failure, TLS handshake failure and connect timeouts are Defer (the endpoint never saw the
// request). A timeout or failure after the request was sent is Retry (it may have acted on it).
// Local misuse that cannot get better (e.g. CURLE_URL_MALFORMAT, unsupported protocol,
// bad local CA file) is Dead.
OutcomeKind ClassifyCurlResult(int curl_code, bool request_sent);

// A librdkafka delivery report error (`err` is an rd_kafka_resp_err_t, `status` an
// rd_kafka_msg_status_t). No error and status PERSISTED: Delivered. Transport, all brokers down,
// resolve failure, message timed out (no broker answered in time), purged from the queue: Defer.
// Permanent errors (MSG_SIZE_TOO_LARGE, _MSG_SIZE_TOO_LARGE, TOPIC_AUTHORIZATION_FAILED,
// CLUSTER_AUTHORIZATION_FAILED, INVALID_RECORD, CORRUPT_MESSAGE, RECORD_LIST_TOO_LARGE,
// UNKNOWN_TOPIC_OR_PART / _UNKNOWN_TOPIC when the topic cannot exist, INVALID_TOPIC_EXCEPTION,
// _INVALID_ARG, _UNKNOWN_PARTITION): Dead. Everything else, including a success report whose
// status is not PERSISTED: Retry.
OutcomeKind ClassifyKafkaResult(int err, int status);

}  // namespace outbox
