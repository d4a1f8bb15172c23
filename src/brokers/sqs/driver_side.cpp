// The sqs row's driver half (broker_kind.hpp).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "outbox/brokers/curl_multi.hpp"
#include "outbox/brokers/sqs/config.hpp"
#include "outbox/brokers/sqs/driver.hpp"
#include "outbox/brokers/http_url.hpp"

namespace outbox {

namespace {

// The host the requests go to (the endpoint's, else the queue URL's): the literal one is
// checked against outbox.broker_allowed_networks when the config is set.
std::vector<std::string> Hosts(const DestinationConfig &config) {
    std::vector<std::string> hosts;
    if (!config.settings)
        return hosts;  // the config did not parse
    const SqsConfig &sqs = config.Settings<SqsConfig>();
    std::string host = UrlHost(sqs.endpoint.empty() ? sqs.queue_url : sqs.endpoint);
    if (!host.empty())
        hosts.push_back(host);
    return hosts;
}

std::unique_ptr<Driver> Open(const DestinationConfig &config, const DriverContext &context,
                             std::string *error) {
    SqsDriverOptions options;
    options.config = config.Settings<SqsConfig>();
    options.destination = context.destination;
    options.source = context.source;
    options.address_rule = context.address_rule;
    options.timeout_ms = options.config.timeout_ms > 0
                             ? std::min(options.config.timeout_ms, context.answer_timeout_ms)
                             : std::min<int64_t>(10000, context.answer_timeout_ms);
    options.max_in_flight = options.config.max_in_flight > 0
                                ? static_cast<size_t>(options.config.max_in_flight)
                                : context.default_in_flight;
    return MakeSqsDriver(options, error);
}

}  // namespace

const DriverSide kSqsDriverSide = {
    CheckSqsConfig,
    Hosts,
    /*check_server=*/nullptr,
    Open,
    EnsureCurlGlobalInit,
    /*check_subscription=*/nullptr,
    /*open_consumer=*/nullptr,
};

}  // namespace outbox
