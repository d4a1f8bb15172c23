// Names of delivery outcomes, as they appear in logs and SQL-facing output.
#include "outbox/message.hpp"

namespace outbox {

// The lower-case name of an outcome kind, for logs and stats.
const char *OutcomeKindName(OutcomeKind kind) {
    switch (kind) {
        case OutcomeKind::Delivered:
            return "delivered";
        case OutcomeKind::Retry:
            return "retry";
        case OutcomeKind::Dead:
            return "dead";
        case OutcomeKind::Defer:
            return "defer";
        case OutcomeKind::Unacknowledged:
            return "unacknowledged";
        case OutcomeKind::Gone:
            return "gone";
        case OutcomeKind::Poison:
            return "poison";
        case OutcomeKind::Aborted:
            return "aborted";
        case OutcomeKind::InDoubt:
            return "in doubt";
        case OutcomeKind::Marker:
            return "marker";
    }
    // Only reachable through a cast of an out-of-range integer.
    return "unknown";
}

}  // namespace outbox
