// The inbox worker: one process per database that has subscriptions, started by the launcher
// while the database's delivery worker says there are some (SetInboxWanted). It runs the
// subscriptions' Kafka consumers in a driver process of its own and applies their records
// through the handlers (inbox_consume.cpp), so that a slow, failing or hostile handler never
// runs in, holds up or changes the session of a delivery worker.
//
// Each turn: serve the driver process (records arrive), then — when records wait or a poll is
// due — one transaction that applies a batch per subscription with the offsets. The one wait
// point is a WaitEventSet on the latch, postmaster death and the driver process's socket.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "outbox/ipc/supervisor.hpp"

extern "C" {
#include "postgres.h"
#include "access/xact.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/debug.hpp"
#include "outbox/pg/driver_process.hpp"
#include "outbox/pg/guard.hpp"
#include "outbox/pg/inbox_consume.hpp"
#include "outbox/pg/queue.hpp"
#include "outbox/pg/session.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/shmem.hpp"
#include "outbox/pg/workers.hpp"

extern "C" {
PGDLLEXPORT void outbox_inbox_worker_main(Datum);
}

namespace outbox::pg {

namespace {

constexpr int64 kErrorBackoffMaxMs = 30000;

volatile sig_atomic_t shutdown_requested = false;
uint32 wait_event_main = PG_WAIT_EXTENSION;

void HandleSigterm(SIGNAL_ARGS) {
    int save_errno = errno;
    shutdown_requested = true;
    SetLatch(MyLatch);
    errno = save_errno;
}

int64 NowMs() {
    return int64(GetCurrentTimestamp() / 1000);
}

class InboxWorker {
  public:
    InboxWorker(WorkerSlot *slot, std::string database)
        : slot_(slot),
          drivers_(std::make_unique<DriverProcess>(CurrentDriverProcessOptions())),
          inbox_(std::make_unique<InboxConsumer>(
              drivers_.get(), std::move(database),
              [this](const char *phase) { PauseForTest(phase, drivers_.get()); })) {}
    void Run();
    // Closes the consumers, then ends the driver process; safe to call twice.
    void Release() {
        inbox_.reset();
        drivers_.reset();
    }

  private:
    bool Turn(bool poll);
    bool Wait(int64 timeout_ms);
    void LogDriverLines();
    void SetState(WorkerState state) { pg_atomic_write_u32(&slot_->state, state); }

    WorkerSlot *slot_;
    std::unique_ptr<DriverProcess> drivers_;  // outlives the consumers
    std::unique_ptr<InboxConsumer> inbox_;
    WaitEventSet *wait_set_ = nullptr;
    int consecutive_errors_ = 0;
};

InboxWorker *the_worker = nullptr;  // for the exit callback

void OnInboxWorkerExit(int, Datum arg) {
    if (the_worker)
        the_worker->Release();
    WorkerSlot *slot = &shared->slots[DatumGetInt32(arg)];
    pg_atomic_write_u32(&slot->state, kWorkerStopping);
    pg_atomic_write_u32(&slot->driver_pid, 0);
    slot->pid = 0;
}

// One transaction of consumption when records wait or a poll is due. Returns whether more
// records wait than it applied.
bool InboxWorker::Turn(bool poll) {
    drivers_->Service();
    LogDriverLines();
    if (!inbox_->HasWork(poll))
        return false;
    bool more = false;
    PgTry([] {
        SetCurrentStatementStartTimestamp();
        StartTransactionCommand();
        PinWorkerSessionSettings();
        if (SPI_connect() != SPI_OK_CONNECT)
            elog(ERROR, "outbox: SPI_connect failed");
        PushActiveSnapshot(GetTransactionSnapshot());
        pgstat_report_activity(STATE_RUNNING, "outbox: consume");
    });
    std::string version;
    if (InstalledExtension(&version) == ExtensionState::Ready) {
        SetState(kWorkerPublishing);
        more = inbox_->Consume(poll);
    } else {
        SetState(kWorkerNoExtension);
    }
    PgTry([] {
        SPI_finish();
        PopActiveSnapshot();
        CommitTransactionCommand();
        pgstat_report_stat(false);
        pgstat_report_activity(STATE_IDLE, nullptr);
    });
    inbox_->Committed();
    pg_atomic_fetch_add_u64(&slot_->cycles, 1);
    slot_->last_cycle_at = GetCurrentTimestamp();
    return more;
}

void InboxWorker::LogDriverLines() {
    std::vector<std::string> lines;
    drivers_->TakeLog(lines);
    pg_atomic_write_u32(&slot_->driver_pid, uint32(drivers_->pid()));
    pg_atomic_write_u64(&slot_->driver_restarts, drivers_->restarts());
    for (const std::string &line : lines)
        ereport(LOG, (errmsg("outbox inbox: %s", line.c_str())));
}

// Returns whether the latch was set (a subscription changed, a reload, a stop).
bool InboxWorker::Wait(int64 timeout_ms) {
    if (wait_set_ == nullptr) {
        // The driver process's fd is its epoll set: constant for the object's life.
        wait_set_ = CreateSessionWaitEventSet(3);
        AddWaitEventToSet(wait_set_, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, nullptr);
        AddWaitEventToSet(wait_set_, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, nullptr, nullptr);
        AddWaitEventToSet(wait_set_, WL_SOCKET_READABLE, drivers_->WaitFd(), nullptr, nullptr);
    }
    WaitEvent events[3];
    int n =
        WaitEventSetWait(wait_set_, long(timeout_ms), events, lengthof(events), wait_event_main);
    bool latch_set = false;
    for (int i = 0; i < n; i++)
        latch_set = latch_set || (events[i].events & WL_LATCH_SET) != 0;
    if (latch_set)
        ResetLatch(MyLatch);
    return latch_set;
}

void InboxWorker::Run() {
    MemoryContext turn_context =
        AllocSetContextCreate(TopMemoryContext, "outbox inbox turn", ALLOCSET_DEFAULT_SIZES);
    int64 next_poll = 0;
    bool woken = false;
    while (!shutdown_requested) {
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            ProcessConfigFile(PGC_SIGHUP);
            drivers_->SetOptions(CurrentDriverProcessOptions());
            next_poll = std::min(next_poll, NowMs() + setting_poll_interval_ms);
        }
        if (DatabaseIsHeld(MyDatabaseId))
            break;
        CHECK_FOR_INTERRUPTS();

        int64 now = NowMs();
        bool poll = woken || now >= next_poll;
        if (poll)
            next_poll = now + setting_poll_interval_ms;
        MemoryContextSwitchTo(turn_context);
        bool more = false, failed = false;
        CaughtError error;
        ErrorStackState entry = SaveErrorStack();
        try {
            more = Turn(poll);
            consecutive_errors_ = 0;
        } catch (...) {
            CaptureCurrentException(&error);
            failed = true;
        }
        if (failed)
            RestoreErrorStack(entry, "the outbox inbox worker");
        int64 timeout;
        if (failed) {
            // Nothing of the turn is kept: the consumers start again from the stored offsets.
            PgTry([] { AbortCurrentTransaction(); });
            inbox_->Aborted();
            consecutive_errors_++;
            pg_atomic_fetch_add_u64(&slot_->errors, 1);
            ereport(LOG,
                    (errcode(error.sqlerrcode), errmsg("outbox inbox worker: %s", error.message),
                     error.detail[0] ? errdetail_internal("%s", error.detail) : 0));
            SetState(kWorkerBackingOff);
            timeout =
                std::min<int64>(kErrorBackoffMaxMs, int64(250) << std::min(consecutive_errors_, 7));
        } else if (more) {
            timeout = 0;
        } else {
            timeout = std::max<int64>(0, next_poll - NowMs());
            int64 process = drivers_->TimeoutMs();
            if (process >= 0)
                timeout = std::min(timeout, process);
            if (pg_atomic_read_u32(&slot_->state) != kWorkerNoExtension)
                SetState(kWorkerIdle);
        }
        MemoryContextSwitchTo(TopMemoryContext);
        MemoryContextReset(turn_context);
        woken = Wait(timeout);
    }
    SetState(kWorkerStopping);
}

}  // namespace

}  // namespace outbox::pg

using namespace outbox::pg;

void outbox_inbox_worker_main(Datum arg) {
    char *database = nullptr;
    WorkerSlot *slot =
        StartWorkerSession(arg, WorkerRole::Inbox, HandleSigterm, OnInboxWorkerExit, &database);
    wait_event_main = NewWaitEvent("OutboxInboxWorkerMain");

    BackgroundWorkerBody("outbox inbox worker", [database, slot] {
        the_worker = new InboxWorker(slot, database);
        the_worker->Run();
        the_worker->Release();
    });
    proc_exit(0);
}
