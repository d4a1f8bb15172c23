// Per-key ordering across processes (see README "Per-key ordering").
//
// Producers of one (destination, key) take turns under a lock held until commit; a message is
// numbered, and marked `waiting` when an earlier message of its key is still queued, only once
// the lock is held. The worker lets the next message of a key go (clears `waiting`) under the
// same lock, but never waits for it: a key whose lock a producer holds is retried on a later
// turn. So a message can never be left waiting behind a head that is already gone.
#pragma once

extern "C" {
#include "postgres.h"
}

namespace outbox::pg {

// Takes the key's lock (transaction-scoped), waiting for the producer that holds it.
void LockKey(const char *destination, int destination_len, const char *key, int key_len);

// Takes the key's lock if it is free; false when a producer holds it.
bool TryLockKey(const char *destination, int destination_len, const char *key, int key_len);

}  // namespace outbox::pg
