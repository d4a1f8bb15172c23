// Shared memory: worker slots and cumulative per-destination counters. Nothing here is a
// process-local pointer; every process maps the same structures.
#pragma once

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
}

namespace outbox::pg {

constexpr int kMaxDestinationCounters = 1024;  // distinct (database, destination) pairs tracked
constexpr int kMaxHeldDatabases = 8;           // databases being dropped/renamed at one time

// What a worker is doing, as shown by outbox.workers().
enum WorkerState : uint32 {
    kWorkerStarting = 0,
    kWorkerIdle,
    kWorkerClaiming,
    kWorkerPublishing,
    kWorkerWritingBack,
    kWorkerBackingOff,
    kWorkerStopping,
    kWorkerNoExtension,
    kWorkerStandby,
};
const char *WorkerStateName(uint32 state);

// One background worker of a database: a delivery worker, or its inbox worker (the one process
// that runs the subscriptions' handlers, apart from delivery). The launcher reserves a slot
// (in_use, database, worker_index, inbox) under shared->lock before starting its worker and
// frees it after the worker has gone; the worker fills in the rest. Readers take `mutex` for
// the text fields and read the atomics lock-free.
struct WorkerSlot {
    slock_t mutex;
    bool in_use;
    bool inbox;  // the database's inbox worker (outbox.workers() shows delivery workers only)
    pid_t pid;   // 0 until the worker runs, and again after it exited
    int pgprocno;
    Oid database;
    int worker_index;  // 0 .. outbox.workers-1 within its database (0 for the inbox worker)
    TimestampTz started_at;
    TimestampTz last_cycle_at;
    char destination[NAMEDATALEN];  // destination being served now, "" when none
    pg_atomic_uint32 state;         // WorkerState
    pg_atomic_uint32 batch_in_flight;
    pg_atomic_uint32 reload;  // destinations changed: read them again before planning
    pg_atomic_uint64 cycles;
    pg_atomic_uint64 claimed;
    pg_atomic_uint64 delivered;
    pg_atomic_uint64 retried;
    pg_atomic_uint64 dead;
    pg_atomic_uint64 deferred;
    pg_atomic_uint64 expired;
    pg_atomic_uint64 errors;  // cycles that ended in an error
    // The worker's driver process (outbox-driver): its pid (0: none running) and how often it
    // was started again after it died.
    pg_atomic_uint32 driver_pid;
    pg_atomic_uint64 driver_restarts;
};

// Cumulative counters of one destination since server start (hash entry, never removed).
struct DestinationCounterKey {
    Oid database;
    char name[NAMEDATALEN];
};
struct DestinationCounters {
    DestinationCounterKey key;  // must be first (hash key)
    pg_atomic_uint64 delivered;
    pg_atomic_uint64 failed;  // attempts that failed (retried or dead)
    pg_atomic_uint64 dead;    // moved to the dead letters
    pg_atomic_uint64 expired;
    pg_atomic_uint64 deferred;  // rescheduled by an outage, no attempt spent
    pg_atomic_uint64 produced;  // rows committed into outbox.messages (requeues included)
    pg_atomic_uint64 removed;   // rows deleted other than by delivery or burial (drop, DELETE)
    pg_atomic_uint64 refused;   // INSERTs refused by max_pending or outbox.max_pending
    // "compaction": "key": rows removed undelivered because a newer message of their key was
    // queued (committed supersessions; message_check.cpp)
    pg_atomic_uint64 superseded;
    // "delivery": "exactly_once": batches found committed in Kafka by a driver's marker when it
    // started (deleted without sending them again), and the Kafka transactions open now (one
    // per worker at most; exactly_once.hpp).
    pg_atomic_uint64 recovered;
    pg_atomic_uint64 transactions_open;
    slock_t mutex;  // protects the fields below
    TimestampTz last_success_at;
    char last_error[512];  // room for librdkafka's text and the hint after it
    // The queue size, kept exact at every commit once its database's counts are valid (see
    // queue_counts.hpp). outbox.conservation() counts from server start, as outbox.stats()
    // does (base_* are 0), or from the CREATE EXTENSION that made the database's outbox.messages
    // anew since (base_*: the counters then); `initial` is the size the queue had then, as the
    // counts imply (the size counted less what the counters say went in and out since).
    int64 queued;
    int64 initial;
    uint64 base_produced, base_removed, base_delivered, base_dead, base_expired;
    uint64 base_superseded;
    // Rows that transactions in progress have passed max_pending with (queue_counts.hpp):
    // released at their commit, with `queued` raised in the same critical section.
    int64 reserved;
};

// Whether a database's queue counts are valid (counted once, then kept up to date).
constexpr int kMaxCountedDatabases = 64;
struct CountedDatabase {
    Oid database;
    bool valid;
    Oid messages;  // outbox.messages when counted: DROP/CREATE EXTENSION makes a new one
    // The whole queue of the database, for outbox.max_pending: its size (kept while `valid`)
    // and the rows transactions in progress reserved against the cap; under `mutex`.
    slock_t mutex;
    int64 queued;
    int64 reserved;
};

// A database whose workers must stay away while DROP/ALTER DATABASE needs it alone.
struct HeldDatabase {
    Oid database;
    TimestampTz until;
};

// A database whose subscriptions want an inbox worker (the launcher starts one while `wanted`).
struct InboxDemand {
    Oid database;
    bool wanted;
};

// A database not in outbox.databases whose queued messages the server log has mentioned, for
// that value of the setting (a hash of it): said once, not at every commit (served.hpp).
struct NotServedNote {
    Oid database;
    uint32 setting_hash;
};

struct SharedState {
    LWLock *lock;  // protects slot allocation, held databases, inbox demand, the counter hash,
                   // the not-served notes
    pid_t launcher_pid;
    int launcher_pgprocno;
    TimestampTz stats_reset;
    HeldDatabase held[kMaxHeldDatabases];
    CountedDatabase counted[kMaxCountedDatabases];
    InboxDemand inbox_demand[kMaxCountedDatabases];
    NotServedNote not_served[kMaxCountedDatabases];
    int num_slots;
    WorkerSlot slots[FLEXIBLE_ARRAY_MEMBER];
};

extern SharedState *shared;  // attached in every backend after startup

// Registers the shared memory above (compat.hpp: RegisterSharedMemory). Called from _PG_init.
void InstallSharedMemoryHooks();

// Whether `database` has subscriptions, as its delivery worker or a committed subscription
// change last said: the launcher keeps an inbox worker running for it while it does. Setting
// it to a new value wakes the launcher; setting it wanted wakes the database's inbox worker,
// which then reads the subscriptions again.
void SetInboxWanted(Oid database, bool wanted);
bool InboxWanted(Oid database);

// Notes that the server log said `database` is not served, under this value of
// outbox.databases; false when it already had (nothing noted then).
bool NoteNotServed(Oid database, uint32 setting_hash);

// Sets the latch of every live delivery worker serving `database` (InvalidOid: all); with
// `reload`, they also read outbox.destinations again (a commit that only adds messages does
// not make them: a paused destination's producers cost the worker nothing).
void WakeWorkers(Oid database, bool reload = false);

// Finds or creates the counters of a destination; nullptr when the table is full.
DestinationCounters *GetDestinationCounters(Oid database, const char *name);

// The hash of all DestinationCounters; iterate under shared->lock.
HTAB *DestinationCountersHash();

// Calls fn(entry) for the counters of every destination of `database`, holding shared->lock
// in shared mode (no entry appears or goes meanwhile); fn must not take that lock.
template <typename F>
void ForEachDestinationCounters(Oid database, F &&fn) {
    HASH_SEQ_STATUS status;
    LWLockAcquire(shared->lock, LW_SHARED);
    hash_seq_init(&status, DestinationCountersHash());
    DestinationCounters *entry;
    while ((entry = static_cast<DestinationCounters *>(hash_seq_search(&status))) != nullptr) {
        if (entry->key.database == database)
            fn(entry);
    }
    LWLockRelease(shared->lock);
}

// Records a delivery failure reason for outbox.stats().last_error (truncated).
void SetLastError(DestinationCounters *counters, const char *error);

// True while DROP/ALTER DATABASE asks the workers of `database` to stay away.
bool DatabaseIsHeld(Oid database);

// Keeps the workers of `database` away (DROP/ALTER DATABASE need it alone) and stops the
// running ones, waiting up to `wait_ms` for them to exit. Returns whether they all exited.
bool HoldDatabase(Oid database, int wait_ms);
void ReleaseDatabase(Oid database);

// Makes the launcher look at outbox.databases and the databases now (it otherwise looks again
// every 10 s for a database that did not exist).
void WakeLauncher();

// Resets the counters of one worker slot (a new worker starts from zero).
void ResetSlotCounters(WorkerSlot *slot);

}  // namespace outbox::pg
