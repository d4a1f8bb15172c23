// The kafka kind's settings and their check (outbox-driver: the check asks librdkafka itself).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/brokers/cloudevents.hpp"
#include "outbox/config.hpp"
#include "outbox/subscription_config.hpp"

namespace outbox {

// Kafka "max_in_flight": messages handed to librdkafka and awaiting their delivery report (the
// default is the worker's, twice outbox.batch_size). The drain runs at most this window per
// acknowledgement round trip; the ceiling is librdkafka's own queue
// ("queue.buffering.max.messages", 100,000 by default).
constexpr int64_t kMaxKafkaInFlight = 100000;
// Without "max_in_flight", a destination's window opens up to this many times the worker's
// default (twice outbox.batch_size: 10,000 messages at the default 500) while acknowledgements
// come back within a few milliseconds (window.hpp, KafkaWindow), as long as fewer than
// kKafkaDefaultWindowBytes are in flight; otherwise it is the worker's default. The drain runs at
// most one window per acknowledgement round trip: two batches per round trip held one broker's
// drain to about half of what PostgreSQL could claim (issue 40).
// The dispatcher uses the width only while claims come back full (Dispatcher::Room), so a
// destination that is caught up keeps two batches in flight as before. The byte bound keeps
// large messages within librdkafka's queue (queue.buffering.max.kbytes, 1 GB by default), which
// refuses a produce beyond it.
constexpr size_t kKafkaDefaultWindowFactor = 10;
constexpr size_t kKafkaDefaultWindowBytes = size_t(64) << 20;

struct KafkaConfig : KindSettings {
    std::string default_topic;  // "topic"; empty when not set
    int max_in_flight = 0;      // messages awaiting their delivery report; 0: the worker's default
    CloudEventsMode cloudevents = CloudEventsMode::Binary;
    // Every other key: a librdkafka property, its JSON string/number/boolean value as text,
    // in the order of the JSON object.
    std::vector<std::pair<std::string, std::string>> properties;
};

// The row's driver half (driver_side.cpp).
extern const DriverSide kKafkaDriverSide;

// The kafka part of CheckDestinationConfig (config.hpp has the keys of every kind):
//
// "topic" (a valid Kafka topic name, IsValidKafkaTopic), "cloudevents" ("binary", the default,
// or "structured"; see cloudevents.hpp), "max_in_flight" (integer 1..kMaxKafkaInFlight; default
// kKafkaDefaultWindowFactor times twice outbox.batch_size, bounded by kKafkaDefaultWindowBytes).
// Every other key is a librdkafka property, checked with librdkafka itself (rd_kafka_conf_set
// on a scratch rd_kafka_conf_t); values must be JSON strings, numbers or booleans.
// "bootstrap.servers" is required. Refused because they would break the guarantees or the host
// process: "enable.idempotence" other than true, "acks"/"request.required.acks"
// other than "all"/"-1", "transactional.id", "internal.termination.signal", and any property
// whose value librdkafka treats as a callback or pointer; "queuing.strategy" other than "fifo"
// (the idempotent producer cannot start otherwise); "enable.sasl.oauthbearer.unsecure.jwt" true
// (development only: librdkafka 2.0.2 crashes the host process when it cannot parse
// "sasl.oauthbearer.config"); "partitioner": "random" with "ordering": "key". Topic-level
// properties are checked in every spelling librdkafka accepts ("acks", "topic.acks",
// "topic.request.required.acks"...). "bootstrap.servers" (and "metadata.broker.list") must be a
// string.
//
// Reported in `privileged` (see ServerAccess), not as problems: RunsCode for any
// "sasl.kerberos.*" property, "sasl.mechanism(s)": "GSSAPI" (its kinit command is a shell
// command), a SASL "security.protocol" without a mechanism (librdkafka's default is GSSAPI),
// "ssl.engine.location", "ssl.engine.id", "ssl.providers", and any property substituted
// into a custom "sasl.kerberos.kinit.cmd"; ReadsFiles for "ssl.ca.location" (other than
// "probe"), "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location" and
// "ssl.crl.location".
void CheckKafkaConfig(const JsonObject &object, const OutOfRange &out_of_range,
                      const CheckOptions &options, ConfigCheck *check);

// The name librdkafka looks a property up by in the default topic config: "topic.acks" is
// "acks".
std::string_view BareKafkaName(std::string_view key);

// Every host librdkafka properties name for it to connect to: the broker list
// ("bootstrap.servers", "metadata.broker.list") and the OIDC token endpoint.
std::vector<std::string> KafkaHosts(
    const std::vector<std::pair<std::string, std::string>> &properties);

// The whole check of a kafka subscription's config:
//
// "bootstrap.servers" (required, a string), "topics" (required: a non-empty array of Kafka
// topic names, no repeats), "on_error" ("skip" or "block"), "event_id_header" (a header name,
// 1..255 bytes), "batch_size" (1..kMaxInboxBatch), "start" ("earliest" or "latest"),
// "handler_timeout" (a duration: milliseconds or a string such as "30s"; 0 to 24 h, 0 for no
// limit). Every other key is a librdkafka property, checked with librdkafka itself and by the
// rules of destination properties (CheckKafkaConfig: values strings, numbers or booleans; the
// callbacks outbox owns, "plugin.library.paths" and "internal.termination.signal" refused;
// Kerberos and file settings reported in `privileged`). Refused because offsets are the
// extension's, committed with the handlers' effects: "enable.auto.commit",
// "enable.auto.offset.store", "auto.commit.interval.ms", "group.instance.id",
// "auto.offset.reset" (use "start"); and the destination settings that mean nothing here
// ("topic", "ordering", "max_attempts"...).
SubscriptionCheck CheckKafkaSubscription(std::string_view json_text,
                                         const CheckOptions &options = {});

}  // namespace outbox
