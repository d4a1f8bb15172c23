// The launcher: one per cluster, connected to no database (it reads only the shared catalog
// pg_database). It keeps one worker running per (database in outbox.databases, worker index).
#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

extern "C" {
#include "postgres.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/shmem.hpp"
#include "outbox/pg/workers.hpp"

extern "C" {
PGDLLEXPORT void outbox_launcher_main(Datum);
}

namespace outbox::pg {

namespace {

constexpr int kRecheckMs = 10 * 1000;     // databases that do not exist (yet)
constexpr int kRestartBaseMs = 1000;      // a worker that died is restarted after this...
constexpr int kRestartMaxMs = 60 * 1000;  // ...doubling up to this while it keeps dying early
constexpr int kHealthyRunMs = 30 * 1000;  // a worker that ran this long was not crash-looping

// What the launcher remembers of each slot it manages (process-local).
struct SlotState {
    BackgroundWorkerHandle *handle = nullptr;  // nullptr: adopted from a previous launcher
    TimestampTz started_at = 0;
    TimestampTz restart_at = 0;
    int quick_exits = 0;
};

SlotState *slot_states;

struct Target {
    Oid database;
    int worker_index;
};

// Looks a database up by scanning pg_database: the launcher is connected to no database, so
// only the shared catalogs' heaps are open to it (not the relcache entries of their indexes).
Oid DatabaseOid(const char *name) {
    Oid oid = InvalidOid;
    Relation rel = table_open(DatabaseRelationId, AccessShareLock);
    TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
    HeapTuple tuple;
    while ((tuple = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
        auto *db = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple));
        if (strcmp(NameStr(db->datname), name) == 0) {
            oid = db->oid;
            break;
        }
    }
    table_endscan(scan);
    table_close(rel, AccessShareLock);
    return oid;
}

// The databases to serve, resolved to OIDs; names that do not exist are logged once each.
std::vector<Oid> ResolveDatabases(std::vector<std::string> *missing_logged) {
    std::vector<Oid> oids;
    char *copy = pstrdup(setting_databases ? setting_databases : "");
    List *names = NIL;
    if (!SplitIdentifierString(copy, ',', &names))
        return oids;  // the check hook forbids it
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    ListCell *lc;
    foreach (lc, names) {
        const char *name = static_cast<const char *>(lfirst(lc));
        Oid oid = DatabaseOid(name);
        bool logged = false;
        for (const std::string &m : *missing_logged)
            logged = logged || m == name;
        if (!OidIsValid(oid)) {
            if (!logged) {
                ereport(LOG,
                        (errmsg("outbox: database \"%s\" in outbox.databases does not exist", name),
                         errhint("Create it, or remove it from outbox.databases. It is "
                                 "checked again every %d seconds.",
                                 kRecheckMs / 1000)));
                missing_logged->push_back(name);
            }
            continue;
        }
        if (logged)
            missing_logged->erase(
                std::remove(missing_logged->begin(), missing_logged->end(), std::string(name)),
                missing_logged->end());
        oids.push_back(oid);
    }
    CommitTransactionCommand();
    list_free(names);
    pfree(copy);
    return oids;
}

bool SlotAlive(int i) {
    WorkerSlot *slot = &shared->slots[i];
    SlotState &st = slot_states[i];
    if (st.handle) {
        pid_t pid;
        return GetBackgroundWorkerPid(st.handle, &pid) != BGWH_STOPPED;
    }
    // Adopted: alive while its process is.
    return slot->pid != 0 && kill(slot->pid, 0) == 0;
}

bool StartWorker(int i, Oid database, int worker_index) {
    BackgroundWorker worker;
    memset(&worker, 0, sizeof worker);
    worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
    worker.bgw_restart_time = BGW_NEVER_RESTART;  // the launcher restarts, with backoff
    strlcpy(worker.bgw_library_name, "outbox", BGW_MAXLEN);
    strlcpy(worker.bgw_function_name, "outbox_worker_main", BGW_MAXLEN);
    snprintf(worker.bgw_name, BGW_MAXLEN, "outbox worker %d for database %u", worker_index,
             database);
    strlcpy(worker.bgw_type, "outbox worker", BGW_MAXLEN);
    worker.bgw_main_arg = Int32GetDatum(i);
    worker.bgw_notify_pid = MyProcPid;
    WorkerArgs args = {database, worker_index, i};
    memcpy(worker.bgw_extra, &args, sizeof args);

    // The handle is kept across passes, and each pass runs in a context that is reset after it:
    // allocate it where it lives on. (A handle in the reset context was read after the reset;
    // PostgreSQL 18 reuses that memory sooner, and the launcher crashed there.)
    BackgroundWorkerHandle *handle = nullptr;
    MemoryContext pass_context = MemoryContextSwitchTo(TopMemoryContext);
    bool registered = RegisterDynamicBackgroundWorker(&worker, &handle);
    MemoryContextSwitchTo(pass_context);
    if (!registered)
        return false;
    if (slot_states[i].handle)
        pfree(slot_states[i].handle);
    slot_states[i].handle = handle;
    slot_states[i].started_at = GetCurrentTimestamp();
    return true;
}

// One pass: stop what should not run, start what should, free slots of exited workers.
// Returns the milliseconds until something needs another look (-1: only events).
long Reconcile(const std::vector<Oid> &databases) {
    std::vector<Target> targets;
    for (Oid db : databases)
        if (!DatabaseIsHeld(db))
            for (int w = 0; w < setting_workers; w++)
                targets.push_back({db, w});

    TimestampTz now = GetCurrentTimestamp();
    long next = -1;
    auto soon = [&next](long ms) {
        if (ms >= 0 && (next < 0 || ms < next))
            next = ms;
    };

    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    std::vector<bool> covered(targets.size(), false);
    for (int i = 0; i < shared->num_slots; i++) {
        WorkerSlot *slot = &shared->slots[i];
        if (!slot->in_use)
            continue;
        int t = -1;
        for (size_t k = 0; k < targets.size(); k++)
            if (targets[k].database == slot->database &&
                targets[k].worker_index == slot->worker_index)
                t = int(k);
        bool alive = SlotAlive(i);
        SlotState &st = slot_states[i];
        if (t < 0) {
            // No longer wanted (database removed from the list, or being dropped).
            if (alive && slot->pid != 0)
                kill(slot->pid, SIGTERM);
            if (!alive) {
                slot->in_use = false;
                if (st.handle)
                    pfree(st.handle);
                st = SlotState();
            }
            continue;
        }
        covered[t] = true;
        if (alive)
            continue;
        // The worker exited: restart it, later if it keeps exiting soon after starting.
        if (st.restart_at == 0) {
            bool quick = st.started_at == 0 ||
                         !TimestampDifferenceExceeds(st.started_at, now, kHealthyRunMs);
            st.quick_exits = quick ? st.quick_exits + 1 : 0;
            long delay = kRestartBaseMs;
            for (int q = 1; q < st.quick_exits && delay < kRestartMaxMs; q++)
                delay *= 2;
            delay = std::min<long>(delay, kRestartMaxMs);
            if (st.quick_exits > 3)
                ereport(LOG, (errmsg("outbox: worker %d for database %u keeps exiting; restarting "
                                     "it in %ld ms",
                                     slot->worker_index, slot->database, delay)));
            st.restart_at = TimestampTzPlusMilliseconds(now, delay);
        }
        if (now < st.restart_at) {
            soon(long((st.restart_at - now) / 1000));
            continue;
        }
        st.restart_at = 0;
        slot->pid = 0;
        if (!StartWorker(i, slot->database, slot->worker_index)) {
            ereport(WARNING, (errmsg("outbox: could not start a worker: no background worker slot "
                                     "is free"),
                              errhint("Raise max_worker_processes (outbox needs "
                                      "outbox.workers per served database, plus one).")));
            st.restart_at = TimestampTzPlusMilliseconds(now, kRestartMaxMs);
        }
    }
    // Targets with no slot yet.
    for (size_t k = 0; k < targets.size(); k++) {
        if (covered[k])
            continue;
        int free_slot = -1;
        for (int i = 0; i < shared->num_slots && free_slot < 0; i++)
            if (!shared->slots[i].in_use)
                free_slot = i;
        if (free_slot < 0)
            break;
        WorkerSlot *slot = &shared->slots[free_slot];
        slot->in_use = true;
        slot->database = targets[k].database;
        slot->worker_index = targets[k].worker_index;
        slot->pid = 0;
        ResetSlotCounters(slot);
        slot_states[free_slot] = SlotState();
        if (!StartWorker(free_slot, slot->database, slot->worker_index)) {
            ereport(WARNING, (errmsg("outbox: could not start a worker: no background worker slot "
                                     "is free"),
                              errhint("Raise max_worker_processes (outbox needs "
                                      "outbox.workers per served database, plus one).")));
            slot_states[free_slot].restart_at = TimestampTzPlusMilliseconds(now, kRestartMaxMs);
            soon(kRestartMaxMs);
        }
    }
    LWLockRelease(shared->lock);
    return next;
}

void OnLauncherExit(int, Datum) {
    if (shared && shared->launcher_pid == MyProcPid)
        shared->launcher_pid = 0;
}

}  // namespace

void RegisterLauncher() {
    BackgroundWorker worker;
    memset(&worker, 0, sizeof worker);
    worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    // A standby delivers nothing: the launcher starts when recovery ends, i.e. on promotion.
    worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
    worker.bgw_restart_time = 5;
    strlcpy(worker.bgw_library_name, "outbox", BGW_MAXLEN);
    strlcpy(worker.bgw_function_name, "outbox_launcher_main", BGW_MAXLEN);
    strlcpy(worker.bgw_name, "outbox launcher", BGW_MAXLEN);
    strlcpy(worker.bgw_type, "outbox launcher", BGW_MAXLEN);
    RegisterBackgroundWorker(&worker);
}

}  // namespace outbox::pg

