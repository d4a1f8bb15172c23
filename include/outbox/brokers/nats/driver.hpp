// NATS JetStream driver (cnats): one connection per destination, publishing asynchronously
// with Nats-Msg-Id = event_id, so that JetStream's duplicate window drops a copy sent again.
// A message counts as delivered only on its PubAck.
#pragma once

#include <memory>
#include <string>

#include "outbox/brokers/nats/config.hpp"
#include "outbox/driver.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

struct NatsDriverOptions {
    NatsConfig config;
    std::string destination;  // for log lines and the ce-type fallback
    std::string source;       // CloudEvents source
    std::string client_name;  // the connection name the server shows
    // How long a PubAck is awaited (the config's ack_timeout when set): kept below the lease.
    int64_t ack_timeout_ms = 5000;
    size_t max_in_flight = 1000;     // publishes awaiting their PubAck
    BrokerAddressRule address_rule;  // outbox.broker_allowed_networks, when guarded
};

// A driver whose connection cnats makes (and remakes) in its own threads; nullptr with *error
// when cnats refused the options (e.g. an unreadable creds file).
std::unique_ptr<Driver> MakeNatsDriver(const NatsDriverOptions &options, std::string *error);

}  // namespace outbox
