// What the mqtt kind publishes for one message: pure code, unit-tested (test/unit/mqtt_*).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "outbox/message.hpp"

namespace outbox {

// One MQTT 5 PUBLISH, before libmosquitto encodes it.
struct MqttPublication {
    std::string topic;
    std::string payload;
    // Properties (MQTT 5 section 3.3.2.3).
    std::string content_type;      // Content Type: the CloudEvents datacontenttype
    bool utf8_payload = false;     // Payload Format Indicator 1 (a jsonb payload is UTF-8)
    std::string correlation_data;  // the event id (its canonical text)
    uint32_t expiry_s = 0;         // Message Expiry Interval; 0: none
    // User Properties in the order sent: the producer's headers (but content-type, which is
    // the Content Type, and ce_type/ce-type, which is the type), then the CloudEvents attributes
    // of the MQTT protocol binding (binary mode): specversion, id, source, type, time, and
    // traceparent/tracestate when the message has them.
    Headers user_properties;
};

// The publication of `m` (its payload is moved out) to `topic` (the message's own or the
// destination's default), at unix time `now_ms` (for the expiry interval: whole seconds left
// until expires_at, at least 1). `type_fallback` is the CloudEvents type of a message without
// a topic of its own and without a ce_type header: the destination's topic.
MqttPublication BuildMqttPublication(Message &m, const std::string &topic, std::string_view source,
                                     std::string_view type_fallback, int64_t now_ms);

}  // namespace outbox
