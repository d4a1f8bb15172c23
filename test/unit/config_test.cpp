// Destination configs: what a DBA passes to create_destination and what the worker runs with.
#include "outbox/config.hpp"
#include "outbox/brokers/amqp/kind.hpp"
#include "outbox/brokers/kafka/config.hpp"
#include "outbox/brokers/kafka/kind.hpp"
#include "outbox/brokers/nats/kind.hpp"
#include "outbox/brokers/registry.hpp"
#include "outbox/brokers/webhook/config.hpp"
#include "outbox/brokers/webhook/kind.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace outbox {
namespace {

using Properties = std::vector<std::pair<std::string, std::string>>;

std::string JoinProblems(const ConfigCheck &check) {
    std::string all;
    for (const std::string &problem : check.problems) {
        all += problem;
        all += '\n';
    }
    return all;
}

// True when some problem is exactly `problem`.
bool HasProblem(const ConfigCheck &check, const std::string &problem) {
    for (const std::string &p : check.problems) {
        if (p == problem) {
            return true;
        }
    }
    return false;
}

// True when some problem contains `fragment`.
bool HasProblemContaining(const ConfigCheck &check, const std::string &fragment) {
    for (const std::string &p : check.problems) {
        if (p.find(fragment) != std::string::npos) {
            return true;
        }
    }
    return false;
}

ConfigCheck Kafka(const std::string &json) {
    return CheckDestinationConfig(kKafkaKind, json);
}

ConfigCheck Webhook(const std::string &json) {
    return CheckDestinationConfig(kWebhookKind, json);
}

// A readable file for "ca_file", removed when the test ends.
class TempFile {
  public:
    TempFile() {
        char path[] = "/tmp/outbox_config_test_XXXXXX";
        int fd = mkstemp(path);
        if (fd >= 0) {
            (void)!write(fd, "x", 1);
            close(fd);
            path_ = path;
        }
    }
    ~TempFile() {
        if (!path_.empty()) {
            unlink(path_.c_str());
        }
    }
    const std::string &path() const { return path_; }

  private:
    std::string path_;
};

constexpr char kSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
constexpr char kOtherSecret[] = "whsec_Zm9vYmFy";  // "foobar"

TEST(ConfigTest, DestinationKindNames) {
    EXPECT_EQ(FindBrokerKind("kafka"), &kKafkaKind);
    EXPECT_EQ(FindBrokerKind("webhook"), &kWebhookKind);
    EXPECT_EQ(FindBrokerKind("Kafka"), nullptr);
    EXPECT_EQ(FindBrokerKind("http"), nullptr);
    EXPECT_EQ(FindBrokerKind(""), nullptr);
    EXPECT_STREQ(kKafkaKind.name, "kafka");
    EXPECT_STREQ(kWebhookKind.name, "webhook");
}

TEST(ConfigTest, ValidKafkaConfigParsesIntoFields) {
    ConfigCheck check = Kafka(R"({
        "bootstrap.servers": "broker1:9092,broker2:9092",
        "topic": "orders.v1",
        "linger.ms": 5,
        "linger.ms": 2,
        "enable.idempotence": true,
        "acks": "all",
        "compression.type": "lz4",
        "message.timeout.ms": 30000.0,
        "batch.num.messages": 1e3,
        "queue.buffering.max.ms": 0.5,
        "client.id": "outbox-test",
        "max_attempts": 5,
        "retry_base": "500ms",
        "retry_max": 120000
    })");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    const DestinationConfig &config = check.config;
    EXPECT_EQ(config.kind, &kKafkaKind);
    EXPECT_EQ(config.Settings<KafkaConfig>().default_topic, "orders.v1");
    EXPECT_EQ(config.retry.max_attempts, 5);
    EXPECT_EQ(config.retry.retry_base_ms, 500);
    EXPECT_EQ(config.retry.retry_max_ms, 120000);
    // librdkafka properties in document order, numbers as decimal text, booleans as words; a
    // repeated key keeps its first position and its last value (what jsonb does too).
    Properties expected = {
        {"bootstrap.servers", "broker1:9092,broker2:9092"},
        {"linger.ms", "2"},
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"compression.type", "lz4"},
        {"message.timeout.ms", "30000"},
        {"batch.num.messages", "1000"},
        {"queue.buffering.max.ms", "0.5"},
        {"client.id", "outbox-test"},
    };
    EXPECT_EQ(config.Settings<KafkaConfig>().properties, expected);
}

TEST(ConfigTest, KafkaDefaultsWhenOnlyTheBrokerIsGiven) {
    ConfigCheck check = Kafka(R"({"bootstrap.servers": "localhost:9092"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    EXPECT_EQ(check.config.Settings<KafkaConfig>().default_topic, "");
    EXPECT_EQ(check.config.retry.max_attempts, -1);
    EXPECT_EQ(check.config.retry.retry_base_ms, -1);
    EXPECT_EQ(check.config.retry.retry_max_ms, -1);
    // The alias works as well.
    EXPECT_TRUE(Kafka(R"({"metadata.broker.list": "localhost:9092"})").ok());
}

TEST(ConfigTest, ValidWebhookConfigParsesIntoFields) {
    TempFile ca;
    ASSERT_FALSE(ca.path().empty());
    std::string json = R"({
        "url": "https://hooks.example.com:8443/outbox?tenant=1",
        "secret": [")" +
                       std::string(kSecret) + R"(", ")" + kOtherSecret + R"("],
        "headers": {"Authorization": "Bearer abc", "X-Tenant": "caf\u00e9"},
        "timeout_ms": "5s",
        "max_in_flight": 8,
        "ca_file": ")" +
                       ca.path() + R"(",
        "tls_verify": false,
        "topic": "order.created",
        "max_attempts": 3,
        "retry_base": 1000,
        "retry_max": "10min"
    })";
    ConfigCheck check = Webhook(json);
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    const WebhookConfig &webhook = check.config.Settings<WebhookConfig>();
    EXPECT_EQ(check.config.kind, &kWebhookKind);
    EXPECT_EQ(webhook.url, "https://hooks.example.com:8443/outbox?tenant=1");
    ASSERT_EQ(webhook.secret_keys.size(), 2u);
    EXPECT_EQ(webhook.secret_keys[0].size(), 24u);
    EXPECT_EQ(webhook.secret_keys[1], "foobar");
    Headers headers = {{"Authorization", "Bearer abc"}, {"X-Tenant", "caf\xc3\xa9"}};
    EXPECT_EQ(webhook.headers, headers);
    EXPECT_EQ(webhook.timeout_ms, 5000);
    EXPECT_EQ(webhook.max_in_flight, 8);
    EXPECT_EQ(webhook.ca_file, ca.path());
    EXPECT_FALSE(webhook.tls_verify);
    EXPECT_EQ(webhook.default_topic, "order.created");
    EXPECT_EQ(check.config.retry.max_attempts, 3);
    EXPECT_EQ(check.config.retry.retry_base_ms, 1000);
    EXPECT_EQ(check.config.retry.retry_max_ms, 600000);
}

TEST(ConfigTest, WebhookDefaultsWhenOnlyTheUrlIsGiven) {
    ConfigCheck check = Webhook(R"({"url": "http://127.0.0.1:8080/hook", "secret": "whsec_Zm9v"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    const WebhookConfig &webhook = check.config.Settings<WebhookConfig>();
    EXPECT_EQ(webhook.secret_keys, std::vector<std::string>{"foo"});
    EXPECT_TRUE(webhook.headers.empty());
    EXPECT_EQ(webhook.timeout_ms, 10000);
    EXPECT_EQ(webhook.max_in_flight, 32);
    EXPECT_EQ(webhook.ca_file, "");
    EXPECT_TRUE(webhook.tls_verify);
    EXPECT_EQ(webhook.default_topic, "");
}

TEST(ConfigTest, KafkaReportsEveryProblemAtOnce) {
    ConfigCheck check = Kafka(R"({
        "foo.bar": 1,
        "acks": 1,
        "dr_msg_cb": "x",
        "max_attempts": 0,
        "linger.ms": "soon"
    })");
    EXPECT_EQ(check.problems.size(), 6u) << JoinProblems(check);
    EXPECT_TRUE(HasProblem(check, "unknown librdkafka property \"foo.bar\""));
    EXPECT_TRUE(HasProblem(
        check,
        "\"acks\" must be \"all\" (outbox requires acknowledgement by all in-sync replicas)"));
    EXPECT_TRUE(HasProblem(check, "\"dr_msg_cb\" is set by outbox and cannot be configured"));
    EXPECT_TRUE(HasProblem(check, "\"max_attempts\" must be an integer between 1 and 1000"));
    // librdkafka reports the canonical name of this alias; the problem names the key as written.
    EXPECT_TRUE(HasProblem(check, "invalid value \"soon\" for \"linger.ms\""))
        << JoinProblems(check);
    EXPECT_TRUE(HasProblem(check, "\"bootstrap.servers\" is required for a kafka destination"));
}

