// The redis row's driver half (broker_kind.hpp).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "outbox/brokers/redis/config.hpp"
#include "outbox/brokers/redis/driver.hpp"

namespace outbox {

namespace {

std::vector<std::string> Hosts(const DestinationConfig &config) {
    if (!config.settings)
        return {};  // the config did not parse
    const RedisConfig &redis = config.Settings<RedisConfig>();
    if (redis.host.empty())
        return {};
    return {redis.host};
}

std::unique_ptr<Driver> Open(const DestinationConfig &config, const DriverContext &context,
                             std::string *error) {
    RedisDriverOptions options;
    options.config = config.Settings<RedisConfig>();
    options.destination = context.destination;
    options.source = context.source;
    options.client_name = context.client_name;
    options.address_rule = context.address_rule;
    options.ack_timeout_ms =
        options.config.ack_timeout_ms > 0
            ? std::min(options.config.ack_timeout_ms, context.answer_timeout_ms)
            : std::min<int64_t>(5000, context.answer_timeout_ms);
    options.max_in_flight = options.config.max_in_flight > 0
                                ? static_cast<size_t>(options.config.max_in_flight)
                                : context.default_in_flight;
    return MakeRedisDriver(options, error);
}

}  // namespace

const DriverSide kRedisDriverSide = {
    CheckRedisConfig,
    Hosts,
    /*check_server=*/nullptr,
    Open,
    /*init_process=*/nullptr,
    /*check_subscription=*/nullptr,
    /*open_consumer=*/nullptr,
};

}  // namespace outbox
