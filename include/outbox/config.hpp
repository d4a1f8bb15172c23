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

enum class DestinationKind { Kafka, Webhook, Amqp, Nats };

// The largest "max_pending" a destination may set.
constexpr int64_t kMaxPendingLimit = 1000000000;

// Kafka "max_in_flight": messages handed to librdkafka and awaiting their delivery report (the
// default is the worker's, twice outbox.batch_size). The drain runs at most this window per
// acknowledgement round trip; the ceiling is librdkafka's own queue
// ("queue.buffering.max.messages", 100,000 by default).
constexpr int64_t kMaxKafkaInFlight = 100000;

// "kafka", "webhook", "amqp", "nats"
std::optional<DestinationKind> ParseDestinationKind(std::string_view text);
const char *DestinationKindName(DestinationKind kind);

// Per-destination overrides of outbox.max_attempts / retry_base / retry_max; -1 = use the GUC.
struct RetryPolicy {
    int max_attempts = -1;
    int64_t retry_base_ms = -1;
    int64_t retry_max_ms = -1;
    // "retry_budget" (issue 26): a message still failing this long after its first failed
    // attempt (time the destination was unreachable not counted) is dead-lettered as
    // max_attempts; 0 = none.
    int64_t retry_budget_ms = 0;
};

// CloudEvents content mode of a destination ("cloudevents"; kafka and webhook).
enum class CloudEventsMode {
    Binary,      // the payload as the value/body, the attributes as headers (the default)
    Structured,  // the whole event as one application/cloudevents+json document
};

struct KafkaConfig {
    std::string default_topic;  // "topic"; empty when not set
    int max_in_flight = 0;      // messages awaiting their delivery report; 0: the worker's default
    CloudEventsMode cloudevents = CloudEventsMode::Binary;
    // Every other key: a librdkafka property, its JSON string/number/boolean value as text,
    // in the order of the JSON object.
    std::vector<std::pair<std::string, std::string>> properties;
};

struct WebhookConfig {
    std::string url;
    std::vector<std::string> secret_keys;   // decoded key bytes, one per whsec_ secret
    std::vector<std::string> signing_keys;  // ed25519 seeds (32 bytes), one per whsk_ secret
    Headers headers;                        // static headers sent on every request
    int64_t timeout_ms = 10000;
    bool timeout_set = false;  // "timeout_ms" given (else the default, lowered to fit the lease)
    int max_in_flight = 32;
    std::string ca_file;  // empty: the system CA store
    bool tls_verify = true;
    std::string default_topic;  // CloudEvents type when a message has no topic
    CloudEventsMode cloudevents = CloudEventsMode::Binary;
};

// RabbitMQ (AMQP 0-9-1). See README "Destinations".
struct AmqpConfig {
    std::string url;          // amqp:// or amqps://; its credentials are a secret: never shown
    std::string exchange;     // "" is the default exchange (routing key = queue name)
    std::string routing_key;  // when a message has no topic
    int max_in_flight = 0;    // publishes awaiting their confirm; 0: the worker's default
    int heartbeat_s = 30;     // AMQP heartbeat (0: off)
    int64_t connect_timeout_ms = 5000;
    std::string ca_file;    // amqps: the only trust anchor; empty: the system store
    std::string cert_file;  // amqps: client certificate (with key_file)
    std::string key_file;
    bool tls_verify = true;
};

