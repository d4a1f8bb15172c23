// The worker's delivery logic, free of PostgreSQL: which destinations to claim for and how
// many, handing claimed rows to the right driver, turning driver outcomes into what the
// write-back does with each row (delete, reschedule, bury), and outage probing.
//
// The worker (src/pg/worker.cpp) owns the loop and the transactions; it asks the dispatcher
// what to claim, writes back what it resolved, and sleeps until NextTimeoutMs or a driver fd.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "outbox/config.hpp"
#include "outbox/driver.hpp"
#include "outbox/exactly_once.hpp"
#include "outbox/message.hpp"

namespace outbox {

// A row of outbox.destinations as the worker read it.
struct DestinationSpec {
    std::string name;
    std::string config_json;  // the stored config, to notice changes
    bool paused = false;
    DestinationConfig config;
    std::string config_error;  // the stored config no longer passes the check (e.g. ca_file gone)
    // outbox.destinations.created_by_superuser: a superuser wrote the config as it stands (a
    // webhook's error texts may then quote response bodies; its brokers may be anywhere, and
    // what they answered is shown: broker_address.hpp).
    bool config_by_superuser = false;
};

// Settings in force (the GUCs, with per-destination overrides applied by the dispatcher).
struct DispatchSettings {
    int batch_size = 500;
    int64_t lease_timeout_ms = 30000;
    int max_attempts = 10;
    int64_t retry_base_ms = 1000;
    int64_t retry_max_ms = 300000;
    std::string webhook_allowed_networks;  // outbox.webhook_allowed_networks
    std::string broker_allowed_networks;   // outbox.broker_allowed_networks
};

// Why a row goes to the dead letters (outbox.dead_letters.reason).
enum class DeadReason { Rejected, MaxAttempts, Expired, Poison };
const char *DeadReasonName(DeadReason reason);

// What the write-back does with one leased row; every action presents the lease token.
struct Resolution {
    enum class Action {
        Delete,      // delivered
        Reschedule,  // due again after delay_ms; refund_attempt when no attempt was spent
        Bury,        // to the dead letters with dead_reason
        // "delivery": "exactly_once", once per driver start (OutcomeKind::Marker): the rows
        // this worker leased for the destination under lease_token went out in a committed
        // transaction (delete them); its other leased rows did not (due again). id is 0.
        // With adopted_worker ≥ 0 the marker is that worker index's, read by an adoption
        // (Dispatcher::Adopt), and only the lapsed batches adopted_tokens are settled.
        Recover,
    };
    int64_t id = 0;
    int64_t lease_token = 0;
    Action action = Action::Delete;
    int64_t delay_ms = 0;
    bool refund_attempt = false;
    DeadReason dead_reason = DeadReason::Rejected;
    std::string error;
    // The endpoint answered 410 Gone: the write-back pauses the destination (outbox.pause).
    bool pause_destination = false;
    int adopted_worker = -1;
    std::vector<int64_t> adopted_tokens;
};

// Resolutions grouped by destination (the write-back runs one statement per destination and
// action, so its row counts are the destination's counters).
using Resolutions = std::map<std::string, std::vector<Resolution>>;

struct ClaimRequest {
    std::string destination;
    // The destination's stored config the worker delivers with: the claim takes nothing if the
    // stored one differs by then (the worker loads the new one first).
    std::string config_json;
    int limit = 0;
    bool ordered = false;        // ordering = key: claim only the head message of each key
    bool block_on_dead = false;  // ordering = key, on_dead = block
    // The fast path: lock the rows for the rest of the worker's transaction instead of leasing
    // them, and record their outcomes before it commits (see README "How it works").
    bool hold_locks = false;
    // "delivery": "exactly_once": a row whose lapsed lease another worker index made is not
    // claimed (that worker's transaction may have committed it): it is adopted (Adopt) first.
    bool exactly_once = false;
    // Where the previous batch of the same transaction ended (PostgreSQL timestamp and id); the
    // first batch starts where the destination's due messages are known to begin (queue.cpp),
    // or with from_start (the poll's claims) at the beginning.
    int64_t after_available_at = INT64_MIN;
    int64_t after_id = 0;
    bool from_start = false;
};

// Builds the driver for a destination; nullptr with *error when it cannot.
using DriverFactory =
    std::function<std::unique_ptr<Driver>(const DestinationSpec &spec, std::string *error)>;
// Builds a driver that adopts worker index `worker_index`'s transactional.id for an
// exactly-once destination (DriverContext::adopt).
using AdoptFactory = std::function<std::unique_ptr<Driver>(const DestinationSpec &spec,
                                                           int worker_index, std::string *error)>;

class Dispatcher {
  public:
    explicit Dispatcher(DriverFactory factory, uint64_t seed);
    ~Dispatcher();

    // New settings. When the ones a driver is built with (batch size, lease timeout) change,
    // every driver is rebuilt, and every webhook driver when the allowed networks change;
    // drivers with messages in flight finish them first.
    void SetSettings(const DispatchSettings &settings);
    const DispatchSettings &Settings() const { return settings_; }

    // Replaces the destinations. A destination whose config changed gets a new driver once its
    // old one has nothing in flight, and its outage state is reset.
    void SetDestinations(std::vector<DestinationSpec> specs);

    // Work may have appeared (a commit woke us, or the poll interval passed).
    void WakeAll();

