// Subscription config parsing and validation (see include/outbox/subscription_config.hpp). The
// librdkafka properties go through the destinations' own check (config.cpp), so that the two
// accept, refuse and hide the same things.
#include "outbox/subscription_config.hpp"

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/duration.hpp"
#include "outbox/headers.hpp"
#include "outbox/quote.hpp"

namespace outbox {

namespace {

using Json = nlohmann::ordered_json;

// Untrusted text in double quotes, as problems show it (quote.hpp).
std::string Quote(std::string_view text) {
    char buffer[kQuotedBufferSize];
    QuoteText(text, buffer);
    return buffer;
}

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

void CheckKafkaSubscription(const Json &object, const CheckOptions &options,
                            SubscriptionCheck *check) {
    Json forwarded = Json::object();
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
    if (forwarded.empty()) {
        return;
    }
    ConfigCheck kafka = CheckDestinationConfig(DestinationKind::Kafka, forwarded.dump(), options);
    for (std::string &problem : kafka.problems) {
        if (problem.find("is required for a kafka destination") != std::string::npos ||
            problem.find("idempotent producer") != std::string::npos) {
            continue;  // said above / a producer's rule
        }
        check->problems.push_back(std::move(problem));
    }
    for (std::string &hint : kafka.hints) {
        check->hints.push_back(std::move(hint));
    }
    check->privileged = std::move(kafka.privileged);
    check->config.properties = std::move(kafka.config.kafka.properties);
    // A key the destination check took as one of its own settings (a destination setting added
    // since this list was written) would be accepted and ignored: refuse it by name.
    for (const auto &item : forwarded.items()) {
        bool used = false;
        for (const auto &[key, value] : check->config.properties) {
            used = used || key == item.key();
        }
        for (const std::string &problem : check->problems) {
            used = used || problem.find(Quote(item.key())) != std::string::npos;
        }
        if (!used) {
            check->problems.push_back(Quote(item.key()) +
                                      " is a destination setting, not a subscription's");
        }
    }
}

}  // namespace

std::optional<SubscriptionKind> ParseSubscriptionKind(std::string_view text) {
    if (text == "kafka") {
        return SubscriptionKind::Kafka;
    }
    return std::nullopt;
}

bool IsValidSubscriptionName(std::string_view name) {
    return IsValidDestinationName(name);
}

SubscriptionCheck CheckSubscriptionConfig(SubscriptionKind kind, std::string_view json_text,
                                          const CheckOptions &options) {
    SubscriptionCheck check;
    check.config.kind = kind;
    try {
        Json object = Json::parse(json_text.begin(), json_text.end(), nullptr, false);
        if (object.is_discarded() || !object.is_object()) {
            check.problems.push_back("the config must be a JSON object");
            return check;
        }
        CheckKafkaSubscription(object, options, &check);
    } catch (const nlohmann::json::exception &) {
        check.problems.push_back("the config could not be checked because of an internal error");
    }
    return check;
}

}  // namespace outbox
