// The launcher: one per cluster, connected to no database (it reads only the shared catalog
// pg_database). It keeps one worker running per (database in outbox.databases, worker index).
//
// Each pass runs behind the boundary (guard.hpp): PostgreSQL calls that may raise an ERROR go
// through PgTry, and a pass that fails — a PostgreSQL error or a C++ exception such as
// std::bad_alloc — is logged, its transaction aborted and its locks released, and the next pass
// comes a second later. Nothing thrown reaches the process's main function, where it would make
// std::terminate abort the launcher and the postmaster restart every session.
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
#include "outbox/pg/guard.hpp"
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
constexpr int kFailedPassRetryMs = 1000;  // a pass that failed is tried again after this

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
    bool inbox;  // the database's inbox worker (inbox_worker.cpp)
};

// A name of outbox.databases looked up in pg_database.
struct DatabaseLookup {
    Oid oid;                       // InvalidOid: no database has exactly that name
    char other_case[NAMEDATALEN];  // a database whose name differs only in case, or ""
};

// Looks a database up by scanning pg_database: the launcher is connected to no database, so
// only the shared catalogs' heaps are open to it (not the relcache entries of their indexes).
// Names compare as PostgreSQL compares them: exactly (the list's unquoted names were already
// folded to lower case, as in SQL).
DatabaseLookup LookUpDatabase(const char *name) {
    DatabaseLookup found;
    found.oid = InvalidOid;
    found.other_case[0] = '\0';
    Relation rel = table_open(DatabaseRelationId, AccessShareLock);
    TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
    HeapTuple tuple;
    while ((tuple = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
        auto *db = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple));
        if (strcmp(NameStr(db->datname), name) == 0) {
            found.oid = db->oid;
            break;
        }
        if (pg_strcasecmp(NameStr(db->datname), name) == 0)
            strlcpy(found.other_case, NameStr(db->datname), sizeof found.other_case);
    }
    table_endscan(scan);
    table_close(rel, AccessShareLock);
    return found;
}

// What the launcher has already said, so that each thing is logged once, not every pass.
struct Logged {
    std::vector<std::string> missing;  // names that do not exist
    std::string duplicates_for;        // the outbox.databases value whose duplicates were logged
    int budget_needed = 0;             // the worker budget last warned about (0: none)
    int budget_max = 0;
};

Logged *logged;

