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

// Adoption (issue 41). A worker never claims a row whose lapsed lease another worker index
// made: that worker's transaction may have committed (or commit later, if its producer was
// never fenced). It *adopts* that index instead: its driver fences the index's
// transactional.id (init_transactions aborts what is open) and reads its marker, and the lapsed
// batches found before are settled by PlanRecovery; the rest is claimed as usual.
struct ForeignLeases {
    int worker_index = -1;
    std::vector<int64_t> tokens;  // lapsed lease tokens of that index, each once
};
// Groups lapsed lease tokens by the worker index they were made for, leaving out this worker's
// own (`own_index`: its own driver's marker settles them) and tokens of no worker (≤ 0).
std::vector<ForeignLeases> GroupForeignLeases(int own_index, const std::vector<int64_t> &tokens);
// What the claim compares `lease_token >> 52` with so that it takes only unleased rows and rows
// this worker leased: the token's worker tag (index + 1).
int64_t LeaseTokenTag(int worker_index);
// The tag a claim under `lease_token` passes to its SQL: the token's own for an exactly-once
// destination, 0 (any lease may be taken over once it lapsed) otherwise.
int64_t ClaimWorkerTag(bool exactly_once, int64_t lease_token);

}  // namespace outbox
