// Destination configs of the amqp and nats kinds: what a DBA passes to create_destination and
// what the worker runs with.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "outbox/brokers/amqp/config.hpp"
#include "outbox/brokers/amqp/kind.hpp"
#include "outbox/brokers/nats/config.hpp"
#include "outbox/brokers/nats/kind.hpp"
#include "outbox/brokers/registry.hpp"
#include "outbox/config.hpp"
#include "outbox/brokers/cloudevents.hpp"
#include "outbox/headers.hpp"

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

ConfigCheck Amqp(const std::string &json, bool check_files = true) {
    CheckOptions options;
    options.check_files = check_files;
    return CheckDestinationConfig(kAmqpKind, json, options);
}

ConfigCheck Nats(const std::string &json, bool check_files = true) {
    CheckOptions options;
    options.check_files = check_files;
    return CheckDestinationConfig(kNatsKind, json, options);
}

TEST(BrokerConfigTest, KindNames) {
    EXPECT_EQ(FindBrokerKind("amqp"), &kAmqpKind);
    EXPECT_EQ(FindBrokerKind("nats"), &kNatsKind);
    EXPECT_EQ(FindBrokerKind("rabbitmq"), nullptr);
    EXPECT_EQ(FindBrokerKind("AMQP"), nullptr);
    EXPECT_STREQ(kAmqpKind.name, "amqp");
    EXPECT_STREQ(kNatsKind.name, "nats");
}

