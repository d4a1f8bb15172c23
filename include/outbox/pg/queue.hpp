// The claim / write-back SQL of the outbox side (the inbox's is in inbox.cpp and
// inbox_consume.cpp; KeptPlan, which all of them use, is in spi.hpp).
// Every function runs inside the worker's transaction with SPI connected (see worker.cpp),
// uses kept plans, and throws PgError when PostgreSQL reports an error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/claim_book.hpp"
#include "outbox/dispatcher.hpp"
#include "outbox/message.hpp"
#include "outbox/pg/spi.hpp"

extern "C" {
#include "postgres.h"
#include "executor/spi.h"
}

namespace outbox::pg {

// Every destination, with its config parsed by the same check as create_destination.
std::vector<DestinationSpec> LoadDestinations();

// Leases up to request.limit due rows of request.destination for `lease_ms` under
// `lease_token`, counting an attempt on each; returns them ready for a driver. With per-key
// ordering only the head message of each key is eligible (the heads claim, found through
// outbox.ordered_keys: see claim_ordered.cpp).
// With request.hold_locks (the fast path) the rows are locked for the rest of the transaction
// instead, unchanged, and come back with lease token 0; the request then remembers where this
// batch ended, so that claiming again in the same transaction takes the next rows.
std::vector<Message> ClaimRows(ClaimRequest &request, int64_t lease_ms, int64_t lease_token);

// ordering = key: what this transaction's claims and write-backs learnt of their keys, written
// on the keys' rows of outbox.ordered_keys. Called at the end of every worker transaction,
// before it commits.
void WriteKeyRows();

// Deletes up to `limit` rows of outbox.ordered_keys per destination this worker ordered that have
// had no queued message for `older_than_s` seconds; returns how many.
int64_t SweepIdleKeys(int64_t older_than_s, int limit);

// The worker's transaction ended (committed or aborted): what the fast path held and what the
// transaction learnt of its keys are forgotten; where its claims got to becomes where the next
// ones start (committed), or they start at the beginning again (aborted).
void TransactionEnded(bool committed);

// The worker's ClaimBook, which the claims and write-backs keep their books in from now on
// (it outlives every claim of the process).
void UseClaimBook(ClaimBook *book);

// The fast path ran out of time: rows this transaction holds locked become leased for
// `lease_ms` under `lease_token`, counting an attempt, so they outlive the commit.
void LeaseLockedRows(const std::vector<int64_t> &ids, int64_t lease_ms, int64_t lease_token);

// Deletes up to `limit` archived rows delivered more than `older_than_s` seconds ago; returns
// how many.
int64_t SweepArchive(int64_t older_than_s, int limit);

// What one destination's write-back changed (rows whose lease no longer matched are skipped
// and not counted).
struct WriteBackCounts {
    int64_t delivered = 0;
    int64_t retried = 0;   // rescheduled, attempt spent
    int64_t deferred = 0;  // rescheduled, attempt refunded (outage)
    int64_t released = 0;  // handed back at shutdown
    int64_t dead = 0;      // buried: rejected, max_attempts or poison
    int64_t expired = 0;   // buried: expired

    WriteBackCounts &operator+=(const WriteBackCounts &o) {
        delivered += o.delivered;
        retried += o.retried;
        deferred += o.deferred;
        released += o.released;
        dead += o.dead;
        expired += o.expired;
        return *this;
    }
};

// Applies the resolutions of one destination: one statement per kind of action. Delivered
// rows are deleted, or moved to outbox.archive while outbox.retention is above 0.
WriteBackCounts WriteBack(const std::string &destination,
                          const std::vector<Resolution> &resolutions);

}  // namespace outbox::pg
