// The mqtt kind's pure parts: its config check (every bad input, all problems at once, secrets
// never quoted), the topic rule, the client id, the outcome classification of MQTT 5 reason
// codes and libmosquitto errors, and the publication a message becomes.
#include <gtest/gtest.h>
#include <mosquitto.h>
#include "outbox/brokers/mqtt/protocol.hpp"

#include <string>

#include "outbox/brokers/mqtt/classify.hpp"
#include "outbox/brokers/mqtt/config.hpp"
#include "outbox/brokers/mqtt/encode.hpp"
#include "outbox/brokers/mqtt/kind.hpp"
#include "outbox/brokers/registry.hpp"
#include "outbox/config.hpp"

namespace outbox {
namespace {

std::string JoinProblems(const ConfigCheck &check) {
    std::string all;
    for (const std::string &problem : check.problems)
        all += problem + "\n";
    return all;
}

bool HasProblem(const ConfigCheck &check, const std::string &problem) {
    for (const std::string &p : check.problems)
        if (p == problem)
            return true;
    return false;
}

ConfigCheck Mqtt(const std::string &json, bool check_files = true) {
    CheckOptions options;
    options.check_files = check_files;
    return CheckDestinationConfig(kMqttKind, json, options);
}

TEST(MqttConfigTest, TheRowIsRegistered) {
    EXPECT_EQ(FindBrokerKind("mqtt"), &kMqttKind);
    EXPECT_STREQ(kMqttKind.docs, "docs/destinations.md#mqtt");
    EXPECT_EQ(kMqttKind.network, NetworkRule::Broker);
    EXPECT_STREQ(kMqttKind.topic.default_key, "topic");
    EXPECT_TRUE(kMqttKind.topic.required);
    EXPECT_FALSE(kMqttKind.tombstones);
}

TEST(MqttConfigTest, DefaultsAndFields) {
    ConfigCheck check = Mqtt(R"({"host": "broker.example", "topic": "orders/new"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    const MqttConfig &c = check.config.Settings<MqttConfig>();
    EXPECT_EQ(c.host, "broker.example");
    EXPECT_EQ(c.port, 1883);
    EXPECT_EQ(c.topic, "orders/new");
    EXPECT_EQ(c.qos, 1);
    EXPECT_FALSE(c.retain);
    EXPECT_FALSE(c.tls);
    EXPECT_TRUE(c.tls_verify);
    EXPECT_EQ(c.keepalive_ms, 30000);
    EXPECT_EQ(c.session_expiry_ms, 3600000);

    ConfigCheck full = Mqtt(R"({"host": "::1", "port": 18883, "topic": "a/b", "qos": 2,
        "retain": true, "username": "relay", "password": "pw", "tls": true, "tls_verify": false,
        "max_in_flight": 50, "ack_timeout": "3s", "keepalive": "10s", "session_expiry": "2h",
        "ordering": "key"})");
    ASSERT_TRUE(full.ok()) << JoinProblems(full);
    const MqttConfig &f = full.config.Settings<MqttConfig>();
    EXPECT_EQ(f.host, "::1");
    EXPECT_EQ(f.port, 18883);
    EXPECT_EQ(f.qos, 2);
    EXPECT_TRUE(f.retain);
    EXPECT_EQ(f.username, "relay");
    EXPECT_EQ(f.password, "pw");
    EXPECT_TRUE(f.tls);
    EXPECT_FALSE(f.tls_verify);
    EXPECT_EQ(f.max_in_flight, 50);
    EXPECT_EQ(f.ack_timeout_ms, 3000);
    EXPECT_EQ(f.keepalive_ms, 10000);
    EXPECT_EQ(f.session_expiry_ms, 7200000);

    // TLS moves the default port.
    ConfigCheck tls = Mqtt(R"({"host": "h", "tls": true})");
    ASSERT_TRUE(tls.ok()) << JoinProblems(tls);
    EXPECT_EQ(tls.config.Settings<MqttConfig>().port, 8883);
}

TEST(MqttConfigTest, EveryProblemAtOnceWithoutTheSecret) {
    ConfigCheck check = Mqtt(R"({"host": "mqtt://h:1883", "port": 0, "topic": "a/+/b",
        "qos": 0, "password": 17, "retain": "yes", "max_in_flight": 0, "ack_timeout": "1ms",
        "keepalive": "1s", "session_expiry": "30d", "subject": "x", "url": "mqtt://u:pw@h",
        "cert_file": "/nonexistent/cert.pem", "colour": "blue"})");
    EXPECT_FALSE(check.ok());
    const std::string all = JoinProblems(check);
    EXPECT_TRUE(HasProblem(check,
                           "\"host\" must be a host name or an IP address (no scheme, no "
                           "port: the port is \"port\")"))
        << all;
    EXPECT_TRUE(HasProblem(check, "\"port\" must be an integer between 1 and 65535")) << all;
    EXPECT_TRUE(HasProblem(check,
                           "\"topic\" must be an MQTT topic name to publish to: UTF-8 without "
                           "control characters or wildcards (\"+\", \"#\"), not starting with "
                           "\"$\", at most 65535 bytes"))
        << all;
    EXPECT_TRUE(HasProblem(check,
                           "\"qos\" must be 1 (acknowledged by PUBACK) or 2 (PUBCOMP): "
                           "QoS 0 has no acknowledgement to delete a message on"))
        << all;
    EXPECT_TRUE(HasProblem(check, "\"password\" must be a non-empty string")) << all;
    EXPECT_TRUE(HasProblem(check, "\"password\" needs \"username\"")) << all;
    EXPECT_TRUE(HasProblem(check, "unknown key \"subject\" for an mqtt destination")) << all;
    EXPECT_TRUE(HasProblem(check, "unknown key \"url\" for an mqtt destination")) << all;
    EXPECT_TRUE(HasProblem(check, "unknown key \"colour\" for an mqtt destination")) << all;
    EXPECT_TRUE(
        HasProblem(check, "\"cert_file\" and \"key_file\" go together: set both or neither"))
        << all;
    EXPECT_TRUE(all.find("\"max_in_flight\"") != std::string::npos) << all;
    EXPECT_TRUE(all.find("\"ack_timeout\" must be a duration between 100ms and 10min") !=
                std::string::npos)
        << all;
    EXPECT_TRUE(all.find("\"keepalive\" must be a duration between 5s and 18h") !=
                std::string::npos)
        << all;
    EXPECT_TRUE(all.find("\"session_expiry\" must be a duration between 0 and 7d") !=
                std::string::npos)
        << all;
    EXPECT_TRUE(all.find("\"retain\"") != std::string::npos) << all;
    EXPECT_TRUE(all.find("\"cert_file\"") != std::string::npos) << all;
    EXPECT_EQ(all.find("pw"), std::string::npos) << "a URL's credentials are never quoted: " << all;
    EXPECT_FALSE(check.hints.empty());

