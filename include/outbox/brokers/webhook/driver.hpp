// Webhook driver: one libcurl multi handle per destination, POSTing each message to the
// destination's URL with Standard Webhooks signing and CloudEvents binary-mode headers.
// A message counts as delivered only on a 2xx answer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "outbox/brokers/webhook/config.hpp"
#include "outbox/driver.hpp"

namespace outbox {

struct WebhookDriverOptions {
    WebhookConfig config;
    std::string destination;  // the destination's name: for log lines and the ce-type fallback
    std::string source;       // CloudEvents ce-source
    // outbox.lease_timeout: a message's request, with the time it waited for one of
    // max_in_flight connections, is given up at half of it (timeout_ms is lowered to that, with
    // a log line), so no lease lapses while its request is in flight and no other worker takes
    // the message over and sends it again.
    int64_t lease_timeout_ms = 30000;
    // outbox.webhook_allowed_networks (network_policy.hpp): the networks of restricted
    // addresses a connection may use. Every address a connection is about to use is checked
    // when its socket is opened; a refused one is not connected to, and a request that has no
    // allowed address left is a permanent failure (dead letter) naming the address.
    std::string allowed_networks;
    // Whether error texts may quote the start of a response body. Only for destinations whose
    // config a superuser wrote: a body can carry an internal service's secrets, and error texts
    // end up where operators read them (dead_letters.last_error, stats().last_error).
    bool show_response_body = false;
};

// A ready driver, or nullptr with *error set (libcurl could not be set up). Calls
// EnsureCurlGlobalInit (brokers/curl_multi.hpp), so it must run on the process's main thread.
std::unique_ptr<Driver> MakeWebhookDriver(const WebhookDriverOptions &options, std::string *error);

}  // namespace outbox
