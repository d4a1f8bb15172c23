// Per-key ordering locks (see include/outbox/pg/key_lock.hpp).
extern "C" {
#include "postgres.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lock.h"
}

#include "outbox/pg/key_lock.hpp"

namespace outbox::pg {

// An advisory lock tag of outbox's own: field4 = 3, which the pg_advisory_* functions (1 and
// 2) never use, so users' advisory locks cannot collide with it. A hash collision between two
// keys only makes them take turns.
static LOCKTAG KeyTag(const char *destination, int destination_len, const char *key, int key_len) {
    uint64 h = hash_bytes_extended(reinterpret_cast<const unsigned char *>(destination),
                                   destination_len, 0);
    h = hash_bytes_extended(reinterpret_cast<const unsigned char *>(key), key_len, h);
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, uint32(h >> 32), uint32(h), 3);
    return tag;
}

void LockKey(const char *destination, int destination_len, const char *key, int key_len) {
    LOCKTAG tag = KeyTag(destination, destination_len, key, key_len);
    (void)LockAcquire(&tag, ExclusiveLock, false, false);
}

bool TryLockKey(const char *destination, int destination_len, const char *key, int key_len) {
    LOCKTAG tag = KeyTag(destination, destination_len, key, key_len);
    return LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

}  // namespace outbox::pg
