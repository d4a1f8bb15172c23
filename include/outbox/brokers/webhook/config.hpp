// The webhook kind's settings and their check (outbox-driver: URLs are parsed by libcurl).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/brokers/cloudevents.hpp"
#include "outbox/config.hpp"
#include "outbox/headers.hpp"

namespace outbox {

struct WebhookConfig : KindSettings {
    std::string url;
    std::vector<std::string> secret_keys;   // decoded key bytes, one per whsec_ secret
    std::vector<std::string> signing_keys;  // ed25519 seeds (32 bytes), one per whsk_ secret
    Headers headers;                        // static headers sent on every request
    int64_t timeout_ms = 10000;
    bool timeout_set = false;  // "timeout_ms" given (else the default, lowered to fit the lease)
    int max_in_flight = 32;
    std::string ca_file;  // empty: the system CA store
    bool tls_verify = true;
    std::string default_topic;  // CloudEvents type when a message has no topic
    CloudEventsMode cloudevents = CloudEventsMode::Binary;
};

// The row's driver half (driver_side.cpp).
extern const DriverSide kWebhookDriverSide;

// The webhook part of CheckDestinationConfig (config.hpp has the keys of every kind):
//
// "url" (required; http or https with a host, checked with libcurl's URL parser), "secret" (a
// "whsec_" + base64 HMAC secret or a "whsk_" + base64 ed25519 private key, or a non-empty array
// of them for rotation; signing.hpp has the key formats), "headers" (object of strings; valid
// names and values per headers.hpp, not reserved), "timeout_ms" (duration, 1ms..10min),
// "max_in_flight" (integer 1..1024), "ca_file" (string; must name a readable file when
// options.check_files; ReadsFiles), "tls_verify" (boolean), "topic" (IsValidWebhookTopic),
// "cloudevents" ("binary", the default, or "structured"; see cloudevents.hpp). Unknown keys are
// problems.
void CheckWebhookConfig(const JsonObject &object, const OutOfRange &out_of_range,
                        const CheckOptions &options, ConfigCheck *check);

// A webhook request must end within half of outbox.lease_timeout, or the lease lapses while it
// is in flight and another worker sends the message again. A "timeout_ms" given that is longer
// is a problem (with the hint that says what to do); nullopt otherwise. The default timeout is
// never one: the driver lowers it to fit (so does it a given one when the lease is lowered
// later, with a log line).
std::optional<std::pair<std::string, std::string>> WebhookTimeoutProblem(
    const WebhookConfig &config, int64_t lease_timeout_ms);

}  // namespace outbox
