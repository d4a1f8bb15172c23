// Shared memory: worker slots and cumulative per-destination counters.
#include <array>
#include <initializer_list>

extern "C" {
#include "postgres.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/shmem.hpp"

namespace outbox::pg {

SharedState *shared = nullptr;
static HTAB *counters_hash = nullptr;
static LWLockPadded *locks = nullptr;

const char *WorkerStateName(uint32 state) {
    switch (state) {
        case kWorkerStarting:
            return "starting";
        case kWorkerIdle:
            return "idle";
        case kWorkerClaiming:
            return "claiming";
        case kWorkerPublishing:
            return "publishing";
        case kWorkerWritingBack:
            return "writing back";
        case kWorkerBackingOff:
            return "backing off";
        case kWorkerStopping:
            return "stopping";
        case kWorkerNoExtension:
            return "no extension";
        case kWorkerStandby:
            return "standby";
    }
    return "unknown";
}

static std::array<pg_atomic_uint64 *, 9> SlotCounters(WorkerSlot *slot) {
    return {&slot->cycles,   &slot->claimed, &slot->delivered,       &slot->retried, &slot->dead,
            &slot->deferred, &slot->expired, &slot->driver_restarts, &slot->errors};
}

void ResetSlotCounters(WorkerSlot *slot) {
    for (pg_atomic_uint64 *c : SlotCounters(slot))
        pg_atomic_write_u64(c, 0);
    pg_atomic_write_u32(&slot->batch_in_flight, 0);
    pg_atomic_write_u32(&slot->driver_pid, 0);
}

// Every worker needs a bgworker slot, so max_worker_processes bounds the slots we need.
static int NumSlots() {
    return max_worker_processes;
}

static Size SharedStateSize() {
    return add_size(offsetof(SharedState, slots), mul_size(NumSlots(), sizeof(WorkerSlot)));
}

// The areas: the state struct, the counters hash and the lock (see compat.hpp).
static void RequestSharedMemory() {
    RequestSharedStruct("outbox", SharedStateSize(), reinterpret_cast<void **>(&shared));
    HASHCTL info;
    memset(&info, 0, sizeof info);
    info.keysize = sizeof(DestinationCounterKey);
    info.entrysize = sizeof(DestinationCounters);
    RequestSharedHash("outbox destination counters", kMaxDestinationCounters, info,
                      HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE, &counters_hash);
    RequestSharedLocks("outbox locks", "outbox", 1, &locks);
}

// Fills in the state struct once, when it was just created.
static void InitSharedMemory() {
    memset(shared, 0, SharedStateSize());
    shared->lock = &locks[0].lock;
    shared->stats_reset = GetCurrentTimestamp();
    shared->num_slots = NumSlots();
    for (CountedDatabase &c : shared->counted)
        SpinLockInit(&c.mutex);
    for (int i = 0; i < shared->num_slots; i++) {
        WorkerSlot *slot = &shared->slots[i];
        SpinLockInit(&slot->mutex);
        pg_atomic_init_u32(&slot->state, kWorkerStarting);
        pg_atomic_init_u32(&slot->batch_in_flight, 0);
        pg_atomic_init_u32(&slot->reload, 0);
        pg_atomic_init_u32(&slot->driver_pid, 0);
        for (pg_atomic_uint64 *c : SlotCounters(slot))
            pg_atomic_init_u64(c, 0);
    }
}

void InstallSharedMemoryHooks() {
    RegisterSharedMemory(RequestSharedMemory, InitSharedMemory);
}

void WakeWorkers(Oid database, bool reload) {
    if (shared == nullptr)
        return;
    // Unlocked reads: a stale pgprocno costs at most a spurious wake-up of some backend, and a
    // missed one is caught by the poll.
    for (int i = 0; i < shared->num_slots; i++) {
        WorkerSlot *slot = &shared->slots[i];
        pid_t pid = slot->pid;
        int procno = slot->pgprocno;
        if (pid != 0 && !slot->inbox && (database == InvalidOid || slot->database == database)) {
            if (reload)
                pg_atomic_write_u32(&slot->reload, 1);
            SetLatch(&ProcGlobal->allProcs[procno].procLatch);
        }
    }
}

DestinationCounters *GetDestinationCounters(Oid database, const char *name) {
    DestinationCounterKey key;
    memset(&key, 0, sizeof key);
    key.database = database;
    strlcpy(key.name, name, sizeof key.name);

    LWLockAcquire(shared->lock, LW_SHARED);
    auto *entry =
        static_cast<DestinationCounters *>(hash_search(counters_hash, &key, HASH_FIND, nullptr));
    LWLockRelease(shared->lock);
    if (entry)
        return entry;

    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    bool found = false;
    entry = static_cast<DestinationCounters *>(
        hash_search(counters_hash, &key, HASH_ENTER_NULL, &found));
    if (entry && !found) {
        for (pg_atomic_uint64 *c :
             {&entry->delivered, &entry->failed, &entry->dead, &entry->expired, &entry->deferred,
              &entry->produced, &entry->removed, &entry->refused, &entry->superseded,
              &entry->recovered, &entry->transactions_open})
            pg_atomic_init_u64(c, 0);
        entry->queued = entry->initial = entry->reserved = 0;
        entry->base_produced = entry->base_removed = entry->base_delivered = 0;
        entry->base_dead = entry->base_expired = entry->base_superseded = 0;
        SpinLockInit(&entry->mutex);
        entry->last_success_at = 0;
        entry->last_error[0] = '\0';
    }
    LWLockRelease(shared->lock);
    return entry;
}

bool NoteNotServed(Oid database, uint32 setting_hash) {
    bool noted = true;
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    NotServedNote *free_note = nullptr;
    NotServedNote *note = nullptr;
    for (NotServedNote &n : shared->not_served) {
        if (n.database == database)
            note = &n;
        else if (n.database == InvalidOid && free_note == nullptr)
            free_note = &n;
    }
    if (note != nullptr && note->setting_hash == setting_hash)
        noted = false;
    else if (note == nullptr)
        note = free_note;  // none free: said again at times, never lost
    if (noted && note != nullptr) {
        note->database = database;
        note->setting_hash = setting_hash;
    }
    LWLockRelease(shared->lock);
    return noted;
}

HTAB *DestinationCountersHash() {
    return counters_hash;
}

void SetLastError(DestinationCounters *counters, const char *error) {
    SpinLockAcquire(&counters->mutex);
    strlcpy(counters->last_error, error, sizeof counters->last_error);
    SpinLockRelease(&counters->mutex);
}

bool DatabaseIsHeld(Oid database) {
    TimestampTz now = GetCurrentTimestamp();
    bool held = false;
    LWLockAcquire(shared->lock, LW_SHARED);
    for (const HeldDatabase &h : shared->held)
        if (h.database == database && h.until > now)
            held = true;
    LWLockRelease(shared->lock);
    return held;
}

bool HoldDatabase(Oid database, int wait_ms) {
    TimestampTz now = GetCurrentTimestamp();
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    HeldDatabase *entry = nullptr;
    for (HeldDatabase &h : shared->held) {
        if (h.database == database) {
            entry = &h;
            break;
        }
        if (entry == nullptr && (h.database == InvalidOid || h.until <= now))
            entry = &h;
    }
    if (entry) {
        entry->database = database;
        // Long enough for the statement; released as soon as it ends.
        entry->until = TimestampTzPlusMilliseconds(now, 60 * 1000);
    }
    LWLockRelease(shared->lock);

    // SIGTERM: the workers hand their leases back and exit.
    for (int waited = 0;; waited += 10) {
        bool running = false;
        LWLockAcquire(shared->lock, LW_SHARED);
        for (int i = 0; i < shared->num_slots; i++) {
            WorkerSlot *slot = &shared->slots[i];
            if (slot->in_use && slot->database == database && slot->pid != 0) {
                running = true;
                if (waited % 1000 == 0)
                    kill(slot->pid, SIGTERM);
            }
        }
        LWLockRelease(shared->lock);
        if (!running)
            return true;
        if (waited >= wait_ms)
            return false;
        CHECK_FOR_INTERRUPTS();
        pg_usleep(10 * 1000L);
    }
}

void ReleaseDatabase(Oid database) {
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    for (HeldDatabase &h : shared->held)
        if (h.database == database)
            h.database = InvalidOid;
    LWLockRelease(shared->lock);
    WakeLauncher();
}

void SetInboxWanted(Oid database, bool wanted) {
    bool changed = false;
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    InboxDemand *entry = nullptr;
    for (InboxDemand &d : shared->inbox_demand) {
        if (d.database == database) {
            entry = &d;
            break;
        }
        if (entry == nullptr && d.database == InvalidOid)
            entry = &d;
    }
    // Free entries are not wanted. The table has room for every database outbox.databases
    // may list (64).
    if (entry && entry->wanted != wanted) {
        changed = true;
        entry->database = wanted ? database : InvalidOid;
        entry->wanted = wanted;
    }
    LWLockRelease(shared->lock);
    if (changed)
        WakeLauncher();
    // A running inbox worker reads the subscriptions again at once.
    for (int i = 0; wanted && i < shared->num_slots; i++) {
        WorkerSlot *slot = &shared->slots[i];
        if (slot->inbox && slot->pid != 0 && slot->database == database)
            SetLatch(&ProcGlobal->allProcs[slot->pgprocno].procLatch);
    }
}

bool InboxWanted(Oid database) {
    bool wanted = false;
    LWLockAcquire(shared->lock, LW_SHARED);
    for (const InboxDemand &d : shared->inbox_demand)
        if (d.database == database && d.wanted)
            wanted = true;
    LWLockRelease(shared->lock);
    return wanted;
}

void WakeLauncher() {
    if (shared == nullptr)
        return;
    LWLockAcquire(shared->lock, LW_SHARED);
    pid_t launcher = shared->launcher_pid;
    int procno = shared->launcher_pgprocno;
    LWLockRelease(shared->lock);
    if (launcher != 0)
        SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

}  // namespace outbox::pg
