// The mqtt row's driver half (broker_kind.hpp).
#include <mosquitto.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "outbox/brokers/mqtt/config.hpp"
#include "outbox/brokers/mqtt/driver.hpp"

namespace outbox {

namespace {

std::vector<std::string> Hosts(const DestinationConfig &config) {
    if (!config.settings)
        return {};  // the config did not parse
    return {config.Settings<MqttConfig>().host};
}

std::unique_ptr<Driver> Open(const DestinationConfig &config, const DriverContext &context,
                             std::string *error) {
    MqttDriverOptions options;
    options.config = config.Settings<MqttConfig>();
    options.destination = context.destination;
    options.source = context.source;
    options.client_id = MqttClientId(context.client_name, context.worker_index);
    options.address_rule = context.address_rule;
    options.ack_timeout_ms =
        options.config.ack_timeout_ms > 0
            ? std::min(options.config.ack_timeout_ms, context.answer_timeout_ms)
            : std::min<int64_t>(10000, context.answer_timeout_ms);
    options.max_in_flight = options.config.max_in_flight > 0
                                ? static_cast<size_t>(options.config.max_in_flight)
                                : std::min<size_t>(context.default_in_flight, 65535);
    return MakeMqttDriver(options, error);
}

// libmosquitto's global init (OpenSSL), once, before any thread of ours exists.
void InitProcess() {
    mosquitto_lib_init();
}

}  // namespace

const DriverSide kMqttDriverSide = {
    CheckMqttConfig,
    Hosts,
    /*check_server=*/nullptr,
    Open,
    InitProcess,
    /*check_subscription=*/nullptr,
    /*open_consumer=*/nullptr,
};

}  // namespace outbox
