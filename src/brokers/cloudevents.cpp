// CloudEvents attributes shared by the drivers, and the Kafka record in either content mode.
#include "outbox/brokers/cloudevents.hpp"

#include <cstdio>
#include <ctime>
#include <utility>

#include <nlohmann/json.hpp>

#include "outbox/signing.hpp"

namespace outbox {

void CheckCloudEventsKey(const JsonObject &value, CloudEventsMode *mode,
                         std::vector<std::string> *problems) {
    if (value == "binary")
        *mode = CloudEventsMode::Binary;
    else if (value == "structured")
        *mode = CloudEventsMode::Structured;
    else
        problems->push_back("\"cloudevents\" must be \"binary\" or \"structured\"");
}

namespace {

// Case-insensitive ASCII comparison with a lower-case literal (header names are tokens).
bool NameIs(std::string_view name, std::string_view lower) {
    if (name.size() != lower.size())
        return false;
    for (size_t i = 0; i < name.size(); ++i) {
        char c = name[i];
        if (c >= 'A' && c <= 'Z')
            c = static_cast<char>(c - 'A' + 'a');
        if (c != lower[i])
            return false;
    }
    return true;
}

bool IsContentType(std::string_view name) {
    return NameIs(name, "content-type");
}

// A JSON string literal. The attributes are valid UTF-8 (checked at INSERT and in the
// config); anything else is replaced rather than thrown about.
std::string JsonString(std::string_view text) {
    return nlohmann::json(std::string(text))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

// RFC 3339 in UTC with milliseconds, the form CloudEvents receivers parse most reliably.
std::string FormatRfc3339Ms(int64_t unix_ms) {
    time_t seconds = static_cast<time_t>(unix_ms / 1000);
    int millis = static_cast<int>(unix_ms % 1000);
    if (millis < 0) {
        millis += 1000;
        seconds -= 1;
    }
    struct tm tm;
    gmtime_r(&seconds, &tm);
    char buf[40];
    size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, sizeof buf - n, ".%03dZ", millis);
    return buf;
}

// The NATS binding's percent-encoding of a header value.
std::string PercentEncodeNatsHeaderValue(std::string_view value) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        unsigned char u = static_cast<unsigned char>(c);
        if (u < 0x21 || u > 0x7E || c == '"' || c == '%') {
            out.push_back('%');
            out.push_back(kHex[u >> 4]);
            out.push_back(kHex[u & 0x0F]);
        } else {
            out.push_back(c);
        }
    }
    return out;
}

// type: what the producer said the event is, else where it goes.
std::string CloudEventType(const Message &m, std::string_view fallback) {
    for (const auto &[name, value] : m.headers)
        if (IsCloudEventTypeHeader(name) && !value.empty())
            return value;
    return !m.topic.empty() ? m.topic : std::string(fallback);
}

// datacontenttype: the producer's, else the destination's, else by payload column.
std::string DataContentType(const Message &m, const Headers *defaults) {
    for (const auto &[name, value] : m.headers)
        if (IsContentType(name))
            return value;
    if (defaults != nullptr)
        for (const auto &[name, value] : *defaults)
            if (IsContentType(name))
                return value;
    if (m.tombstone)
        return std::string();
    return m.payload_is_json ? "application/json" : "application/octet-stream";
}

CloudEventAttributes AttributesOf(const Message &m, std::string_view source,
                                  std::string_view type_fallback,
                                  const Headers *content_type_defaults) {
    CloudEventAttributes a;
    a.id = m.event_id;
    a.source = std::string(source);
    a.type = CloudEventType(m, type_fallback);
    a.time = FormatRfc3339Ms(m.created_at_ms);
    a.datacontenttype = DataContentType(m, content_type_defaults);
    for (const auto &[name, value] : m.headers) {
        if (NameIs(name, "traceparent"))
            a.traceparent = value;
        else if (NameIs(name, "tracestate"))
            a.tracestate = value;
    }
    if (a.traceparent.empty())
        a.tracestate.clear();  // a tracestate means nothing without its traceparent
    return a;
}

// The JSON event format. The jsonb payload is already JSON text (PostgreSQL printed it), so it
// is embedded as it is; bytes go as base64.
std::string StructuredEvent(const Message &m, const CloudEventAttributes &a) {
    std::string out;
    out.reserve(m.payload.size() * (m.payload_is_json ? 1 : 2) + 256);
    out += "{\"specversion\":\"1.0\",\"id\":";
    out += JsonString(a.id);
    out += ",\"source\":";
    out += JsonString(a.source);
    out += ",\"type\":";
    out += JsonString(a.type);
    out += ",\"time\":";
    out += JsonString(a.time);
    if (!a.datacontenttype.empty()) {
        out += ",\"datacontenttype\":";
        out += JsonString(a.datacontenttype);
    }
    if (!a.traceparent.empty()) {
        out += ",\"traceparent\":";
        out += JsonString(a.traceparent);
    }
    if (!a.tracestate.empty()) {
        out += ",\"tracestate\":";
        out += JsonString(a.tracestate);
    }
    if (!m.tombstone) {
        if (m.payload_is_json) {
            out += ",\"data\":";
            out += m.payload;
        } else {
            out += ",\"data_base64\":";
            out += JsonString(Base64Encode(m.payload));
        }
    }
    out += '}';
    return out;
}

// The record the Kafka driver produces.
KafkaRecord BuildKafkaRecord(Message &m, std::string_view source, CloudEventsMode mode) {
    KafkaRecord r;
    CloudEventAttributes a = AttributesOf(m, source, m.topic);
    r.headers.reserve(m.headers.size() + 6);
    for (const auto &h : m.headers)
        if (!IsContentType(h.first) && !IsCloudEventTypeHeader(h.first))
            r.headers.push_back(h);
    if (m.tombstone) {
        r.null_value = true;  // and binary mode, whatever the destination's
    } else if (mode == CloudEventsMode::Structured) {
        r.headers.emplace_back("content-type", "application/cloudevents+json");
        r.value = StructuredEvent(m, a);
        return r;
    } else {
        r.value = std::move(m.payload);
    }
    if (!a.datacontenttype.empty())
        r.headers.emplace_back("content-type", std::move(a.datacontenttype));
    r.headers.emplace_back("ce_id", std::move(a.id));
    r.headers.emplace_back("ce_type", std::move(a.type));
    r.headers.emplace_back("ce_source", std::move(a.source));
    r.headers.emplace_back("ce_time", std::move(a.time));
    r.headers.emplace_back("ce_specversion", "1.0");
    if (!a.traceparent.empty())
        r.headers.emplace_back("ce_traceparent", std::move(a.traceparent));
    if (!a.tracestate.empty())
        r.headers.emplace_back("ce_tracestate", std::move(a.tracestate));
    return r;
}

}  // namespace outbox