TEST(BrokerConfigTest, ValidAmqpConfigParsesIntoFields) {
    ConfigCheck check = Amqp(R"({"url": "amqp://outbox:s3cret@rabbit:5673/prod",
        "exchange": "orders", "routing_key": "order.created", "max_in_flight": 64,
        "heartbeat": "10s", "connect_timeout": 2000, "max_attempts": 4, "ordering": "key"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    const AmqpConfig &a = check.config.Settings<AmqpConfig>();
    EXPECT_EQ(check.config.kind, &kAmqpKind);
    EXPECT_EQ(a.url, "amqp://outbox:s3cret@rabbit:5673/prod");
    EXPECT_EQ(a.exchange, "orders");
    EXPECT_EQ(a.routing_key, "order.created");
    EXPECT_EQ(a.max_in_flight, 64);
    EXPECT_EQ(a.heartbeat_s, 10);
    EXPECT_EQ(a.connect_timeout_ms, 2000);
    EXPECT_EQ(check.config.retry.max_attempts, 4);
    EXPECT_EQ(check.config.ordering, Ordering::Key);
    EXPECT_TRUE(check.privileged.empty());
}

TEST(BrokerConfigTest, AmqpDefaults) {
    ConfigCheck check = Amqp(R"({"url": "amqp://rabbit"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    EXPECT_EQ(check.config.Settings<AmqpConfig>().exchange, "");  // the default exchange
    EXPECT_EQ(check.config.Settings<AmqpConfig>().routing_key, "");
    EXPECT_EQ(check.config.Settings<AmqpConfig>().heartbeat_s, 30);
    EXPECT_TRUE(check.config.Settings<AmqpConfig>().tls_verify);
    // Half a second of heartbeat is one second, not off.
    EXPECT_EQ(Amqp(R"({"url": "amqp://r", "heartbeat": "500ms"})")
                  .config.Settings<AmqpConfig>()
                  .heartbeat_s,
              1);
    EXPECT_EQ(
        Amqp(R"({"url": "amqp://r", "heartbeat": 0})").config.Settings<AmqpConfig>().heartbeat_s,
        0);
}

TEST(BrokerConfigTest, AmqpProblemsAllAtOnceWithoutTheUrl) {
    ConfigCheck check = Amqp(R"({"url": "http://user:hunter2@rabbit/", "exchange": 7,
        "routing_key": "", "topic": "orders", "max_in_flight": 0, "heartbeat": "2h",
        "bogus": 1})");
    EXPECT_TRUE(HasProblem(check,
                           "\"url\" must be an amqp:// or amqps:// URL with a host, such as "
                           "\"amqp://user:password@host:5672/vhost\" (no query parameters)"));
    EXPECT_TRUE(HasProblem(check,
                           "\"exchange\" must be a string of at most 255 bytes of valid UTF-8 "
                           "without control characters (\"\" is the default exchange)"));
    EXPECT_TRUE(HasProblem(check,
                           "\"routing_key\" must be 1 to 255 bytes of valid UTF-8 without "
                           "control characters"));
    EXPECT_TRUE(HasProblem(check, "unknown key \"topic\" for an amqp destination"));
    EXPECT_TRUE(HasProblem(check, "\"max_in_flight\" must be an integer between 1 and 10000"));
    EXPECT_TRUE(HasProblem(check,
                           "\"heartbeat\" must be a duration between 0 (off) and 10min (a number "
                           "of milliseconds or a string such as \"500ms\" or \"5s\")"));
    EXPECT_TRUE(HasProblem(check, "unknown key \"bogus\" for an amqp destination"));
    EXPECT_EQ(check.problems.size(), 7u) << JoinProblems(check);
    EXPECT_EQ(JoinProblems(check).find("hunter2"), std::string::npos);
    ASSERT_EQ(check.hints.size(), 1u);
    EXPECT_EQ(check.hints[0], "The default routing key of an amqp destination is \"routing_key\".");
}

TEST(BrokerConfigTest, AmqpUrlShapes) {
    for (const char *good : {"amqp://h", "amqp://u:p@h:5672/vh", "amqps://h/"})
        EXPECT_TRUE(Amqp(std::string(R"({"url": ")") + good + "\"}").ok()) << good;
    for (const char *bad : {"amqp://", "amqp:///vhost", "amqp://h:0", "amqp://h:99999",
                            "amqp://h?heartbeat=10", "h:5672", "amqp://h:port", "AMQP://h:1", ""})
        EXPECT_FALSE(Amqp(std::string(R"({"url": ")") + bad + "\"}").ok()) << bad;
    EXPECT_TRUE(HasProblem(Amqp("{}"), "\"url\" is required for an amqp destination"));
}

TEST(BrokerConfigTest, AmqpTlsFilesArePrivilegedAndChecked) {
    ConfigCheck check = Amqp(R"({"url": "amqps://h", "ca_file": "/nonexistent/ca.pem",
        "cert_file": "/etc/hostname"})");
    ASSERT_EQ(check.privileged.size(), 2u);
    EXPECT_EQ(check.privileged[0].access, ServerAccess::ReadsFiles);
    EXPECT_EQ(check.privileged[0].problem,
              "\"ca_file\" has the database server read a file: only a superuser or a member "
              "of pg_read_server_files may set it");
    EXPECT_TRUE(HasProblem(check,
                           "\"ca_file\" must name a readable file (\"/nonexistent/ca.pem\": no "
                           "such file)"));
    EXPECT_TRUE(HasProblem(check,
                           "\"cert_file\" and \"key_file\" go together: set both or "
                           "neither"));
    // Without the right to read server files, no path is looked at.
    ConfigCheck unchecked =
        Amqp(R"({"url": "amqps://h", "ca_file": "/nonexistent/ca.pem"})", false);
    EXPECT_TRUE(unchecked.ok()) << JoinProblems(unchecked);
    EXPECT_EQ(unchecked.privileged.size(), 1u);
    // TLS settings on a plain URL are a mistake.
    EXPECT_TRUE(HasProblem(Amqp(R"({"url": "amqp://h", "tls_verify": false})"),
                           "\"ca_file\", \"cert_file\", \"key_file\" and \"tls_verify\" apply to "
                           "amqps:// URLs only"));
}

TEST(BrokerConfigTest, ValidNatsConfigParsesIntoFields) {
    ConfigCheck check = Nats(R"({"servers": "nats://a:4222, tls://b:4223", "subject": "orders.new",
        "user": "outbox", "password": "pw", "max_in_flight": 32, "ack_timeout": "2s",
        "retry_base": "100ms"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    const NatsConfig &n = check.config.Settings<NatsConfig>();
    ASSERT_EQ(n.servers.size(), 2u);
    EXPECT_EQ(n.servers[0], "nats://a:4222");
    EXPECT_EQ(n.servers[1], "tls://b:4223");
    EXPECT_EQ(n.subject, "orders.new");
    EXPECT_EQ(n.user, "outbox");
    EXPECT_EQ(n.password, "pw");
    EXPECT_EQ(n.max_in_flight, 32);
    EXPECT_EQ(n.ack_timeout_ms, 2000);
    ConfigCheck array = Nats(R"({"servers": ["nats://127.0.0.1:4222", "localhost:4223"]})");
    ASSERT_TRUE(array.ok()) << JoinProblems(array);
    EXPECT_EQ(array.config.Settings<NatsConfig>().servers.size(), 2u);
}

TEST(BrokerConfigTest, NatsProblemsAllAtOnceWithoutSecrets) {
    ConfigCheck check = Nats(R"({"servers": "http://u:topsecret@h:4222", "subject": "orders.*",
        "token": "", "password": "alsosecret", "nkey": "SUAM", "topic": "x",
        "creds_file": "/nonexistent/user.creds"})");
    EXPECT_TRUE(HasProblem(check,
                           "\"servers\" must list NATS servers as nats://host:port or "
                           "tls://host:port URLs, in a comma-separated string or an array of "
                           "strings"));
    EXPECT_TRUE(HasProblem(check,
                           "\"subject\" must be a NATS subject to publish to: tokens of "
                           "printable ASCII separated by \".\", no spaces, no wildcards (\"*\", "
                           "\">\"), not a system subject (\"$...\", \"_INBOX...\"), at most 255 "
                           "bytes"));
    EXPECT_TRUE(HasProblem(check, "\"token\" must be a non-empty string"));
    EXPECT_TRUE(HasProblem(check, "\"password\" needs \"user\""));
    EXPECT_TRUE(HasProblem(check,
                           "\"nkey\" must be an NKey public user key (56 characters "
                           "starting with \"U\")"));
    EXPECT_TRUE(HasProblem(check,
                           "\"nkey\" and \"nkey_seed_file\" go together: set both or "
                           "neither"));
    EXPECT_TRUE(HasProblem(check, "unknown key \"topic\" for a nats destination"));
    EXPECT_TRUE(HasProblem(check,
                           "\"creds_file\" must name a readable file "
                           "(\"/nonexistent/user.creds\": no such file)"));
    EXPECT_TRUE(HasProblem(check,
                           "choose one way to authenticate: \"user\"/\"password\", "
                           "\"token\", \"creds_file\" or \"nkey\"/\"nkey_seed_file\""));
    std::string all = JoinProblems(check);
    EXPECT_EQ(all.find("topsecret"), std::string::npos);
    EXPECT_EQ(all.find("alsosecret"), std::string::npos);
    EXPECT_TRUE(HasProblem(Nats("{}"), "\"servers\" is required for a nats destination"));
    EXPECT_EQ(check.privileged.size(), 1u);  // creds_file
}

TEST(BrokerConfigTest, NatsServerShapes) {
    for (const char *good :
         {"nats://h:4222", "tls://h:4222", "h:4222", "h", "nats://u:p@h:1", "nats://[::1]:4222"})
        EXPECT_TRUE(Nats(std::string(R"({"servers": ")") + good + "\"}").ok()) << good;
    for (const char *bad : {"", "nats://", "ws://h:80", "nats://h:0", "nats://h:x", "nats://h/p",
                            "a b:4222", ",", "nats://h:4222,"})
        EXPECT_FALSE(Nats(std::string(R"({"servers": ")") + bad + "\"}").ok()) << bad;
    EXPECT_FALSE(Nats(R"({"servers": []})").ok());
    EXPECT_FALSE(Nats(R"({"servers": [4222]})").ok());
}

TEST(BrokerConfigTest, NatsSubjects) {
    for (const char *good : {"orders", "orders.created", "a.b-c_d.e1", "Orders.V2"})
        EXPECT_TRUE(IsValidNatsSubject(good)) << good;
    for (const char *bad :
         {"", ".orders", "orders.", "a..b", "orders.*", "orders.>", "a b", "a\tb",
          "$JS.API.STREAM.DELETE.orders", "$SYS.x", "_INBOX.abc", "_INBOX", "caf\xc3\xa9"})
        EXPECT_FALSE(IsValidNatsSubject(bad)) << bad;
    EXPECT_TRUE(IsValidNatsSubject(std::string(255, 'a')));
    EXPECT_FALSE(IsValidNatsSubject(std::string(256, 'a')));
}

TEST(BrokerConfigTest, AmqpRoutingKeys) {
    for (const char *good : {"orders", "order.created", "#", "caf\xc3\xa9", "a b"})
        EXPECT_TRUE(IsValidAmqpRoutingKey(good)) << good;
    for (const char *bad : {"", "a\nb", "a\x01", "bad\xff"})
        EXPECT_FALSE(IsValidAmqpRoutingKey(bad)) << bad;
    EXPECT_TRUE(IsValidAmqpRoutingKey(std::string(255, 'k')));
    EXPECT_FALSE(IsValidAmqpRoutingKey(std::string(256, 'k')));
}

TEST(BrokerConfigTest, JetStreamControlHeadersAreReserved) {
    EXPECT_TRUE(IsReservedHeaderName("Nats-Msg-Id"));
    EXPECT_TRUE(IsReservedHeaderName("nats-rollup"));
    EXPECT_TRUE(IsReservedHeaderName("NATS-Expected-Last-Sequence"));
    EXPECT_FALSE(IsReservedHeaderName("natsy"));
    EXPECT_FALSE(IsReservedHeaderName("x-nats-thing"));
}

TEST(BrokerConfigTest, NatsHeaderValuesArePercentEncoded) {
    EXPECT_EQ(PercentEncodeNatsHeaderValue("/outbox/app"), "/outbox/app");
    EXPECT_EQ(PercentEncodeNatsHeaderValue("Euro \xE2\x82\xAC \xF0\x9F\x98\x80"),
              "Euro%20%E2%82%AC%20%F0%9F%98%80");  // the binding's own example
    EXPECT_EQ(PercentEncodeNatsHeaderValue("a\"b%c"), "a%22b%25c");
    EXPECT_EQ(PercentEncodeNatsHeaderValue(std::string("\x01\x7F", 2)), "%01%7F");
}

}  // namespace
}  // namespace outbox
