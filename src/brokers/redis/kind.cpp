// The redis kind's row (broker_kind.hpp) and the stream rule of the producer's INSERT check.
#include "outbox/brokers/redis/kind.hpp"

#include <string_view>

namespace outbox {

// A Redis stream a message may be added to (see kind.hpp).
bool IsValidRedisStream(std::string_view stream) {
    if (stream.empty() || stream.size() > 512)
        return false;
    for (char c : stream) {
        unsigned char u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7F)
            return false;
    }
    return true;
}

extern const DriverSide kRedisDriverSide;

const BrokerKind kRedisKind = {
    "redis",
    "Redis",
    "docs/destinations.md#redis",
    NetworkRule::Broker,
    {"stream", "stream", true, IsValidRedisStream,
     "A Redis stream name is 1 to 512 bytes without control characters."},
    {},
    /*tombstones=*/false,
    /*read_subscription=*/nullptr,
    OUTBOX_DRIVER_SIDE(kRedisDriverSide),
};

}  // namespace outbox
