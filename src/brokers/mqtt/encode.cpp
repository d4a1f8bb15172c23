// The mqtt kind's publication of a message (include/outbox/brokers/mqtt/encode.hpp).
#include "outbox/brokers/mqtt/encode.hpp"

#include <strings.h>

#include <string>
#include <utility>

#include "outbox/brokers/cloudevents.hpp"
#include "outbox/headers.hpp"

namespace outbox {

MqttPublication BuildMqttPublication(Message &m, const std::string &topic, std::string_view source,
                                     std::string_view type_fallback, int64_t now_ms) {
    MqttPublication p;
    p.topic = topic;
    // CloudEvents MQTT binding, binary mode, MQTT 5: datacontenttype is the Content Type, every
    // other attribute a User Property named as the attribute.
    CloudEventAttributes a = AttributesOf(m, source, type_fallback);
    p.content_type = a.datacontenttype;
    p.utf8_payload = m.payload_is_json;
    p.correlation_data = m.event_id;
    if (m.expires_at_ms > 0) {
        int64_t left_s = (m.expires_at_ms - now_ms + 999) / 1000;
        p.expiry_s = static_cast<uint32_t>(left_s < 1              ? 1
                                           : left_s > 0xFFFFFFFFll ? 0xFFFFFFFFll
                                                                   : left_s);
    }
    for (auto &[name, value] : m.headers) {
        if (strcasecmp(name.c_str(), "content-type") == 0 || IsCloudEventTypeHeader(name))
            continue;
        // Sent once, as the distributed-tracing extension's attributes of the same names.
        if (!a.traceparent.empty() && (strcasecmp(name.c_str(), "traceparent") == 0 ||
                                       strcasecmp(name.c_str(), "tracestate") == 0))
            continue;
        p.user_properties.emplace_back(name, value);
    }
    p.user_properties.emplace_back("specversion", "1.0");
    p.user_properties.emplace_back("id", a.id);
    p.user_properties.emplace_back("source", a.source);
    p.user_properties.emplace_back("type", a.type);
    p.user_properties.emplace_back("time", a.time);
    if (!a.traceparent.empty())
        p.user_properties.emplace_back("traceparent", a.traceparent);
    if (!a.tracestate.empty())
        p.user_properties.emplace_back("tracestate", a.tracestate);
    p.payload = std::move(m.payload);
    return p;
}

}  // namespace outbox
