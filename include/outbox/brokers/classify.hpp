// Turning a transport result into what the worker should do with the row.
// Design §1 "Guarantees": an outage defers without spending the retry budget, a rejection spends
// one attempt and backs off, a permanent failure goes to the dead letters at once.
#pragma once

#include <string>

#include "outbox/message.hpp"

namespace outbox {

// HTTP status of a completed exchange: 2xx Delivered; 408, 425, 429, 5xx Retry; 410 Gone (the
// endpoint wants no more webhooks: the destination is paused); everything else
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

// AMQP 0-9-1 (RabbitMQ) reply codes, as in channel.close, connection.close and basic.return.
// The name of a reply code ("NO_ROUTE" for 312...), or "" for a code AMQP does not define.
const char *AmqpReplyCodeName(int reply_code);

// A message the broker returned (basic.return, mandatory publish): NO_ROUTE (312) and
// NO_CONSUMERS (313) are Dead (no queue is bound for its routing key, and publishing it again
// changes nothing); anything else Retry.
OutcomeKind ClassifyAmqpReturn(int reply_code);

// The messages still unconfirmed when the broker closed the channel with `reply_code`.
// NOT_FOUND (404: no such exchange), ACCESS_REFUSED (403), NOT_ALLOWED (530) and
// NOT_IMPLEMENTED (540) are Dead: every message to this exchange fails the same way.
// CONNECTION_FORCED (320) is Defer. Anything else (PRECONDITION_FAILED, RESOURCE_ERROR,
// INTERNAL_ERROR...) is Retry: the broker saw the messages and one of them may be the cause.
OutcomeKind ClassifyAmqpChannelClose(int reply_code);

// The messages still unconfirmed when the connection ended. `reply_code` is the broker's
// connection.close code, or 0 when the connection was lost (socket error, heartbeat timeout,
// connection refused, failed login). 0 and CONNECTION_FORCED (320, the broker is shutting
// down) are Defer: an outage (a message the broker took before it went may come twice,
// which at-least-once allows). Anything else the broker said (INTERNAL_ERROR,
// FRAME_ERROR...) is Retry.
OutcomeKind ClassifyAmqpConnectionEnd(int reply_code);

// A JetStream publish outcome from cnats: `nats_status` a natsStatus, `js_error` a jsErrCode
// (0 when the server sent none), `connection_lost` whether the connection was down at some
// point while the PubAck was awaited. NATS_OK: Delivered (a duplicate acknowledged as such
// too: the stream has the message). NATS_NO_RESPONDERS (no stream listens on the subject),
// NATS_MAX_PAYLOAD, NATS_NOT_PERMITTED, and JetStream errors that repeat for this message
// (stream not found or not matching, message over the stream's maximum size, wrong expected
// sequence or id): Dead. Connection errors, and a timeout while the connection was lost:
// Defer. A timeout on a live connection, storage and resource limits, cluster unavailable and
// everything else: Retry. `just_connected`: the connection (re)started moments ago, when a
// restarted server's JetStream may not answer yet — no responders and "JetStream not enabled"
// are then an outage (Defer), not a missing stream.
OutcomeKind ClassifyNatsPublish(int nats_status, int js_error, bool connection_lost,
                                bool just_connected = false);
// The messages librdkafka purged from its queue after a fatal producer error `fatal_err` (an
// rd_kafka_resp_err_t, from rd_kafka_fatal_error). They were never sent. Authorization
// failures (CLUSTER_AUTHORIZATION_FAILED: the principal may write no topic, so the idempotent
// producer gets no producer id; TOPIC_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED) are permanent:
// Dead. Any other fatal error is the producer's own state: Defer (the producer is rebuilt).
OutcomeKind ClassifyKafkaFatal(int fatal_err);

// What a Kafka error means beyond librdkafka's own text, for last_error (a sentence in
// parentheses, or "" when there is nothing to add).
struct KafkaErrorContext {
    int err = 0;                 // rd_kafka_resp_err_t
    size_t message_bytes = 0;    // the message's key, value and headers (0: unknown)
    size_t batch_size = 0;       // the producer's batch.size
    std::string sasl_mechanism;  // the producer's sasl.mechanisms ("" when none)
    int librdkafka_version = 0;  // rd_kafka_version(): 0xMMmmrrpp
};
// - MSG_SIZE_TOO_LARGE for a message smaller than batch.size: the broker checks whole record
//   batches against the topic's max.message.bytes, so messages below it may be refused
//   together: set batch.size to at most max.message.bytes.
// - CLUSTER_AUTHORIZATION_FAILED: an idempotent producer's principal needs WRITE on the topic
//   (Kafka 3.0+ no longer needs IDEMPOTENT_WRITE on the cluster).
// - _AUTHENTICATION with SCRAM and librdkafka before 2.6.1: such versions cannot do SCRAM with
//   Apache Kafka 4.x brokers (they reject the client's nonce), whatever the password.
std::string KafkaErrorHint(const KafkaErrorContext &context);

}  // namespace outbox