TEST(ConfigTest, WebhookReportsFiveProblemsAtOnce) {
    ConfigCheck check = Webhook(R"({
        "url": "ftp://example.com/hook",
        "secret": "whsec_not base64",
        "max_in_flight": 0,
        "headers": {"Webhook-Signature": "forged"},
        "colour": "blue"
    })");
    ASSERT_EQ(check.problems.size(), 5u) << JoinProblems(check);
    EXPECT_EQ(check.problems[0], "\"url\" must be an http or https URL with a host");
    EXPECT_EQ(check.problems[1], "\"secret\" must be \"whsec_\" followed by base64");
    EXPECT_EQ(check.problems[2], "\"max_in_flight\" must be an integer between 1 and 1024");
    EXPECT_EQ(check.problems[3],
              "header \"Webhook-Signature\" in \"headers\" is set by outbox and cannot be "
              "configured");
    EXPECT_EQ(check.problems[4], "unknown key \"colour\" for a webhook destination");
}

TEST(ConfigTest, ConfigMustBeAJsonObject) {
    for (const char *json : {"", "   ", "{", "[]", "[{}]", "5", "\"x\"", "null", "true",
                             "{\"url\": }", "{} {}", "{\"a\": \"\xff\"}"}) {
        for (const BrokerKind *kind : {&kKafkaKind, &kWebhookKind}) {
            ConfigCheck check = CheckDestinationConfig(*kind, json);
            ASSERT_EQ(check.problems.size(), 1u) << json;
            EXPECT_EQ(check.problems[0], "the config must be a JSON object") << json;
        }
    }
}

TEST(ConfigTest, KafkaGuaranteesCannotBeWeakened) {
    EXPECT_TRUE(Kafka(R"({"bootstrap.servers": "b:9092", "acks": -1})").ok());
    EXPECT_TRUE(Kafka(R"({"bootstrap.servers": "b:9092", "acks": "-1"})").ok());
    EXPECT_TRUE(Kafka(R"({"bootstrap.servers": "b:9092", "request.required.acks": "all"})").ok());
    EXPECT_TRUE(Kafka(R"({"bootstrap.servers": "b:9092", "enable.idempotence": "true"})").ok());

    ConfigCheck check = Kafka(R"({"bootstrap.servers": "b:9092", "request.required.acks": 0,
                                  "acks": "1", "enable.idempotence": false})");
    EXPECT_EQ(check.problems.size(), 3u) << JoinProblems(check);
    EXPECT_TRUE(HasProblemContaining(check, "\"request.required.acks\" must be \"all\""));
    EXPECT_TRUE(HasProblemContaining(check, "\"acks\" must be \"all\""));
    EXPECT_TRUE(HasProblemContaining(check, "\"enable.idempotence\" must be true"));

    check = Kafka(R"({"bootstrap.servers": "b:9092", "transactional.id": "t",
                      "internal.termination.signal": 0, "plugin.library.paths": "/tmp/evil.so"})");
    EXPECT_EQ(check.problems.size(), 3u) << JoinProblems(check);
    EXPECT_TRUE(HasProblemContaining(check, "\"transactional.id\" cannot be configured"));
    EXPECT_TRUE(
        HasProblemContaining(check, "\"internal.termination.signal\" cannot be configured"));
    EXPECT_TRUE(HasProblemContaining(check, "\"plugin.library.paths\" cannot be configured"));
}

TEST(ConfigTest, KafkaCallbackAndPointerPropertiesAreRefused) {
    for (const char *key : {"opaque",
                            "dr_cb",
                            "dr_msg_cb",
                            "error_cb",
                            "log_cb",
                            "log.queue",
                            "background_event_cb",
                            "socket_cb",
                            "connect_cb",
                            "closesocket_cb",
                            "open_cb",
                            "resolve_cb",
                            "stats_cb",
                            "throttle_cb",
                            "oauthbearer_token_refresh_cb",
                            "ssl.certificate.verify_cb",
                            "ssl_engine_callback_data",
                            "default_topic_conf",
                            "interceptors",
                            "ssl_key",
                            "ssl_certificate",
                            "ssl_ca",
                            "msg_order_cmp",
                            "partitioner_cb",
                            "some.future.cb",
                            "LOG_CB"}) {
        ConfigCheck check =
            Kafka(std::string(R"({"bootstrap.servers": "b:9092", ")") + key + R"(": "x"})");
        ASSERT_EQ(check.problems.size(), 1u) << key << ": " << JoinProblems(check);
        EXPECT_EQ(check.problems[0],
                  "\"" + std::string(key) + "\" is set by outbox and cannot be configured");
    }
    // Names merely ending in the letters "cb" are ordinary (unknown) properties.
    ConfigCheck check = Kafka(R"({"bootstrap.servers": "b:9092", "abcb": "x"})");
    EXPECT_TRUE(HasProblem(check, "unknown librdkafka property \"abcb\"")) << JoinProblems(check);
}

TEST(ConfigTest, KafkaValuesAreCheckedByLibrdkafka) {
    ConfigCheck check = Kafka(R"({"bootstrap.servers": "b:9092", "security.protocol": "bogus",
                                  "message.max.bytes": 5, "enable.ssl.certificate.verification":
                                  "maybe", "linger.ms": [1], "client.id": {"a": 1},
                                  "debug": null, "url": "http://x"})");
    EXPECT_EQ(check.problems.size(), 7u) << JoinProblems(check);
    EXPECT_TRUE(HasProblem(check,
                           "invalid value \"bogus\" for configuration property "
                           "\"security.protocol\""))
        << JoinProblems(check);
    EXPECT_TRUE(HasProblemContaining(check, "\"message.max.bytes\" value 5 is outside"));
    EXPECT_TRUE(HasProblemContaining(check, "\"enable.ssl.certificate.verification\""));
    EXPECT_TRUE(
        HasProblem(check, "librdkafka property \"linger.ms\" must be a string, number or boolean"));
    EXPECT_TRUE(
        HasProblem(check, "librdkafka property \"client.id\" must be a string, number or boolean"));
    EXPECT_TRUE(
        HasProblem(check, "librdkafka property \"debug\" must be a string, number or boolean"));
    EXPECT_TRUE(HasProblem(check, "unknown librdkafka property \"url\""));
    for (const std::string &problem : check.problems) {
        EXPECT_EQ(problem.find('\n'), std::string::npos) << problem;
        EXPECT_NE(problem.back(), '.') << problem;
    }
}

