// The amqp kind's outcome classification. Design §1 "Guarantees": a Defer must only be returned
// when the destination certainly did not act on the message, because a Defer never spends the retry
// budget; anything doubtful is a Retry, which does.
#include "outbox/brokers/amqp/classify.hpp"
#include "outbox/brokers/amqp/rabbitmq_c.hpp"

namespace outbox {

// The AMQP 0-9-1 name of a reply code.
const char *AmqpReplyCodeName(int reply_code) {
    switch (reply_code) {
        case AMQP_REPLY_SUCCESS:
            return "REPLY_SUCCESS";
        case AMQP_CONTENT_TOO_LARGE:
            return "CONTENT_TOO_LARGE";
        case AMQP_NO_ROUTE:
            return "NO_ROUTE";
        case AMQP_NO_CONSUMERS:
            return "NO_CONSUMERS";
        case AMQP_ACCESS_REFUSED:
            return "ACCESS_REFUSED";
        case AMQP_NOT_FOUND:
            return "NOT_FOUND";
        case AMQP_RESOURCE_LOCKED:
            return "RESOURCE_LOCKED";
        case AMQP_PRECONDITION_FAILED:
            return "PRECONDITION_FAILED";
        case AMQP_CONNECTION_FORCED:
            return "CONNECTION_FORCED";
        case AMQP_INVALID_PATH:
            return "INVALID_PATH";
        case AMQP_FRAME_ERROR:
            return "FRAME_ERROR";
        case AMQP_SYNTAX_ERROR:
            return "SYNTAX_ERROR";
        case AMQP_COMMAND_INVALID:
            return "COMMAND_INVALID";
        case AMQP_CHANNEL_ERROR:
            return "CHANNEL_ERROR";
        case AMQP_UNEXPECTED_FRAME:
            return "UNEXPECTED_FRAME";
        case AMQP_RESOURCE_ERROR:
            return "RESOURCE_ERROR";
        case AMQP_NOT_ALLOWED:
            return "NOT_ALLOWED";
        case AMQP_NOT_IMPLEMENTED:
            return "NOT_IMPLEMENTED";
        case AMQP_INTERNAL_ERROR:
            return "INTERNAL_ERROR";
        default:
            return "";
    }
}

// What to do with a message the broker returned.
OutcomeKind ClassifyAmqpReturn(int reply_code) {
    return reply_code == AMQP_NO_ROUTE || reply_code == AMQP_NO_CONSUMERS ? OutcomeKind::Dead
                                                                          : OutcomeKind::Retry;
}

// What to do with the unconfirmed messages of a channel the broker closed.
OutcomeKind ClassifyAmqpChannelClose(int reply_code) {
    switch (reply_code) {
        case AMQP_NOT_FOUND:
        case AMQP_ACCESS_REFUSED:
        case AMQP_NOT_ALLOWED:
        case AMQP_NOT_IMPLEMENTED:
            return OutcomeKind::Dead;
        case AMQP_CONNECTION_FORCED:
            return OutcomeKind::Defer;
        default:
            return OutcomeKind::Retry;
    }
}

// What to do with the unconfirmed messages of a connection that ended.
OutcomeKind ClassifyAmqpConnectionEnd(int reply_code) {
    return reply_code == 0 || reply_code == AMQP_CONNECTION_FORCED ? OutcomeKind::Defer
                                                                   : OutcomeKind::Retry;
}

}  // namespace outbox
