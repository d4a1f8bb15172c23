// "delivery": "exactly_once" on the PostgreSQL side: recovery when a destination's
// transactional driver starts (exactly_once.hpp has the rules, driver_txn.cpp the Kafka side).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/pg/queue.hpp"

namespace outbox::pg {

// The driver of `destination` fenced its predecessor and read its marker (`marker_token`: the
// lease of the last batch whose transaction committed, 0 for none). Rows worker
// `worker_index` of this database still has leased for the destination are settled: those under
// the marker's lease went out in a committed transaction and are deleted as delivered, without
// sending them again; the others were in a transaction that aborted or never began, and are due
// again at once. Runs in the worker's transaction, before the destination's next claim.
// `batches` gets the number of committed batches found (0 or 1).
WriteBackCounts RecoverLeased(const std::string &destination, int worker_index,
                              int64_t marker_token, int64_t *batches);

// Adoption (exactly_once.hpp): the lease tokens of `destination`'s rows whose lease lapsed and
// that another worker index than `own_index` made (the claims leave those rows alone). At most
// a few hundred, each once.
std::vector<int64_t> LapsedForeignLeases(const std::string &destination, int own_index);

// This worker adopted worker `worker_index`'s transactional.id (fenced it: its open transaction
// aborted, none of its transactions can commit any more) and read its marker. The rows still
// leased under `tokens` (lapsed when they were found, before the fence) are settled as
// RecoverLeased does; rows that index leased since are left to it. Logs what it found.
WriteBackCounts RecoverAdopted(const std::string &destination, int worker_index,
                               int64_t marker_token, const std::vector<int64_t> &tokens,
                               int64_t *batches);

}  // namespace outbox::pg
