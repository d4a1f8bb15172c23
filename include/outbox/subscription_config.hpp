// Subscription configs (the `config jsonb` of outbox.create_subscription, issue 23): one parser
// for the definition-time check and for the consumer, as for destinations (config.hpp). Every
// problem is collected; secrets are never quoted. The parsers are the kind's (a row's
// read_subscription and check_subscription, broker_kind.hpp; kafka: src/brokers/kafka/).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/config.hpp"

namespace outbox {

struct BrokerKind;

// What a handler that raises does to its partition.
enum class OnError {
    Skip,   // the record goes to outbox.inbox_dead_letters; consumption goes on (the default)
    Block,  // the partition stops at the record until an operator acts
};

// Records per consume transaction: the default and the largest "batch_size".
constexpr int kDefaultInboxBatch = 500;
constexpr int kMaxInboxBatch = 10000;
// The longest "handler_timeout".
constexpr int64_t kMaxHandlerTimeoutMs = 24 * 3600 * 1000;

struct SubscriptionConfig {
    const BrokerKind *kind = nullptr;
    std::vector<std::string> topics;  // "topics": at least one, no repeats
    OnError on_error = OnError::Skip;
    std::string event_id_header;  // "event_id_header": read when a record has no ce_id; "" none
    int batch_size = kDefaultInboxBatch;
    // "start": where a partition with no stored offset begins ("earliest", the default, or
    // "latest").
    bool start_at_latest = false;
    // "isolation_level": "read_committed" (the default: records of aborted Kafka transactions
    // are never read, so never applied) or "read_uncommitted".
    bool read_uncommitted = false;
    // "handler_timeout": how long one call of the handler may run before it is cancelled and
    // counts as an error of its record (milliseconds; 0: no limit); -1 when not set, i.e.
    // outbox.inbox_handler_timeout.
    int64_t handler_timeout_ms = -1;
    // Every other key: a librdkafka consumer property, as text, in the order of the object
    // ("bootstrap.servers" among them).
    std::vector<std::pair<std::string, std::string>> properties;
};

struct SubscriptionCheck {
    SubscriptionConfig config;
    std::vector<std::string> problems;  // empty when the config is valid
    std::vector<std::string> hints;
    // Settings that need privileges (the same rules as destinations: config.hpp ServerAccess).
    std::vector<PrivilegedSetting> privileged;
    bool ok() const { return problems.empty(); }
};

// A subscription name: the rule of destination names (IsValidDestinationName).
bool IsValidSubscriptionName(std::string_view name);

}  // namespace outbox
