// The redis kind's pure parts: the config check (every bad input, all problems at once, the
// password never quoted), the classification of Redis's error replies, and the stream entry a
// message becomes.
#include <gtest/gtest.h>

#include <string>

#include "outbox/brokers/redis/classify.hpp"
#include "outbox/brokers/redis/config.hpp"
#include "outbox/brokers/redis/driver.hpp"
#include "outbox/brokers/redis/kind.hpp"
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

ConfigCheck Redis(const std::string &json, bool check_files = true) {
    CheckOptions options;
    options.check_files = check_files;
    return CheckDestinationConfig(kRedisKind, json, options);
}

TEST(RedisConfigTest, KindRow) {
    EXPECT_EQ(FindBrokerKind("redis"), &kRedisKind);
    EXPECT_STREQ(kRedisKind.name, "redis");
    EXPECT_STREQ(kRedisKind.topic.default_key, "stream");
    EXPECT_EQ(kRedisKind.network, NetworkRule::Broker);
    EXPECT_FALSE(kRedisKind.tombstones);
}

TEST(RedisConfigTest, ValidConfigParsesIntoFields) {
    ConfigCheck check = Redis(R"({"server": "rediss://cache.example.com:6380", "stream": "orders",
        "user": "outbox", "password": "s3cret", "database": 2, "maxlen": 100000,
        "create_stream": false, "wait": {"replicas": 1, "timeout": "250ms"},
        "max_in_flight": 500, "ack_timeout": "3s", "connect_timeout": 2000, "ordering": "key"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    const RedisConfig &c = check.config.Settings<RedisConfig>();
    EXPECT_EQ(c.host, "cache.example.com");
    EXPECT_EQ(c.port, 6380);
    EXPECT_TRUE(c.tls);
    EXPECT_TRUE(c.tls_verify);
    EXPECT_EQ(c.stream, "orders");
    EXPECT_EQ(c.user, "outbox");
    EXPECT_EQ(c.password, "s3cret");
    EXPECT_EQ(c.database, 2);
    EXPECT_EQ(c.maxlen, 100000);
    EXPECT_FALSE(c.create_stream);
    EXPECT_EQ(c.wait_replicas, 1);
    EXPECT_EQ(c.wait_timeout_ms, 250);
    EXPECT_EQ(c.max_in_flight, 500);
    EXPECT_EQ(c.ack_timeout_ms, 3000);
    EXPECT_EQ(c.connect_timeout_ms, 2000);
    EXPECT_EQ(check.config.ordering, Ordering::Key);
    EXPECT_EQ(kRedisKind.driver->hosts(check.config),
              std::vector<std::string>{"cache.example.com"});
}

TEST(RedisConfigTest, Defaults) {
    ConfigCheck check = Redis(R"({"server": "127.0.0.1"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    const RedisConfig &c = check.config.Settings<RedisConfig>();
    EXPECT_EQ(c.port, 6379);
    EXPECT_FALSE(c.tls);
    EXPECT_TRUE(c.create_stream);
    EXPECT_EQ(c.database, 0);
    EXPECT_EQ(c.maxlen, 0);
    EXPECT_EQ(c.wait_replicas, 0);
    EXPECT_EQ(c.stream, "");
}

TEST(RedisConfigTest, ProblemsAllAtOnceWithoutSecrets) {
    ConfigCheck check = Redis(R"({"server": "redis://outbox:hunter2@h:6379", "stream": "a\u0001b",
        "user": "u", "password": 42, "database": 70000, "maxlen": 0, "wait": {"replicas": 0,
        "timeout": "2min", "x": 1}, "max_in_flight": 0, "ack_timeout": "1ms",
        "connect_timeout": "2min", "topic": "t", "tls_verify": "no", "cert_file": "/etc/hostname",
        "bogus": 1})");
    EXPECT_FALSE(check.ok());
    const std::string all = JoinProblems(check);
    EXPECT_EQ(all.find("hunter2"), std::string::npos) << all;
    EXPECT_TRUE(HasProblem(check,
                           "\"server\" must be one Redis server as host, host:port, [ipv6]:port, "
                           "redis://host:port or rediss://host:port (TLS), without credentials "
                           "(use \"user\" and \"password\")"))
        << all;
    EXPECT_TRUE(HasProblem(check,
                           "\"stream\" must be a Redis stream name: 1 to 512 bytes without "
                           "control characters"));
    EXPECT_TRUE(HasProblem(check, "\"password\" must be a non-empty string"));
    EXPECT_TRUE(HasProblem(check, "\"database\" must be an integer between 0 and 65535"));
    EXPECT_TRUE(
        HasProblem(check, "\"maxlen\" must be an integer between 1 and 4611686018427387904"));
    EXPECT_TRUE(HasProblem(check, "\"wait\".\"replicas\" must be an integer between 1 and 100"));
    EXPECT_TRUE(HasProblem(check,
                           "\"wait\".\"timeout\" must be a duration between 1ms and 1min (a "
                           "number of milliseconds or a string such as \"500ms\" or \"5s\")"));
    EXPECT_TRUE(HasProblem(check, "unknown key \"x\" in \"wait\" (\"replicas\", \"timeout\")"));
    EXPECT_TRUE(HasProblem(check, "\"max_in_flight\" must be an integer between 1 and 10000"));
    EXPECT_TRUE(HasProblem(check, "unknown key \"topic\" for a redis destination"));
    EXPECT_TRUE(HasProblem(check, "unknown key \"bogus\" for a redis destination"));
    EXPECT_TRUE(
        HasProblem(check, "\"cert_file\" and \"key_file\" go together: set both or neither"));
    EXPECT_EQ(check.hints.size(), 1u);
    EXPECT_GE(check.problems.size(), 14u) << all;
}

TEST(RedisConfigTest, RequiredAndPairs) {
    ConfigCheck check = Redis(R"({"user": "u"})");
    EXPECT_TRUE(HasProblem(check, "\"server\" is required for a redis destination"));
    EXPECT_TRUE(HasProblem(check, "\"user\" needs \"password\""));
    EXPECT_TRUE(HasProblem(Redis(R"({"server": "h", "tls_verify": false})"),
                           "\"tls_verify\" needs TLS (\"tls\": true or a rediss:// server)"));
    EXPECT_TRUE(HasProblem(Redis(R"({"server": "rediss://h", "tls": false})"),
                           "\"tls\": false contradicts a rediss:// server, \"ca_file\" or "
                           "\"cert_file\""));
    EXPECT_TRUE(HasProblem(Redis(R"({"server": "h", "wait": 1})"),
                           "\"wait\" must be an object {\"replicas\": N, \"timeout\": duration} "
                           "(\"replicas\" required)"));
    // A password alone logs in as the default user.
    EXPECT_TRUE(Redis(R"({"server": "h", "password": "p"})").ok());
}

TEST(RedisConfigTest, ServerShapes) {
    std::string host;
    int port = 0;
    bool tls = false;
    EXPECT_TRUE(ParseRedisServer("h", &host, &port, &tls));
    EXPECT_EQ(host, "h");
    EXPECT_EQ(port, 6379);
    EXPECT_TRUE(ParseRedisServer("h:7000", &host, &port, &tls));
    EXPECT_EQ(port, 7000);
    EXPECT_TRUE(ParseRedisServer("[::1]:7001", &host, &port, &tls));
    EXPECT_EQ(host, "::1");
    EXPECT_EQ(port, 7001);
    EXPECT_TRUE(ParseRedisServer("REDISS://h/", &host, &port, &tls));
    EXPECT_TRUE(tls);
    EXPECT_TRUE(ParseRedisServer("redis://10.0.0.1:6380", &host, &port, &tls));
    EXPECT_FALSE(tls);
    EXPECT_EQ(host, "10.0.0.1");
    for (const char *bad : {"", "h:", "h:0", "h:65536", "h:x", "::1", "[::1", "[]:1", "http://h",
                            "redis://u:p@h", "h,i", "h /x", "redis://h/0", "h:123456"})
        EXPECT_FALSE(ParseRedisServer(bad, &host, &port, &tls)) << bad;
}

TEST(RedisConfigTest, TlsFilesArePrivilegedAndChecked) {
    ConfigCheck check = Redis(R"({"server": "h", "ca_file": "/nonexistent/ca.pem"})");
    ASSERT_EQ(check.privileged.size(), 1u);
    EXPECT_EQ(check.privileged[0].access, ServerAccess::ReadsFiles);
    EXPECT_TRUE(HasProblem(check,
                           "\"ca_file\" must name a readable file (\"/nonexistent/ca.pem\": no "
                           "such file)"));
    ConfigCheck unchecked = Redis(R"({"server": "h", "ca_file": "/nonexistent/ca.pem"})", false);
    EXPECT_TRUE(unchecked.ok()) << JoinProblems(unchecked);
    EXPECT_TRUE(unchecked.config.Settings<RedisConfig>().tls) << "ca_file implies TLS";
}

TEST(RedisConfigTest, Streams) {
    EXPECT_TRUE(IsValidRedisStream("orders"));
    EXPECT_TRUE(IsValidRedisStream("tenant:42:orders {x}"));
    EXPECT_TRUE(IsValidRedisStream(std::string(512, 's')));
    EXPECT_FALSE(IsValidRedisStream(""));
    EXPECT_FALSE(IsValidRedisStream(std::string(513, 's')));
    EXPECT_FALSE(IsValidRedisStream("a\nb"));
    EXPECT_FALSE(IsValidRedisStream(std::string("a\0b", 3)));
    EXPECT_FALSE(IsValidRedisStream("a\x7f"));
}

TEST(RedisClassifyTest, ErrorReplies) {
    EXPECT_EQ(
        ClassifyRedisError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        OutcomeKind::Dead);
    EXPECT_EQ(ClassifyRedisError("NOPERM this user has no permissions to access one of the keys"),
              OutcomeKind::Dead);
    EXPECT_EQ(ClassifyRedisError("ERR Protocol error: invalid bulk length"), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyRedisError("ERR syntax error"), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyRedisError("MOVED 3999 127.0.0.1:6381"), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyRedisError("OOM command not allowed when used memory > 'maxmemory'."),
              OutcomeKind::Retry);
    for (const char *outage :
         {"LOADING Redis is loading the dataset in memory", "BUSY Redis is busy running a script",
          "MASTERDOWN Link with MASTER is down",
          "READONLY You can't write against a read only replica.",
          "NOAUTH Authentication required.", "WRONGPASS invalid username-password pair", "TRYAGAIN",
          "CLUSTERDOWN The cluster is down"})
        EXPECT_EQ(ClassifyRedisError(outage), OutcomeKind::Defer) << outage;
    EXPECT_EQ(ClassifyRedisError("ERR something new"), OutcomeKind::Retry);
    EXPECT_EQ(ClassifyRedisError(""), OutcomeKind::Retry);
    EXPECT_TRUE(RedisErrorDropsConnection("READONLY You can't write against a read only replica."));
    EXPECT_TRUE(RedisErrorDropsConnection("NOAUTH Authentication required."));
    EXPECT_TRUE(RedisErrorDropsConnection("ERR Protocol error: invalid bulk length"));
    EXPECT_FALSE(RedisErrorDropsConnection("WRONGTYPE Operation against a key"));
    EXPECT_FALSE(RedisErrorDropsConnection("OOM command not allowed"));
}

TEST(RedisEntryTest, FieldsInOrder) {
    Message m;
    m.event_id = "0190a0b0-0000-7000-8000-000000000001";
    m.topic = "orders";
    m.key = "k1";
    m.payload = R"({"n":1})";
    m.headers = {{"x-a", "1"},
                 {"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}};
    m.created_at_ms = 1700000000123;
    auto fields = RedisEntryFields(m, "/outbox/db", "fallback");
    std::vector<std::string> names;
    for (const auto &f : fields)
        names.push_back(f.first);
    EXPECT_EQ(names, (std::vector<std::string>{"payload", "key", "headers", "ce_specversion",
                                               "ce_id", "ce_source", "ce_type", "ce_time",
                                               "ce_datacontenttype", "ce_traceparent"}));
    EXPECT_EQ(fields[0].second, R"({"n":1})");
    EXPECT_EQ(
        fields[2].second,
        R"({"x-a":"1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})");
    EXPECT_EQ(fields[4].second, m.event_id);
    EXPECT_EQ(fields[5].second, "/outbox/db");
    EXPECT_EQ(fields[6].second, "orders");
    EXPECT_EQ(fields[7].second, "2023-11-14T22:13:20.123Z");
    EXPECT_EQ(fields[8].second, "application/json");

    Message bare;
    bare.event_id = "e";
    bare.payload = std::string("\0\xff", 2);
    bare.payload_is_json = false;
    auto minimal = RedisEntryFields(bare, "/outbox/db", "fallback");
    ASSERT_EQ(minimal.size(), 7u);
    EXPECT_EQ(minimal[0].second, std::string("\0\xff", 2));
    EXPECT_EQ(minimal[4].first, "ce_type");
    EXPECT_EQ(minimal[4].second, "fallback");
    EXPECT_EQ(minimal[6].second, "application/octet-stream");
}

}  // namespace
}  // namespace outbox
