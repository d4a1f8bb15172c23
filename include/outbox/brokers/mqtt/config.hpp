// The mqtt kind's settings and their check (outbox-driver).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/config.hpp"

namespace outbox {

// MQTT 5. See docs/destinations.md#mqtt.
struct MqttConfig : KindSettings {
    std::string host;   // a host name or an IP address literal, no scheme
    int port = 0;       // 0: 1883, or 8883 with TLS
    std::string topic;  // when a message has no topic
    int qos = 1;        // 1 (PUBACK) or 2 (PUBREC/PUBREL/PUBCOMP)
    bool retain = false;
    std::string username;
    std::string password;
    bool tls = false;  // also implied by ca_file or cert_file
    bool tls_verify = true;
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
    int max_in_flight = 0;                // publishes awaiting their PUBACK/PUBCOMP; 0: the default
    int64_t ack_timeout_ms = 0;           // 0: the worker's answer timeout (below the lease)
    int64_t keepalive_ms = 30000;         // MQTT keep alive (whole seconds on the wire)
    int64_t session_expiry_ms = 3600000;  // the session's expiry interval after a disconnect
};

// The row's driver half (driver_side.cpp).
extern const DriverSide kMqttDriverSide;

// The mqtt part of CheckDestinationConfig (config.hpp has the keys of every kind):
//
// "host" (required; a host name or an IP address, no scheme or port), "port" (1..65535),
// "topic" (IsValidMqttTopic), "qos" (1 or 2), "retain", "username", "password" (secret; needs
// "username"), "tls", "tls_verify", "ca_file", "cert_file" + "key_file" (ReadsFiles),
// "max_in_flight" (1..65535), "ack_timeout" (100ms..10min), "keepalive" (5s..18h),
// "session_expiry" (0..7d). "subject" and "url" are refused with a hint.
void CheckMqttConfig(const JsonObject &object, const OutOfRange &out_of_range,
                     const CheckOptions &options, ConfigCheck *check);

// The client identifier of a destination's connection: the driver's client name
// ("outbox-<database>-<destination>"), with "-w<N>" for the second and later worker of a
// database, so that no two connections share one (a broker disconnects the older of two clients
// with the same identifier). At most 200 bytes: the rest is replaced by a hash.
std::string MqttClientId(const std::string &client_name, int64_t worker_index);

}  // namespace outbox
