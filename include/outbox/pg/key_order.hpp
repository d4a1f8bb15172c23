// Per-key ordering (see README "Per-key ordering").
//
// A message of an ordering = key destination carries its order key: the destination's 32-bit
// hash in the high half, its key's in the low half. So the keys of one destination are one
// contiguous range of messages_key_order (order_key, id), the head of a key is the first
// visible entry of its order key, and a claim walks the range one key at a time (outbox.
// _key_heads, which reads the index's leaf entries) without anything being written when a
// key's message is done. Two keys whose hashes collide share one order; nothing else changes.
//
// Producers of one order key take turns under a lock held until commit, and a message is
// numbered only once its producer holds it: ids follow commit order within a key.
#pragma once

#include <cstdint>
#include <string_view>

namespace outbox::pg {

int64_t OrderKey(std::string_view destination, std::string_view key);

// The order keys of a destination: [lo, hi].
struct OrderKeyRange {
    int64_t lo, hi;
};
OrderKeyRange OrderKeysOf(std::string_view destination);

// Takes the order key's lock (transaction-scoped), waiting for the producer that holds it.
void LockOrderKey(int64_t order_key);

// What the last outbox._key_heads call of this process returned: how many heads, and the
// order key of the last one (the claim locks only some of them, and goes on after the last).
struct KeyHeadsReturned {
    int64_t heads = 0;
    int64_t last_key = 0;
};
KeyHeadsReturned &LastKeyHeads();

// Key floors (outbox/key_floors.hpp): the worker's walks start each key where its delivered
// messages end. A transaction about to put messages of ordered keys back ahead of their key's
// others (a requeue keeps the dead letter's id; an ordering change gives queued messages an
// order key) calls ReorderingKeys() before it writes them; its end is seen to here. It cannot
// be prepared (its commit would become visible where this backend cannot announce it).
void ReorderingKeys();

// Around the worker's heads claim: the walk of that statement uses and learns key floors.
// BeginKeyWalk() returns the generation read before the statement's snapshot is taken.
uint64_t BeginKeyWalk();
void EndKeyWalk(uint64_t generation_before);

// The worker's transaction removed a head it held: its key's floor moves past it (and every
// floor is dropped if that transaction aborts).
void KeyHeadRemoved(int64_t order_key, int64_t id);

// Registers the transaction callbacks (floors are dropped on abort). Called from _PG_init.
void RegisterKeyOrderCallbacks();

}  // namespace outbox::pg
