// The kafka kind's row (broker_kind.hpp) and what both processes need of it: the topic rule of
// the producer's INSERT check, and the settings of a subscription the inbox worker reads itself.
#include "outbox/brokers/kafka/kind.hpp"

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/brokers/kafka/config.hpp"
#include "outbox/config_json.hpp"
#include "outbox/duration.hpp"
#include "outbox/headers.hpp"
#include "outbox/subscription_config.hpp"

namespace outbox {

const BrokerKind kKafkaKind = {
    "kafka",
    "Kafka",
    "docs/destinations.md#kafka",
    NetworkRule::Broker,
    {"topic", "topic", true, IsValidKafkaTopic,
     "A Kafka topic name is 1 to 249 characters of letters, digits, '.', '_' and '-'."},
    // librdkafka's message.max.bytes default; the relay's own headers (CloudEvents,
    // traceparent) and the record's framing, with room to spare.
    {"message.max.bytes", 1000000, 1024, " (and max.message.bytes of the topic on the brokers)"},
    /*tombstones=*/true,
    ReadKafkaSubscription,
    OUTBOX_DRIVER_SIDE(kKafkaDriverSide),
};

namespace {

constexpr size_t kMaxKafkaTopicBytes = 249;

// librdkafka properties that would make Kafka's group offsets, not the extension's table, say
// where consumption stands; and what to use instead.
struct RefusedProperty {
    std::string_view key;
    std::string_view why;
};
constexpr RefusedProperty kRefusedProperties[] = {
    {"enable.auto.commit", "offsets are kept by outbox, committed with the handlers' effects"},
    {"enable.auto.offset.store",
     "offsets are kept by outbox, committed with the handlers' effects"},
    {"auto.commit.interval.ms", "offsets are kept by outbox, committed with the handlers' effects"},
    {"auto.offset.reset", "use \"start\": \"earliest\" or \"latest\" instead"},
    {"group.instance.id", "outbox assigns partitions itself, without a consumer group"},
    {"enable.partition.eof", "set by outbox"},
    {"isolation.level", "use \"isolation_level\": \"read_committed\" or \"read_uncommitted\""},
};

// Destination settings that have no meaning for a subscription.
constexpr std::string_view kDestinationOnly[] = {
    "topic",     "ordering",    "on_dead",    "max_pending", "max_attempts", "retry_base",
    "retry_max", "cloudevents", "compaction", "ttl",         "retry_budget",
};

void CheckTopics(const Json &value, SubscriptionCheck *check) {
    if (!value.is_array() || value.empty()) {
        check->problems.push_back(
            "\"topics\" must be a non-empty array of Kafka topic names, such as [\"orders\"]");
        return;
    }
    std::set<std::string> seen;
    for (const Json &topic : value) {
        if (!topic.is_string() || !IsValidKafkaTopic(topic.get_ref<const std::string &>())) {
            check->problems.push_back(
                "\"topics\" holds " +
                (topic.is_string() ? Quote(topic.get<std::string>())
                                   : std::string("a ") + topic.type_name()) +
                ", which is not a Kafka topic name (1 to 249 of A-Z a-z 0-9 . _ -)");
            continue;
        }
        const std::string &name = topic.get_ref<const std::string &>();
        if (!seen.insert(name).second) {
            check->problems.push_back("\"topics\" names " + Quote(name) + " more than once");
            continue;
        }
        check->config.topics.push_back(name);
    }
}

// The subscription's own settings; false when `key` is not one of them.
bool CheckOwnKey(const std::string &key, const Json &value, SubscriptionCheck *check) {
    SubscriptionConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    if (key == "topics") {
        CheckTopics(value, check);
    } else if (key == "on_error") {
        if (value == "skip") {
            config->on_error = OnError::Skip;
        } else if (value == "block") {
            config->on_error = OnError::Block;
        } else {
            problems->push_back("\"on_error\" must be \"skip\" or \"block\"");
        }
    } else if (key == "event_id_header") {
        if (!value.is_string() || value.get_ref<const std::string &>().size() > 255 ||
            !IsValidHeaderName(value.get_ref<const std::string &>())) {
            problems->push_back(
                "\"event_id_header\" must be a header name (up to 255 letters, digits and "
                "!#$%&'*+-.^_`|~)");
        } else {
            config->event_id_header = value.get<std::string>();
        }
    } else if (key == "batch_size") {
        if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
            value.get<int64_t>() > kMaxInboxBatch) {
            problems->push_back("\"batch_size\" must be an integer from 1 to " +
                                std::to_string(kMaxInboxBatch));
        } else {
            config->batch_size = static_cast<int>(value.get<int64_t>());
        }
    } else if (key == "handler_timeout") {
        std::optional<int64_t> ms;
        if (value.is_number_integer() && value.get<int64_t>() >= 0)
            ms = value.get<int64_t>();
        else if (value.is_string())
            ms = ParseDurationMs(value.get_ref<const std::string &>());
        if (!ms || *ms > kMaxHandlerTimeoutMs) {
            problems->push_back(
                "\"handler_timeout\" must be a duration from 0 (no limit) to 24h: milliseconds, "
                "or a string such as \"30s\"");
        } else {
            config->handler_timeout_ms = *ms;
        }
    } else if (key == "isolation_level") {
        if (value == "read_committed") {
            config->read_uncommitted = false;
        } else if (value == "read_uncommitted") {
            config->read_uncommitted = true;
        } else {
            problems->push_back(
                "\"isolation_level\" must be \"read_committed\" (the default) or "
                "\"read_uncommitted\"");
        }
    } else if (key == "start") {
        if (value == "earliest") {
            config->start_at_latest = false;
        } else if (value == "latest") {
            config->start_at_latest = true;
        } else {
            problems->push_back("\"start\" must be \"earliest\" or \"latest\"");
        }
    } else {
        return false;
    }
    return true;
}

}  // namespace

