// Destination configs (the `config jsonb` of outbox.destinations): one parser for both the
// definition-time check (create/alter_destination) and the worker, so what was accepted is
// exactly what runs. Every problem is collected; nothing stops at the first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/message.hpp"

namespace outbox {

enum class DestinationKind { Kafka, Webhook };

std::optional<DestinationKind> ParseDestinationKind(std::string_view text);  // "kafka", "webhook"
const char *DestinationKindName(DestinationKind kind);

// Per-destination overrides of outbox.max_attempts / retry_base / retry_max; -1 = use the GUC.
struct RetryPolicy {
    int max_attempts = -1;
    int64_t retry_base_ms = -1;
    int64_t retry_max_ms = -1;
};

struct KafkaConfig {
    std::string default_topic;  // "topic"; empty when not set
    // Every other key: a librdkafka property, its JSON string/number/boolean value as text,
    // in the order of the JSON object.
    std::vector<std::pair<std::string, std::string>> properties;
};

struct WebhookConfig {
    std::string url;
    std::vector<std::string> secret_keys;  // decoded key bytes, one per whsec_ secret
    Headers headers;                       // static headers sent on every request
    int64_t timeout_ms = 10000;
    int max_in_flight = 32;
    std::string ca_file;  // empty: the system CA store
    bool tls_verify = true;
    std::string default_topic;  // CloudEvents type when a message has no topic
};

// Per-key ordering (see README "Per-key ordering").
enum class Ordering {
    None,  // fastest: any message may be delivered at any time
    Key,   // a key's messages are delivered one at a time, in id order
};

// What a dead-lettered message does to the rest of its key, with Ordering::Key.
enum class OnDead {
    Block,  // hold the key until the dead letter is requeued or skipped (outbox.skip)
    Skip,   // carry on with the key's next message
};

struct DestinationConfig {
    DestinationKind kind = DestinationKind::Kafka;
    RetryPolicy retry;
    Ordering ordering = Ordering::None;
    OnDead on_dead = OnDead::Block;
    KafkaConfig kafka;
    WebhookConfig webhook;
};

struct ConfigCheck {
    DestinationConfig config;
    std::vector<std::string> problems;  // empty when the config is valid
    bool ok() const { return problems.empty(); }
};

// Parses and validates `json_text` (a JSON object) for a destination of `kind`.
//
// Keys of every kind: "ordering" ("none" or "key"), "on_dead" ("block" or "skip"; only with
// "ordering": "key"), "max_attempts" (integer 1..1000), "retry_base" and "retry_max" (duration:
// number of ms or string such as "500ms", "2s", "5min"; retry_base 1ms..1d, retry_max >=
// retry_base when both are given, at most 7d), "topic" (kafka: a valid Kafka topic name, i.e.
// 1..249 chars of [A-Za-z0-9._-], not "." or ".."; webhook: any non-empty string up to 249).
//
// kafka: every other key is a librdkafka property, checked with librdkafka itself
// (rd_kafka_conf_set on a scratch rd_kafka_conf_t); values must be JSON strings, numbers or
// booleans. "bootstrap.servers" is required. Refused because they would break the guarantees or
// the host process: "enable.idempotence" other than true, "acks"/"request.required.acks" other
// than "all"/"-1", "transactional.id", "internal.termination.signal", and any property whose
// value librdkafka treats as a callback or pointer.
//
// webhook: "url" (required; http or https with a host, checked with libcurl's URL parser),
// "secret" (a "whsec_" + base64 string, or a non-empty array of them for rotation),
// "headers" (object of strings; valid names and values per headers.hpp, not reserved),
// "timeout_ms" (duration, 1ms..10min), "max_in_flight" (integer 1..1024), "ca_file" (string;
// must name a readable file), "tls_verify" (boolean). Unknown keys are problems.
//
// Problems name the key and say what is expected. A problem never quotes the value of a secret
// setting (see IsSecretSetting); other values may be quoted, truncated to 64 bytes.
ConfigCheck CheckDestinationConfig(DestinationKind kind, std::string_view json_text);

// Settings whose values are secrets and must never be echoed: webhook "secret", and any key
// containing "password", "secret", "token", "sasl.oauthbearer.config", or "ssl.key" (keys and
// key material), case-insensitively.
bool IsSecretSetting(std::string_view key);

}  // namespace outbox

namespace outbox {

// A Kafka topic name: 1..249 characters of [A-Za-z0-9._-], and not "." or "..".
bool IsValidKafkaTopic(std::string_view name);

// A destination name: 1..63 characters of [A-Za-z0-9_.-], starting with a letter or digit
// (it is also a key in shared memory and appears in metrics labels).
bool IsValidDestinationName(std::string_view name);

}  // namespace outbox
