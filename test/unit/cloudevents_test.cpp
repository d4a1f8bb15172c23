// The Kafka record of a message, checked against the CloudEvents Kafka protocol binding
// (binary and structured content modes) and the JSON event format, with the attribute values of
// the binding's own examples.
#include "outbox/brokers/amqp/kind.hpp"
#include "outbox/brokers/kafka/config.hpp"
#include "outbox/brokers/kafka/kind.hpp"
#include "outbox/brokers/webhook/config.hpp"
#include "outbox/brokers/webhook/kind.hpp"
#include "outbox/config.hpp"
#include "outbox/brokers/cloudevents.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace outbox {
namespace {

// 2018-04-05T03:56:24Z, the time of the binding's examples.
constexpr int64_t kExampleTimeMs = 1522900584000;

Message Example() {
    Message m;
    m.event_id = "1234-1234-1234";
    m.topic = "mytopic";
    m.key = "mykey";
    m.payload = R"({"n":1})";
    m.payload_is_json = true;
    m.created_at_ms = kExampleTimeMs;
    return m;
}

// The value of header `name` (exact name), or "<absent>"; fails when it appears twice.
std::string Header(const KafkaRecord &r, const std::string &name) {
    std::string found = "<absent>";
    int count = 0;
    for (const auto &[n, v] : r.headers) {
        if (n == name) {
            found = v;
            ++count;
        }
    }
    EXPECT_LE(count, 1) << "header " << name << " sent more than once";
    return found;
}

TEST(CloudEventsKafkaBinary, HeadersOfTheBindingWithContentTypeForJson) {
    Message m = Example();
    m.headers = {{"x-trace", "abc"}};
    KafkaRecord r = BuildKafkaRecord(m, "/mycontext/subcontext", CloudEventsMode::Binary);
    EXPECT_FALSE(r.null_value);
    EXPECT_EQ(r.value, R"({"n":1})");
    EXPECT_EQ(Header(r, "content-type"), "application/json");
    EXPECT_EQ(Header(r, "ce_specversion"), "1.0");
    EXPECT_EQ(Header(r, "ce_type"), "mytopic");
    EXPECT_EQ(Header(r, "ce_source"), "/mycontext/subcontext");
    EXPECT_EQ(Header(r, "ce_id"), "1234-1234-1234");
    EXPECT_EQ(Header(r, "ce_time"), "2018-04-05T03:56:24.000Z");
    EXPECT_EQ(Header(r, "x-trace"), "abc");
    // The producer's headers first, then the relay's, in a fixed order.
    ASSERT_EQ(r.headers.size(), 7u);
    EXPECT_EQ(r.headers[0].first, "x-trace");
    EXPECT_EQ(r.headers[1].first, "content-type");
    EXPECT_EQ(r.headers[2].first, "ce_id");
}

TEST(CloudEventsKafkaBinary, BytesAreOctetStream) {
    Message m = Example();
    m.payload = std::string("\0\0\0\0\x2a\x02", 6);
    m.payload_is_json = false;
    KafkaRecord r = BuildKafkaRecord(m, "/s", CloudEventsMode::Binary);
    EXPECT_EQ(Header(r, "content-type"), "application/octet-stream");
    EXPECT_EQ(r.value, std::string("\0\0\0\0\x2a\x02", 6));
}

TEST(CloudEventsKafkaBinary, ProducerContentTypeWinsAndIsSentOnce) {
    Message m = Example();
    m.payload_is_json = false;
    m.payload = "bytes";
    m.headers = {{"Content-Type", "application/avro"}};
    KafkaRecord r = BuildKafkaRecord(m, "/s", CloudEventsMode::Binary);
    EXPECT_EQ(Header(r, "content-type"), "application/avro");
    EXPECT_EQ(Header(r, "Content-Type"), "<absent>");
}

TEST(CloudEventsKafkaBinary, ProducerTypeHeaderReplacesTheTopic) {
    for (const char *name : {"ce_type", "ce-type", "CE_Type"}) {
        Message m = Example();
        m.headers = {{name, "com.example.someevent"}};
        KafkaRecord r = BuildKafkaRecord(m, "/s", CloudEventsMode::Binary);
        EXPECT_EQ(Header(r, "ce_type"), "com.example.someevent") << name;
        // Sent once, as ce_type, not also under the producer's spelling.
        int types = 0;
        for (const auto &h : r.headers)
            types += IsCloudEventTypeHeader(h.first);
        EXPECT_EQ(types, 1) << name;
    }
}

TEST(CloudEventsKafkaBinary, TombstoneHasANullValueAndNoContentType) {
    Message m = Example();
    m.payload.clear();
    m.tombstone = true;
    m.payload_is_json = false;
    KafkaRecord r = BuildKafkaRecord(m, "/s", CloudEventsMode::Binary);
    EXPECT_TRUE(r.null_value);
    EXPECT_EQ(Header(r, "content-type"), "<absent>");
    EXPECT_EQ(Header(r, "ce_id"), "1234-1234-1234");
    EXPECT_EQ(Header(r, "ce_type"), "mytopic");
}

TEST(CloudEventsKafkaStructured, TheWholeEventAsJson) {
    Message m = Example();
    m.headers = {{"ce_type", "com.example.someevent"},
                 {"content-type", "application/json; charset=utf-8"},
                 {"x-trace", "abc"}};
    KafkaRecord r = BuildKafkaRecord(m, "/mycontext/subcontext", CloudEventsMode::Structured);
    EXPECT_FALSE(r.null_value);
    EXPECT_EQ(Header(r, "content-type"), "application/cloudevents+json");
    EXPECT_EQ(Header(r, "x-trace"), "abc");
    EXPECT_EQ(Header(r, "ce_id"), "<absent>");
    EXPECT_EQ(Header(r, "ce_type"), "<absent>");
    ASSERT_EQ(r.headers.size(), 2u);
    nlohmann::json event = nlohmann::json::parse(r.value);
    nlohmann::json expected = {
        {"specversion", "1.0"},
        {"type", "com.example.someevent"},
        {"source", "/mycontext/subcontext"},
        {"id", "1234-1234-1234"},
        {"time", "2018-04-05T03:56:24.000Z"},
        {"datacontenttype", "application/json; charset=utf-8"},
        {"data", {{"n", 1}}},
    };
    EXPECT_EQ(event, expected);
}

TEST(CloudEventsKafkaStructured, BytesGoAsDataBase64) {
    Message m = Example();
    m.payload = std::string("\0\0\0\0\x2a\x02", 6);
    m.payload_is_json = false;
    KafkaRecord r = BuildKafkaRecord(m, "/s", CloudEventsMode::Structured);
    nlohmann::json event = nlohmann::json::parse(r.value);
    EXPECT_EQ(event["datacontenttype"], "application/octet-stream");
    EXPECT_EQ(event["data_base64"], "AAAAACoC");
    EXPECT_FALSE(event.contains("data"));
}

TEST(CloudEventsKafkaStructured, AttributesAreEscaped) {
    Message m = Example();
    m.headers = {{"ce-type", "a\"b\\c\tü"}};
    KafkaRecord r = BuildKafkaRecord(m, "/s", CloudEventsMode::Structured);
    EXPECT_EQ(nlohmann::json::parse(r.value)["type"], "a\"b\\c\tü");
}

TEST(CloudEventsKafkaStructured, TombstoneStaysBinary) {
    Message m = Example();
    m.payload.clear();
    m.tombstone = true;
    KafkaRecord r = BuildKafkaRecord(m, "/s", CloudEventsMode::Structured);
    EXPECT_TRUE(r.null_value);
    EXPECT_EQ(Header(r, "content-type"), "<absent>");
    EXPECT_EQ(Header(r, "ce_id"), "1234-1234-1234");
}

// The distributed-tracing extension: traceparent/tracestate travel as they are (the W3C
// headers) and as the CloudEvents attributes.
TEST(CloudEventsTracing, BinaryModeSendsCeTraceparent) {
    Message m = Example();
    m.headers = {{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
                 {"tracestate", "rojo=00f067aa0ba902b7"}};
    KafkaRecord r = BuildKafkaRecord(m, "/s", CloudEventsMode::Binary);
    EXPECT_EQ(Header(r, "traceparent"), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    EXPECT_EQ(Header(r, "ce_traceparent"),
              "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    EXPECT_EQ(Header(r, "tracestate"), "rojo=00f067aa0ba902b7");
    EXPECT_EQ(Header(r, "ce_tracestate"), "rojo=00f067aa0ba902b7");
}

TEST(CloudEventsTracing, StructuredModeHasTheAttributes) {
    Message m = Example();
    m.headers = {{"Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}};
    KafkaRecord r = BuildKafkaRecord(m, "/s", CloudEventsMode::Structured);
    nlohmann::json event = nlohmann::json::parse(r.value);
    EXPECT_EQ(event["traceparent"], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    EXPECT_FALSE(event.contains("tracestate"));
    EXPECT_EQ(Header(r, "Traceparent"), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
}

TEST(CloudEventsTracing, NoTraceparentNoExtension) {
    Message m = Example();
    m.headers = {{"tracestate", "rojo=1"}};
    KafkaRecord r = BuildKafkaRecord(m, "/s", CloudEventsMode::Binary);
    EXPECT_EQ(Header(r, "ce_traceparent"), "<absent>");
    EXPECT_EQ(Header(r, "ce_tracestate"), "<absent>");
    EXPECT_EQ(Header(r, "tracestate"), "rojo=1");
}

TEST(CloudEvents, TypeAndContentTypeFallbacks) {
    Message m = Example();
    m.topic.clear();
    EXPECT_EQ(CloudEventType(m, "dest"), "dest");
    m.headers = {{"ce_type", ""}};  // refused at INSERT; never sent empty
    EXPECT_EQ(CloudEventType(m, "dest"), "dest");
    Headers defaults = {{"Content-Type", "text/plain"}};
    m.headers.clear();
    EXPECT_EQ(DataContentType(m, &defaults), "text/plain");
    m.headers = {{"content-type", "application/xml"}};
    EXPECT_EQ(DataContentType(m, &defaults), "application/xml");
}

TEST(CloudEvents, TypeHeaderNames) {
    EXPECT_TRUE(IsCloudEventTypeHeader("ce_type"));
    EXPECT_TRUE(IsCloudEventTypeHeader("CE-TYPE"));
    EXPECT_FALSE(IsCloudEventTypeHeader("ce_types"));
    EXPECT_FALSE(IsCloudEventTypeHeader("type"));
    // Still the relay's on the wire: a destination's static headers cannot set it.
    EXPECT_TRUE(IsReservedHeaderName("ce-type"));
    EXPECT_TRUE(IsReservedHeaderName("ce_traceparent"));
    EXPECT_TRUE(IsReservedHeaderName("CE-TRACESTATE"));
    EXPECT_FALSE(IsReservedHeaderName("traceparent"));
}

TEST(CloudEventsConfig, ModeOfKafkaAndWebhookDestinations) {
    ConfigCheck k = CheckDestinationConfig(
        kKafkaKind, R"({"bootstrap.servers": "b", "cloudevents": "structured"})");
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(k.config.Settings<KafkaConfig>().cloudevents, CloudEventsMode::Structured);
    // Not handed to librdkafka as a property.
    for (const auto &p : k.config.Settings<KafkaConfig>().properties)
        EXPECT_NE(p.first, "cloudevents");
    ConfigCheck b = CheckDestinationConfig(
        kKafkaKind, R"({"bootstrap.servers": "b", "cloudevents": "binary"})");
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b.config.Settings<KafkaConfig>().cloudevents, CloudEventsMode::Binary);
    ConfigCheck w = CheckDestinationConfig(
        kWebhookKind, R"({"url": "http://127.0.0.1/", "cloudevents": "structured"})");
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(w.config.Settings<WebhookConfig>().cloudevents, CloudEventsMode::Structured);
    EXPECT_EQ(CheckDestinationConfig(kWebhookKind, R"({"url": "http://127.0.0.1/"})")
                  .config.Settings<WebhookConfig>()
                  .cloudevents,
              CloudEventsMode::Binary);
}

TEST(CloudEventsConfig, BadModesAreRefused) {
    for (const char *bad : {R"("Structured")", "true", "1", R"("batch")"}) {
        ConfigCheck k = CheckDestinationConfig(
            kKafkaKind, std::string(R"({"bootstrap.servers": "b", "cloudevents": )") + bad + "}");
        ASSERT_EQ(k.problems.size(), 1u) << bad;
        EXPECT_EQ(k.problems[0], R"("cloudevents" must be "binary" or "structured")");
    }
    ConfigCheck a = CheckDestinationConfig(
        kAmqpKind, R"({"url": "amqp://127.0.0.1", "cloudevents": "structured"})");
    ASSERT_EQ(a.problems.size(), 1u);
    EXPECT_EQ(a.problems[0], R"(unknown key "cloudevents" for an amqp destination)");
}

}  // namespace
}  // namespace outbox
