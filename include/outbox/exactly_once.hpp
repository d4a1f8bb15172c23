// "delivery": "exactly_once" (issue 41): the rules both processes share, free of PostgreSQL and
// of librdkafka. A batch is one claim (one lease token) and one Kafka transaction; inside it the
// transactional producer commits a consumer-group offset, the batch's marker, whose metadata
// names the batch's lease token. Kafka makes the marker visible only if the transaction
// commits, so a restarted driver reads which batch committed last.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

// Lease tokens carry the worker's index in its database in bits 52..62, so that recovery can
// tell the rows a worker leased (its transactional.id's) from another worker's. `random` gives
// the other bits (distinct `random` values below 2^51 give distinct tokens); the result is
// positive, odd (never 0, the fast path's "locked") and ≠ -1.
constexpr int kLeaseTokenWorkerShift = 52;
constexpr int kMaxLeaseTokenWorkers = 2047;
int64_t LeaseTokenFor(int worker_index, uint64_t random);
// The worker index a token was made for by LeaseTokenFor.
int LeaseTokenWorker(int64_t token);

// The marker's metadata string for a batch, and the token read back from one (nullopt when the
// metadata is not one of ours: a group offset someone else committed).
std::string MarkerMetadata(int64_t lease_token);
std::optional<int64_t> ParseMarkerMetadata(std::string_view metadata);

// What recovery does with the batches a worker still has leased for a destination when its
// driver starts: the one whose token the marker names was committed in Kafka (its rows are
// deleted as delivered, without sending them again); every other was in a transaction that
// aborted or never began (its rows are due again). `marker_token` 0: no batch ever committed.
struct RecoveryPlan {
    std::vector<int64_t> delivered;  // lease tokens
    std::vector<int64_t> released;
};
RecoveryPlan PlanRecovery(int64_t marker_token, const std::vector<int64_t> &leased_tokens);

}  // namespace outbox
