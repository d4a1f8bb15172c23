// The nats kind's row (broker_kind.hpp) and the subject rule of the producer's INSERT check.
#include "outbox/brokers/nats/kind.hpp"

#include <string_view>

#include "outbox/config_json.hpp"

namespace outbox {

// A NATS subject a message may be published to (see kind.hpp).
bool IsValidNatsSubject(std::string_view subject) {
    if (subject.empty() || subject.size() > 255 || subject.front() == '.' ||
        subject.back() == '.' || subject.front() == '$' || StartsWith(subject, "_INBOX.") ||
        subject == "_INBOX") {
        return false;
    }
    char previous = '.';
    for (char c : subject) {
        unsigned char u = static_cast<unsigned char>(c);
        if (u <= 0x20 || u >= 0x7F || c == '*' || c == '>' || (c == '.' && previous == '.')) {
            return false;
        }
        previous = c;
    }
    return true;
}

extern const DriverSide kNatsDriverSide;

const BrokerKind kNatsKind = {
    "nats",
    "NATS",
    "docs/destinations.md#nats",
    NetworkRule::Broker,
    {"subject", "subject", true, IsValidNatsSubject,
     "A NATS subject is 1 to 255 bytes of printable ASCII: tokens separated by '.', no spaces, "
     "no wildcards ('*', '>'), not a system subject ('$...', '_INBOX...')."},
    {},
    /*tombstones=*/false,
    /*read_subscription=*/nullptr,
    OUTBOX_DRIVER_SIDE(kNatsDriverSide),
};

}  // namespace outbox
