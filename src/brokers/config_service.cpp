// What outbox-driver does with a config (include/outbox/brokers/config_service.hpp).
#include "outbox/brokers/config_service.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "outbox/brokers/kafka/consumer.hpp"
#include "outbox/brokers/registry.hpp"
#include "outbox/driver.hpp"
#include "outbox/subscription_config.hpp"

namespace outbox {

namespace {

ConfigVerdict VerdictOf(ConfigCheck check, const BrokerKind &kind) {
    ConfigVerdict verdict;
    verdict.problems = std::move(check.problems);
    verdict.hints = std::move(check.hints);
    verdict.privileged = std::move(check.privileged);
    verdict.hosts = kind.driver->hosts(check.config);
    return verdict;
}

ConfigAnswer AnswerSubscription(const ConfigQuery &query, const BrokerKind &kind) {
    ConfigAnswer answer;
    CheckOptions options;
    options.check_files = query.check_files;
    SubscriptionCheck check;
    kind.driver->check_subscription(query.config, options, &check, &answer.config.hosts);
    answer.config.problems = std::move(check.problems);
    answer.config.hints = std::move(check.hints);
    answer.config.privileged = std::move(check.privileged);
    if (query.has_old) {
        CheckOptions no_files;
        no_files.check_files = false;
        SubscriptionCheck old;
        kind.driver->check_subscription(query.old_config, no_files, &old, &answer.old.hosts);
        answer.old.problems = std::move(old.problems);
        answer.old.privileged = std::move(old.privileged);
    }
    return answer;
}

}  // namespace

ConfigAnswer AnswerConfigQuery(const ConfigQuery &query) {
    const BrokerKind *kind = FindBrokerKind(query.kind);
    if (kind == nullptr || kind->driver == nullptr ||
        (query.subscription && kind->driver->check_subscription == nullptr)) {
        ConfigAnswer answer;
        answer.config.problems.push_back(
            "this outbox-driver has no " +
            std::string(query.subscription ? "subscription" : "destination") + " kind \"" +
            query.kind + "\"");
        return answer;
    }
    if (query.subscription)
        return AnswerSubscription(query, *kind);
    CheckOptions options;
    options.check_files = query.check_files;
    ConfigCheck check = CheckDestinationConfig(*kind, query.config, options);
    ConfigCheck old;
    if (query.has_old) {
        CheckOptions no_files;
        no_files.check_files = false;
        old = CheckDestinationConfig(*kind, query.old_config, no_files);
    }
    ConfigAnswer answer;
    if (check.ok() && kind->driver->check_server != nullptr)
        answer.server = kind->driver->check_server(
            check.config, query.has_old ? &old.config : nullptr, query.server);
    answer.config = VerdictOf(std::move(check), *kind);
    if (query.has_old)
        answer.old = VerdictOf(std::move(old), *kind);
    return answer;
}

std::unique_ptr<Driver> OpenDriver(std::string_view kind_name, std::string_view config_json,
                                   const DriverContext &context, std::string *error) {
    const BrokerKind *kind = FindBrokerKind(kind_name);
    if (kind == nullptr || kind->driver == nullptr) {
        *error = "this outbox-driver has no driver of kind \"" + std::string(kind_name) + "\"";
        return nullptr;
    }
    ConfigCheck check = CheckDestinationConfig(*kind, config_json);
    if (!check.ok()) {
        // What the worker said when it checked the config itself (before the driver process
        // did): a stored config that no longer passes (a ca_file gone).
        *error = "invalid config: ";
        for (size_t i = 0; i < check.problems.size(); i++)
            *error += (i == 0 ? "" : "; ") + check.problems[i];
        return nullptr;
    }
    return kind->driver->open(check.config, context, error);
}

std::unique_ptr<KafkaConsumer> OpenConsumer(std::string_view kind_name,
                                            std::string_view config_json,
                                            const ConsumerContext &context, std::string *error) {
    const BrokerKind *kind = FindBrokerKind(kind_name);
    if (kind == nullptr || kind->driver == nullptr || kind->driver->open_consumer == nullptr) {
        *error = "this outbox-driver has no consumer of kind \"" + std::string(kind_name) + "\"";
        return nullptr;
    }
    SubscriptionCheck check;
    std::vector<std::string> hosts;
    kind->driver->check_subscription(config_json, CheckOptions{}, &check, &hosts);
    if (!check.ok()) {
        *error = "the config is not valid: " + check.problems.front();
        return nullptr;
    }
    return kind->driver->open_consumer(check.config, context, error);
}

}  // namespace outbox