    EXPECT_TRUE(HasProblem(Mqtt("{}"), "\"host\" is required for an mqtt destination"));
    EXPECT_TRUE(HasProblem(Mqtt(R"({"host": "h", "qos": 3})"),
                           "\"qos\" must be 1 (acknowledged by PUBACK) or 2 (PUBCOMP): QoS 0 has "
                           "no acknowledgement to delete a message on"));
    EXPECT_TRUE(HasProblem(Mqtt(R"({"host": "h", "username": ""})"),
                           "\"username\" must be a non-empty string"));
    // A secret value in a problem: never.
    ConfigCheck secret = Mqtt(R"({"host": "h", "password": "hunter2"})");
    EXPECT_EQ(JoinProblems(secret).find("hunter2"), std::string::npos);
    EXPECT_TRUE(IsSecretSetting("password"));
}

TEST(MqttConfigTest, FileSettingsArePrivileged) {
    ConfigCheck check = Mqtt(R"({"host": "h", "ca_file": "/etc/hostname"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    EXPECT_TRUE(check.config.Settings<MqttConfig>().tls) << "a CA file means TLS";
    EXPECT_EQ(check.config.Settings<MqttConfig>().port, 8883);
    bool found = false;
    for (const PrivilegedSetting &p : check.privileged)
        found = found || p.key == "ca_file";
    EXPECT_TRUE(found);
}

TEST(MqttTopicTest, Rule) {
    for (const char *ok : {"a", "a/b/c", "orders/created", "/leading", "trailing/", "a b", "ü/ñ"})
        EXPECT_TRUE(IsValidMqttTopic(ok)) << ok;
    for (std::string bad :
         {std::string(""), std::string("a/+/b"), std::string("a/#"), std::string("$SYS/x"),
          std::string("a\nb"), std::string("a\x7f"), std::string("a\0b", 3), std::string("\xc3"),
          std::string("\xc0\xaf"), std::string("\xed\xa0\x80"), std::string(65536, 'a')})
        EXPECT_FALSE(IsValidMqttTopic(bad)) << bad;
    EXPECT_TRUE(IsValidMqttTopic(std::string(65535, 'a')));
}

TEST(MqttClientIdTest, FixedPerDestinationAndWorker) {
    EXPECT_EQ(MqttClientId("outbox-db-orders", 0), "outbox-db-orders");
    EXPECT_EQ(MqttClientId("outbox-db-orders", 1), "outbox-db-orders-w2");
    EXPECT_EQ(MqttClientId("outbox-db-orders", 1), MqttClientId("outbox-db-orders", 1));
    std::string a = MqttClientId("outbox-" + std::string(300, 'x') + "a", 0);
    std::string b = MqttClientId("outbox-" + std::string(300, 'x') + "b", 0);
    EXPECT_EQ(a.size(), 200u);
    EXPECT_NE(a, b);
}

TEST(MqttClassifyTest, ReasonCodes) {
    EXPECT_EQ(ClassifyMqttReason(0x00), OutcomeKind::Delivered);
    EXPECT_EQ(ClassifyMqttReason(0x10), OutcomeKind::Delivered);  // no matching subscribers
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_NOT_AUTHORIZED), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_TOPIC_NAME_INVALID), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_PACKET_TOO_LARGE), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_PAYLOAD_FORMAT_INVALID), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_RETAIN_NOT_SUPPORTED), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_QOS_NOT_SUPPORTED), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_UNSPECIFIED), OutcomeKind::Retry);
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_IMPLEMENTATION_SPECIFIC), OutcomeKind::Retry);
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_QUOTA_EXCEEDED), OutcomeKind::Retry);
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_PACKET_ID_IN_USE), OutcomeKind::Retry);
    EXPECT_EQ(ClassifyMqttReason(MQTT_RC_PACKET_ID_NOT_FOUND), OutcomeKind::Retry);
    EXPECT_EQ(MqttReasonText(0x87), "0x87 Not authorized");
    EXPECT_EQ(MqttReasonText(0x95), "0x95 Packet too large");
}

