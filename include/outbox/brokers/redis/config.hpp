// The redis kind's settings and their check (outbox-driver).
#pragma once

#include <cstdint>
#include <string>

#include "outbox/broker_kind.hpp"
#include "outbox/config.hpp"

namespace outbox {

// Redis Streams (XADD). See docs/destinations.md#redis.
struct RedisConfig : KindSettings {
    std::string host;  // as written: a name, an IPv4 address or an IPv6 address (no brackets)
    int port = 6379;
    std::string stream;  // when a message has no topic
    std::string user;    // ACL user; empty: AUTH with the password only ("default")
    std::string password;
    int database = 0;  // SELECT, when not 0
    bool tls = false;  // also implied by rediss://, ca_file, cert_file
    bool tls_verify = true;
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
    int64_t maxlen = 0;         // XADD MAXLEN ~ N; 0: none
    bool create_stream = true;  // false: XADD NOMKSTREAM (a missing stream dead-letters)
    int wait_replicas = 0;      // WAIT numreplicas after each pipelined batch; 0: none
    int64_t wait_timeout_ms = 1000;
    int max_in_flight = 0;       // XADDs awaiting their reply; 0: the worker's default
    int64_t ack_timeout_ms = 0;  // reply wait; 0: the worker's default (below the lease)
    int64_t connect_timeout_ms = 5000;
};

// The row's driver half (driver_side.cpp).
extern const DriverSide kRedisDriverSide;

// The redis part of CheckDestinationConfig:
//
// "server" (required: "host", "host:port", "[v6]:port", "redis://host:port" or
// "rediss://host:port", which also turns TLS on; no credentials in it), "stream"
// (IsValidRedisStream), "user" and "password" (AUTH; the password is a secret, never quoted),
// "database" (0..65535: SELECT), "tls", "tls_verify", "ca_file", "cert_file" + "key_file"
// (ReadsFiles), "maxlen" (1..2^62: MAXLEN ~ N), "create_stream" (false: NOMKSTREAM), "wait"
// ({"replicas": 1..100, "timeout": 1ms..1min}), "max_in_flight" (1..10000), "ack_timeout"
// (100ms..10min), "connect_timeout" (100ms..1min). "topic" is refused with a hint (the kind
// says "stream").
void CheckRedisConfig(const JsonObject &object, const OutOfRange &out_of_range,
                      const CheckOptions &options, ConfigCheck *check);

// Splits a "server" setting into host (IPv6 without brackets), port and whether it asked for
// TLS (rediss://); false when it is not one.
bool ParseRedisServer(const std::string &server, std::string *host, int *port, bool *tls);

}  // namespace outbox
