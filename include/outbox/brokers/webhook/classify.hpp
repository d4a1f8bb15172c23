// The webhook kind: turning a transport result into what the worker should do with the row.
// Design §1 "Guarantees": an outage defers without spending the retry budget, a rejection spends
// one attempt and backs off, a permanent failure goes to the dead letters at once.
#pragma once

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

}  // namespace outbox
