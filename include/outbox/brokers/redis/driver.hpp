// Redis Streams driver: one connection per destination, XADDs pipelined on it (replies come in
// order), a message counts as delivered on XADD's reply (its entry id), or with "wait" only
// once WAIT after its batch says enough replicas have it.
#pragma once

#include <memory>
#include <string>

#include "outbox/brokers/redis/config.hpp"
#include "outbox/driver.hpp"
#include "outbox/message.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

struct RedisDriverOptions {
    RedisConfig config;
    std::string destination;  // for log lines and the ce_type fallback
    std::string source;       // CloudEvents source
    std::string client_name;  // CLIENT SETNAME: what CLIENT LIST shows for the connection
    // How long a reply is awaited (the config's ack_timeout when set): kept below the lease.
    int64_t ack_timeout_ms = 5000;
    size_t max_in_flight = 1000;     // XADDs awaiting their reply
    BrokerAddressRule address_rule;  // outbox.broker_allowed_networks, when guarded
};

// The fields of the stream entry for `m`, in order, as XADD gets them after the entry id:
// "payload", "key" (when the message has one), "headers" (the producer's headers as one JSON
// object, when it has any), then the CloudEvents attributes "ce_specversion", "ce_id" (the
// event id), "ce_source", "ce_type", "ce_time", "ce_datacontenttype", "ce_traceparent" and
// "ce_tracestate" (when the message has them). `type_fallback`: the ce_type of a message
// without a topic or ce_type header.
std::vector<std::pair<std::string, std::string>> RedisEntryFields(const Message &m,
                                                                  std::string_view source,
                                                                  std::string_view type_fallback);

// The driver; nullptr with *error when it cannot be made.
std::unique_ptr<Driver> MakeRedisDriver(const RedisDriverOptions &options, std::string *error);

}  // namespace outbox
