// The sqs kind: turning SQS's answers into what the worker should do with the row. Design §1
// "Guarantees": an outage defers without spending the retry budget, a rejection spends one
// attempt and backs off, a permanent failure goes to the dead letters at once.
#pragma once

#include <string_view>

#include "outbox/message.hpp"

namespace outbox {

// A failed entry of SendMessageBatch: SenderFault true (the message itself is refused:
// InvalidMessageContents, a missing or bad MessageGroupId...) is Dead; false (SQS's own
// trouble) is Retry.
OutcomeKind ClassifySqsEntryFailure(bool sender_fault, std::string_view code);

// A whole request answered with an HTTP error. Throttling, 5xx and SQS's internal errors:
// Retry. The queue does not exist, access is denied (the credentials may not send to the
// queue), KMS refuses the queue's key, the request is invalid: Dead, with the server's
// reason. Credentials SQS does not know or whose signature or token does not verify
// (InvalidClientTokenId, SignatureDoesNotMatch, ExpiredToken...): Retry, so that rotated or
// refreshed credentials (alter_destination) get the messages through before max_attempts.
// Anything else: Retry.
OutcomeKind ClassifySqsRequestError(long http_status, std::string_view code);

// Whether a request's HTTP status decides its outcome (`curl_code` the transfer's CURLcode). A
// complete answer's does; so does an error status whose body was cut off (SQS has refused the
// request by then). A 2xx whose body was cut off does not: the per-entry results went with the
// connection (a server going away mid-answer), so ClassifySqsTransport decides, as for a request
// with no answer.
bool SqsStatusDecides(long http_status, int curl_code);

// A request that got no HTTP answer (`curl_code` a CURLcode). Nothing sent, or the connection
// refused, reset or closed before an answer: Defer (the server is unreachable; sending the
// batch again is safe, a FIFO queue drops the copy by its deduplication id and consumers of a
// standard queue dedup by event id). A timeout on a connection that took the request: Retry.
// Local misuse (bad CA file, bad option): Dead.
OutcomeKind ClassifySqsTransport(int curl_code, bool request_sent);

}  // namespace outbox
