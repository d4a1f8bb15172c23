// AMQP 0-9-1 driver (RabbitMQ): one connection and one channel per destination, in publisher
// confirm mode. Every message is published persistent and mandatory; it counts as delivered
// only on the broker's basic.ack, a basic.nack is a rejection, and a message the broker
// returns as unroutable (basic.return) is dead-lettered with the broker's reason.
#pragma once

#include <memory>
#include <string>

#include "outbox/brokers/amqp/config.hpp"
#include "outbox/driver.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

struct AmqpDriverOptions {
    AmqpConfig config;
    std::string destination;  // for log lines, the connection name and the type fallback
    std::string source;       // CloudEvents source
    std::string client_name;  // the connection_name the broker shows
    // A publish still unconfirmed after this long ends the connection and everything in
    // flight comes back deferred: kept below the lease, so no lease lapses meanwhile.
    int64_t confirm_timeout_ms = 10000;
    size_t max_in_flight = 1000;     // publishes awaiting their confirm
    BrokerAddressRule address_rule;  // outbox.broker_allowed_networks, when guarded
};

// A driver whose connection is made (and remade) by its own I/O thread; nullptr with *error
// when the driver cannot be set up (the URL does not parse, no thread or pipe).
std::unique_ptr<Driver> MakeAmqpDriver(const AmqpDriverOptions &options, std::string *error);

}  // namespace outbox
