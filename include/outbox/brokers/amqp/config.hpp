// The amqp kind's settings and their check (outbox-driver: URLs are parsed by librabbitmq).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/config.hpp"

namespace outbox {

// RabbitMQ (AMQP 0-9-1). See docs/destinations.md#amqp.
struct AmqpConfig : KindSettings {
    std::string url;          // amqp:// or amqps://; its credentials are a secret: never shown
    std::string exchange;     // "" is the default exchange (routing key = queue name)
    std::string routing_key;  // when a message has no topic
    int max_in_flight = 0;    // publishes awaiting their confirm; 0: the worker's default
    int heartbeat_s = 30;     // AMQP heartbeat (0: off)
    int64_t connect_timeout_ms = 5000;
    std::string ca_file;    // amqps: the only trust anchor; empty: the system store
    std::string cert_file;  // amqps: client certificate (with key_file)
    std::string key_file;
    bool tls_verify = true;
};

// The row's driver half (driver_side.cpp).
extern const DriverSide kAmqpDriverSide;

// The amqp part of CheckDestinationConfig (config.hpp has the keys of every kind):
//
// "url" (required; amqp:// or amqps:// as librabbitmq parses it, with a host, no query),
// "exchange" (0..255 bytes), "routing_key" (IsValidAmqpRoutingKey), "max_in_flight"
// (1..10000), "heartbeat" (0..10min, rounded up to seconds), "connect_timeout" (100ms..1min),
// "ca_file"/"cert_file"/"key_file" (ReadsFiles; amqps only; cert and key together),
// "tls_verify". "topic" is refused with a hint (the kind says "routing_key"), and the URL is
// never quoted (it carries credentials).
void CheckAmqpConfig(const JsonObject &object, const OutOfRange &out_of_range,
                     const CheckOptions &options, ConfigCheck *check);

}  // namespace outbox
