// MQTT 5 driver (libmosquitto): one client per destination and worker, publishing with QoS 1
// or 2; a message counts as delivered only on its PUBACK (QoS 1) or PUBCOMP (QoS 2) with a
// success reason code.
#pragma once

#include <memory>
#include <string>

#include "outbox/brokers/mqtt/config.hpp"
#include "outbox/driver.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

struct MqttDriverOptions {
    MqttConfig config;
    std::string destination;  // for log lines and the CloudEvents type fallback
    std::string source;       // CloudEvents source
    std::string client_id;    // MqttClientId: fixed per destination and worker
    // How long a PUBACK/PUBCOMP is awaited on a live connection (the config's ack_timeout when
    // set): kept below the lease.
    int64_t ack_timeout_ms = 5000;
    size_t max_in_flight = 1000;     // publishes awaiting their acknowledgement
    BrokerAddressRule address_rule;  // outbox.broker_allowed_networks, when guarded
};

// A driver whose connection a thread of its own makes, serves and remakes; nullptr with *error
// when libmosquitto refused the options (e.g. an unreadable certificate).
std::unique_ptr<Driver> MakeMqttDriver(const MqttDriverOptions &options, std::string *error);

}  // namespace outbox
