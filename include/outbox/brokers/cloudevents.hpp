// CloudEvents attributes shared by the drivers (Kafka ce_* headers, webhook ce-* headers), and
// the Kafka record of a message in either content mode. Pure code: unit-tested against the
// CloudEvents Kafka protocol binding and JSON event format.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/headers.hpp"
#include "outbox/message.hpp"

namespace outbox {

// CloudEvents content mode of a destination ("cloudevents"; kafka and webhook).
enum class CloudEventsMode {
    Binary,      // the payload as the value/body, the attributes as headers (the default)
    Structured,  // the whole event as one application/cloudevents+json document
};

// The "cloudevents" setting of a kind's config check: "binary" or "structured", into *mode, or
// the problem.
void CheckCloudEventsKey(const JsonObject &value, CloudEventsMode *mode,
                         std::vector<std::string> *problems);

// "2026-11-29T18:03:04.123Z" for a unix time in milliseconds (CloudEvents time).
std::string FormatRfc3339Ms(int64_t unix_ms);

// A CloudEvents attribute value as the NATS protocol binding sends it in a header: UTF-8 with
// space, '"', '%' and every byte outside printable ASCII percent-encoded (upper-case hex).
std::string PercentEncodeNatsHeaderValue(std::string_view value);

// The message's CloudEvents type: the producer's ce_type/ce-type header, else its topic, else
// `fallback` (the destination's default topic or name).
std::string CloudEventType(const Message &m, std::string_view fallback);

// The message's datacontenttype: the producer's content-type header, else the first
// content-type of `defaults` (a webhook's static headers), else application/json for payload
// and application/octet-stream for payload_bytes. Empty for a tombstone without a producer
// content-type.
std::string DataContentType(const Message &m, const Headers *defaults = nullptr);

// The attributes of one event, as the relay sends them.
struct CloudEventAttributes {
    std::string id;
    std::string source;
    std::string type;
    std::string time;             // RFC 3339
    std::string datacontenttype;  // empty: not sent
    // The distributed-tracing extension: the message's traceparent and tracestate headers
    // (the producer's, or captured at INSERT); empty: not sent.
    std::string traceparent;
    std::string tracestate;
};

CloudEventAttributes AttributesOf(const Message &m, std::string_view source,
                                  std::string_view type_fallback,
                                  const Headers *content_type_defaults = nullptr);

// The event in the JSON event format (structured content mode, application/cloudevents+json):
// specversion, id, source, type, time, datacontenttype, traceparent, tracestate, then "data"
// (the jsonb payload, as JSON) or "data_base64" (payload_bytes).
std::string StructuredEvent(const Message &m, const CloudEventAttributes &attributes);

// What the Kafka driver produces for one message.
struct KafkaRecord {
    Headers headers;          // in the order they are sent
    bool null_value = false;  // a tombstone
    std::string value;        // when !null_value
};

// The Kafka record of `m` (its payload is moved out). Binary mode (the CloudEvents Kafka
// binding): the producer's headers (but content-type and the ce_type header), then
// content-type (= datacontenttype), ce_id, ce_type, ce_source, ce_time, ce_specversion,
// ce_traceparent and ce_tracestate (when the message has them); the
// value is the payload. Structured mode: the producer's headers (same exceptions), then
// content-type: application/cloudevents+json; the value is StructuredEvent. A tombstone is
// sent in binary mode whatever the mode (a null value cannot hold a structured event), without
// content-type unless the producer set one.
KafkaRecord BuildKafkaRecord(Message &m, std::string_view source, CloudEventsMode mode);

}  // namespace outbox
