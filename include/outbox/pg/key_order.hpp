// Per-key ordering: the producer's side, and the notes the worker writes on the keys' rows (see
// README "Per-key ordering" and the comments on outbox.ordered_keys in sql/outbox--0.2.0.sql).
//
// A message of an ordering = key destination carries its order key: the destination's 32-bit
// hash in the high half, its key's in the low half (two keys whose hashes collide share one
// order; nothing else changes). Each (destination, order key) with queued messages has a row in
// outbox.ordered_keys. A producer takes its turn on that row — it inserts or updates the row,
// which locks it until the producer's transaction ends — before its message is numbered, so ids
// follow commit order within a key. Nothing here is held in memory or shared memory: the row
// and its lock are the whole protocol, and a prepared transaction keeps its turn like any other.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
#include "storage/itemptr.h"
}

namespace outbox::pg {

int64_t OrderKey(std::string_view destination, std::string_view key);

// Takes the key's turn for a message about to be queued: inserts or updates the key's row of
// outbox.ordered_keys (locked until this transaction ends) so that its head is due no later than
// `available_at`. The row is taken as it is now, whatever the transaction's isolation level and
// snapshot, and read without SSI predicate locks: a producer at REPEATABLE READ or SERIALIZABLE
// gets no serialization failure from its key's turn (kTurnSql's upsert would raise 40001 for a
// row another producer wrote after this transaction's snapshot). A message that goes back with its
// own id (`keeps_id`: a requeued dead letter, a restored dump) may lie below the key's floor: the
// row is first taken FOR UPDATE (which waits for the workers holding the key), then the floor goes
// down to `id`, with floor_version + 1; refused (55000) after this transaction queued a new message
// of the key. C-style code: may ereport. Returns false, having taken the turn the way outbox 0.1.0
// did (a transaction-scoped lock of the order key), when the database's schema is still 0.1.0 (no
// outbox.ordered_keys yet: the module was installed before ALTER EXTENSION outbox UPDATE ran).
bool TakeKeyTurn(std::string_view destination, int64_t order_key, std::string_view key,
                 TimestampTz available_at, bool keeps_id, int64_t id);

// What a worker saw of a key in its transaction, noted on the key's row at the end of it
// (src/pg/queue.cpp, WriteKeyRows), under the rules of outbox.ordered_keys.
struct KeyRowNote {
    int64_t order_key = 0;
    int64_t floor = 0;          // raise the floor to this (0: leave it)...
    int64_t floor_version = 0;  // ... if floor_version is still this
    int64_t version = 0;        // set due_at (below) only if version is still this
    TimestampTz due_at = 0;     // DT_NOEND: no queued message
    bool has_due_at = false;
    bool head_removed = false;  // the key is due now at the latest
};

// Writes the notes on the keys' rows, each only if its row can be locked at once: a row that
// another transaction holds, or changed after this call's snapshot, is skipped (a producer's
// turn makes its key due by itself; what was not written is seen again). The worker never waits
// here: the row is locked with the table access method's call, which does not follow a row's
// newer versions (FOR NO KEY UPDATE SKIP LOCKED does, and waits for whoever holds the newest
// one). Returns false, having written nothing, when the table is not laid out as this code
// expects (see UpdateKeyRow); the caller then writes them with a statement.
bool WriteKeyRowNotes(std::string_view destination, const std::vector<KeyRowNote> &notes);

// Deletes the rows at `tids` (found by a scan for idle keys) that still have nothing queued and
// have been idle since before `idle_before`, each only if it can be locked at once, as
// WriteKeyRowNotes locks. Returns how many went.
int64_t DeleteIdleKeyRows(std::string_view destination, const std::vector<ItemPointerData> &tids,
                          TimestampTz idle_before);

// A queued message of an ordered key (FindNextMessages): which row version it is.
struct NextMessage {
    int64_t order_key;
    int64_t id;
    ItemPointerData tid;
    TransactionId xmin;
};

// For each (order key, id) of `keys`, the first `limit` messages of that key in `destination`
// with a higher id, in id order, as the newest snapshot sees them, appended to `out`: one
// ordered scan of messages_key_order per key, with the index access method's own calls (a
// statement's plan could read the key's whole run of messages and sort it instead). The worker
// claims them one by one as their heads go (src/pg/queue.cpp, kHeadsFollowSql). Returns false,
// having found nothing, when outbox.messages or that index is not laid out as created.
bool FindNextMessages(std::string_view destination,
                      const std::vector<std::pair<int64_t, int64_t>> &keys, int limit,
                      std::vector<NextMessage> *out);

// Registers the transaction callbacks that forget the turns a (sub)transaction held. Called
// once from _PG_init.
void RegisterKeyTurnCallbacks();

}  // namespace outbox::pg
