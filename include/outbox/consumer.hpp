// The consuming side of Kafka (the inbox, issue 23): what a delivery worker asks of a consumer
// in its driver process, and what comes back. Plain types, no librdkafka and no PostgreSQL:
// the protocol (driver_protocol.hpp), the helper's consumer (drivers/kafka_consumer.hpp) and
// the worker's side (driver_supervisor.hpp, RemoteConsumer) share them.
//
// Offsets live in PostgreSQL, committed with the records' effects: the consumer never commits
// to Kafka and never joins a group; the worker assigns partitions explicitly, from the offsets
// it has applied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/message.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

// One partition to read, from `offset` (the next record, >= 0).
struct ConsumerAssignment {
    std::string topic;
    int32_t partition = 0;
    int64_t offset = 0;
};

struct ConsumedRecord {
    std::string topic;
    int32_t partition = 0;
    int64_t offset = 0;
    std::optional<std::string> key;    // nullopt: no key
    std::optional<std::string> value;  // nullopt: a null value (tombstone)
    Headers headers;                   // in order; a header with a null value arrives as ""
    int64_t timestamp_ms = -1;         // the record's timestamp, -1 when none
};

// From metadata and watermarks.
struct PartitionInfo {
    std::string topic;
    int32_t partition = 0;
    int64_t low = -1, high = -1;  // watermarks; -1 unknown (not yet queried / error)
};

struct ConsumerState {
    bool known = false;      // metadata answered at least once
    bool reachable = false;  // the latest metadata round was answered
    // Every partition of every subscribed topic that exists, sorted (topic, partition).
    std::vector<PartitionInfo> partitions;
    std::vector<std::string> missing_topics;  // subscribed topics the cluster does not have
    // The last consumer/metadata error, "" when healthy (never a secret; cut to
    // protocol::kMaxTextBytes).
    std::string error;
};

struct KafkaConsumerOptions {
    std::string name;  // the subscription, for log lines
    std::vector<std::string> topics;
    // librdkafka consumer properties given by the user (bootstrap.servers, security.*,
    // fetch.*; already validated).
    std::vector<std::pair<std::string, std::string>> properties;
    std::string client_id;                // e.g. "outbox-inbox-<db>-<name>"
    int64_t metadata_interval_ms = 1000;  // how often metadata + watermarks are refreshed
    size_t window_records = 20000;        // records sent to the worker and not yet taken
    size_t window_bytes = 64u << 20;
    BrokerAddressRule address_rule;  // outbox.broker_allowed_networks, when guarded
};

// What a record weighs against KafkaConsumerOptions::window_bytes: its key, value and headers.
// The helper and the worker both count with this, so their windows agree.
inline size_t RecordBytes(const ConsumedRecord &r) {
    size_t n = (r.key ? r.key->size() : 0) + (r.value ? r.value->size() : 0);
    for (const auto &[name, value] : r.headers)
        n += name.size() + value.size();
    return n;
}

inline bool operator==(const PartitionInfo &a, const PartitionInfo &b) {
    return a.topic == b.topic && a.partition == b.partition && a.low == b.low && a.high == b.high;
}
inline bool operator!=(const PartitionInfo &a, const PartitionInfo &b) {
    return !(a == b);
}
inline bool operator==(const ConsumerState &a, const ConsumerState &b) {
    return a.known == b.known && a.partitions == b.partitions &&
           a.missing_topics == b.missing_topics && a.error == b.error;
}
inline bool operator!=(const ConsumerState &a, const ConsumerState &b) {
    return !(a == b);
}

}  // namespace outbox
