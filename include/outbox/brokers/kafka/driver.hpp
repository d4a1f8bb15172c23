// Kafka driver: one idempotent, acks=all librdkafka producer per destination. A message counts
// as delivered only on a delivery report with status PERSISTED.
#pragma once

#include <memory>
#include <string>

#include "outbox/brokers/kafka/config.hpp"
#include "outbox/driver.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

struct KafkaDriverOptions {
    KafkaConfig config;
    std::string client_id;     // default client.id (the config may set its own)
    std::string source;        // CloudEvents ce_source
    int64_t lease_timeout_ms;  // message.timeout.ms is kept below it, so no lease lapses
    size_t max_in_flight;      // messages handed to librdkafka and not yet reported
    // The default window (no "max_in_flight" in the config): base_in_flight messages, opening
    // up to max_in_flight while acknowledgements are fast (KafkaWindow) and fewer than
    // max_in_flight_bytes are in flight. 0: max_in_flight is the window, whatever the messages
    // weigh.
    size_t base_in_flight = 0;
    size_t max_in_flight_bytes = 0;
    BrokerAddressRule address_rule;  // outbox.broker_allowed_networks, when guarded
    std::string transactional_id;    // "delivery": "exactly_once" (DriverContext)
    bool adopt = false;              // fence transactional_id, read its marker, nothing else
};

// A ready producer, or nullptr with *error set (librdkafka refused the configuration).
std::unique_ptr<Driver> MakeKafkaDriver(const KafkaDriverOptions &options, std::string *error);

// "delivery": "exactly_once": a transactional producer, one transaction per batch, each with its
// marker (driver_txn.cpp). Its first outcome is OutcomeKind::Marker; it takes no batch before.
// With `adopt` that is all it does (one attempt; Broken when it fails), and it takes no batch.
std::unique_ptr<Driver> MakeKafkaTxnDriver(const KafkaDriverOptions &options, std::string *error);

}  // namespace outbox