    // Exactly-once adoption (exactly_once.hpp). The destinations whose claims leave lapsed leases
    // of other worker indexes alone (not paused), and that are due a look for them now (at most
    // once per lease_timeout/2 each).
    void SetAdoptFactory(AdoptFactory factory) { adopt_factory_ = std::move(factory); }
    std::vector<std::string> AdoptionChecksDue(int64_t now_ms);
    // Starts adopting `leases.worker_index` for `destination` unless an adoption of it is under
    // way or ended less than a lease_timeout ago; true when started. Its Recover resolution
    // (the marker read, adopted_worker and adopted_tokens set) comes out of Poll; when the
    // driver fails or takes longer than a lease_timeout (at least 10 s) it is dropped and logged,
    // and the rows stay leased until the next try.
    bool Adopt(const std::string &destination, const ForeignLeases &leases, int64_t now_ms);
    size_t AdoptionsUnderWay() const { return adoptions_.size(); }

    // What to claim now: destinations that are not paused, not in outage (except a one-row
    // probe when it is due), and whose driver has room.
    std::vector<ClaimRequest> PlanClaims(int64_t now_ms);

    // Rows claimed for `destination` (asked for `asked`). Expired and poison rows are resolved
    // at once; the rest go to the driver — except a row whose earlier claim is still in flight
    // (its lease lapsed, or the fast path locked it again): it is never sent twice; the request
    // in flight takes the new claim's lease token, so its outcome is written back with it.
    void Submit(const std::string &destination, int asked, std::vector<Message> rows,
                int64_t now_ms);

    // Serves every driver and moves everything resolved since the last call into `out`.
    void Poll(int64_t now_ms, Resolutions &out);

    // Milliseconds until the dispatcher needs to run again without an fd or latch event
    // (a due probe, a driver's poll timer, a driver to rebuild); -1 for none.
    int64_t NextTimeoutMs(int64_t now_ms) const;

    // File descriptors to wait on, each once (drivers in the helper process share one).
    std::vector<int> WaitFds() const;
    // How many drivers have been built so far. A wait set built from WaitFds() must be built
    // again when this changes even if the list of numbers did not: a new driver's fd often
    // gets the number its predecessor's closed fd had, which the wait set no longer watches.
    uint64_t DriversBuilt() const { return drivers_built_; }

    // Runs at the start of every Poll, before the drivers are served: the driver process reads
    // its socket once there for all of its drivers.
    void SetPollHook(std::function<void()> hook) { poll_hook_ = std::move(hook); }

    // Fast path: the rows of `destination` submitted under transaction locks (lease token 0)
    // whose outcome is not known yet; and, when they must outlive the transaction, the lease
    // they now hold instead.
    std::vector<int64_t> LockedInFlight(const std::string &destination) const;
    // How many more messages the destination takes now: its driver's room, within the claim
    // window (Room in dispatcher.cpp).
    size_t Capacity(const std::string &destination) const;
    void Relet(const std::string &destination, const std::vector<int64_t> &ids, int64_t token);
    // The transaction holding the fast path's locks aborted: outcomes of those rows match
    // nothing any more (they are due again and will be delivered again).
    void OrphanLocked();

    // Shutdown, first step: stop claiming and let the drivers give up on what is in flight.
    // From now on an unfinished row comes back as a Reschedule with no delay, attempt refunded.
    void StopAll();
    // Shutdown, last step: every row still in flight is handed back the same way, and the
    // drivers are destroyed.
    void ReleaseAll(Resolutions &out);
    size_t InFlight() const;
    // "delivery": "exactly_once" destinations with a batch in flight now: each has one Kafka
    // transaction open (outbox.stats().transactions_open).
    std::vector<std::string> OpenTransactions() const;

    // Lines for the server log, prefixed with the destination name.
    void TakeLog(std::vector<std::string> &lines);

    // Destinations whose driver cannot be built now, with the reason (for outbox.stats()).
    std::vector<std::pair<std::string, std::string>> BuildErrors() const;

  private:
    struct Destination;

    Resolution Resolve(Destination &d, const Outcome &outcome, int attempts,
                       int64_t first_failed_ms, int64_t now_ms);
    void EnsureDriver(Destination &d, int64_t now_ms);
    void Retire(std::unique_ptr<Destination> &d);
    int MaxAttempts(const Destination &d) const;
    size_t Room(const Destination &d) const;

    struct Adoption {
        std::string destination;
        ForeignLeases leases;
        std::unique_ptr<Driver> driver;
        int64_t deadline_ms = 0;
    };
    void PollAdoptions(int64_t now_ms);

    DriverFactory factory_;
    AdoptFactory adopt_factory_;
    std::vector<Adoption> adoptions_;
    // (destination, worker index) -> when it may be adopted again; destination -> next look.
    std::map<std::pair<std::string, int>, int64_t> adopt_not_before_;
    std::map<std::string, int64_t> adopt_check_at_;
    std::function<void()> poll_hook_;
    DispatchSettings settings_;
    std::map<std::string, std::unique_ptr<Destination>> destinations_;
    // Drivers of destinations that were dropped or reconfigured, kept until drained.
    std::vector<std::unique_ptr<Destination>> retired_;
    Resolutions resolved_;
    std::vector<std::string> log_;
    bool stopping_ = false;
    uint64_t drivers_built_ = 0;
    uint64_t random_state_;
    uint64_t NextRandom();
};

}  // namespace outbox