TEST(MqttClassifyTest, LibraryErrors) {
    EXPECT_EQ(ClassifyMqttPublishError(MOSQ_ERR_OVERSIZE_PACKET), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttPublishError(MOSQ_ERR_PAYLOAD_SIZE), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttPublishError(MOSQ_ERR_INVAL), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttPublishError(MOSQ_ERR_MALFORMED_UTF8), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttPublishError(MOSQ_ERR_QOS_NOT_SUPPORTED), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyMqttPublishError(MOSQ_ERR_NO_CONN), OutcomeKind::Defer);
    EXPECT_EQ(ClassifyMqttPublishError(MOSQ_ERR_CONN_LOST), OutcomeKind::Defer);
    EXPECT_EQ(ClassifyMqttPublishError(MOSQ_ERR_NOMEM), OutcomeKind::Retry);
}

TEST(MqttEncodeTest, CloudEventsBindingAndProperties) {
    Message m;
    m.event_id = "0190a0c4-0000-7000-8000-000000000001";
    m.topic = "";
    m.payload = R"({"n":1})";
    m.payload_is_json = true;
    m.created_at_ms = 1700000000123;
    m.expires_at_ms = 1700000100000;
    m.headers = {{"x-a", "1"},
                 {"content-type", "application/vnd.x+json"},
                 {"ce_type", "order.created"},
                 {"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}};
    MqttPublication p =
        BuildMqttPublication(m, "orders/new", "/outbox/db", "orders/new", 1700000000000);
    EXPECT_EQ(p.topic, "orders/new");
    EXPECT_EQ(p.payload, R"({"n":1})");
    EXPECT_EQ(p.content_type, "application/vnd.x+json");
    EXPECT_TRUE(p.utf8_payload);
    EXPECT_EQ(p.correlation_data, m.event_id);
    EXPECT_EQ(p.expiry_s, 100u);
    Headers want = {{"x-a", "1"},
                    {"specversion", "1.0"},
                    {"id", "0190a0c4-0000-7000-8000-000000000001"},
                    {"source", "/outbox/db"},
                    {"type", "order.created"},
                    {"time", "2023-11-14T22:13:20.123Z"},
                    {"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}};
    EXPECT_EQ(p.user_properties, want);

    Message b;
    b.event_id = "e";
    b.topic = "own/topic";
    b.payload = std::string("\x00\xff", 2);
    b.payload_is_json = false;
    MqttPublication q = BuildMqttPublication(b, "own/topic", "/outbox/db", "dflt", 0);
    EXPECT_EQ(q.content_type, "application/octet-stream");
    EXPECT_FALSE(q.utf8_payload);
    EXPECT_EQ(q.expiry_s, 0u);
    EXPECT_EQ(q.payload, std::string("\x00\xff", 2));
    // The type is the message's topic; an expired message still gets at least 1 s.
    b.expires_at_ms = 500;
    b.payload = "x";
    MqttPublication r = BuildMqttPublication(b, "own/topic", "/outbox/db", "dflt", 10000);
    EXPECT_EQ(r.expiry_s, 1u);
    bool type_ok = false;
    for (const auto &[k, v] : r.user_properties)
        type_ok = type_ok || (k == "type" && v == "own/topic");
    EXPECT_TRUE(type_ok);
}

}  // namespace
}  // namespace outbox
