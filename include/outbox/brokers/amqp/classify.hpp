// The amqp kind: turning a transport result into what the worker should do with the row.
// Design §1 "Guarantees": an outage defers without spending the retry budget, a rejection spends
// one attempt and backs off, a permanent failure goes to the dead letters at once.
#pragma once

#include "outbox/message.hpp"

namespace outbox {

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

}  // namespace outbox
