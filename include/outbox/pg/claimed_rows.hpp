// What the claims of queue.cpp (the plain claim, the write-back) and claim_ordered.cpp (the
// heads claim of ordering = key) share: the rows a claim returned, read out of SPI memory and
// turned into messages, what the fast path's transaction holds locked, the worker's ClaimBook,
// and the config check every claim's SQL makes. Internal to those files.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "outbox/claim_book.hpp"
#include "outbox/dispatcher.hpp"
#include "outbox/message.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup.h"
#include "access/tupdesc.h"
#include "access/xact.h"
#include "storage/itemptr.h"
#include "storage/proc.h"
}

#include "outbox/pg/compat.hpp"

// Every claim takes rows only while the destination's config is the one the worker loaded
// (ClaimRequest::config_json) and the destination is not paused, checked in the claim's own
// snapshot: a change committed together with messages (alter_destination and requeue in one
// transaction) is then either not visible to the claim, or visible along with them, and the
// claim takes nothing; the change's wake-up (the reload flag) makes the worker load the new
// config first. A pause committed before a claim's snapshot stops it even inside a transaction
// that loaded the destination earlier (claims see what is due at their own time, so a message
// queued after the pause would otherwise be taken). (An InitPlan: read once per claim.)
#define DESTINATION_AS_LOADED(param)                                         \
    "(SELECT d.config::text FROM outbox.destinations AS d WHERE d.name = $1" \
    "   AND NOT d.paused) = " param "::text"

namespace outbox::pg {

// One claimed row, pointing into SPI memory (valid until SPI_finish).
struct RawRow {
    int64 id;
    char event_id[37];
    const char *topic;
    int topic_len;
    const char *key;  // nullptr when NULL
    int key_len;
    const char *payload;
    int payload_len;
    bool payload_is_json;
    int nheaders;
    const char **header_names;
    int *header_name_lens;
    const char **header_values;
    int *header_value_lens;
    int64 created_ms;
    int64 expires_ms;
    int64 first_failed_ms;  // 0: no failed attempt yet
    int attempts;
    ItemPointerData tid;  // the fast path's locked rows, heads
};

// The fast path: what the current transaction holds locked, valid only in that transaction
// (forgotten when the worker says it ended, or when another one is seen).
struct FastPathState {
    LocalTransactionId lxid = InvalidLocalTransactionId;
    // where its locked rows are, by id
    std::unordered_map<int64_t, ItemPointerData> tids;

    FastPathState &Current() {
        if (lxid != CurrentLocalTransactionId()) {
            Forget();
            lxid = CurrentLocalTransactionId();
        }
        return *this;
    }
    void Forget() { tids.clear(); }
};
// This process's.
FastPathState &FastPath();

// What the claims know between transactions (the worker's, UseClaimBook).
ClaimBook &Book();

// The column of first_failed_at in a claim's result.
int FirstFailedColumn(TupleDesc desc);
// Reads one claimed row; C-style code only (may ereport).
void ReadRow(HeapTuple tuple, TupleDesc desc, int first_failed_col, RawRow *row);
// The claimed rows of the last SPI statement (ReadRow), pointing into SPI memory.
RawRow *ReadClaimedRows(uint64 *count);
// Claimed rows as messages for the drivers; `locked`: held by this transaction (the fast path).
void AppendMessages(const RawRow *rows, uint64 n, bool locked, int64 lease_token,
                    std::vector<Message> *out);

// ordering = key (claim_ordered.cpp): the heads of request.destination's keys, appended to *out.
void ClaimHeads(const ClaimRequest &request, int64 lease_ms, int64 lease_token,
                std::vector<Message> *out);

}  // namespace outbox::pg