TEST(ConfigTest, LongValuesAreTruncatedInProblems) {
    std::string long_value(300, 'z');
    ConfigCheck check =
        Kafka(R"({"bootstrap.servers": "b:9092", "security.protocol": ")" + long_value + R"("})");
    ASSERT_EQ(check.problems.size(), 1u);
    EXPECT_EQ(check.problems[0].find(long_value.substr(0, 65)), std::string::npos)
        << check.problems[0];
    EXPECT_NE(check.problems[0].find(long_value.substr(0, 64) + "...\""), std::string::npos)
        << check.problems[0];
    EXPECT_LT(check.problems[0].size(), 200u);

    std::string long_key(100, 'k');
    check = Webhook(R"({"url": "http://h/", ")" + long_key + R"(": 1})");
    ASSERT_EQ(check.problems.size(), 1u);
    EXPECT_EQ(check.problems[0],
              "unknown key \"" + long_key.substr(0, 64) + "...\" for a webhook destination");
}

TEST(ConfigTest, KafkaBootstrapServersMustNameABroker) {
    ConfigCheck check = Kafka(R"({"bootstrap.servers": ""})");
    ASSERT_EQ(check.problems.size(), 1u) << JoinProblems(check);
    EXPECT_EQ(check.problems[0], "\"bootstrap.servers\" must list at least one broker");
    EXPECT_FALSE(Kafka(R"({"bootstrap.servers": " , "})").ok());
    EXPECT_FALSE(Kafka(R"({})").ok());
}

TEST(ConfigTest, KafkaTopicNames) {
    for (const char *topic : {"orders", "orders.v1", "a_b-c.D9", ".x"}) {
        ConfigCheck check =
            Kafka(std::string(R"({"bootstrap.servers": "b", "topic": ")") + topic + "\"}");
        EXPECT_TRUE(check.ok()) << topic << ": " << JoinProblems(check);
        EXPECT_EQ(check.config.Settings<KafkaConfig>().default_topic, topic);
    }
    EXPECT_TRUE(
        Kafka(R"({"bootstrap.servers": "b", "topic": ")" + std::string(249, 't') + "\"}").ok());
    for (const std::string &topic :
         {std::string(""), std::string("."), std::string(".."), std::string("a b"),
          std::string("a/b"), std::string("caf\xc3\xa9"), std::string(250, 't')}) {
        ConfigCheck check = Kafka(R"({"bootstrap.servers": "b", "topic": ")" + topic + "\"}");
        ASSERT_EQ(check.problems.size(), 1u) << topic;
        EXPECT_EQ(check.problems[0].rfind("\"topic\" must be a Kafka topic name", 0), 0u);
    }
    EXPECT_FALSE(Kafka(R"({"bootstrap.servers": "b", "topic": 5})").ok());
}

