// The mqtt kind's row (broker_kind.hpp) and the topic rule of the producer's INSERT check.
#include "outbox/brokers/mqtt/kind.hpp"

#include <cstdint>
#include <string_view>

namespace outbox {

namespace {

// Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates): MQTT 5 requires it of
// a topic name (section 1.5.4), and a broker disconnects a client that sends anything else.
bool IsUtf8(std::string_view text) {
    size_t i = 0;
    while (i < text.size()) {
        unsigned char c = static_cast<unsigned char>(text[i]);
        size_t n = c < 0x80           ? 0
                   : (c >> 5) == 0x6  ? 1
                   : (c >> 4) == 0xE  ? 2
                   : (c >> 3) == 0x1E ? 3
                                      : 4;
        if (n == 4 || text.size() - i <= n)
            return false;
        uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
        for (size_t k = 1; k <= n; k++) {
            unsigned char d = static_cast<unsigned char>(text[i + k]);
            if ((d >> 6) != 0x2)
                return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n + 1;
    }
    return true;
}

}  // namespace

// An MQTT topic name a message may be published to (see kind.hpp).
bool IsValidMqttTopic(std::string_view topic) {
    if (topic.empty() || topic.size() > 65535 || topic.front() == '$' || !IsUtf8(topic))
        return false;
    for (char c : topic) {
        unsigned char u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7F || c == '+' || c == '#')
            return false;
    }
    return true;
}

extern const DriverSide kMqttDriverSide;

const BrokerKind kMqttKind = {
    "mqtt",
    "MQTT",
    "docs/destinations.md#mqtt",
    NetworkRule::Broker,
    {"topic", "topic", true, IsValidMqttTopic,
     "An MQTT topic name is 1 to 65535 bytes of UTF-8 without control characters or wildcards "
     "('+', '#'), and does not start with '$'."},
    {},
    /*tombstones=*/false,
    /*read_subscription=*/nullptr,
    OUTBOX_DRIVER_SIDE(kMqttDriverSide),
};

}  // namespace outbox
