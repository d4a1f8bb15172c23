// The settings of our background workers' sessions: see include/outbox/pg/session.hpp.
#include "outbox/pg/session.hpp"

#include <cstring>

extern "C" {
#include "postgres.h"
#include "access/xact.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"  // get_database_name, from 19 on (compat.hpp)
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/shmem.hpp"
#include "outbox/pg/workers.hpp"

namespace outbox::pg {

namespace {

struct Pinned {
    const char *name;
    const char *value;
};

// The settings every worker session runs with, compared before each transaction. (Settings a
// database or role owner may set with ALTER DATABASE/ROLE ... SET that would stop or change the
// worker's transactions, and the search_path of a superuser session that must find only
// pg_catalog's functions and operators.)
const Pinned kPinned[] = {
    {"search_path", "pg_catalog, pg_temp"},
    {"default_transaction_read_only", "off"},
    {"default_transaction_isolation", "read committed"},
    {"default_transaction_deferrable", "off"},
    {"statement_timeout", "0"},
    {"idle_in_transaction_session_timeout", "0"},
    {"transaction_timeout", "0"},  // PostgreSQL 17 and later (missing before: skipped)
};

const char *Current(const char *name) {
    return GetConfigOption(name, true, false);
}

}  // namespace

void SetWorkerSessionSettings(WorkerRole role) {
    for (const Pinned &p : kPinned)
        if (Current(p.name) != nullptr)
            SetConfigOption(p.name, p.value, PGC_SUSET, PGC_S_OVERRIDE);
    // Short statements on a few hundred rows: JIT compilation would cost more than it saves.
    SetConfigOption("jit", "off", PGC_SUSET, PGC_S_OVERRIDE);
    // Never wait on a lock for long: a SIGTERM is noticed between transactions.
    SetConfigOption("lock_timeout", "5s", PGC_SUSET, PGC_S_OVERRIDE);
    if (role != WorkerRole::Delivery)
        return;
    // Losing the worker's last commits in a crash only means redelivering those messages
    // (at-least-once allows it, event_id identifies them), so its commits need not wait for
    // the WAL flush. The producers' commits are untouched.
    SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
    // The worker's writes skip ordinary triggers (the queue-count trigger: the worker counts
    // what it changes itself, without a trigger call per row); the INSERT check is ALWAYS.
    SetConfigOption("session_replication_role", "replica", PGC_SUSET, PGC_S_OVERRIDE);
    // The worker's one wait for a session (FOR KEY SHARE following a key row's newer versions,
    // which ignores SKIP LOCKED, to one a requeue holds FOR UPDATE) can close a deadlock with
    // outbox.requeue: the other side, which looks for it after the default 1 s, is the one
    // aborted, and requeue starts again (sql/outbox--0.3.0.sql). The worker's writes of key rows
    // never wait (WriteKeyRowNotes).
    SetConfigOption("deadlock_timeout", "4s", PGC_SUSET, PGC_S_OVERRIDE);
}

WorkerSlot *StartWorkerSession(Datum main_arg, WorkerRole role, pqsigfunc on_sigterm,
                               pg_on_exit_callback on_exit, char **database) {
    int slot_index = DatumGetInt32(main_arg);
    WorkerArgs args;
    memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof args);

    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, on_sigterm);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnectionByOid(args.database, InvalidOid, 0);

    WorkerSlot *slot = &shared->slots[slot_index];
    SpinLockAcquire(&slot->mutex);
    slot->destination[0] = '\0';
    SpinLockRelease(&slot->mutex);
    slot->pgprocno = OwnProcNumber();
    slot->started_at = GetCurrentTimestamp();
    slot->last_cycle_at = 0;
    pg_atomic_write_u32(&slot->state, kWorkerStarting);
    slot->pid = MyProcPid;  // last: WakeWorkers reads pid before pgprocno
    on_shmem_exit(on_exit, main_arg);

    pgstat_report_appname(role == WorkerRole::Delivery ? "outbox worker" : "outbox inbox worker");
    SetWorkerSessionSettings(role);

    StartTransactionCommand();
    char *name = get_database_name(MyDatabaseId);
    *database = MemoryContextStrdup(TopMemoryContext, name ? name : "?");
    CommitTransactionCommand();
    return slot;
}

void PinWorkerSessionSettings() {
    for (const Pinned &p : kPinned) {
        const char *now = Current(p.name);
        // A session-level SET outranks PGC_S_OVERRIDE: the value goes back at that level.
        if (now != nullptr && strcmp(now, p.value) != 0)
            (void)set_config_option(p.name, p.value, PGC_SUSET, PGC_S_SESSION, GUC_ACTION_SET, true,
                                    0, false);
    }
}

}  // namespace outbox::pg