TEST(ConfigTest, WebhookTopicIsAnyNonEmptyHeaderSafeString) {
    EXPECT_TRUE(Webhook(R"({"url": "http://h/", "topic": "com.example order/created"})").ok());
    EXPECT_FALSE(Webhook(R"({"url": "http://h/", "topic": ""})").ok());
    EXPECT_FALSE(Webhook(R"({"url": "http://h/", "topic": "a\r\nb"})").ok());
    EXPECT_FALSE(
        Webhook(R"({"url": "http://h/", "topic": ")" + std::string(250, 't') + "\"}").ok());
    EXPECT_TRUE(Webhook(R"({"url": "http://h/", "topic": ")" + std::string(249, 't') + "\"}").ok());
}

TEST(ConfigTest, RetrySettings) {
    auto retry = [](const std::string &members) {
        return Kafka(R"({"bootstrap.servers": "b", )" + members + "}");
    };
    EXPECT_EQ(retry(R"("max_attempts": 1000)").config.retry.max_attempts, 1000);
    EXPECT_EQ(retry(R"("max_attempts": 7.0)").config.retry.max_attempts, 7);
    EXPECT_EQ(retry(R"("retry_base": "1ms", "retry_max": "7d")").config.retry.retry_max_ms,
              7 * 86400000LL);
    EXPECT_EQ(retry(R"("retry_base": "1d")").config.retry.retry_base_ms, 86400000);
    EXPECT_EQ(retry(R"("retry_base": 2.9)").config.retry.retry_base_ms, 2);
    EXPECT_TRUE(retry(R"("retry_base": "2s", "retry_max": "2s")").ok());

    for (const char *bad :
         {R"("max_attempts": 0)", R"("max_attempts": 1001)", R"("max_attempts": 2.5)",
          R"("max_attempts": "5")", R"("max_attempts": -1)", R"("retry_base": 0)",
          R"("retry_base": "0ms")", R"("retry_base": "25h")", R"("retry_base": -5)",
          R"("retry_base": "fast")", R"("retry_base": true)", R"("retry_max": "8d")",
          R"("retry_max": 0)", R"("retry_max": 1e300)"}) {
        ConfigCheck check = retry(bad);
        EXPECT_EQ(check.problems.size(), 1u) << bad << ": " << JoinProblems(check);
    }
    ConfigCheck check = retry(R"("retry_base": "1min", "retry_max": "30s")");
    ASSERT_EQ(check.problems.size(), 1u) << JoinProblems(check);
    EXPECT_EQ(check.problems[0], "\"retry_max\" must not be less than \"retry_base\"");
}

TEST(ConfigTest, WebhookUrls) {
    for (const char *url :
         {"http://example.com", "https://example.com/hook", "http://127.0.0.1:8080/a?b=c",
          "http://[::1]:9000/", "HTTPS://EXAMPLE.COM/", "https://user@example.com/x"}) {
        ConfigCheck check = Webhook(std::string(R"({"url": ")") + url + "\"}");
        EXPECT_TRUE(check.ok()) << url << ": " << JoinProblems(check);
        EXPECT_EQ(check.config.Settings<WebhookConfig>().url, url);
    }
    for (const char *url : {"", "example.com/hook", "ftp://example.com/", "file:///etc/passwd",
                            "http://", "https:///path", "http:/h/", "http://exa mple.com/",
                            "mailto:a@b", "gopher://example.com/", "//example.com/"}) {
        ConfigCheck check = Webhook(std::string(R"({"url": ")") + url + "\"}");
        ASSERT_EQ(check.problems.size(), 1u) << url;
        EXPECT_EQ(check.problems[0], "\"url\" must be an http or https URL with a host") << url;
    }
    EXPECT_FALSE(Webhook(R"({"url": 42})").ok());
    EXPECT_FALSE(Webhook(R"({"url": "http://a\u0000b/"})").ok());
    ConfigCheck check = Webhook(R"({})");
    ASSERT_EQ(check.problems.size(), 1u);
    EXPECT_EQ(check.problems[0], "\"url\" is required for a webhook destination");
}

TEST(ConfigTest, WebhookSecrets) {
    EXPECT_TRUE(Webhook(R"({"url": "http://h/", "secret": ")" + std::string(kSecret) + "\"}").ok());
    ConfigCheck check = Webhook(R"({"url": "http://h/", "secret": []})");
    ASSERT_EQ(check.problems.size(), 1u);
    EXPECT_EQ(check.problems[0],
              "\"secret\" must be a \"whsec_\" string or a non-empty array of them");
    EXPECT_FALSE(Webhook(R"({"url": "http://h/", "secret": 5})").ok());
    EXPECT_FALSE(Webhook(R"({"url": "http://h/", "secret": "Zm9vYmFy"})").ok());
    EXPECT_FALSE(Webhook(R"({"url": "http://h/", "secret": "whsec_"})").ok());
    check = Webhook(R"({"url": "http://h/", "secret": [")" + std::string(kSecret) +
                    R"(", "whsec_Zm9", 7]})");
    ASSERT_EQ(check.problems.size(), 2u) << JoinProblems(check);
    EXPECT_EQ(check.problems[0], "element 2 of \"secret\" must be \"whsec_\" followed by base64");
    EXPECT_EQ(check.problems[1], "element 3 of \"secret\" must be \"whsec_\" followed by base64");
    EXPECT_TRUE(check.config.Settings<WebhookConfig>().secret_keys.empty());
}

// v1a: whsk_ private keys sign beside whsec_ secrets; a public key given by mistake is named.
TEST(ConfigTest, WebhookSigningKeys) {
    const std::string seed = "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=";
    const std::string pub = "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";
    ConfigCheck check = Webhook(R"({"url": "http://h/", "secret": ")" + seed + "\"}");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    ASSERT_EQ(check.config.Settings<WebhookConfig>().signing_keys.size(), 1u);
    EXPECT_EQ(check.config.Settings<WebhookConfig>().signing_keys[0].size(), 32u);
    EXPECT_TRUE(check.config.Settings<WebhookConfig>().secret_keys.empty());

    check = Webhook(R"({"url": "http://h/", "secret": [")" + std::string(kSecret) + R"(", ")" +
                    seed + R"("]})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    EXPECT_EQ(check.config.Settings<WebhookConfig>().secret_keys.size(), 1u);
    EXPECT_EQ(check.config.Settings<WebhookConfig>().signing_keys.size(), 1u);

    check = Webhook(R"({"url": "http://h/", "secret": ")" + pub + "\"}");
    ASSERT_EQ(check.problems.size(), 1u);
    EXPECT_EQ(check.problems[0],
              "\"secret\" is a public key (\"whpk_\"): sign with its private key (\"whsk_\"); "
              "the public key is what receivers verify with");
    check = Webhook(R"({"url": "http://h/", "secret": [")" + seed + R"(", "whsk_Zm9vYmFy"]})");
    ASSERT_EQ(check.problems.size(), 1u);
    EXPECT_EQ(check.problems[0],
              "element 2 of \"secret\" must be \"whsk_\" followed by the base64 of a 32-byte "
              "ed25519 private key (or of libsodium's 64-byte secret key)");
    EXPECT_TRUE(check.config.Settings<WebhookConfig>().signing_keys.empty());
    // Neither problem quotes the key.
    check = Webhook(R"({"url": "http://h/", "secret": ")" + seed.substr(0, 20) + "\"}");
    ASSERT_EQ(check.problems.size(), 1u);
    EXPECT_EQ(check.problems[0].find(seed.substr(5, 10)), std::string::npos);
}

TEST(ConfigTest, WebhookHeaders) {
    ConfigCheck check = Webhook(R"({"url": "http://h/", "headers": {
        "bad name": "v",
        "Host": "evil",
        "ce-id": "x",
        "X-Number": 5,
        "X-Injected": "a\r\nb",
        "X-Good": "ok"
    }})");
    ASSERT_EQ(check.problems.size(), 5u) << JoinProblems(check);
    EXPECT_EQ(check.problems[0],
              "header name \"bad name\" in \"headers\" is not a valid HTTP header name");
    EXPECT_EQ(check.problems[1],
              "header \"Host\" in \"headers\" is set by outbox and cannot be configured");
    EXPECT_EQ(check.problems[2],
              "header \"ce-id\" in \"headers\" is set by outbox and cannot be configured");
    EXPECT_EQ(check.problems[3], "header \"X-Number\" in \"headers\" must be a string");
    EXPECT_EQ(check.problems[4],
              "header \"X-Injected\" in \"headers\" must be valid UTF-8 of at most 8192 bytes "
              "without CR, LF or NUL");
    EXPECT_EQ(check.config.Settings<WebhookConfig>().headers, (Headers{{"X-Good", "ok"}}));

    EXPECT_FALSE(Webhook(R"({"url": "http://h/", "headers": ["a"]})").ok());
    EXPECT_FALSE(Webhook(R"({"url": "http://h/", "headers": "a: b"})").ok());

    std::string many = R"({"url": "http://h/", "headers": {)";
    for (int i = 0; i < 65; ++i) {
        many += (i ? ", " : "") + std::string("\"x-") + std::to_string(i) + "\": \"v\"";
    }
    check = Webhook(many + "}}");
    ASSERT_EQ(check.problems.size(), 1u);
    EXPECT_EQ(check.problems[0], "\"headers\" must have at most 64 entries");
}

TEST(ConfigTest, WebhookTimeoutAndConcurrency) {
    auto webhook = [](const std::string &members) {
        return Webhook(R"({"url": "http://h/", )" + members + "}");
    };
    EXPECT_EQ(webhook(R"("timeout_ms": 1)").config.Settings<WebhookConfig>().timeout_ms, 1);
    EXPECT_EQ(webhook(R"("timeout_ms": "10min")").config.Settings<WebhookConfig>().timeout_ms,
              600000);
    EXPECT_EQ(webhook(R"("timeout_ms": "1.5s")").config.Settings<WebhookConfig>().timeout_ms, 1500);
    EXPECT_EQ(webhook(R"("max_in_flight": 1)").config.Settings<WebhookConfig>().max_in_flight, 1);
    EXPECT_EQ(webhook(R"("max_in_flight": 1024)").config.Settings<WebhookConfig>().max_in_flight,
              1024);
    EXPECT_EQ(webhook(R"("tls_verify": true)").config.Settings<WebhookConfig>().tls_verify, true);
    for (const char *bad :
         {R"("timeout_ms": 0)", R"("timeout_ms": "11min")", R"("timeout_ms": "-1s")",
          R"("timeout_ms": "soon")", R"("max_in_flight": 0)", R"("max_in_flight": 1025)",
          R"("max_in_flight": 1.5)", R"("max_in_flight": "8")", R"("tls_verify": "false")",
          R"("tls_verify": 0)"}) {
        ConfigCheck check = webhook(bad);
        EXPECT_EQ(check.problems.size(), 1u) << bad << ": " << JoinProblems(check);
    }
}

TEST(ConfigTest, WebhookCaFileMustBeReadable) {
    ConfigCheck check = Webhook(R"({"url": "https://h/", "ca_file": "/nonexistent/ca.pem"})");
    ASSERT_EQ(check.problems.size(), 1u);
    EXPECT_EQ(check.problems[0],
              "\"ca_file\" must name a readable file (\"/nonexistent/ca.pem\": no such file)");
    check = Webhook(R"({"url": "https://h/", "ca_file": "/tmp"})");
    ASSERT_EQ(check.problems.size(), 1u);
    EXPECT_EQ(check.problems[0],
              "\"ca_file\" must name a readable file (\"/tmp\" is not a regular file)");
    EXPECT_FALSE(Webhook(R"({"url": "https://h/", "ca_file": ""})").ok());
    EXPECT_FALSE(Webhook(R"({"url": "https://h/", "ca_file": 5})").ok());
    if (geteuid() != 0) {  // root reads everything
        TempFile unreadable;
        ASSERT_EQ(chmod(unreadable.path().c_str(), 0), 0);
        check = Webhook(R"({"url": "https://h/", "ca_file": ")" + unreadable.path() + "\"}");
        EXPECT_TRUE(HasProblemContaining(check, "permission denied")) << JoinProblems(check);
    }
}

TEST(ConfigTest, OrderingSettings) {
    ConfigCheck none = CheckDestinationConfig(kKafkaKind, R"({"bootstrap.servers": "b:9092"})");
    ASSERT_TRUE(none.ok()) << JoinProblems(none);
    EXPECT_EQ(none.config.ordering, Ordering::None);

    ConfigCheck key =
        CheckDestinationConfig(kWebhookKind, R"({"url": "http://h/", "ordering": "key"})");
    ASSERT_TRUE(key.ok()) << JoinProblems(key);
    EXPECT_EQ(key.config.ordering, Ordering::Key);
    EXPECT_EQ(key.config.on_dead, OnDead::Block);  // the default holds a key on a dead letter

    ConfigCheck skip = CheckDestinationConfig(
        kWebhookKind, R"({"url": "http://h/", "ordering": "key", "on_dead": "skip"})");
    ASSERT_TRUE(skip.ok()) << JoinProblems(skip);
    EXPECT_EQ(skip.config.on_dead, OnDead::Skip);

    ConfigCheck bad = CheckDestinationConfig(
        kKafkaKind,
        R"({"bootstrap.servers": "b:9092", "ordering": "partition", "on_dead": "drop"})");
    EXPECT_TRUE(HasProblem(bad, "\"ordering\" must be \"none\" or \"key\"")) << JoinProblems(bad);
    EXPECT_TRUE(HasProblem(bad, "\"on_dead\" must be \"block\" or \"skip\"")) << JoinProblems(bad);

    ConfigCheck stray =
        CheckDestinationConfig(kWebhookKind, R"({"url": "http://h/", "on_dead": "skip"})");
    EXPECT_TRUE(HasProblemContaining(stray, "\"on_dead\" applies only with"))
        << JoinProblems(stray);

    ConfigCheck random = CheckDestinationConfig(
        kKafkaKind,
        R"({"bootstrap.servers": "b:9092", "ordering": "key", "partitioner": "random"})");
    EXPECT_TRUE(HasProblemContaining(random, "\"partitioner\" must map a key to one partition"))
        << JoinProblems(random);
}

TEST(ConfigTest, MaxPending) {
    ConfigCheck none = CheckDestinationConfig(kKafkaKind, R"({"bootstrap.servers": "b:9092"})");
    ASSERT_TRUE(none.ok()) << JoinProblems(none);
    EXPECT_EQ(none.config.max_pending, 0);  // no cap

    for (const char *cap : {"1", "1000000000", "5.0"}) {
        ConfigCheck ok = CheckDestinationConfig(
            kWebhookKind, std::string(R"({"url": "http://h/", "max_pending": )") + cap + "}");
        EXPECT_TRUE(ok.ok()) << cap << ": " << JoinProblems(ok);
    }
    ConfigCheck top =
        CheckDestinationConfig(kAmqpKind, R"({"url": "amqp://h/", "max_pending": 1000000000})");
    ASSERT_TRUE(top.ok()) << JoinProblems(top);
    EXPECT_EQ(top.config.max_pending, 1000000000);

    for (const char *bad : {"0", "-1", "1000000001", "2.5", "\"10\"", "true", "null", "[1]"}) {
        ConfigCheck check = CheckDestinationConfig(
            kKafkaKind,
            std::string(R"({"bootstrap.servers": "b:9092", "max_pending": )") + bad + "}");
        EXPECT_TRUE(
            HasProblem(check, "\"max_pending\" must be an integer between 1 and 1000000000"))
            << bad << ": " << JoinProblems(check);
    }
}

// Policies of issue 26: "ttl".
TEST(ConfigTest, Ttl) {
    ConfigCheck none = CheckDestinationConfig(kKafkaKind, R"({"bootstrap.servers": "b:9092"})");
    ASSERT_TRUE(none.ok()) << JoinProblems(none);
    EXPECT_EQ(none.config.ttl_ms, 0);

    const std::pair<const char *, int64_t> good[] = {{"\"15min\"", 900000},
                                                     {"\"1s\"", 1000},
                                                     {"1000", 1000},
                                                     {"\"366d\"", 31622400000},
                                                     {"1500.7", 1500}};
    for (const auto &[ttl, ms] : good) {
        ConfigCheck ok = CheckDestinationConfig(
            kWebhookKind, std::string(R"({"url": "http://h/", "ttl": )") + ttl + "}");
        ASSERT_TRUE(ok.ok()) << ttl << ": " << JoinProblems(ok);
        EXPECT_EQ(ok.config.ttl_ms, ms) << ttl;
    }
    for (const char *bad :
         {"\"999ms\"", "999", "\"367d\"", "-1000", "\"soon\"", "true", "null", "[1]", "\"\""}) {
        ConfigCheck check = CheckDestinationConfig(
            kNatsKind,
            std::string(R"({"servers": "nats://h:4222", "subject": "s", "ttl": )") + bad + "}");
        EXPECT_TRUE(HasProblem(check,
                               "\"ttl\" must be a duration between 1s and 366d (a number of "
                               "milliseconds or a string such as \"30s\", \"15min\" or \"2h\")"))
            << bad << ": " << JoinProblems(check);
    }
}

TEST(ConfigTest, RetryBudget) {
    ConfigCheck none = CheckDestinationConfig(kKafkaKind, R"({"bootstrap.servers": "b:9092"})");
    ASSERT_TRUE(none.ok()) << JoinProblems(none);
    EXPECT_EQ(none.config.retry.retry_budget_ms, 0);
    ConfigCheck day = CheckDestinationConfig(
        kWebhookKind, R"({"url": "http://h/", "retry_budget": "24h", "max_attempts": 5})");
    ASSERT_TRUE(day.ok()) << JoinProblems(day);
    EXPECT_EQ(day.config.retry.retry_budget_ms, 86400000);
    EXPECT_EQ(day.config.retry.max_attempts, 5);
    for (const char *bad : {"\"0s\"", "999", "\"367d\"", "\"a day\"", "false"}) {
        ConfigCheck check = CheckDestinationConfig(
            kWebhookKind, std::string(R"({"url": "http://h/", "retry_budget": )") + bad + "}");
        EXPECT_TRUE(
            HasProblem(check,
                       "\"retry_budget\" must be a duration between 1s and 366d (a number "
                       "of milliseconds or a string such as \"30s\", \"15min\" or \"24h\")"))
            << bad << ": " << JoinProblems(check);
    }
}

TEST(ConfigTest, IdempotentProducerLimitsAreCheckedNow) {
    ConfigCheck retries =
        CheckDestinationConfig(kKafkaKind, R"({"bootstrap.servers": "b:9092", "retries": 0})");
    EXPECT_TRUE(HasProblemContaining(retries, "must be at least 1 for the idempotent producer"))
        << JoinProblems(retries);
    ConfigCheck in_flight = CheckDestinationConfig(
        kKafkaKind, R"({"bootstrap.servers": "b:9092", "max.in.flight": 6})");
    EXPECT_TRUE(HasProblemContaining(in_flight, "must be at most 5 for the idempotent producer"))
        << JoinProblems(in_flight);
    // librdkafka's own default (1000000) is lowered by idempotence itself: not a problem.
    ConfigCheck fine = CheckDestinationConfig(
        kKafkaKind, R"({"bootstrap.servers": "b:9092", "max.in.flight": 5})");
    EXPECT_TRUE(fine.ok()) << JoinProblems(fine);
}

// "max_in_flight" is the relay's window (not librdkafka's "max.in.flight", above): 1..100000.
TEST(ConfigTest, KafkaMaxInFlightIsTheRelaysWindow) {
    ConfigCheck given = CheckDestinationConfig(
        kKafkaKind, R"({"bootstrap.servers": "b:9092", "max_in_flight": 50000})");
    ASSERT_TRUE(given.ok()) << JoinProblems(given);
    EXPECT_EQ(given.config.Settings<KafkaConfig>().max_in_flight, 50000);
    // Not handed to librdkafka as a property.
    for (const auto &[key, value] : given.config.Settings<KafkaConfig>().properties)
        EXPECT_NE(key, "max_in_flight");
    ConfigCheck absent = CheckDestinationConfig(kKafkaKind, R"({"bootstrap.servers": "b:9092"})");
    EXPECT_EQ(absent.config.Settings<KafkaConfig>().max_in_flight, 0);  // the worker's default
    EXPECT_TRUE(CheckDestinationConfig(
                    kKafkaKind, R"({"bootstrap.servers": "b:9092", "max_in_flight": 100000})")
                    .ok());
    for (const char *bad : {"0", "100001", "1.5", "\"8\"", "-1", "true"}) {
        ConfigCheck check = CheckDestinationConfig(
            kKafkaKind,
            std::string(R"({"bootstrap.servers": "b:9092", "max_in_flight": )") + bad + "}");
        EXPECT_TRUE(HasProblem(check, "\"max_in_flight\" must be an integer between 1 and 100000"))
            << bad << ": " << JoinProblems(check);
    }
}

TEST(ConfigTest, IsSecretSetting) {
    for (const char *key : {"secret", "sasl.password", "SASL.PASSWORD", "ssl.key.password",
                            "ssl.key.pem", "ssl.key.location", "ssl.keystore.password",
                            "sasl.oauthbearer.config", "sasl.oauthbearer.client.secret",
                            "sasl.oauthbearer.token.endpoint.url", "api_token", "My-Secret"}) {
        EXPECT_TRUE(IsSecretSetting(key)) << key;
    }
    for (const char *key : {"bootstrap.servers", "url", "sasl.username", "ssl.ca.location",
                            "ssl.certificate.pem", "headers", "sasl.mechanism", "acks"}) {
        EXPECT_FALSE(IsSecretSetting(key)) << key;
    }
}

// Every problem, for every way a secret setting can be wrong, is searched for the secret.
TEST(ConfigTest, SecretsNeverAppearInProblems) {
    const std::string secret = "hunter2-S3CR3T-value";
    std::vector<ConfigCheck> checks;
    // Kafka: secret properties that librdkafka accepts or refuses, next to other problems.
    for (const char *key : {"sasl.password", "ssl.key.password", "ssl.key.pem",
                            "ssl.keystore.password", "sasl.oauthbearer.config",
                            "sasl.oauthbearer.client.secret", "sasl.oauthbearer.token.endpoint.url",
                            "ssl.key.location", "ssl_key", "sasl.pasword.x", "my.secret.thing"}) {
        checks.push_back(
            Kafka(std::string(R"({"acks": 0, ")") + key + R"(": ")" + secret + R"(", "foo": 1})"));
        checks.push_back(Kafka(std::string(R"({")") + key + R"(": [")" + secret + R"("]})"));
    }
    // Webhook: malformed secrets, in a string and in an array, and secret-bearing headers.
    for (const std::string &bad_secret :
         {"whsec_" + secret, "whsec_" + secret + "=", secret, "whsec_" + secret + "\\u0000"}) {
        checks.push_back(Webhook(R"({"url": "bad", "secret": ")" + bad_secret + R"("})"));
        checks.push_back(
            Webhook(R"({"url": "http://h/", "secret": ["whsec_Zm9v", ")" + bad_secret + R"("]})"));
    }
    checks.push_back(Webhook(R"({"url": "http://h/", "headers": {"Authorization": "Bearer )" +
                             secret + R"(\r\nX: y"}})"));
    checks.push_back(
        Webhook(R"({"url": "http://h/", "headers": {"X-Api-Key": ")" + secret + R"(\u0000"}})"));
    checks.push_back(Webhook(R"({"url": "http://user:)" + secret + R"(@h:bad/"})"));
    checks.push_back(Webhook(R"({"url": "http://h/?token=)" + secret + R"( x"})"));

    size_t problems = 0;
    for (const ConfigCheck &check : checks) {
        EXPECT_FALSE(check.ok());
        for (const std::string &problem : check.problems) {
            ++problems;
            EXPECT_EQ(problem.find("hunter2"), std::string::npos) << problem;
            EXPECT_EQ(problem.find("S3CR3T"), std::string::npos) << problem;
        }
    }
    EXPECT_GT(problems, checks.size());

    // The same search finds a value that is not secret: the test can fail.
    ConfigCheck control =
        Kafka(R"({"bootstrap.servers": "b", "security.protocol": ")" + secret + R"("})");
    ASSERT_EQ(control.problems.size(), 1u);
    EXPECT_NE(control.problems[0].find("hunter2"), std::string::npos);
}

// The privileged settings of a check, as "code key" / "files key" lines, in order.
std::vector<std::string> Privileged(const ConfigCheck &check) {
    std::vector<std::string> out;
    for (const PrivilegedSetting &setting : check.privileged) {
        out.push_back(std::string(setting.access == ServerAccess::RunsCode ? "code " : "files ") +
                      setting.key);
    }
    return out;
}

const PrivilegedSetting *FindPrivileged(const ConfigCheck &check, const std::string &key) {
    for (const PrivilegedSetting &setting : check.privileged) {
        if (setting.key == key) {
            return &setting;
        }
    }
    return nullptr;
}

// The settings that run code as the server's OS user are valid, but reported as privileged.
TEST(ConfigTest, SettingsThatRunCodeAreReported) {
    ConfigCheck check = Kafka(R"({"bootstrap.servers": "b:9092",
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI",
        "sasl.kerberos.kinit.cmd": "touch /tmp/pwned"})");
    EXPECT_TRUE(check.ok()) << JoinProblems(check);
    EXPECT_EQ(Privileged(check),
              (std::vector<std::string>{"code sasl.kerberos.kinit.cmd", "code sasl.mechanisms"}));
    EXPECT_EQ(FindPrivileged(check, "sasl.kerberos.kinit.cmd")->problem,
              "\"sasl.kerberos.kinit.cmd\" runs a command on the database server: only a "
              "superuser may set it");
    EXPECT_EQ(FindPrivileged(check, "sasl.mechanisms")->problem,
              "\"sasl.mechanisms\": \"GSSAPI\" (Kerberos) runs kinit, a command on the database "
              "server: only a superuser may set it");

    // Every sasl.kerberos.* property (the default kinit command substitutes the principal and
    // the keytab into a shell command), OpenSSL engines and providers.
    for (const char *key :
         {"sasl.kerberos.principal", "sasl.kerberos.keytab", "sasl.kerberos.service.name",
          "ssl.engine.location", "ssl.engine.id", "ssl.providers"}) {
        check = Kafka(std::string(R"({"bootstrap.servers": "b:9092", ")") + key + R"(": "x"})");
        EXPECT_TRUE(check.ok()) << key << ": " << JoinProblems(check);
        EXPECT_EQ(Privileged(check), std::vector<std::string>{std::string("code ") + key});
    }
    check = Kafka(R"({"bootstrap.servers": "b", "sasl.kerberos.min.time.before.relogin": 0})");
    EXPECT_EQ(Privileged(check),
              std::vector<std::string>{"code sasl.kerberos.min.time.before.relogin"});
    check = Kafka(R"({"bootstrap.servers": "b", "ssl.engine.location": "/tmp/engine.so"})");
    EXPECT_EQ(check.privileged.at(0).problem,
              "\"ssl.engine.location\" loads a shared library (an OpenSSL engine) into the "
              "database server: only a superuser may set it");
    // Even when librdkafka refuses the value, or it is not a scalar.
    check = Kafka(R"({"bootstrap.servers": "b", "sasl.kerberos.min.time.before.relogin": "x",
                      "sasl.kerberos.kinit.cmd": {"sh": "-c"}})");
    EXPECT_FALSE(check.ok());
    EXPECT_EQ(check.privileged.size(), 2u);
}

// GSSAPI however it is chosen: in any case, through the alias, or as librdkafka's default
// mechanism for a SASL security.protocol.
TEST(ConfigTest, KerberosIsPrivilegedHoweverChosen) {
    ConfigCheck check = Kafka(R"({"bootstrap.servers": "b", "sasl.mechanism": "gssapi"})");
    EXPECT_EQ(Privileged(check), std::vector<std::string>{"code sasl.mechanisms"});
    EXPECT_EQ(check.privileged.at(0).problem,
              "\"sasl.mechanism\": \"gssapi\" (Kerberos) runs kinit, a command on the database "
              "server: only a superuser may set it");
    check = Kafka(R"({"bootstrap.servers": "b", "security.protocol": "SASL_SSL"})");
    EXPECT_TRUE(check.ok()) << JoinProblems(check);
    EXPECT_EQ(Privileged(check), std::vector<std::string>{"code sasl.mechanisms"});
    EXPECT_EQ(check.privileged.at(0).problem,
              "\"security.protocol\": \"SASL_SSL\" without \"sasl.mechanisms\" chooses GSSAPI "
              "(Kerberos), which runs kinit, a command on the database server: only a superuser "
              "may set it");
    // The same identity every way, so that an UPDATE that respells it changes nothing.
    EXPECT_EQ(check.privileged.at(0).value, "gssapi");

    for (const char *mechanism : {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"}) {
        check = Kafka(std::string(R"({"bootstrap.servers": "b", "security.protocol": "SASL_SSL",
                                      "sasl.mechanisms": ")") +
                      mechanism + R"(", "sasl.username": "u", "sasl.password": "p"})");
        EXPECT_TRUE(check.privileged.empty()) << mechanism;
    }
    // Not SASL at all: librdkafka's default mechanism is never used.
    EXPECT_TRUE(
        Kafka(R"({"bootstrap.servers": "b", "security.protocol": "SSL"})").privileged.empty());
    EXPECT_TRUE(Kafka(R"({"bootstrap.servers": "b"})").privileged.empty());
}

// A custom kinit command can substitute any property: those become part of the command.
TEST(ConfigTest, PropertiesSubstitutedIntoKinitAreCode) {
    ConfigCheck check = Kafka(R"({"bootstrap.servers": "b", "sasl.username": "u; rm -rf /",
        "sasl.kerberos.kinit.cmd": "kinit %{sasl.username} %{sasl.kerberos.principal}",
        "client.id": "c"})");
    EXPECT_TRUE(check.ok()) << JoinProblems(check);
    EXPECT_EQ(Privileged(check),
              (std::vector<std::string>{"code sasl.kerberos.kinit.cmd", "code sasl.username"}));
    EXPECT_EQ(FindPrivileged(check, "sasl.username")->problem,
              "\"sasl.username\" is substituted into \"sasl.kerberos.kinit.cmd\", a command the "
              "database server runs: only a superuser may set it");
}

TEST(ConfigTest, SettingsThatReadFilesAreReported) {
    for (const char *key : {"ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
                            "ssl.keystore.location", "ssl.crl.location"}) {
        ConfigCheck check =
            Kafka(std::string(R"({"bootstrap.servers": "b", ")") + key + R"(": "/etc/passwd"})");
        EXPECT_TRUE(check.ok()) << key << ": " << JoinProblems(check);
        EXPECT_EQ(Privileged(check), std::vector<std::string>{std::string("files ") + key});
        EXPECT_EQ(check.privileged.at(0).problem,
                  "\"" + std::string(key) +
                      "\" has the database server read a file: only a superuser or a member of "
                      "pg_read_server_files may set it");
    }
    // "probe" names no file: librdkafka looks in the usual system locations.
    EXPECT_TRUE(
        Kafka(R"({"bootstrap.servers": "b", "ssl.ca.location": "probe"})").privileged.empty());
    // ssl.ca.directory does not exist in librdkafka 2.0.2.
    EXPECT_FALSE(Kafka(R"({"bootstrap.servers": "b", "ssl.ca.directory": "/etc"})").ok());

    ConfigCheck hook = Webhook(R"({"url": "https://h/", "ca_file": "/nonexistent/ca.pem"})");
    EXPECT_EQ(Privileged(hook), std::vector<std::string>{"files ca_file"});
    EXPECT_EQ(hook.privileged.at(0).problem,
              "\"ca_file\" has the database server read a file: only a superuser or a member of "
              "pg_read_server_files may set it");
    EXPECT_TRUE(Webhook(R"({"url": "https://h/"})").privileged.empty());
    // Ordinary settings need no privilege.
    ConfigCheck plain = Kafka(R"({"bootstrap.servers": "b", "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "p",
        "linger.ms": 5, "ssl.ca.pem": "x"})");
    EXPECT_TRUE(plain.privileged.empty());
}

// Without check_files, "ca_file" is not looked up: the caller must not learn which paths exist.
TEST(ConfigTest, CaFileIsLookedUpOnlyWhenAsked) {
    CheckOptions options;
    options.check_files = false;
    ConfigCheck check = CheckDestinationConfig(
        kWebhookKind, R"({"url": "https://h/", "ca_file": "/nonexistent/ca.pem"})", options);
    EXPECT_TRUE(check.ok()) << JoinProblems(check);
    EXPECT_EQ(Privileged(check), std::vector<std::string>{"files ca_file"});
    check = CheckDestinationConfig(kWebhookKind, R"({"url": "https://h/", "ca_file": "/tmp"})",
                                   options);
    EXPECT_TRUE(check.ok()) << JoinProblems(check);
    // What says nothing about the server is still checked.
    check =
        CheckDestinationConfig(kWebhookKind, R"({"url": "https://h/", "ca_file": ""})", options);
    EXPECT_EQ(JoinProblems(check), "\"ca_file\" must name a readable file\n");
    check = CheckDestinationConfig(kWebhookKind, R"({"url": "https://h/", "ca_file": 5})", options);
    EXPECT_FALSE(check.ok());
}

TEST(ConfigTest, AddedOrChangedSettings) {
    auto privileged = [](const std::string &json) { return Kafka(json).privileged; };
    const std::string kerberos = R"("bootstrap.servers": "b", "security.protocol": "SASL_SSL",
        "sasl.kerberos.principal": "outbox", "ssl.ca.location": "/etc/ssl/ca.pem")";
    auto before = privileged("{" + kerberos + "}");
    ASSERT_EQ(before.size(), 3u);
    // Other settings changed: nothing privileged was added or changed.
    EXPECT_TRUE(AddedOrChangedSettings(before, privileged("{" + kerberos + R"(, "linger.ms": 5})"))
                    .empty());
    // Choosing GSSAPI explicitly, in another spelling, keeps the same choice.
    EXPECT_TRUE(AddedOrChangedSettings(
                    before, privileged("{" + kerberos + R"(, "sasl.mechanism": "GSSAPI"})"))
                    .empty());
    // A changed value, a new setting.
    auto changed = AddedOrChangedSettings(
        before, privileged(R"({"bootstrap.servers": "b", "security.protocol": "SASL_SSL",
            "sasl.kerberos.principal": "x; touch /tmp/p", "ssl.ca.location": "/etc/ssl/ca.pem",
            "ssl.key.location": "/k"})"));
    ASSERT_EQ(changed.size(), 2u);
    EXPECT_EQ(changed[0].key, "sasl.kerberos.principal");
    EXPECT_EQ(changed[1].key, "ssl.key.location");
    // From nothing, everything is added.
    EXPECT_EQ(AddedOrChangedSettings({}, before).size(), 3u);
    // Removing is not adding.
    EXPECT_TRUE(
        AddedOrChangedSettings(before, privileged(R"({"bootstrap.servers": "b"})")).empty());
}

TEST(ConfigTest, UnsecuredJwtIsRefused) {
    for (const char *value : {"true", "\"true\"", "\"t\"", "1"}) {
        ConfigCheck check = Kafka(std::string(R"({"bootstrap.servers": "b",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
            "sasl.oauthbearer.config": "bogus", "enable.sasl.oauthbearer.unsecure.jwt": )") +
                                  value + "}");
        ASSERT_EQ(check.problems.size(), 1u) << value << ": " << JoinProblems(check);
        EXPECT_EQ(check.problems[0],
                  "\"enable.sasl.oauthbearer.unsecure.jwt\" must be false (librdkafka's unsecured "
                  "JWT is for development only, and librdkafka 2.0.2 crashes the database server "
                  "when it cannot parse \"sasl.oauthbearer.config\")");
        ASSERT_EQ(check.hints.size(), 1u);
        EXPECT_NE(check.hints[0].find("\"sasl.oauthbearer.method\": \"oidc\""), std::string::npos);
        // The config (a secret) is never quoted.
        EXPECT_EQ(JoinProblems(check).find("bogus"), std::string::npos);
    }
    ConfigCheck off = Kafka(R"({"bootstrap.servers": "b", "sasl.mechanisms": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": false})");
    EXPECT_TRUE(off.ok()) << JoinProblems(off);
    EXPECT_TRUE(off.hints.empty());
}

TEST(ConfigTest, TopicLevelSpellingsCannotWeakenGuarantees) {
    for (const char *key : {"topic.acks", "topic.request.required.acks"}) {
        for (const char *value : {"0", "1", "\"1\""}) {
            ConfigCheck check = Kafka(std::string(R"({"bootstrap.servers": "b", ")") + key +
                                      R"(": )" + value + "}");
            EXPECT_EQ(JoinProblems(check),
                      "\"" + std::string(key) +
                          "\" must be \"all\" (outbox requires acknowledgement by all in-sync "
                          "replicas)\n")
                << key << "=" << value;
        }
        EXPECT_TRUE(
            Kafka(std::string(R"({"bootstrap.servers": "b", ")") + key + R"(": "all"})").ok());
    }
    for (const char *key : {"queuing.strategy", "topic.queuing.strategy"}) {
        ConfigCheck check =
            Kafka(std::string(R"({"bootstrap.servers": "b", ")") + key + R"(": "lifo"})");
        EXPECT_EQ(JoinProblems(check),
                  "\"" + std::string(key) +
                      "\" must be \"fifo\" (the idempotent producer cannot start with another "
                      "queuing strategy)\n");
        EXPECT_TRUE(
            Kafka(std::string(R"({"bootstrap.servers": "b", ")") + key + R"(": "fifo"})").ok());
    }
    ConfigCheck random =
        Kafka(R"({"bootstrap.servers": "b", "ordering": "key", "topic.partitioner": "random"})");
    EXPECT_TRUE(HasProblemContaining(random, "\"partitioner\" must map a key to one partition"))
        << JoinProblems(random);
}

TEST(ConfigTest, BootstrapServersMustBeAString) {
    for (const char *value : {"9092", "true", "1.5", "null", "[\"b:9092\"]", "{}"}) {
        ConfigCheck check = Kafka(std::string(R"({"bootstrap.servers": )") + value + "}");
        EXPECT_EQ(JoinProblems(check),
                  "\"bootstrap.servers\" must be a string listing brokers, such as "
                  "\"host1:9092,host2:9092\"\n")
            << value;
    }
    ConfigCheck check = Kafka(R"({"metadata.broker.list": 9092})");
    EXPECT_EQ(JoinProblems(check),
              "\"metadata.broker.list\" must be a string listing brokers, such as "
              "\"host1:9092,host2:9092\"\n");
}

// jsonb keeps 1e400 exactly (and prints it as 401 digits); a double cannot hold it.
TEST(ConfigTest, NumbersOutOfRangeAreReportedWhereTheyAre) {
    const std::string huge = "1" + std::string(400, '0');
    ConfigCheck check =
        Webhook(R"({"url": "http://h/", "max_attempts": 2.5, "retry_base": )" + huge + "}");
    EXPECT_EQ(JoinProblems(check),
              "\"max_attempts\" must be an integer between 1 and 1000\n"
              "number out of range in \"retry_base\" (numbers must be within the range of a "
              "double, about +/-1.8e308)\n");
    // Exponents, negative numbers, nested values; a required key out of range is still given.
    check = Webhook(R"({"url": -1e400, "headers": {"x/a": ["v", 1E+999]}, "timeout_ms": 5})");
    EXPECT_EQ(JoinProblems(check),
              "number out of range in \"url\" (numbers must be within the range of a double, "
              "about +/-1.8e308)\n"
              "number out of range in \"headers\" at \"/x~1a/1\" (numbers must be within the "
              "range of a double, about +/-1.8e308)\n");
    check = Kafka(R"({"bootstrap.servers": "b", "sasl.password": 1e400, "linger.ms": "x1e400"})");
    EXPECT_TRUE(HasProblem(check,
                           "number out of range in \"sasl.password\" (numbers must be within the "
                           "range of a double, about +/-1.8e308)"))
        << JoinProblems(check);
    EXPECT_TRUE(HasProblemContaining(check, "\"linger.ms\"")) << JoinProblems(check);
    EXPECT_EQ(check.problems.size(), 2u) << JoinProblems(check);
    // Strings that look like numbers are untouched; small numbers underflow harmlessly.
    check = Webhook(R"({"url": "http://h/", "topic": "1e400", "retry_base": 1e-400})");
    EXPECT_TRUE(HasProblemContaining(check, "\"retry_base\" must be a duration"))
        << JoinProblems(check);
    EXPECT_EQ(check.config.Settings<WebhookConfig>().default_topic, "1e400");
    // Still not an object, or not JSON.
    EXPECT_EQ(JoinProblems(Webhook("1e400")), "the config must be a JSON object\n");
    EXPECT_EQ(JoinProblems(Webhook(R"({"url": 1e400)")), "the config must be a JSON object\n");
}

TEST(ConfigTest, ProblemsAreSinglePrintableLines) {
    ConfigCheck check = Webhook("{\"x\\ny\\u0001\\\"z\": 1}");
    ASSERT_EQ(check.problems.size(), 2u) << JoinProblems(check);
    EXPECT_EQ(check.problems[0], "unknown key \"x?y?\\\"z\" for a webhook destination");
}

// A given timeout_ms must fit in half of outbox.lease_timeout; the default never is a problem
// (the driver lowers it).
TEST(ConfigTest, WebhookTimeoutMustFitHalfTheLease) {
    ConfigCheck given = CheckDestinationConfig(
        kWebhookKind, R"({"url": "https://example.com/", "timeout_ms": "20s"})");
    ASSERT_TRUE(given.ok());
    EXPECT_TRUE(given.config.Settings<WebhookConfig>().timeout_set);
    auto problem = WebhookTimeoutProblem(given.config.Settings<WebhookConfig>(), 5000);
    ASSERT_TRUE(problem.has_value());
    EXPECT_EQ(problem->first,
              "\"timeout_ms\" (20000 ms) must be at most half of outbox.lease_timeout (5000 ms): a "
              "request that outlasts the lease is taken over and sent again by another worker");
    EXPECT_EQ(problem->second,
              "Lower \"timeout_ms\" to at most 2500, or raise outbox.lease_timeout to at least "
              "40000 ms.");
    EXPECT_FALSE(WebhookTimeoutProblem(given.config.Settings<WebhookConfig>(), 40000).has_value());
    EXPECT_TRUE(WebhookTimeoutProblem(given.config.Settings<WebhookConfig>(), 39999).has_value());

    ConfigCheck defaulted =
        CheckDestinationConfig(kWebhookKind, R"({"url": "https://example.com/"})");
    EXPECT_FALSE(defaulted.config.Settings<WebhookConfig>().timeout_set);
    EXPECT_FALSE(
        WebhookTimeoutProblem(defaulted.config.Settings<WebhookConfig>(), 1000).has_value());
}

}  // namespace
}  // namespace outbox

namespace outbox {
namespace {

// Policies of issue 26: "compaction".
TEST(ConfigTest, Compaction) {
    ConfigCheck none = CheckDestinationConfig(kKafkaKind, R"({"bootstrap.servers": "b:9092"})");
    ASSERT_TRUE(none.ok()) << JoinProblems(none);
    EXPECT_EQ(none.config.compaction, Compaction::None);

    const std::pair<const char *, const BrokerKind *> kinds[] = {
        {R"({"bootstrap.servers": "b:9092", "compaction": )", &kKafkaKind},
        {R"({"url": "http://h/", "compaction": )", &kWebhookKind},
        {R"({"url": "amqp://h/", "compaction": )", &kAmqpKind},
        {R"({"servers": "nats://h:4222", "subject": "s", "compaction": )", &kNatsKind}};
    for (const auto &[prefix, kind] : kinds) {
        ConfigCheck key = CheckDestinationConfig(*kind, std::string(prefix) + "\"key\"}");
        ASSERT_TRUE(key.ok()) << prefix << ": " << JoinProblems(key);
        EXPECT_EQ(key.config.compaction, Compaction::Key);
        ConfigCheck off = CheckDestinationConfig(*kind, std::string(prefix) + "\"none\"}");
        ASSERT_TRUE(off.ok()) << prefix << ": " << JoinProblems(off);
        EXPECT_EQ(off.config.compaction, Compaction::None);
        // Not a librdkafka property for Kafka: it is never handed to librdkafka.
        if (kind == &kKafkaKind) {
            EXPECT_TRUE(key.config.Settings<KafkaConfig>().properties.empty() ||
                        key.config.Settings<KafkaConfig>().properties.back().first != "compaction");
        }
    }
    for (const char *bad : {"\"Key\"", "\"keys\"", "\"\"", "true", "1", "null", "[\"key\"]"}) {
        ConfigCheck check = CheckDestinationConfig(
            kWebhookKind, std::string(R"({"url": "http://h/", "compaction": )") + bad +
                              ", \"ordering\": \"key\"}");
        EXPECT_TRUE(HasProblem(check,
                               "\"compaction\" must be \"key\" (a newer message of a key "
                               "supersedes its older undelivered one) or \"none\""))
            << bad << ": " << JoinProblems(check);
        EXPECT_EQ(check.config.compaction, Compaction::None) << bad;
    }
    // With ordering by key too.
    ConfigCheck both = CheckDestinationConfig(
        kWebhookKind, R"({"url": "http://h/", "compaction": "key", "ordering": "key"})");
    ASSERT_TRUE(both.ok()) << JoinProblems(both);
    EXPECT_EQ(both.config.compaction, Compaction::Key);
    EXPECT_EQ(both.config.ordering, Ordering::Key);
}

}  // namespace
}  // namespace outbox