// NATS JetStream. See README "Destinations".
struct NatsConfig {
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

// Compaction by key (issue 26, README "Compaction by key").
enum class Compaction {
    None,  // every message is delivered
    Key,   // a message queued for a key supersedes the key's older undelivered, not-in-flight one
};

struct DestinationConfig {
    DestinationKind kind = DestinationKind::Kafka;
    RetryPolicy retry;
    Ordering ordering = Ordering::None;
    OnDead on_dead = OnDead::Block;
    int64_t max_pending = 0;  // "max_pending": the queue's cap; 0 = none
    // Policies (issue 26): "ttl", the default lifetime of a message from its available_at
    // (producer.cpp sets expires_at when the producer gave none); 0 = none.
    int64_t ttl_ms = 0;
    // "compaction": "key" (producer.cpp supersedes the key's older queued message).
    Compaction compaction = Compaction::None;
    KafkaConfig kafka;
    WebhookConfig webhook;
    AmqpConfig amqp;
    NatsConfig nats;
};

// What a setting makes the database server do beyond talking to the network. The pure check
// only reports such settings; whether the role defining the destination may use them is
// decided by src/pg/destinations.cpp (the worker, a superuser, runs whatever was stored).
enum class ServerAccess {
    RunsCode,    // runs a program or loads a library as the server's OS user: superuser only
    ReadsFiles,  // has the server read a file it names: superuser or pg_read_server_files
};

struct PrivilegedSetting {
    // Identity of the setting, compared between a destination's old and new config. Aliases
    // of the same choice share it ("sasl.mechanism": "GSSAPI" and librdkafka's default
    // GSSAPI are both {"sasl.mechanisms", "gssapi"}); otherwise the key as written and the
    // value's JSON text. Never shown: the value may be a path or a command.
    std::string key;
    std::string value;
    ServerAccess access = ServerAccess::RunsCode;
    // The sentence for a refusal, naming the setting and what it does, e.g.
    // `"ssl.engine.location" loads a shared library into the database server: only a
    // superuser may set it`.
    std::string problem;
};

struct CheckOptions {
    // Whether "ca_file" must name a readable file. Off when the caller may not have the
    // server read files: the answer would tell it which server paths exist.
    bool check_files = true;
};

struct ConfigCheck {
    DestinationConfig config;
    std::vector<std::string> problems;  // empty when the config is valid
    std::vector<std::string> hints;     // what to do instead, for some of the problems
    // Settings that need privileges, whether or not the config has problems.
    std::vector<PrivilegedSetting> privileged;
    bool ok() const { return problems.empty(); }
};

// Parses and validates `json_text` (a JSON object) for a destination of `kind`.
//
// Keys of every kind: "ordering" ("none" or "key"), "on_dead" ("block" or "skip"; only with
// "ordering": "key"), "compaction" ("key" or "none"), "max_pending" (integer 1..kMaxPendingLimit),
// "ttl" and "retry_budget" (durations 1s..366d), "max_attempts" (integer 1..1000), "retry_base" and
// "retry_max" (duration: number of ms or string such as "500ms", "2s", "5min"; retry_base 1ms..1d,
// retry_max >= retry_base when both are given, at most 7d), "topic" (kafka: a valid Kafka topic
// name, i.e. 1..249 chars of [A-Za-z0-9._-], not "." or
// ".."; webhook: any non-empty string up to 249).
// kafka and webhook: "cloudevents" ("binary", the default, or "structured"; see
// drivers/cloudevents.hpp).
//
// kafka: "max_in_flight" (integer 1..kMaxKafkaInFlight; default twice outbox.batch_size). Every
// other key is a librdkafka property, checked with
// librdkafka itself (rd_kafka_conf_set on a scratch rd_kafka_conf_t); values must be JSON strings,
// numbers or booleans. "bootstrap.servers" is required. Refused because they would break the
// guarantees or the host process: "enable.idempotence" other than true,
// "acks"/"request.required.acks" other than "all"/"-1", "transactional.id",
// "internal.termination.signal", and any property whose value librdkafka treats as a callback or
// pointer; "queuing.strategy" other than "fifo" (the idempotent producer cannot start otherwise);
// "enable.sasl.oauthbearer.unsecure.jwt" true (development only: librdkafka 2.0.2 crashes the host
// process when it cannot parse "sasl.oauthbearer.config"). Topic-level properties are checked in
// every spelling librdkafka accepts ("acks", "topic.acks", "topic.request.required.acks"...).
// "bootstrap.servers" (and "metadata.broker.list") must be a string.
//
// Reported in `privileged` (see ServerAccess), not as problems: RunsCode for any
// "sasl.kerberos.*" property, "sasl.mechanism(s)": "GSSAPI" (its kinit command is a shell
// command), a SASL "security.protocol" without a mechanism (librdkafka's default is GSSAPI),
// "ssl.engine.location", "ssl.engine.id", "ssl.providers", and any property substituted
// into a custom "sasl.kerberos.kinit.cmd"; ReadsFiles for "ssl.ca.location" (other than
// "probe"), "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
// "ssl.crl.location" and the webhook "ca_file".
//
// A number beyond the range of a double (jsonb keeps 1e400 exactly) is reported as out of
// range where it is; the rest of the config is still checked.
//
// webhook: "url" (required; http or https with a host, checked with libcurl's URL parser),
// "secret" (a "whsec_" + base64 HMAC secret or a "whsk_" + base64 ed25519 private key, or a
// non-empty array of them for rotation; signing.hpp has the key formats),
// "headers" (object of strings; valid names and values per headers.hpp, not reserved),
// "timeout_ms" (duration, 1ms..10min), "max_in_flight" (integer 1..1024), "ca_file" (string;
// must name a readable file when options.check_files), "tls_verify" (boolean). Unknown keys
// are problems.
//
// amqp: "url" (required; amqp:// or amqps:// as librabbitmq parses it, with a host, no query),
// "exchange" (0..255 bytes), "routing_key" (IsValidAmqpRoutingKey), "max_in_flight"
// (1..10000), "heartbeat" (0..10min, rounded up to seconds), "connect_timeout" (100ms..1min),
// "ca_file"/"cert_file"/"key_file" (ReadsFiles; amqps only; cert and key together),
// "tls_verify". nats: "servers" (required; nats:// or tls:// URLs or host:port, a comma list
// or an array), "subject" (IsValidNatsSubject), one of "user"+"password", "token",
// "creds_file", "nkey"+"nkey_seed_file"; "tls", "tls_verify", "ca_file", "cert_file" +
// "key_file", "max_in_flight", "ack_timeout" (100ms..10min), "connect_timeout". File settings
// are ReadsFiles. For both, "topic" is refused with a hint (they say "routing_key" and
// "subject"), and URLs are never quoted (they carry credentials).
//
// Problems name the key and say what is expected. A problem never quotes the value of a secret
// setting (see IsSecretSetting); other values may be quoted, truncated to 64 bytes.
ConfigCheck CheckDestinationConfig(DestinationKind kind, std::string_view json_text,
                                   const CheckOptions &options = {});

// The settings of `after` that `before` lacks or has with another value: the privileged
// settings an UPDATE of a destination adds or changes.
std::vector<PrivilegedSetting> AddedOrChangedSettings(const std::vector<PrivilegedSetting> &before,
                                                      const std::vector<PrivilegedSetting> &after);

// A webhook request must end within half of outbox.lease_timeout, or the lease lapses while it
// is in flight and another worker sends the message again. A "timeout_ms" given that is longer
// is a problem (with the hint that says what to do); nullopt otherwise. The default timeout is
// never one: the driver lowers it to fit (so does it a given one when the lease is lowered
// later, with a log line).
std::optional<std::pair<std::string, std::string>> WebhookTimeoutProblem(
    const WebhookConfig &config, int64_t lease_timeout_ms);

// Settings whose values are secrets and must never be echoed: webhook "secret", and any key
// containing "password", "secret", "token", "sasl.oauthbearer.config", or "ssl.key" (keys and
// key material), case-insensitively.
bool IsSecretSetting(std::string_view key);

}  // namespace outbox

namespace outbox {

// A Kafka topic name: 1..249 characters of [A-Za-z0-9._-], and not "." or "..".
bool IsValidKafkaTopic(std::string_view name);

// An AMQP routing key as outbox sends it: 1..255 bytes (an AMQP short string) of valid UTF-8
// without control characters (it is also the CloudEvents type).
bool IsValidAmqpRoutingKey(std::string_view key);

// A NATS subject a message may be published to: 1..255 bytes of printable ASCII without
// spaces, tokens separated by '.', none empty, no wildcard ('*', '>'), and not a system
// subject (a first token starting with '$', such as $JS.API, or _INBOX): those would let a
// producer drive JetStream's API with the destination's credentials.
bool IsValidNatsSubject(std::string_view subject);

// A destination name: 1..63 characters of [A-Za-z0-9_.-], starting with a letter or digit
// (it is also a key in shared memory and appears in metrics labels).
bool IsValidDestinationName(std::string_view name);

}  // namespace outbox
