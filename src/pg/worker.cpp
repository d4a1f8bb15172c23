// The delivery worker: one process per (database, worker index), started by the launcher.
//
// Each turn of the loop: serve the drivers (collect outcomes), then — when there is anything to
// write back or to claim — one short transaction that writes back every outcome collected and
// claims the next batches, then hand the claimed rows to the drivers after the commit. No
// transaction is ever open while a driver waits for the network. The one wait point is a
// WaitEventSet on the latch (commits wake us), postmaster death and the drivers' fd: the drivers
// run in the worker's driver process (outbox-driver, src/pg/driver_process.cpp), whose socket
// the worker waits on; a crash there is handled by the worker, never by the postmaster.
#include <cerrno>
#include <ctime>
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "outbox/claim_book.hpp"
#include "outbox/dispatcher.hpp"
#include "outbox/exactly_once.hpp"
#include "outbox/fast_batch.hpp"
#include "outbox/ipc/supervisor.hpp"

extern "C" {
#include "postgres.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/destination_cache.hpp"
#include "outbox/pg/driver_process.hpp"
#include "outbox/pg/exactly_once.hpp"
#include "outbox/pg/guard.hpp"
#include "outbox/pg/inbox.hpp"
#include "outbox/pg/debug.hpp"
#include "outbox/pg/inbox_consume.hpp"  // SubscriptionsExist
#include "outbox/pg/queue.hpp"
#include "outbox/pg/queue_counts.hpp"
#include "outbox/pg/session.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/shmem.hpp"
#include "outbox/pg/workers.hpp"

extern "C" {
PGDLLEXPORT void outbox_worker_main(Datum);
}

namespace outbox::pg {

namespace {

// On SIGTERM in-flight messages get this long to be acknowledged before they are handed back.
constexpr int64 kShutdownGraceMs = 2000;
constexpr int64 kErrorBackoffMaxMs = 30000;
// ordering = key: a key's row stays this long after its last queued message went (it keeps the
// key's floor for the next message), then a poll sweeps it: the first poll after every
// kKeySweepEveryMs (sooner while there are more than a batch).
constexpr int64 kIdleKeySeconds = 300;
constexpr int64 kKeySweepEveryMs = 10000;
constexpr int kKeySweepBatch = 1000;

volatile sig_atomic_t shutdown_requested = false;

// What pg_stat_activity.wait_event shows while the worker waits (compat.hpp: NewWaitEvent).
uint32 wait_event_main = PG_WAIT_EXTENSION;

void HandleSigterm(SIGNAL_ARGS) {
    int save_errno = errno;
    shutdown_requested = true;
    SetLatch(MyLatch);
    errno = save_errno;
}

// Wall-clock milliseconds: due times and expiry are compared with timestamps from the table.
int64 NowMs() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

DriverProcess *paused_drivers = nullptr;  // the worker's driver process, for DebugPause

// Fault injection for the crash tests (outbox.debug_pause, debug.hpp).
void DebugPause(const char *phase) {
    PauseForTest(phase, paused_drivers);
}

// The worker's session skips the _messages_changed trigger: it counts its own removals, and
// the outcomes of outbox.stats() with them, at its commit (queue_counts.hpp).
void CountRemoved(const std::string &destination, const WriteBackCounts &c) {
    CountOutcomes(destination.c_str(), c.delivered, c.dead, c.expired);
}

DispatchSettings CurrentSettings() {
    DispatchSettings s;
    s.batch_size = setting_batch_size;
    s.lease_timeout_ms = setting_lease_timeout_ms;
    s.max_attempts = setting_max_attempts;
    s.retry_base_ms = setting_retry_base_ms;
    s.retry_max_ms = setting_retry_max_ms;
    s.webhook_allowed_networks =
        setting_webhook_allowed_networks ? setting_webhook_allowed_networks : "";
    s.broker_allowed_networks =
        setting_broker_allowed_networks ? setting_broker_allowed_networks : "";
    return s;
}

class Worker {
  public:
    Worker(WorkerSlot *slot, std::string database);
    void Run();
    // Destroys the drivers, then ends the driver process; safe to call twice.
    void ReleaseDrivers() {
        dispatcher_.reset();
        paused_drivers = nullptr;
        drivers_.reset();
    }

  private:
    bool Turn(bool woken, bool poll_due);
    void Shutdown();
    void WriteBackAndClaim(bool claim,
                           std::vector<std::pair<ClaimRequest, std::vector<Message>>> *claimed,
                           std::vector<ClaimRequest> *fast, bool sweep = false);
    void SweepArchiveOnce();
    void SweepInboxOnce();
    void SweepKeysOnce();
    bool WriteBackOne(const std::string &destination, const std::vector<Resolution> &resolutions,
                      WriteBackCounts *written);
    template <typename F>
    void InTransaction(const char *activity, F &&body);
    void Publish(const Resolutions &resolved,
                 const std::map<std::string, WriteBackCounts> &written);
    void Wait(int64 timeout_ms, bool *latch_set);
    bool FastBatch(std::vector<ClaimRequest> requests);
    // A fresh token per claim: only that claim's write-back can match it. Never 0 (the fast
    // path's "locked by this transaction") or negative.
    // The worker's index is in the token (exactly_once.hpp): an exactly-once destination's
    // recovery settles this worker's leases only.
    int64 NextLeaseToken() {
        return LeaseTokenFor(slot_->worker_index, lease_base_ + ++lease_counter_);
    }
    void LogDriverLines();
    void SetState(WorkerState state) { pg_atomic_write_u32(&slot_->state, state); }
    void SetDestination(const char *name);
    void CountOpenTransactions();

  public:
    // The transactions this worker counts as open in outbox.stats(), given back at exit.
    void ForgetOpenTransactions() {
        for (const std::string &name : open_transactions_)
            if (DestinationCounters *c = GetDestinationCounters(MyDatabaseId, name.c_str()))
                pg_atomic_fetch_sub_u64(&c->transactions_open, 1);
        open_transactions_.clear();
    }

  private:
    WorkerSlot *slot_;
    std::string database_;
    std::unique_ptr<DriverProcess> drivers_;  // outlives the dispatcher's drivers
    std::unique_ptr<Dispatcher> dispatcher_;
    Resolutions pending_;  // outcomes not yet written back
    ClaimBook claims_;     // what the claims know between transactions (pg::UseClaimBook)
    uint64 seen_generation_ = 0;
    bool destinations_loaded_ = false;
    ExtensionState logged_extension_ = ExtensionState::Ready;  // the state last said in the log
    int consecutive_errors_ = 0;
    uint64 lease_counter_ = 0;
    uint64 lease_base_ = 0;       // random, so that tokens of different workers never meet
    bool woken_ = false;          // the latch was set while the fast path waited
    bool full_scan_ = false;      // this turn is a poll: claims start at the beginning
    bool archive_empty_ = false;  // nothing left to sweep while retention is 0
    bool sweep_inbox_ = false;    // this turn sweeps outbox.inbox (a poll, inbox_retention > 0)
    bool sweep_keys_ = false;     // this turn sweeps idle keys' rows (SweepKeysOnce)
    bool check_inbox_ = false;    // this turn says whether the database wants an inbox worker
    int64 next_key_sweep_ms_ = 0;
    MemoryContext turn_context_;
    WaitEventSet *wait_set_ = nullptr;
    std::vector<int> wait_fds_;
    uint64_t wait_drivers_built_ = 0;  // Dispatcher::DriversBuilt() when wait_set_ was built
    std::vector<std::string> open_transactions_;  // counted in outbox.stats() (sorted)
};

Worker *the_worker = nullptr;  // for the exit callback

void OnWorkerExit(int, Datum arg) {
    int slot_index = DatumGetInt32(arg);
    if (the_worker) {
        the_worker->ReleaseDrivers();
        the_worker->ForgetOpenTransactions();
    }
    WorkerSlot *slot = &shared->slots[slot_index];
    SpinLockAcquire(&slot->mutex);
    slot->destination[0] = '\0';
    SpinLockRelease(&slot->mutex);
    pg_atomic_write_u32(&slot->state, kWorkerStopping);
    pg_atomic_write_u32(&slot->driver_pid, 0);
    slot->pid = 0;
}

Worker::Worker(WorkerSlot *slot, std::string database)
    : slot_(slot), database_(std::move(database)) {
    UseClaimBook(&claims_);
    // Started with the first driver it hosts.
    drivers_ = std::make_unique<DriverProcess>(CurrentDriverProcessOptions());
    paused_drivers = drivers_.get();
    dispatcher_ = std::make_unique<Dispatcher>(
        [this](const DestinationSpec &spec, std::string *error) {
            return BuildDriver(drivers_.get(), spec, database_, slot_->worker_index,
                               dispatcher_->Settings(), error);
        },
        uint64(MyProcPid) << 32 ^ uint64(NowMs()));
    dispatcher_->SetAdoptFactory(
        [this](const DestinationSpec &spec, int worker_index, std::string *error) {
            return BuildAdoptingDriver(drivers_.get(), spec, database_, worker_index,
                                       dispatcher_->Settings(), error);
        });
    dispatcher_->SetPollHook([this] { drivers_->Service(); });
    dispatcher_->SetSettings(CurrentSettings());
    if (!pg_strong_random(&lease_base_, sizeof lease_base_))
        lease_base_ = uint64(MyProcPid) << 32 ^ uint64(NowMs());
    turn_context_ =
        AllocSetContextCreate(TopMemoryContext, "outbox worker turn", ALLOCSET_DEFAULT_SIZES);
}

// outbox.stats().transactions_open: this worker's exactly-once destinations with a batch (a
// Kafka transaction) in flight, counted up and down as that changes.
void Worker::CountOpenTransactions() {
    std::vector<std::string> now = dispatcher_->OpenTransactions();
    std::sort(now.begin(), now.end());
    if (now == open_transactions_)
        return;
    auto adjust = [](const std::string &name, bool up) {
        if (DestinationCounters *c = GetDestinationCounters(MyDatabaseId, name.c_str())) {
            if (up)
                pg_atomic_fetch_add_u64(&c->transactions_open, 1);
            else
                pg_atomic_fetch_sub_u64(&c->transactions_open, 1);
        }
    };
    for (const std::string &name : open_transactions_)
        if (!std::binary_search(now.begin(), now.end(), name))
            adjust(name, false);
    for (const std::string &name : now)
        if (!std::binary_search(open_transactions_.begin(), open_transactions_.end(), name))
            adjust(name, true);
    open_transactions_ = std::move(now);
}

void Worker::SetDestination(const char *name) {
    SpinLockAcquire(&slot_->mutex);
    strlcpy(slot_->destination, name, sizeof slot_->destination);
    SpinLockRelease(&slot_->mutex);
}

// Runs `body` in a transaction with SPI connected and a snapshot pushed; commits. On an
// exception the transaction is left for the caller to abort.
template <typename F>
void Worker::InTransaction(const char *activity, F &&body) {
    PgTry([activity] {
        SetCurrentStatementStartTimestamp();
        StartTransactionCommand();
        PinWorkerSessionSettings();
        if (SPI_connect() != SPI_OK_CONNECT)
            elog(ERROR, "outbox: SPI_connect failed");
        PushActiveSnapshot(GetTransactionSnapshot());
        pgstat_report_activity(STATE_RUNNING, activity);
    });
    body();
    WriteKeyRows();
    PgTry([] {
        SPI_finish();
        PopActiveSnapshot();
        CommitTransactionCommand();
        pgstat_report_stat(false);
        pgstat_report_activity(STATE_IDLE, nullptr);
    });
    TransactionEnded(true);
    MemoryContextSwitchTo(turn_context_);
}

void Worker::WriteBackAndClaim(bool claim,
                               std::vector<std::pair<ClaimRequest, std::vector<Message>>> *claimed,
                               std::vector<ClaimRequest> *fast, bool sweep) {
    std::map<std::string, WriteBackCounts> counts;
    Resolutions failed;  // destinations whose write-back failed in this turn
    // Exactly-once: lapsed leases of other worker indexes, to adopt after the commit.
    std::vector<std::pair<std::string, std::vector<int64_t>>> lapsed;
    ExtensionState extension = ExtensionState::Ready;
    std::string version;
    bool subscriptions = false;
    InTransaction("outbox: write back and claim", [&] {
        extension = InstalledExtension(&version);
        if (extension != ExtensionState::Ready)
            return;
        if (check_inbox_)
            subscriptions = SubscriptionsExist();
        if (!destinations_loaded_ || seen_generation_ != destinations_generation) {
            seen_generation_ = destinations_generation;
            dispatcher_->SetDestinations(LoadDestinations());
            destinations_loaded_ = true;
        }
        if (!pending_.empty())
            SetState(kWorkerWritingBack);
        for (const auto &[destination, resolutions] : pending_) {
            SetDestination(destination.c_str());
            WriteBackCounts written;
            if (!WriteBackOne(destination, resolutions, &written)) {
                failed[destination] = resolutions;  // kept for the next turn; no claim now
                continue;
            }
            CountRemoved(destination, written);
            counts[destination] += written;
        }
        for (const auto &[destination, resolutions] : failed)
            pending_.erase(destination);
        if (!pending_.empty())
            DebugPause("write-back");
        if (sweep)
            SweepArchiveOnce();
        if (sweep_keys_)
            SweepKeysOnce();
        if (sweep_inbox_)
            SweepInboxOnce();
        if (!claim)
            return;
        DebugPause("before-claim");
        for (const std::string &name : dispatcher_->AdoptionChecksDue(NowMs())) {
            if (failed.count(name))
                continue;
            std::vector<int64_t> tokens = LapsedForeignLeases(name, slot_->worker_index);
            if (!tokens.empty())
                lapsed.emplace_back(name, std::move(tokens));
        }
        SetState(kWorkerClaiming);
        int64 lease_ms = dispatcher_->Settings().lease_timeout_ms;
        for (ClaimRequest &request : dispatcher_->PlanClaims(NowMs())) {
            if (failed.count(request.destination))
                continue;
            request.from_start = full_scan_;
            if (PausesForTests())
                request.hold_locks = false;  // the crash tests pause in the leased path
            if (request.hold_locks) {        // claimed in a transaction of their own, FastBatch
                fast->push_back(std::move(request));
                continue;
            }
            SetDestination(request.destination.c_str());
            std::vector<Message> rows = ClaimRows(request, lease_ms, NextLeaseToken());
            claimed->emplace_back(std::move(request), std::move(rows));
        }
        if (!claimed->empty() && !claimed->back().second.empty())
            DebugPause("claim");
    });
    if (check_inbox_)
        SetInboxWanted(MyDatabaseId, subscriptions);
    if (extension != ExtensionState::Ready) {
        // Dropped while we ran (or never created), or still at the schema of an older version:
        // nothing to deliver, nothing to write back.
        if (logged_extension_ != extension && extension == ExtensionState::Missing)
            ereport(LOG, (errmsg("outbox: extension \"outbox\" is not installed in database "
                                 "\"%s\"; the worker waits for CREATE EXTENSION outbox",
                                 database_.c_str())));
        if (logged_extension_ != extension && extension == ExtensionState::OtherVersion)
            ereport(LOG, (errmsg("outbox: database \"%s\" has extension \"outbox\" %s, this "
                                 "module is %s; the worker waits for ALTER EXTENSION outbox "
                                 "UPDATE",
                                 database_.c_str(), version.c_str(), OUTBOX_EXTVERSION)));
        logged_extension_ = extension;
        SetState(kWorkerNoExtension);
        pending_.clear();
        dispatcher_->SetDestinations({});
        destinations_loaded_ = false;
        return;
    }
    logged_extension_ = ExtensionState::Ready;
    // The worker commits asynchronously, but a leased claim's `attempts + 1` must survive a
    // crash that the claimed message itself may cause: that count is what dead-letters a
    // message that kills the worker (poison) instead of crash-restarting the server forever.
    // So the claim's commit is flushed before any of its rows reaches a driver.
    bool leased = claim && std::any_of(claimed->begin(), claimed->end(),
                                       [](const auto &c) { return !c.second.empty(); });
    if (leased)
        PgTry([] { XLogFlush(XactLastCommitEnd); });
    Publish(pending_, counts);
    pending_ = std::move(failed);
    // Outside the transaction: building a driver waits for the driver process's answer.
    for (const auto &[name, tokens] : lapsed)
        for (const ForeignLeases &leases : GroupForeignLeases(slot_->worker_index, tokens))
            dispatcher_->Adopt(name, leases, NowMs());
}

// One destination's write-back, in a subtransaction of its own: when it fails (a constraint or
// trigger on outbox.dead_letters or archive, a lock timeout behind an operator's UPDATE) only it
// is rolled back, and the other destinations of the transaction go on. Returns false then, with
// the failure in the log and in the destination's last_error.
bool Worker::WriteBackOne(const std::string &destination,
                          const std::vector<Resolution> &resolutions, WriteBackCounts *written) {
    CaughtError error;
    int64 recovered = 0;
    auto body = [&] {
        // Exactly-once: a new driver's marker settles the destination's leased rows first.
        std::vector<Resolution> plain;
        for (const Resolution &r : resolutions) {
            if (r.action != Resolution::Action::Recover) {
                plain.push_back(r);
                continue;
            }
            int64_t batches = 0;
            if (r.adopted_worker >= 0)
                *written += RecoverAdopted(destination, r.adopted_worker, r.lease_token,
                                           r.adopted_tokens, &batches);
            else
                *written +=
                    RecoverLeased(destination, slot_->worker_index, r.lease_token, &batches);
            recovered += batches;
        }
        if (!plain.empty())
            *written += WriteBack(destination, plain);
    };
    if (InSubtransaction(body, &error)) {
        if (recovered > 0)
            if (DestinationCounters *c = GetDestinationCounters(MyDatabaseId, destination.c_str()))
                pg_atomic_fetch_add_u64(&c->recovered, uint64(recovered));
        return true;
    }
    ereport(LOG,
            (errcode(error.sqlerrcode),
             errmsg("outbox worker: writing back %zu outcomes of destination \"%s\" failed: %s",
                    resolutions.size(), destination.c_str(), error.message),
             error.detail[0] ? errdetail_internal("%s", error.detail) : 0,
             errhint("The other destinations go on; these outcomes are written again, and "
                     "their messages are sent again if their leases lapse.")));
    DestinationCounters *counters = GetDestinationCounters(MyDatabaseId, destination.c_str());
    if (counters) {
        std::string message = std::string("write-back failed: ") + error.message;
        SetLastError(counters, message.c_str());
    }
    return false;
}

// After a committed write-back: the counters of outbox.stats() and outbox.workers() (but those
// counted at the commit itself, CountRemoved).
void Worker::Publish(const Resolutions &resolved,
                     const std::map<std::string, WriteBackCounts> &written) {
    for (const auto &[destination, c] : written) {
        pg_atomic_fetch_add_u64(&slot_->delivered, c.delivered);
        pg_atomic_fetch_add_u64(&slot_->retried, c.retried);
        pg_atomic_fetch_add_u64(&slot_->deferred, c.deferred);
        pg_atomic_fetch_add_u64(&slot_->dead, c.dead);
        pg_atomic_fetch_add_u64(&slot_->expired, c.expired);
        DestinationCounters *counters = GetDestinationCounters(MyDatabaseId, destination.c_str());
        if (counters == nullptr)
            continue;
        // (delivered, dead and expired were counted at the commit: CountRemoved)
        pg_atomic_fetch_add_u64(&counters->failed, c.retried + c.dead);
        pg_atomic_fetch_add_u64(&counters->deferred, c.deferred);
        const std::string *last_error = nullptr;
        auto rs = resolved.find(destination);
        if (rs != resolved.end())
            for (const Resolution &r : rs->second)
                if (!r.error.empty())
                    last_error = &r.error;
        if (last_error)
            SetLastError(counters, last_error->c_str());
        if (c.delivered > 0) {
            SpinLockAcquire(&counters->mutex);
            counters->last_success_at = GetCurrentTimestamp();
            SpinLockRelease(&counters->mutex);
        }
    }
}

void Worker::LogDriverLines() {
    std::vector<std::string> lines;
    drivers_->TakeLog(lines);
    pg_atomic_write_u32(&slot_->driver_pid, uint32(drivers_->pid()));
    pg_atomic_write_u64(&slot_->driver_restarts, drivers_->restarts());
    dispatcher_->TakeLog(lines);
    for (const std::string &line : lines)
        ereport(LOG, (errmsg("outbox: %s", line.c_str())));
    // A destination that cannot get a driver says why in outbox.stats().last_error.
    for (const auto &[name, error] : dispatcher_->BuildErrors()) {
        DestinationCounters *counters = GetDestinationCounters(MyDatabaseId, name.c_str());
        if (counters)
            SetLastError(counters, error.c_str());
    }
}

// One turn: collect outcomes; write back and claim if there is anything to do. Returns true
// when a claim came back full, i.e. more work is waiting now.
// Retention: one bounded batch of archived rows past outbox.retention per poll (the archive is
// also emptied, batch by batch, after retention is set back to 0).
void Worker::SweepArchiveOnce() {
    constexpr int kSweepBatch = 1000;
    if (setting_retention_s == 0 && archive_empty_)
        return;
    int64 swept = SweepArchive(setting_retention_s, kSweepBatch);
    archive_empty_ = setting_retention_s == 0 && swept < kSweepBatch;
}

// The inbox: one bounded batch of dedup rows past outbox.inbox_retention per poll.
void Worker::SweepInboxOnce() {
    constexpr int kInboxSweepBatch = 5000;
    if (setting_inbox_retention_s > 0)
        SweepInbox(setting_inbox_retention_s, kInboxSweepBatch);
}

// ordering = key: one bounded batch of idle keys' rows (kIdleKeySeconds).
void Worker::SweepKeysOnce() {
    int64 swept = SweepIdleKeys(kIdleKeySeconds, kKeySweepBatch);
    next_key_sweep_ms_ = swept < kKeySweepBatch ? NowMs() + kKeySweepEveryMs : 0;
}

bool Worker::Turn(bool woken, bool poll_due) {
    int64 now = NowMs();
    dispatcher_->Poll(now, pending_);
    LogDriverLines();
    CountOpenTransactions();
    if (woken)
        dispatcher_->WakeAll();
    // A transaction is needed to read changed destinations (and on every poll, the safety
    // net), or to claim; a commit that only added messages for a paused destination needs none.
    bool reload = pg_atomic_exchange_u32(&slot_->reload, 0) != 0;
    // A change to outbox.destinations committed: load them in this turn. (Their relcache
    // invalidation alone has been seen to leave the worker on the old config; the claims' config
    // check then refuses every claim until the destinations are loaded again.)
    if (reload)
        destinations_loaded_ = false;
    bool claim = reload || poll_due || !dispatcher_->PlanClaims(now).empty();
    bool sweep = poll_due && !(setting_retention_s == 0 && archive_empty_);
    // The inbox's dedup rows are swept on polls too (WriteBackAndClaim).
    sweep_inbox_ = poll_due && setting_inbox_retention_s > 0;
    sweep_keys_ = poll_due && now >= next_key_sweep_ms_;
    // One worker of the database says on each poll whether it has subscriptions: the launcher
    // then keeps an inbox worker running for them (inbox_worker.cpp).
    check_inbox_ = poll_due && slot_->worker_index == 0;
    if (pending_.empty() && !claim && !sweep && !sweep_inbox_ && !sweep_keys_)
        return false;

    std::vector<std::pair<ClaimRequest, std::vector<Message>>> claimed;
    std::vector<ClaimRequest> fast;
    // When there is nothing to write back and only fast-path claims to make, the fast batch's
    // own transaction is the only one this turn needs.
    std::vector<ClaimRequest> plan = dispatcher_->PlanClaims(now);
    // The poll's claims start at the beginning of each destination's queue (queue.cpp: due
    // hints): no message waits longer than poll_interval for a hint.
    full_scan_ = poll_due;
    for (ClaimRequest &r : plan)
        r.from_start = full_scan_;
    // The crash tests pause in the phases of the leased path, which they need deterministic.
    bool fast_only =
        !PausesForTests() && !sweep && !sweep_inbox_ && !sweep_keys_ && !check_inbox_ &&
        pending_.empty() && destinations_loaded_ && seen_generation_ == destinations_generation &&
        !plan.empty() &&
        std::all_of(plan.begin(), plan.end(), [](const ClaimRequest &r) { return r.hold_locks; });
    if (fast_only)
        fast = std::move(plan);
    else
        WriteBackAndClaim(claim, &claimed, &fast, sweep);
    pg_atomic_fetch_add_u64(&slot_->cycles, 1);
    slot_->last_cycle_at = GetCurrentTimestamp();

    bool full = false;
    size_t total = 0;
    now = NowMs();
    // A pause in "publish" holds the driver process before the rows are handed over, not after:
    // a webhook driver starts its transfers in Submit, and a hold that arrived later could find
    // the request sent (test/t/084 b1: a message the paused worker holds never reaches the
    // endpoint, as when the drivers ran inside the worker).
    bool hold_first = paused_drivers && PausesInPhase("publish") &&
                      std::any_of(claimed.begin(), claimed.end(),
                                  [](const auto &c) { return !c.second.empty(); });
    if (hold_first)
        paused_drivers->Freeze(true);
    for (auto &[request, rows] : claimed) {
        full = full || int(rows.size()) >= request.limit;
        total += rows.size();
        dispatcher_->Submit(request.destination, request.limit, std::move(rows), now);
    }
    pg_atomic_fetch_add_u64(&slot_->claimed, total);
    if (total > 0)
        DebugPause("publish");
    if (!fast.empty())
        full = FastBatch(std::move(fast)) || full;
    pg_atomic_write_u32(&slot_->batch_in_flight, uint32(dispatcher_->InFlight()));
    CountOpenTransactions();
    return full;
}

// The fast path, for destinations that acknowledge within milliseconds: rows are locked
// (FOR UPDATE SKIP LOCKED, nothing written), published, and their outcomes recorded before
// the same transaction commits, so a delivered message costs one write (its DELETE) instead of
// a lease UPDATE plus the DELETE. While one batch waits for its acknowledgements the next is
// claimed, so the database and the broker work at the same time. Nothing is lost if the
// worker dies meanwhile: the transaction aborts and the rows are due again (delivered twice at
// worst). Claiming stops after FastBatchPlan::kClaimMs; rows whose outcome has not arrived kBatchMs
// after the start are leased before the commit and finish like any leased row.
bool Worker::FastBatch(std::vector<ClaimRequest> requests) {
    bool claimed_full = false;  // a claim returned its limit: more rows are probably due
    Resolutions done;           // every outcome written back in this transaction
    std::map<std::string, WriteBackCounts> counts;
    size_t total = 0;
    InTransaction("outbox: fast batch", [&] {
        std::string version;
        if (InstalledExtension(&version) != ExtensionState::Ready)
            return;
        // A destination paused, changed or dropped since the plan was made (this transaction
        // is the first to see it): plan again.
        if (seen_generation_ != destinations_generation) {
            seen_generation_ = destinations_generation;
            dispatcher_->SetDestinations(LoadDestinations());
            std::vector<ClaimRequest> plan = dispatcher_->PlanClaims(NowMs());
            requests.clear();
            for (ClaimRequest &r : plan)
                if (r.hold_locks) {
                    r.from_start = full_scan_;
                    requests.push_back(std::move(r));
                }
        }
        int64 lease_ms = dispatcher_->Settings().lease_timeout_ms;
        // How long it claims, which requests claim again, when it ends (fast_batch.hpp).
        FastBatchPlan batch(requests, NowMs());

        auto locked = [&] {
            size_t n = 0;
            for (const ClaimRequest &request : requests)
                n += dispatcher_->LockedInFlight(request.destination).size();
            return n;
        };
        auto may_claim = [&](int64 now) {
            return batch.MayClaim(now, pg_atomic_read_u32(&slot_->reload) != 0);
        };
        Resolutions got;
        for (;;) {
            int64 now = NowMs();
            bool claiming = may_claim(now);
            for (size_t i = 0; claiming && i < requests.size(); i++) {
                ClaimRequest &request = requests[i];
                if (!batch.WantsClaim(i, dispatcher_->Capacity(request.destination)))
                    continue;
                SetState(kWorkerClaiming);
                SetDestination(request.destination.c_str());
                std::vector<Message> rows = ClaimRows(request, lease_ms, 0);
                bool full = batch.Claimed(i, rows.size());
                claimed_full = claimed_full || full;
                total += rows.size();
                dispatcher_->Submit(request.destination, request.limit, std::move(rows), NowMs());
            }

            SetState(kWorkerPublishing);
            now = NowMs();
            dispatcher_->Poll(now, got);
            // This transaction's rows are written back in it, as their outcomes arrive (while the
            // broker works on the next batch); the rest waits for the next turn.
            for (auto &[destination, resolutions] : got) {
                std::vector<Resolution> mine;
                for (Resolution &r : resolutions)
                    (r.lease_token == 0 ? mine : pending_[destination]).push_back(std::move(r));
                if (mine.empty())
                    continue;
                SetState(kWorkerWritingBack);
                WriteBackCounts written;
                if (!WriteBackOne(destination, mine, &written)) {
                    // Its rows stay locked, unchanged, until the commit: due again then (sent
                    // again). The other destinations go on; this one claims no more now.
                    batch.WriteBackFailed(destination);
                    continue;
                }
                CountRemoved(destination, written);
                counts[destination] += written;
                for (Resolution &r : mine)
                    done[destination].push_back(std::move(r));
                // ordering = key: a head that is done lets its key's next message go, in this
                // same transaction.
                batch.WrittenBack(destination);
            }
            got.clear();
            claiming = may_claim(now);
            // now, without waiting for acknowledgements first
            bool more_to_claim = batch.MoreToClaim(claiming, [&](size_t i) {
                return dispatcher_->Capacity(requests[i].destination) >= size_t(requests[i].limit);
            });
            if (batch.Over(now, locked(), claiming))
                break;
            bool latch_set = false;
            Wait(batch.WaitMs(now, dispatcher_->NextTimeoutMs(now), more_to_claim), &latch_set);
            woken_ = woken_ || latch_set;
            if (latch_set)  // a producer committed: its rows may join this batch
                batch.LatchSet();
        }
        for (const ClaimRequest &request : requests) {
            std::vector<int64_t> ids = dispatcher_->LockedInFlight(request.destination);
            if (ids.empty())
                continue;
            int64 token = NextLeaseToken();
            LeaseLockedRows(ids, lease_ms, token);
            dispatcher_->Relet(request.destination, ids, token);
        }
    });
    pg_atomic_fetch_add_u64(&slot_->claimed, total);
    Publish(done, counts);
    return claimed_full;
}

void Worker::Wait(int64 timeout_ms, bool *latch_set) {
    std::vector<int> fds = dispatcher_->WaitFds();
    // Same numbers are not the same fds: a rebuilt driver's fd may reuse a closed one's number.
    if (wait_set_ == nullptr || fds != wait_fds_ ||
        dispatcher_->DriversBuilt() != wait_drivers_built_) {
        if (wait_set_)
            FreeWaitEventSet(wait_set_);
        wait_set_ = CreateSessionWaitEventSet(int(fds.size()) + 2);
        AddWaitEventToSet(wait_set_, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, nullptr);
        AddWaitEventToSet(wait_set_, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, nullptr, nullptr);
        for (int fd : fds)
            AddWaitEventToSet(wait_set_, WL_SOCKET_READABLE, fd, nullptr, nullptr);
        wait_fds_ = fds;
        wait_drivers_built_ = dispatcher_->DriversBuilt();
    }
    WaitEvent events[8];
    int n =
        WaitEventSetWait(wait_set_, long(timeout_ms), events, lengthof(events), wait_event_main);
    *latch_set = false;
    for (int i = 0; i < n; i++)
        if (events[i].events & WL_LATCH_SET)
            *latch_set = true;
    if (*latch_set)
        ResetLatch(MyLatch);
}

void Worker::Run() {
    int64 next_poll = 0;  // poll at once on start: leases of a previous run may be due
    bool latch_set = false;
    while (!shutdown_requested) {
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            ProcessConfigFile(PGC_SIGHUP);
            dispatcher_->SetSettings(CurrentSettings());
            drivers_->SetOptions(CurrentDriverProcessOptions());
            latch_set = true;
            // A shorter poll_interval applies now, not once the longer one has passed.
            next_poll = std::min(next_poll, NowMs() + setting_poll_interval_ms);
        }
        if (DatabaseIsHeld(MyDatabaseId))
            break;
        CHECK_FOR_INTERRUPTS();

        int64 now = NowMs();
        bool poll_due = now >= next_poll;
        if (poll_due)
            next_poll = now + setting_poll_interval_ms;
        bool more = false;
        CaughtError error;
        bool failed = false;
        ErrorStackState entry = SaveErrorStack();
        // A latch the fast path consumed while it waited (woken_) counts as a wake-up of the
        // next turn: the commit that set it may have come too late for the batch's claims, and
        // nothing else would claim its rows before the next commit or poll.
        bool woken = latch_set || poll_due || woken_;
        woken_ = false;
        try {
            more = Turn(woken, poll_due);
            consecutive_errors_ = 0;
        } catch (...) {
            CaptureCurrentException(&error);
            failed = true;
        }
        if (failed)
            RestoreErrorStack(entry, "the outbox worker");
        MemoryContextSwitchTo(turn_context_);
        MemoryContextReset(turn_context_);

        int64 timeout;
        if (failed) {
            // Abort the half-done transaction; outcomes stay pending and are written next time.
            // Rows the fast path had locked are free again: their outcomes no longer belong
            // to anyone (they will be claimed and delivered again).
            PgTry([] { AbortCurrentTransaction(); });
            TransactionEnded(false);
            dispatcher_->OrphanLocked();
            MemoryContextSwitchTo(turn_context_);
            consecutive_errors_++;
            pg_atomic_fetch_add_u64(&slot_->errors, 1);
            ereport(LOG, (errcode(error.sqlerrcode), errmsg("outbox worker: %s", error.message),
                          error.detail[0] ? errdetail_internal("%s", error.detail) : 0));
            SetState(kWorkerBackingOff);
            timeout =
                std::min<int64>(kErrorBackoffMaxMs, int64(250) << std::min(consecutive_errors_, 7));
        } else if (more || woken_) {
            timeout = 0;
        } else {
            now = NowMs();
            timeout = std::max<int64>(0, next_poll - now);
            int64 driver = dispatcher_->NextTimeoutMs(now);
            if (driver >= 0)
                timeout = std::min(timeout, driver);
            uint32 state = pg_atomic_read_u32(&slot_->state);
            if (state != kWorkerNoExtension)
                SetState(dispatcher_->InFlight() > 0 ? kWorkerPublishing : kWorkerIdle);
            if (dispatcher_->InFlight() == 0)
                SetDestination("");
        }
        Wait(timeout, &latch_set);
    }
    Shutdown();
}

// SIGTERM: stop claiming, give in-flight messages a moment to be acknowledged, hand back the
// rest at once, write it all back, exit.
void Worker::Shutdown() {
    SetState(kWorkerStopping);
    int64 deadline = NowMs() + kShutdownGraceMs;
    bool abandoned = false;
    for (;;) {
        int64 now = NowMs();
        if (!abandoned && now >= deadline) {
            dispatcher_->StopAll();
            abandoned = true;
            deadline = now + 500;  // time for the purge reports
        } else if (abandoned && now >= deadline) {
            break;
        }
        dispatcher_->Poll(now, pending_);
        if (dispatcher_->InFlight() == 0)
            break;
        bool latch_set;
        int64 timeout = dispatcher_->NextTimeoutMs(now);
        Wait(timeout < 0 ? 50 : std::min<int64>(timeout, 50), &latch_set);
    }
    dispatcher_->ReleaseAll(pending_);
    LogDriverLines();
    if (pending_.empty())
        return;
    try {
        WriteBackAndClaim(false, nullptr, nullptr);
    } catch (...) {
        CaughtError error;
        CaptureCurrentException(&error);
        ereport(LOG,
                (errmsg("outbox worker: could not hand back leases at shutdown: %s", error.message),
                 errdetail("They become due again after outbox.lease_timeout.")));
    }
}

}  // namespace

}  // namespace outbox::pg

using namespace outbox::pg;

void outbox_worker_main(Datum arg) {
    char *database = nullptr;
    WorkerSlot *slot =
        StartWorkerSession(arg, WorkerRole::Delivery, HandleSigterm, OnWorkerExit, &database);
    wait_event_main = NewWaitEvent("OutboxWorkerMain");

    CaughtError error;
    bool failed = false;
    ErrorStackState entry = SaveErrorStack();
    try {
        the_worker = new Worker(slot, database);
        the_worker->Run();
        the_worker->ReleaseDrivers();
    } catch (...) {
        CaptureCurrentException(&error);
        failed = true;
    }
    if (failed) {
        RestoreErrorStack(entry, "the outbox worker");
        if (the_worker)
            the_worker->ReleaseDrivers();
        ereport(LOG, (errmsg("outbox worker stopped: %s", error.message)));
        proc_exit(1);
    }
    proc_exit(0);
}
