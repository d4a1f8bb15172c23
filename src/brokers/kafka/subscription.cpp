// The whole check of a kafka subscription's config (include/outbox/brokers/kafka/config.hpp):
// the subscription's own settings (kind.cpp, ReadSubscriptionKeys), then the librdkafka
// properties through the destinations' own check (config.cpp), so that the two accept, refuse
// and hide the same things. outbox-driver only (librdkafka).
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "outbox/brokers/kafka/config.hpp"
#include "outbox/brokers/kafka/kind.hpp"
#include "outbox/config_json.hpp"
#include "outbox/subscription_config.hpp"

namespace outbox {

namespace {

// The librdkafka properties of a subscription (`forwarded`: the keys that are not its own).
void CheckSubscriptionProperties(const Json &forwarded, const CheckOptions &options,
                                 SubscriptionCheck *check) {
    if (forwarded.empty()) {
        return;
    }
    ConfigCheck kafka = CheckDestinationConfig(kKafkaKind, forwarded.dump(), options);
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
    check->config.properties = kafka.config.Settings<KafkaConfig>().properties;
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

SubscriptionCheck CheckKafkaSubscription(std::string_view json_text, const CheckOptions &options) {
    SubscriptionCheck check;
    check.config.kind = &kKafkaKind;
    try {
        Json object = Json::parse(json_text.begin(), json_text.end(), nullptr, false);
        if (object.is_discarded() || !object.is_object()) {
            check.problems.push_back("the config must be a JSON object");
            return check;
        }
        Json forwarded;
        ReadSubscriptionKeys(object, &check, &forwarded);
        CheckSubscriptionProperties(forwarded, options, &check);
    } catch (const nlohmann::json::exception &) {
        check.problems.push_back("the config could not be checked because of an internal error");
    }
    return check;
}

}  // namespace outbox
