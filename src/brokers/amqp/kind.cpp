// The amqp kind's row (broker_kind.hpp) and the routing key rule of the producer's INSERT check.
#include "outbox/brokers/amqp/kind.hpp"

#include <string_view>

#include "outbox/headers.hpp"

namespace outbox {

// An AMQP routing key as outbox sends it (see kind.hpp).
bool IsValidAmqpRoutingKey(std::string_view key) {
    if (key.empty() || key.size() > 255 || !IsValidHeaderValue(key)) {
        return false;
    }
    for (char c : key) {
        unsigned char u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7F) {
            return false;
        }
    }
    return true;
}

extern const DriverSide kAmqpDriverSide;

const BrokerKind kAmqpKind = {
    "amqp",
    "AMQP",
    "docs/destinations.md#amqp",
    NetworkRule::Broker,
    // A routing key may be empty: a fanout exchange ignores it.
    {"routing_key", "routing key", false, IsValidAmqpRoutingKey,
     "An AMQP routing key is 1 to 255 bytes of UTF-8 without control characters."},
    {},
    /*tombstones=*/false,
    /*read_subscription=*/nullptr,
    OUTBOX_DRIVER_SIDE(kAmqpDriverSide),
};

}  // namespace outbox
