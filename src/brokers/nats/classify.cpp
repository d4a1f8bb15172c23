// The nats kind's outcome classification. Design §1 "Guarantees": a Defer must only be returned
// when the destination certainly did not act on the message, because a Defer never spends the retry
// budget; anything doubtful is a Retry, which does.
#include "outbox/brokers/nats/classify.hpp"

#include <nats/nats.h>

namespace outbox {

// What to do with a JetStream publish outcome.
OutcomeKind ClassifyNatsPublish(int nats_status, int js_error, bool connection_lost,
                                bool just_connected) {
    switch (nats_status) {
        case NATS_OK:
            return OutcomeKind::Delivered;
        case NATS_NO_RESPONDERS:
            // Also what a server answers while its JetStream is still restoring the streams
            // after a (re)start: only a connection that has settled can trust it.
            return connection_lost || just_connected ? OutcomeKind::Defer : OutcomeKind::Dead;
        case NATS_MAX_PAYLOAD:
        case NATS_NOT_PERMITTED:
            return OutcomeKind::Dead;
        case NATS_CONNECTION_CLOSED:
        case NATS_CONNECTION_DISCONNECTED:
        case NATS_NO_SERVER:
        case NATS_NOT_YET_CONNECTED:
        case NATS_IO_ERROR:
        case NATS_STALE_CONNECTION:
        case NATS_SSL_ERROR:
        case NATS_CONNECTION_AUTH_FAILED:
        case NATS_INSUFFICIENT_BUFFER:
            return OutcomeKind::Defer;
        case NATS_TIMEOUT:
            return connection_lost ? OutcomeKind::Defer : OutcomeKind::Retry;
        default:
            break;
    }
    switch (js_error) {
        case JSStreamNotFoundErr:
        case JSStreamNotMatchErr:
        case JSStreamMessageExceedsMaximumErr:
        case JSStreamWrongLastMsgIDErr:
        case JSStreamWrongLastSequenceErr:
            return OutcomeKind::Dead;
        case JSNotEnabledErr:
        case JSNotEnabledForAccountErr:
            return just_connected ? OutcomeKind::Defer : OutcomeKind::Dead;
        default:
            return OutcomeKind::Retry;
    }
}

}  // namespace outbox
