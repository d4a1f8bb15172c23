// The nats kind's settings and their check (outbox-driver).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/config.hpp"

namespace outbox {

// NATS JetStream. See docs/destinations.md#nats.
struct NatsConfig : KindSettings {
    std::vector<std::string> servers;  // nats:// or tls:// URLs; may carry credentials
    std::string subject;               // when a message has no topic
    std::string user;
    std::string password;
    std::string token;
    std::string creds_file;      // user JWT + NKey seed (.creds)
    std::string nkey;            // NKey public key, with nkey_seed_file
    std::string nkey_seed_file;  // file holding the NKey seed
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
    bool tls = false;  // require TLS (also implied by a tls:// server)
    bool tls_verify = true;
    int max_in_flight = 0;       // publishes awaiting their PubAck; 0: the worker's default
    int64_t ack_timeout_ms = 0;  // PubAck wait; 0: the worker's default (below the lease)
    int64_t connect_timeout_ms = 5000;
};

// The row's driver half (driver_side.cpp).
extern const DriverSide kNatsDriverSide;

// The nats part of CheckDestinationConfig (config.hpp has the keys of every kind):
//
// "servers" (required; nats:// or tls:// URLs or host:port, a comma list or an array),
// "subject" (IsValidNatsSubject), one of "user"+"password", "token", "creds_file",
// "nkey"+"nkey_seed_file"; "tls", "tls_verify", "ca_file", "cert_file" + "key_file",
// "max_in_flight" (1..10000), "ack_timeout" (100ms..10min), "connect_timeout" (100ms..1min).
// File settings are ReadsFiles. "topic" is refused with a hint (the kind says "subject"), and
// server URLs are never quoted (they carry credentials).
void CheckNatsConfig(const JsonObject &object, const OutOfRange &out_of_range,
                     const CheckOptions &options, ConfigCheck *check);

}  // namespace outbox
