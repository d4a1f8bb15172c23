// What a broker kind is to outbox: one row of src/brokers/registry.cpp per kind ("kafka",
// "webhook", "amqp", "nats"). Everything that differs between kinds is a field of the row, and
// nothing outside src/brokers/<kind>/ switches on a kind's name (docs/architecture.md, "Adding a
// broker kind").
//
// A row has two halves. The first is plain data and library-free functions that both processes
// link: the name, where the manual describes it, the rule a message's topic follows in the
// producer's INSERT check, which network setting guards its connections. The second (`driver`) is
// what only outbox-driver links, because it needs the kind's client library: the config check,
// the hosts a config names, the driver itself. In outbox.so `driver` is nullptr: the module never
// checks a config or builds a driver itself, it asks its driver process (Open, and `outbox-driver
// --check` for create/alter_destination).
//
// This header is pure (no library, no PostgreSQL): the dispatcher and the module read the first
// half; the rows themselves live in src/brokers/<kind>/kind.cpp.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/network_policy.hpp"

namespace outbox {

class Driver;
class KafkaConsumer;
struct CheckOptions;
struct ConfigCheck;
struct DestinationConfig;
struct SubscriptionCheck;
struct SubscriptionConfig;

// Which setting guards the connections of a kind's destinations when a role other than a
// superuser configured them (network_policy.hpp, broker_address.hpp).
enum class NetworkRule {
    // outbox.webhook_allowed_networks, for every destination; the driver's errors are shown.
    Webhook,
    // outbox.broker_allowed_networks, for configs a superuser did not write; why such a broker
    // cannot be reached is not shown to their owner (kWhyHidden).
    Broker,
};

// How the producer's INSERT check treats a message's topic for a destination of the kind.
struct TopicRule {
    // The config key of the destination's default topic ("topic", "routing_key", "subject").
    const char *default_key;
    // What the kind calls a topic, in the error for a message without one ("topic", "subject").
    const char *noun;
    // Whether a message needs one, its own or the destination's default (else it may have none).
    bool required;
    // Whether a message's own topic is valid for the kind.
    bool (*valid)(std::string_view topic);
    // What a valid one is, for the error that refuses one (errdetail).
    const char *rule;
};

// The most a destination sends in one record, when the kind has such a limit.
struct MessageLimit {
    const char *config_key =
        nullptr;                // the setting that raises it ("message.max.bytes"); nullptr: none
    int64_t default_bytes = 0;  // when the config does not set it
    // What a record takes besides the producer's payload, key and headers: the relay's own
    // headers and the record's framing, with room to spare.
    int64_t overhead_bytes = 0;
    // Said after "raise <config_key> of the destination" in the hint, e.g. " (and
    // max.message.bytes of the topic on the brokers)".
    const char *raise_also = "";
};

// What a driver is told besides its destination's config: where it runs and the settings of the
// server that bound it. The worker fills it in once per driver (src/pg/driver_process.cpp).
struct DriverContext {
    std::string destination;  // the destination's name: log lines, the CloudEvents type fallback
    std::string source;       // the CloudEvents source: "/outbox/<database>"
    std::string client_name;  // the name a broker shows for the connection: "outbox-<db>-<name>"
    // The delivery worker's number within its database (0 for the first): what tells apart the
    // connections of two workers where a broker wants a unique client id (mqtt).
    int64_t worker_index = 0;
    int64_t lease_timeout_ms = 30000;
    // Messages a driver keeps in flight when its config says nothing: twice outbox.batch_size
    // (InFlightWindow). Kafka's opens wider while acknowledgements are fast (config.hpp,
    // kKafkaDefaultWindowFactor).
    size_t default_in_flight = 1000;
    // A broker's answer to a message is due within this: half the lease, at least a second.
    int64_t answer_timeout_ms = 15000;
    // Whether a superuser wrote the destination's config as it stands (error texts may then quote
    // response bodies; its brokers may be anywhere).
    bool config_by_superuser = false;
    // outbox.broker_allowed_networks, guarded when a role other than a superuser configured it.
    BrokerAddressRule address_rule;
    std::string webhook_allowed_networks;  // outbox.webhook_allowed_networks
    // "delivery": "exactly_once": the producer's transactional.id, stable for the destination
    // and the worker's place in its database ("outbox-<db>-<name>-<worker index>"), so that a
    // restarted worker fences its predecessor's producer.
    std::string transactional_id;
    // "delivery": "exactly_once", adoption (exactly_once.hpp): transactional_id is another
    // worker index's; the driver only fences it and reads its marker (one Marker outcome, or
    // Broken), and takes no message.
    bool adopt = false;
};

// What a consumer of the inbox is told besides its subscription's config.
struct ConsumerContext {
    std::string subscription;
    std::string client_id;  // "outbox-inbox-<database>-<name>"
    int64_t metadata_interval_ms = 1000;
    size_t window_records = 20000;
    size_t window_bytes = 64u << 20;
    BrokerAddressRule address_rule;
};

// The settings of the server that a definition-time check applies (create/alter_destination).
struct ServerSettings {
    int64_t lease_timeout_ms = 30000;
    std::string webhook_allowed_networks;
};

// What the server's settings make of a new or changed config: a refusal (an error of its own,
// raised after the privilege checks: "permission denied to configure <destination>: <reason>"),
// and problems reported with the config's own.
struct ServerVerdict {
    bool refused = false;
    std::string reason, detail, hint;
    std::vector<std::string> problems, hints;
};

using JsonObject = nlohmann::ordered_json;

// Top-level keys whose value holds a number beyond the range of a double, each with the problem
// to report for it (config.hpp, CheckDestinationConfig).
using OutOfRange = std::vector<std::pair<std::string, std::string>>;

// The half of a row that only outbox-driver links (the kind's client library).
struct DriverSide {
    // The kind's part of CheckDestinationConfig: every key of `object` (a JSON object), in
    // order, the common ones through CheckCommonKey (config_json.hpp), its own into its settings
    // (check->config.settings); every problem into check->problems.
    void (*check)(const JsonObject &object, const OutOfRange &out_of_range,
                  const CheckOptions &options, ConfigCheck *check);
    // The hosts a valid config names for its brokers, as written (outbox.broker_allowed_networks
    // checks the literal ones when the config is set); none for a webhook.
    std::vector<std::string> (*hosts)(const DestinationConfig &config);
    // Rules against the server's settings, for a config being created (`old` nullptr) or
    // changed; nullptr when the kind has none.
    ServerVerdict (*check_server)(const DestinationConfig &config, const DestinationConfig *old,
                                  const ServerSettings &server);
    // The driver of a destination whose config passed the check; nullptr with *error when it
    // cannot be built.
    std::unique_ptr<Driver> (*open)(const DestinationConfig &config, const DriverContext &context,
                                    std::string *error);
    // Once per outbox-driver process, before any thread exists (a library's global init);
    // nullptr for none.
    void (*init_process)();

