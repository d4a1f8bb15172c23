// Subscription configs (the inbox): what create_subscription accepts and what the worker runs
// with.
#include "outbox/subscription_config.hpp"
#include "outbox/brokers/kafka/config.hpp"
#include "outbox/brokers/registry.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace outbox {
namespace {

bool HasProblem(const SubscriptionCheck &check, const std::string &problem) {
    for (const std::string &p : check.problems) {
        if (p == problem) {
            return true;
        }
    }
    return false;
}

std::string All(const SubscriptionCheck &check) {
    std::string all;
    for (const std::string &p : check.problems) {
        all += p + "\n";
    }
    return all;
}

TEST(SubscriptionConfig, ParsesEverySetting) {
    SubscriptionCheck check = CheckKafkaSubscription(
        R"({"bootstrap.servers": "127.0.0.1:9092", "topics": ["a", "b.c"], "on_error": "block",
            "event_id_header": "x-id", "batch_size": 42, "start": "latest",
            "handler_timeout": "1.5s", "fetch.wait.max.ms": 10, "group.id": "g"})");
    ASSERT_TRUE(check.ok()) << All(check);
    EXPECT_EQ(check.config.topics, (std::vector<std::string>{"a", "b.c"}));
    EXPECT_EQ(check.config.on_error, OnError::Block);
    EXPECT_EQ(check.config.event_id_header, "x-id");
    EXPECT_EQ(check.config.batch_size, 42);
    EXPECT_TRUE(check.config.start_at_latest);
    EXPECT_EQ(check.config.handler_timeout_ms, 1500);
    using Properties = std::vector<std::pair<std::string, std::string>>;
    EXPECT_EQ(check.config.properties, (Properties{{"bootstrap.servers", "127.0.0.1:9092"},
                                                   {"fetch.wait.max.ms", "10"},
                                                   {"group.id", "g"}}));
}

TEST(SubscriptionConfig, Defaults) {
    SubscriptionCheck check =
        CheckKafkaSubscription(R"({"bootstrap.servers": "b:9092", "topics": ["t"]})");
    ASSERT_TRUE(check.ok()) << All(check);
    EXPECT_EQ(check.config.on_error, OnError::Skip);
    EXPECT_EQ(check.config.batch_size, kDefaultInboxBatch);
    EXPECT_FALSE(check.config.start_at_latest);
    EXPECT_TRUE(check.config.event_id_header.empty());
    EXPECT_EQ(check.config.handler_timeout_ms, -1);  // outbox.inbox_handler_timeout
}

TEST(SubscriptionConfig, HandlerTimeout) {
    auto timeout = [](const std::string &value) {
        SubscriptionCheck check = CheckKafkaSubscription(
            R"({"bootstrap.servers": "b:9092", "topics": ["t"], "handler_timeout": )" + value +
            "}");
        return check.ok() ? check.config.handler_timeout_ms : -2;
    };
    EXPECT_EQ(timeout("0"), 0);  // no limit
    EXPECT_EQ(timeout("250"), 250);
    EXPECT_EQ(timeout("\"30s\""), 30000);
    EXPECT_EQ(timeout("\"24h\""), kMaxHandlerTimeoutMs);
    for (const char *bad : {"-1", "\"25h\"", "\"soon\"", "1.5", "true", "null", "86400001"})
        EXPECT_EQ(timeout(bad), -2) << bad;
    SubscriptionCheck check = CheckKafkaSubscription(
        R"({"bootstrap.servers": "b:9092", "topics": ["t"], "handler_timeout": "x"})");
    EXPECT_TRUE(HasProblem(check,
                           "\"handler_timeout\" must be a duration from 0 (no limit) to 24h: "
                           "milliseconds, or a string such as \"30s\""))
        << All(check);
}

TEST(SubscriptionConfig, EveryProblemAtOnce) {
    SubscriptionCheck check = CheckKafkaSubscription(
        R"({"topics": ["ok", "no spaces", "ok"], "on_error": "retry", "batch_size": 10001,
            "no.such.property": 1, "enable.auto.commit": false, "topic": "t", "ordering": "key"})");
    EXPECT_TRUE(HasProblem(check, "\"bootstrap.servers\" is required for a kafka subscription"))
        << All(check);
    EXPECT_TRUE(HasProblem(check,
                           "\"topics\" holds \"no spaces\", which is not a Kafka topic "
                           "name (1 to 249 of A-Z a-z 0-9 . _ -)"))
        << All(check);
    EXPECT_TRUE(HasProblem(check, "\"topics\" names \"ok\" more than once")) << All(check);
    EXPECT_TRUE(HasProblem(check, "\"on_error\" must be \"skip\" or \"block\"")) << All(check);
    EXPECT_TRUE(HasProblem(check, "\"batch_size\" must be an integer from 1 to 10000"))
        << All(check);
    EXPECT_TRUE(HasProblem(check, "unknown librdkafka property \"no.such.property\""))
        << All(check);
    EXPECT_TRUE(HasProblem(check,
                           "\"enable.auto.commit\" cannot be configured for a subscription "
                           "(offsets are kept by outbox, committed with the handlers' effects)"))
        << All(check);
    EXPECT_TRUE(HasProblem(
        check, "\"topic\" is a destination setting, not a subscription's (use \"topics\": [...])"))
        << All(check);
    EXPECT_TRUE(HasProblem(check, "\"ordering\" is a destination setting, not a subscription's"))
        << All(check);
    EXPECT_EQ(check.problems.size(), 9u) << All(check);
}