using namespace outbox::pg;

void outbox_launcher_main(Datum) {
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, die);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);
    pgstat_report_appname("outbox launcher");
    // What pg_stat_activity.wait_event shows while the launcher waits (compat.hpp).
    uint32 wait_event = NewWaitEvent("OutboxLauncherMain");

    slot_states = static_cast<SlotState *>(
        MemoryContextAllocZero(TopMemoryContext, sizeof(SlotState) * shared->num_slots));
    for (int i = 0; i < shared->num_slots; i++)
        new (&slot_states[i]) SlotState();
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    shared->launcher_pid = MyProcPid;
    shared->launcher_pgprocno = OwnProcNumber();
    // Slots left by a previous launcher: keep live workers, free the rest.
    for (int i = 0; i < shared->num_slots; i++) {
        WorkerSlot *slot = &shared->slots[i];
        if (slot->in_use && !(slot->pid != 0 && kill(slot->pid, 0) == 0))
            slot->in_use = false;
    }
    LWLockRelease(shared->lock);
    on_shmem_exit(OnLauncherExit, 0);

    MemoryContext loop_context =
        AllocSetContextCreate(TopMemoryContext, "outbox launcher", ALLOCSET_DEFAULT_SIZES);
    std::vector<std::string> *missing_logged = new std::vector<std::string>();
    for (;;) {
        CHECK_FOR_INTERRUPTS();
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            ProcessConfigFile(PGC_SIGHUP);
        }
        MemoryContextSwitchTo(loop_context);
        std::vector<Oid> databases = ResolveDatabases(missing_logged);
        long next = Reconcile(databases);
        MemoryContextSwitchTo(TopMemoryContext);
        MemoryContextReset(loop_context);
        if (next < 0 || next > kRecheckMs)
            next = kRecheckMs;
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, next, wait_event);
        ResetLatch(MyLatch);
    }
}
