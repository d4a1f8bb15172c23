// The amqp row's driver half (broker_kind.hpp).
#include <memory>
#include <string>
#include <vector>

#include "outbox/broker_address.hpp"
#include "outbox/brokers/amqp/config.hpp"
#include "outbox/brokers/amqp/driver.hpp"

namespace outbox {

namespace {

std::vector<std::string> Hosts(const DestinationConfig &config) {
    if (!config.settings)
        return {};  // the config did not parse
    return {BrokerUrlHost(config.Settings<AmqpConfig>().url)};
}

std::unique_ptr<Driver> Open(const DestinationConfig &config, const DriverContext &context,
                             std::string *error) {
    AmqpDriverOptions options;
    options.config = config.Settings<AmqpConfig>();
    options.destination = context.destination;
    options.source = context.source;
    options.client_name = context.client_name;
    options.address_rule = context.address_rule;
    options.confirm_timeout_ms = context.answer_timeout_ms;
    options.max_in_flight = options.config.max_in_flight > 0
                                ? static_cast<size_t>(options.config.max_in_flight)
                                : context.default_in_flight;
    return MakeAmqpDriver(options, error);
}

}  // namespace

const DriverSide kAmqpDriverSide = {
    CheckAmqpConfig,
    Hosts,
    /*check_server=*/nullptr,
    Open,
    /*init_process=*/nullptr,
    /*check_subscription=*/nullptr,
    /*open_consumer=*/nullptr,
};

}  // namespace outbox