    // Subscriptions (BrokerKind::subscriptions): the whole check of a subscription's config,
    // with the hosts it names; and its consumer.
    void (*check_subscription)(std::string_view json, const CheckOptions &options,
                               SubscriptionCheck *check, std::vector<std::string> *hosts);
    std::unique_ptr<KafkaConsumer> (*open_consumer)(const SubscriptionConfig &config,
                                                    const ConsumerContext &context,
                                                    std::string *error);
};

struct BrokerKind {
    const char *name;   // outbox.destinations.kind, the Open frame's kind: "kafka"
    const char *title;  // in a sentence: "Kafka", "webhook", "AMQP", "NATS"
    const char *docs;   // the manual's section on its settings: "docs/destinations.md#kafka"
    NetworkRule network;
    TopicRule topic;
    MessageLimit message_limit;
    // Whether a message with neither payload nor payload_bytes is a tombstone (with a key).
    bool tombstones;
    // Subscriptions (the inbox) consume from it: outbox.create_subscription accepts the kind.
    // The settings the inbox worker reads itself (topics, batch_size...): library-free, in both
    // processes; nullptr when the kind has no subscriptions.
    void (*read_subscription)(std::string_view json, SubscriptionCheck *check);
    // outbox-driver only; nullptr in outbox.so (see above).
    const DriverSide *driver;
};

// Messages a worker keeps in flight per destination unless a config says otherwise, and the
// dispatcher's window while a destination is caught up: twice a batch, so that one batch is
// acknowledged while the next is claimed.
inline size_t InFlightWindow(int batch_size) {
    return 2 * static_cast<size_t>(batch_size < 1 ? 1 : batch_size);
}

}  // namespace outbox

// The driver half of a row: `&row` in outbox-driver and the unit tests, nullptr in outbox.so
// (built with OUTBOX_MODULE, Makefile), which does not link the kinds' libraries.
#ifdef OUTBOX_MODULE
#define OUTBOX_DRIVER_SIDE(row) nullptr
#else
#define OUTBOX_DRIVER_SIDE(row) (&(row))
#endif
