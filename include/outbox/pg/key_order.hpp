// Per-key ordering, the producer's side (see README "Per-key ordering" and the comments on
// outbox.ordered_keys in sql/outbox--0.2.0.sql).
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

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
}

namespace outbox::pg {

int64_t OrderKey(std::string_view destination, std::string_view key);

// Takes the key's turn for a message about to be queued: inserts or updates the key's row of
// outbox.ordered_keys (locked until this transaction ends) so that its head is due no later than
// `available_at`. A message that goes back with its own id (`keeps_id`: a requeued dead letter,
// a restored dump) may lie below the key's floor: the row is first taken FOR UPDATE (which waits
// for the workers holding the key), then the floor goes down to `id`, with floor_version + 1;
// refused (55000) after this transaction queued a new message of the key. C-style code: may
// ereport. Returns false, having taken the turn the way
// outbox 0.1.0 did (a transaction-scoped lock of the order key), when the database's schema is
// still 0.1.0 (no outbox.ordered_keys yet: the module was installed before ALTER EXTENSION
// outbox UPDATE ran).
bool TakeKeyTurn(std::string_view destination, int64_t order_key, std::string_view key,
                 TimestampTz available_at, bool keeps_id, int64_t id);

// Registers the transaction callbacks that forget the turns a (sub)transaction held. Called
// once from _PG_init.
void RegisterKeyTurnCallbacks();

}  // namespace outbox::pg
