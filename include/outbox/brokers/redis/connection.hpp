// The redis driver's connection: made in full (resolve, the broker guard, connect, TLS, AUTH,
// SELECT, CLIENT SETNAME) with blocking I/O bounded by connect_timeout, in the driver's connector
// thread; used afterwards with non-blocking I/O by the driver (driver.cpp).
#pragma once

#include <string>

#include "outbox/broker_address.hpp"
#include "outbox/brokers/redis/config.hpp"

struct ssl_st;
struct ssl_ctx_st;

namespace outbox {

// A socket connected to a Redis server and logged in, with its TLS session when it has one.
struct RedisConnection {
    int fd = -1;
    ssl_ctx_st *ctx = nullptr;
    ssl_st *ssl = nullptr;

    // Frees the TLS session and closes the socket (no TLS close_notify: the peer is either gone
    // or being dropped).
    void Close();
};

// OpenSSL's latest error after `what`, and the error queue cleared.
std::string RedisTlsError(const char *what);

// Makes the connection for `config`; false with *error when it failed. Every address of the
// server's name must pass `guard` (a name with one refused address is refused whole), and the
// socket is connected to such an address by this function, so nothing else is ever reached.
// *error names the server and the step, never the password.
bool MakeRedisConnection(const RedisConfig &config, const std::string &client_name,
                         const BrokerGuard &guard, RedisConnection *c, std::string *error);

}  // namespace outbox