TEST(SubscriptionConfig, NeverQuotesASecret) {
    SubscriptionCheck check = CheckKafkaSubscription(
        R"({"bootstrap.servers": "b:9092", "topics": ["t"], "sasl.password": {"v": "hunter2"},
            "ssl.key.password": "hunter3", "sasl.mechanisms": "hunter4"})");
    EXPECT_FALSE(check.ok());
    EXPECT_EQ(All(check).find("hunter2"), std::string::npos) << All(check);
    EXPECT_EQ(All(check).find("hunter3"), std::string::npos) << All(check);
}

TEST(SubscriptionConfig, ReportsPrivilegedSettings) {
    SubscriptionCheck check = CheckKafkaSubscription(
        R"({"bootstrap.servers": "b:9092", "topics": ["t"], "ssl.ca.location": "/x/ca.pem",
            "sasl.kerberos.kinit.cmd": "kinit"})");
    ASSERT_EQ(check.privileged.size(), 2u) << All(check);
    EXPECT_EQ(check.privileged[0].access, ServerAccess::ReadsFiles);
    EXPECT_EQ(check.privileged[1].access, ServerAccess::RunsCode);
}

TEST(SubscriptionConfig, NotAnObject) {
    for (const char *text : {"[1]", "\"x\"", "{", ""}) {
        SubscriptionCheck check = CheckKafkaSubscription(text);
        EXPECT_TRUE(HasProblem(check, "the config must be a JSON object")) << text;
    }
}

TEST(SubscriptionConfig, Kinds) {
    // Kinds with subscriptions are those whose row reads them (broker_kind.hpp).
    ASSERT_NE(FindBrokerKind("kafka"), nullptr);
    EXPECT_NE(FindBrokerKind("kafka")->read_subscription, nullptr);
    EXPECT_EQ(FindBrokerKind("webhook")->read_subscription, nullptr);
    EXPECT_EQ(FindBrokerKind("Kafka"), nullptr);
    EXPECT_EQ(BrokerKindList(/*subscriptions=*/true), "\"kafka\"");
}

}  // namespace
// The inbox reads only committed transactions unless a subscription lowers it (issue 41).
TEST(SubscriptionConfig, IsolationLevel) {
    SubscriptionCheck check =
        CheckKafkaSubscription(R"({"bootstrap.servers": "b:9092", "topics": ["t"]})");
    ASSERT_TRUE(check.ok()) << All(check);
    EXPECT_FALSE(check.config.read_uncommitted);
    check = CheckKafkaSubscription(
        R"({"bootstrap.servers": "b:9092", "topics": ["t"], "isolation_level": "read_uncommitted"})");
    ASSERT_TRUE(check.ok()) << All(check);
    EXPECT_TRUE(check.config.read_uncommitted);
    check = CheckKafkaSubscription(
        R"({"bootstrap.servers": "b:9092", "topics": ["t"], "isolation_level": "dirty"})");
    ASSERT_EQ(check.problems.size(), 1u) << All(check);
    EXPECT_NE(check.problems[0].find("\"isolation_level\" must be"), std::string::npos);
    // librdkafka's own spelling is refused, pointing to the setting.
    check = CheckKafkaSubscription(
        R"({"bootstrap.servers": "b:9092", "topics": ["t"], "isolation.level": "read_uncommitted"})");
    ASSERT_EQ(check.problems.size(), 1u) << All(check);
    EXPECT_NE(check.problems[0].find("use \"isolation_level\""), std::string::npos);
    // A destination's "delivery" means nothing to a subscription.
    check = CheckKafkaSubscription(
        R"({"bootstrap.servers": "b:9092", "topics": ["t"], "delivery": "exactly_once"})");
    EXPECT_FALSE(check.ok());
}

}  // namespace outbox