// A Kafka topic name as the broker accepts it (Kafka's Topic.validate).
bool IsValidKafkaTopic(std::string_view topic) {
    if (topic.empty() || topic.size() > kMaxKafkaTopicBytes || topic == "." || topic == "..") {
        return false;
    }
    for (char c : topic) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok) {
            return false;
        }
    }
    return true;
}

void ReadSubscriptionKeys(const Json &object, SubscriptionCheck *check, Json *forwarded_out) {
    Json &forwarded = *forwarded_out;
    forwarded = Json::object();
    bool has_topics = false;
    bool has_bootstrap = false;
    for (const auto &item : object.items()) {
        const std::string &key = item.key();
        has_topics = has_topics || key == "topics";
        has_bootstrap =
            has_bootstrap || key == "bootstrap.servers" || key == "metadata.broker.list";
        if (CheckOwnKey(key, item.value(), check)) {
            continue;
        }
        bool refused = false;
        for (const RefusedProperty &property : kRefusedProperties) {
            if (key == property.key) {
                check->problems.push_back(Quote(key) +
                                          " cannot be configured for a subscription (" +
                                          std::string(property.why) + ")");
                refused = true;
            }
        }
        for (std::string_view destination_only : kDestinationOnly) {
            if (key == destination_only) {
                check->problems.push_back(Quote(key) +
                                          " is a destination setting, not a subscription's" +
                                          (key == "topic" ? " (use \"topics\": [...])" : ""));
                refused = true;
            }
        }
        if (!refused) {
            forwarded[key] = item.value();
        }
    }
    if (!has_bootstrap) {
        check->problems.push_back("\"bootstrap.servers\" is required for a kafka subscription");
    }
    if (!has_topics) {
        check->problems.push_back("\"topics\" is required for a kafka subscription");
    }
}

void ReadKafkaSubscription(std::string_view json_text, SubscriptionCheck *check) {
    check->config.kind = &kKafkaKind;
    try {
        Json object = Json::parse(json_text.begin(), json_text.end(), nullptr, false);
        if (object.is_discarded() || !object.is_object()) {
            check->problems.push_back("the config must be a JSON object");
            return;
        }
        Json forwarded;
        ReadSubscriptionKeys(object, check, &forwarded);
    } catch (const nlohmann::json::exception &) {
        check->problems.push_back("the config could not be checked because of an internal error");
    }
}

}  // namespace outbox
