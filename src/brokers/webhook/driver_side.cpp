// The webhook row's driver half (broker_kind.hpp): the definition-time rules against the
// server's settings, and the driver.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "outbox/brokers/curl_multi.hpp"
#include "outbox/brokers/webhook/config.hpp"
#include "outbox/brokers/webhook/driver.hpp"
#include "outbox/brokers/webhook/kind.hpp"
#include "outbox/brokers/http_url.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

namespace {

std::vector<std::string> NoHosts(const DestinationConfig &) {
    return {};  // outbox.webhook_allowed_networks guards a webhook, in CheckServer and the driver
}

// A webhook is checked against the settings of the server when it is created and when the
// setting concerned changes (not for every alter: a setting of the server that changed since is
// applied by the driver): a literal address (or localhost) in the URL must be allowed by
// outbox.webhook_allowed_networks (a name is resolved only when connecting: that check is the
// driver's), and a given timeout_ms must fit in half of outbox.lease_timeout.
ServerVerdict CheckServer(const DestinationConfig &config, const DestinationConfig *old,
                          const ServerSettings &server) {
    ServerVerdict verdict;
    const WebhookConfig &webhook = config.Settings<WebhookConfig>();
    const WebhookConfig *before = old && old->settings ? &old->Settings<WebhookConfig>() : nullptr;
    if (old == nullptr || before == nullptr || webhook.url != before->url) {
        std::vector<Network> allowed;
        std::string error;
        if (!ParseNetworkList(server.webhook_allowed_networks, &allowed, &error))
            allowed.clear();  // the setting's check hook refuses a bad list
        if (std::optional<HostRefusal> refused = RefusedLiteralUrlHost(webhook.url, allowed)) {
            verdict.refused = true;
            verdict.reason = "its URL names " + refused->what +
                             ", which is not allowed by outbox.webhook_allowed_networks";
            verdict.detail = "That is " + WithArticle(refused->kind) +
                             " address. Webhooks may reach loopback, unspecified, private, "
                             "link-local, multicast, reserved and IPv4-mapped addresses only "
                             "where a superuser allows them.";
            verdict.hint =
                "Use the endpoint's public address or name, or ask a superuser to add its network "
                "to outbox.webhook_allowed_networks (postgresql.conf, then a reload).";
        }
    }
    bool timeout_changed = old == nullptr || before == nullptr ||
                           webhook.timeout_set != before->timeout_set ||
                           webhook.timeout_ms != before->timeout_ms;
    if (timeout_changed) {
        if (auto problem = WebhookTimeoutProblem(webhook, server.lease_timeout_ms)) {
            verdict.problems.push_back(problem->first);
            verdict.hints.push_back(problem->second);
        }
    }
    return verdict;
}

std::unique_ptr<Driver> Open(const DestinationConfig &config, const DriverContext &context,
                             std::string *error) {
    WebhookDriverOptions options;
    options.config = config.Settings<WebhookConfig>();
    options.destination = context.destination;
    options.source = context.source;
    options.lease_timeout_ms = context.lease_timeout_ms;
    options.allowed_networks = context.webhook_allowed_networks;
    options.show_response_body = context.config_by_superuser;
    return MakeWebhookDriver(options, error);
}

}  // namespace

const DriverSide kWebhookDriverSide = {
    CheckWebhookConfig,
    NoHosts,
    CheckServer,
    Open,
    EnsureCurlGlobalInit,
    /*check_subscription=*/nullptr,
    /*open_consumer=*/nullptr,
};

}  // namespace outbox
