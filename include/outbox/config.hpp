// Destination configs (the `config jsonb` of outbox.destinations): one parser for both the
// definition-time check (create/alter_destination) and the driver, so what was accepted is
// exactly what runs. Every problem is collected; nothing stops at the first.
//
// The settings every kind has (retries, ordering, policies) are parsed here; each kind's own
// are parsed by its row (broker_kind.hpp, src/brokers/<kind>/config.cpp), which needs the kind's
// client library and therefore runs in outbox-driver only. The module reads the common settings
// itself (ReadDestinationSettings) and has the whole check run by outbox-driver.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/message.hpp"

namespace outbox {

struct BrokerKind;

// The largest "max_pending" a destination may set.
constexpr int64_t kMaxPendingLimit = 1000000000;

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
// "delivery": what a consumer may see after a crash.
enum class Delivery {
    AtLeastOnce,  // the default: a crash between acknowledgement and write-back sends again
    // Kafka transactions: a claimed batch is one transaction, committed with a marker naming it;
    // a consumer reading read_committed sees each message once (docs/destinations.md#kafka).
    ExactlyOnce,
};

enum class Compaction {
    None,  // every message is delivered
    Key,   // a message queued for a key supersedes the key's older undelivered, not-in-flight one
};

// A kind's own settings (KafkaConfig, WebhookConfig... in src/brokers/<kind>/config.hpp),
// parsed by its check.
class KindSettings {
  public:
    virtual ~KindSettings() = default;
};

struct DestinationConfig {
    const BrokerKind *kind = nullptr;
    RetryPolicy retry;
    Ordering ordering = Ordering::None;
    OnDead on_dead = OnDead::Block;
    int64_t max_pending = 0;  // "max_pending": the queue's cap; 0 = none
    // Policies (issue 26): "ttl", the default lifetime of a message from its available_at
    // (message_check.cpp sets expires_at when the producer gave none); 0 = none.
    int64_t ttl_ms = 0;
    // "compaction": "key" (message_check.cpp supersedes the key's older queued message).
    Compaction compaction = Compaction::None;
    // "delivery" (issue 41): accepted only by a kind whose check supports it (ConfigCheck).
    Delivery delivery = Delivery::AtLeastOnce;
    // The kind's own settings, set by its check (outbox-driver); empty where only the common
    // settings were read (ReadDestinationSettings).
    std::shared_ptr<const KindSettings> settings;

    // The kind's settings as its type; throws std::logic_error when they are not that.
    template <typename T>
    const T &Settings() const {
        const T *typed = dynamic_cast<const T *>(settings.get());
        if (typed == nullptr)
            throw std::logic_error("a destination config without the settings of its kind");
        return *typed;
    }
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
    // Set by a kind's check that delivers "delivery": "exactly_once" (transactions); any other
    // kind's config with it is refused.
    bool exactly_once_supported = false;
    bool ok() const { return problems.empty(); }
};

// Parses and validates `json_text` (a JSON object) for a destination of `kind`. Needs the
// kind's driver side (outbox-driver and the unit tests; kind.driver is nullptr in outbox.so).
//
// Keys of every kind (CheckCommonKey): "ordering" ("none" or "key"), "on_dead" ("block" or
// "skip"; only with "ordering": "key"), "compaction" ("key" or "none"), "max_pending" (integer
// 1..kMaxPendingLimit), "ttl" and "retry_budget" (durations 1s..366d), "max_attempts" (integer
// 1..1000), "retry_base" and "retry_max" (duration: number of ms or string such as "500ms",
// "2s", "5min"; retry_base 1ms..1d, retry_max >= retry_base when both are given, at most 7d).
// The keys of each kind: its config.hpp in src/brokers/<kind>/.
//
// A number beyond the range of a double (jsonb keeps 1e400 exactly) is reported as out of
// range where it is; the rest of the config is still checked.
//
// Problems name the key and say what is expected. A problem never quotes the value of a secret
// setting (see IsSecretSetting); other values may be quoted, truncated to 64 bytes.
ConfigCheck CheckDestinationConfig(const BrokerKind &kind, std::string_view json_text,
                                   const CheckOptions &options = {});

// The settings every kind has, as the check parses them (the kind's own are left out): what the
// worker needs of a destination for its claims and outcomes. Problems are not reported: the
// config was checked when it was stored, and its driver is built only if it still passes the
// whole check (in outbox-driver).
DestinationConfig ReadDestinationSettings(const BrokerKind &kind, std::string_view json_text);

// The settings of `after` that `before` lacks or has with another value: the privileged
// settings an UPDATE of a destination adds or changes.
std::vector<PrivilegedSetting> AddedOrChangedSettings(const std::vector<PrivilegedSetting> &before,
                                                      const std::vector<PrivilegedSetting> &after);

// Settings whose values are secrets and must never be echoed: webhook "secret", and any key
// containing "password", "secret", "token", "sasl.oauthbearer.config", or "ssl.key" (keys and
// key material), case-insensitively.
bool IsSecretSetting(std::string_view key);

// A destination name: 1..63 characters of [A-Za-z0-9_.-], starting with a letter or digit
// (it is also a key in shared memory and appears in metrics labels).
bool IsValidDestinationName(std::string_view name);

}  // namespace outbox
