// What the worker hands a driver, and what a driver hands back. Plain C++: no PostgreSQL types,
// so drivers and their tests never see a PostgreSQL header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outbox {

using Headers = std::vector<std::pair<std::string, std::string>>;

// One claimed row of outbox.messages, ready to publish.
struct Message {
    int64_t id = 0;
    int64_t lease_token = 0;  // fences the write-back of this claim
    std::string event_id;     // canonical UUID text, stable across retries
    std::string topic;        // kafka topic / CloudEvents type; may be empty for webhooks
    std::optional<std::string> key;
    std::string payload;          // the bytes to send
    bool payload_is_json = true;  // payload came from the jsonb column
    // Neither payload column is set: a Kafka tombstone (a record with a null value, which
    // deletes the key from a compacted topic). Only Kafka destinations accept one.
    bool tombstone = false;
    Headers headers;            // the producer's headers, in order
    int64_t created_at_ms = 0;  // unix epoch milliseconds
    int64_t expires_at_ms = 0;  // unix epoch milliseconds; 0 = never expires
    int attempts = 0;           // attempts including this one
    // When its first attempt failed (unix epoch milliseconds; 0 = none failed yet): the worker
    // measures "retry_budget" from it. Not sent to the driver process.
    int64_t first_failed_at_ms = 0;
};

// What happened to one message.
enum class OutcomeKind {
    Delivered,  // accepted by the broker / endpoint: delete (or archive) the row
    Retry,      // rejected but may succeed later: spend an attempt, back off
    Dead,       // permanent failure: move to the dead letters now
    Defer,      // destination unreachable: reschedule without spending an attempt
    // Only from the driver process's supervisor (driver_supervisor.hpp), never from a driver:
    Unacknowledged,  // the driver process died before it answered: due again, attempt refunded
    Poison,          // in flight during outbox.poison_after driver process crashes: dead letters
    // From a driver again: the endpoint said it wants nothing more (HTTP 410 Gone). The
    // destination is paused and the message stays queued, no attempt spent.
    Gone,
    // "delivery": "exactly_once" (a transactional driver), never from any other:
    // The message's transaction was aborted, by the driver or by the broker: nothing of it is
    // visible to a read_committed consumer. Due again at once, no attempt spent.
    Aborted,
    // Whether the message's transaction committed is not known (the producer was fenced, or
    // the driver process died while it was open): the row stays leased to this worker until
    // the destination's next driver has read its marker (Marker).
    InDoubt,
    // Not about a message: the first outcome of a transactional driver, once it has fenced its
    // predecessor. lease_token is the lease of the last batch whose transaction committed
    // (0: none ever did); id is 0.
    Marker,
};

struct Outcome {
    int64_t id = 0;
    int64_t lease_token = 0;
    OutcomeKind kind = OutcomeKind::Delivered;
    std::string error;            // human readable reason; never contains a secret
    int64_t retry_after_ms = -1;  // delay asked for by the server (Retry-After), -1 if none
    // Where it went, for diagnostics (the write-back does not need them): Kafka partition and
    // offset, -1 when unknown; the webhook's HTTP status, 0 when there was no answer.
    int32_t partition = -1;
    int64_t offset = -1;
    int32_t http_status = 0;
};

const char *OutcomeKindName(OutcomeKind kind);

}  // namespace outbox
