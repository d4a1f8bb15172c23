// The kafka row's driver half (broker_kind.hpp): what outbox-driver does with a kafka
// destination or subscription once its config passed the check.
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/brokers/kafka/config.hpp"
#include "outbox/brokers/kafka/consumer.hpp"
#include "outbox/brokers/kafka/driver.hpp"
#include "outbox/brokers/kafka/kind.hpp"
#include "outbox/subscription_config.hpp"

namespace outbox {

namespace {

std::vector<std::string> Hosts(const DestinationConfig &config) {
    if (!config.settings)
        return {};  // the config did not parse
    return KafkaHosts(config.Settings<KafkaConfig>().properties);
}

std::unique_ptr<Driver> Open(const DestinationConfig &config, const DriverContext &context,
                             std::string *error) {
    KafkaDriverOptions options;
    options.config = config.Settings<KafkaConfig>();
    options.client_id = context.client_name;
    options.source = context.source;
    options.lease_timeout_ms = context.lease_timeout_ms;
    options.address_rule = context.address_rule;
    // The drain runs at most one window per acks=all round trip. The dispatcher uses the width
    // only while claims come back full (Dispatcher::Room): caught up, two batches stay in
    // flight, so claims stay large when the producers commit a row at a time. Without
    // "max_in_flight" the window opens up to kKafkaDefaultWindowFactor times the worker's
    // default while acknowledgements are fast and the messages in flight weigh less than
    // kKafkaDefaultWindowBytes (config.hpp, window.hpp). Exactly-once claims one batch per
    // transaction: its window is the worker's default.
    if (options.config.max_in_flight > 0) {
        options.max_in_flight = static_cast<size_t>(options.config.max_in_flight);
    } else if (config.delivery == Delivery::ExactlyOnce) {
        options.max_in_flight = context.default_in_flight;
    } else {
        options.base_in_flight = context.default_in_flight;
        options.max_in_flight =
            std::min(static_cast<size_t>(kMaxKafkaInFlight),
                     std::max<size_t>(1, context.default_in_flight) * kKafkaDefaultWindowFactor);
        options.max_in_flight_bytes = kKafkaDefaultWindowBytes;
    }
    options.transactional_id = context.transactional_id;
    options.adopt = context.adopt;
    if (context.adopt && config.delivery != Delivery::ExactlyOnce) {
        *error = "only an exactly-once destination's transactional.id can be adopted";
        return nullptr;
    }
    if (config.delivery == Delivery::ExactlyOnce)
        return MakeKafkaTxnDriver(options, error);
    return MakeKafkaDriver(options, error);
}

void CheckSubscription(std::string_view json, const CheckOptions &options, SubscriptionCheck *check,
                       std::vector<std::string> *hosts) {
    *check = CheckKafkaSubscription(json, options);
    *hosts = KafkaHosts(check->config.properties);
}

std::unique_ptr<KafkaConsumer> OpenConsumer(const SubscriptionConfig &config,
                                            const ConsumerContext &context, std::string *error) {
    KafkaConsumerOptions options;
    options.name = context.subscription;
    options.topics = config.topics;
    options.properties = config.properties;
    // Said explicitly, not left to librdkafka's default: a record of an aborted transaction
    // (an exactly-once producer's, for one) is never read, so never applied.
    options.properties.emplace_back(
        "isolation.level", config.read_uncommitted ? "read_uncommitted" : "read_committed");
    options.client_id = context.client_id;
    options.metadata_interval_ms = context.metadata_interval_ms;
    options.window_records = context.window_records;
    options.window_bytes = context.window_bytes;
    options.address_rule = context.address_rule;
    return MakeKafkaConsumer(options, error);
}

}  // namespace

const DriverSide kKafkaDriverSide = {
    CheckKafkaConfig,  Hosts,        /*check_server=*/nullptr, Open, /*init_process=*/nullptr,
    CheckSubscription, OpenConsumer,
};

}  // namespace outbox