// The databases to serve, resolved to OIDs, each once. Names that do not exist, names that
// name the same database, and more workers than the server can spare are logged once each.
std::vector<Oid> ResolveDatabases() {
    std::vector<Oid> oids;
    std::string setting = setting_databases ? setting_databases : "";
    const char *value = setting.c_str();
    List *names = PgTry([value]() -> List * {
        List *list = NIL;
        if (!SplitIdentifierString(pstrdup(value), ',', &list))
            return NIL;  // the check hook forbids it
        return list;
    });
    PgTry([] {
        SetCurrentStatementStartTimestamp();
        StartTransactionCommand();
    });
    std::vector<std::string> duplicates;
    ListCell *lc;
    foreach (lc, names) {
        const char *name = static_cast<const char *>(lfirst(lc));
        DatabaseLookup db = PgTry([name] { return LookUpDatabase(name); });
        bool was_logged = std::find(logged->missing.begin(), logged->missing.end(),
                                    std::string(name)) != logged->missing.end();
        if (!OidIsValid(db.oid)) {
            if (!was_logged) {
                const char *other = db.other_case;
                if (other[0] != '\0')
                    ereport(
                        LOG,
                        (errmsg("outbox: database \"%s\" in outbox.databases does not exist", name),
                         errdetail("Database \"%s\" exists. Names in outbox.databases "
                                   "compare exactly, and as in SQL a name without double "
                                   "quotes is folded to lower case.",
                                   other),
                         errhint("To serve database \"%s\", list it in double quotes: "
                                 "'\"%s\"'.",
                                 other, other)));
                else
                    ereport(
                        LOG,
                        (errmsg("outbox: database \"%s\" in outbox.databases does not exist", name),
                         errhint("Create it, or remove it from outbox.databases. It is "
                                 "checked again every %d seconds.",
                                 kRecheckMs / 1000)));
                logged->missing.push_back(name);
            }
            continue;
        }
        if (was_logged)
            logged->missing.erase(
                std::remove(logged->missing.begin(), logged->missing.end(), std::string(name)),
                logged->missing.end());
        if (std::find(oids.begin(), oids.end(), db.oid) != oids.end()) {
            duplicates.push_back(name);
            continue;  // one set of workers per database, however often it is listed
        }
        oids.push_back(db.oid);
    }
    PgTry([] { CommitTransactionCommand(); });

    if (duplicates.empty()) {
        logged->duplicates_for.clear();
    } else if (logged->duplicates_for != setting) {
        std::string list;
        for (const std::string &d : duplicates)
            list += (list.empty() ? "\"" : ", \"") + d + "\"";
        ereport(WARNING,
                (errmsg("outbox: outbox.databases names the same database more than once (%s); "
                        "it is served by one set of workers",
                        list.c_str()),
                 errdetail("outbox.databases is \"%s\". As in SQL, a name without double quotes "
                           "is folded to lower case: app and APP are the same database, \"APP\" "
                           "is another.",
                           setting.c_str()),
                 errhint("List each database once.")));
        logged->duplicates_for = setting;
    }

    // The launcher and the workers come out of max_worker_processes, like parallel query's and
    // logical replication's workers: say so when outbox takes more than half of them.
    int inboxes = int(std::count_if(oids.begin(), oids.end(), InboxWanted));
    int needed = 1 + int(oids.size()) * setting_workers + inboxes;
    if (needed * 2 <= max_worker_processes) {
        logged->budget_needed = 0;
    } else if (needed != logged->budget_needed || max_worker_processes != logged->budget_max) {
        int left = std::max(0, max_worker_processes - needed);
        ereport(
            WARNING,
            (errmsg("outbox: its launcher and workers need %d of the %d background worker "
                    "processes (max_worker_processes)",
                    needed, max_worker_processes),
             errdetail(
                 "%d database(s) served with outbox.workers = %d%s. Parallel query, "
                 "logical replication and other extensions take their workers from the "
                 "same %d processes: %d are left for them%s.",
                 int(oids.size()), setting_workers,
                 inboxes > 0 ? psprintf(", %d with subscriptions (an inbox worker each)", inboxes)
                             : "",
                 max_worker_processes, left,
                 needed > max_worker_processes ? ", and some outbox workers cannot start at all"
                                               : ""),
             errhint("Raise max_worker_processes (it takes a restart), or serve fewer "
                     "databases or fewer outbox.workers per database.")));
        logged->budget_needed = needed;
        logged->budget_max = max_worker_processes;
    }
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

bool StartWorker(int i, Oid database, int worker_index, bool inbox) {
    BackgroundWorker worker;
    memset(&worker, 0, sizeof worker);
    worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
    worker.bgw_restart_time = BGW_NEVER_RESTART;  // the launcher restarts, with backoff
    strlcpy(worker.bgw_library_name, "outbox", BGW_MAXLEN);
    if (inbox) {
        strlcpy(worker.bgw_function_name, "outbox_inbox_worker_main", BGW_MAXLEN);
        snprintf(worker.bgw_name, BGW_MAXLEN, "outbox inbox worker for database %u", database);
        strlcpy(worker.bgw_type, "outbox inbox worker", BGW_MAXLEN);
    } else {
        strlcpy(worker.bgw_function_name, "outbox_worker_main", BGW_MAXLEN);
        snprintf(worker.bgw_name, BGW_MAXLEN, "outbox worker %d for database %u", worker_index,
                 database);
        strlcpy(worker.bgw_type, "outbox worker", BGW_MAXLEN);
    }
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
    for (Oid db : databases) {
        if (DatabaseIsHeld(db))
            continue;
        for (int w = 0; w < setting_workers; w++)
            targets.push_back({db, w, false});
        if (InboxWanted(db))
            targets.push_back({db, 0, true});
    }
    // Allocated before the lock is taken: nothing below allocates with the lock held.
    std::vector<bool> covered(targets.size(), false);

    TimestampTz now = GetCurrentTimestamp();
    long next = -1;
    auto soon = [&next](long ms) {
        if (ms >= 0 && (next < 0 || ms < next))
            next = ms;
    };

    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    // Demand of databases no longer served (or never: a subscription in a database outside
    // outbox.databases) leaves room for the others.
    for (InboxDemand &d : shared->inbox_demand)
        if (d.wanted &&
            std::find(databases.begin(), databases.end(), d.database) == databases.end())
            d = InboxDemand{InvalidOid, false};
    for (int i = 0; i < shared->num_slots; i++) {
        WorkerSlot *slot = &shared->slots[i];
        if (!slot->in_use)
            continue;
        // The target this slot serves: the first one not covered yet, so that a slot never
        // counts for two and a target never gets two slots.
        int t = -1;
        for (size_t k = 0; k < targets.size() && t < 0; k++)
            if (!covered[k] && targets[k].database == slot->database &&
                targets[k].worker_index == slot->worker_index && targets[k].inbox == slot->inbox)
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
                ereport(LOG, (errmsg("outbox: %s worker %d for database %u keeps exiting; "
                                     "restarting it in %ld ms",
                                     slot->inbox ? "inbox" : "delivery", slot->worker_index,
                                     slot->database, delay)));
            st.restart_at = TimestampTzPlusMilliseconds(now, delay);
        }
        if (now < st.restart_at) {
            soon(long((st.restart_at - now) / 1000));
            continue;
        }
        st.restart_at = 0;
        slot->pid = 0;
        if (!StartWorker(i, slot->database, slot->worker_index, slot->inbox)) {
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
        slot->inbox = targets[k].inbox;
        slot->pid = 0;
        ResetSlotCounters(slot);
        slot_states[free_slot] = SlotState();
        if (!StartWorker(free_slot, slot->database, slot->worker_index, slot->inbox)) {
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

// One pass behind the boundary. Returns the milliseconds until the next one is due.
long Pass(MemoryContext pass_context) noexcept {
    ErrorStackState entry = SaveErrorStack();
    CaughtError error;
    bool failed = false;
    long next = -1;
    MemoryContextSwitchTo(pass_context);
    try {
        std::vector<Oid> databases = ResolveDatabases();
        next = Reconcile(databases);
    } catch (...) {
        CaptureCurrentException(&error);
        failed = true;
    }
    if (failed) {
        RestoreErrorStack(entry, "the outbox launcher");
        LWLockReleaseAll();
        bool aborted = true;
        try {
            PgTry([] { AbortCurrentTransaction(); });
        } catch (...) {
            aborted = false;
        }
        ereport(LOG, (errcode(error.sqlerrcode),
                      errmsg("outbox launcher: %s; trying again in %d ms", error.message,
                             kFailedPassRetryMs),
                      error.detail[0] ? errdetail_internal("%s", error.detail) : 0));
        if (!aborted)
            proc_exit(1);  // the postmaster starts a new launcher
        next = kFailedPassRetryMs;
    }
    MemoryContextSwitchTo(TopMemoryContext);
    MemoryContextReset(pass_context);
    return next;
}

void OnLauncherExit(int, Datum) {
    if (shared && shared->launcher_pid == MyProcPid)
        shared->launcher_pid = 0;
}

void LauncherMain() {
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
    logged = new Logged();  // for the life of the process
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

    MemoryContext pass_context =
        AllocSetContextCreate(TopMemoryContext, "outbox launcher", ALLOCSET_DEFAULT_SIZES);
    for (;;) {
        CHECK_FOR_INTERRUPTS();
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            ProcessConfigFile(PGC_SIGHUP);
        }
        long next = Pass(pass_context);
        if (next < 0 || next > kRecheckMs)
            next = kRecheckMs;
        // A pass sees everything that changed before it started: a CREATE EXTENSION that
        // commits meanwhile sets the latch again (WakeLauncher).
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, next, wait_event);
        ResetLatch(MyLatch);
    }
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

void outbox_launcher_main(Datum) {
    outbox::pg::BackgroundWorkerBody("outbox launcher", [] { outbox::pg::LauncherMain(); });
}
