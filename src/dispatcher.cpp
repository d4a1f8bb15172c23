// The worker's delivery logic (see include/outbox/dispatcher.hpp).
#include "outbox/dispatcher.hpp"

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

#include "outbox/broker_address.hpp"
#include "outbox/broker_kind.hpp"
#include "outbox/backoff.hpp"
#include "outbox/duration.hpp"

namespace outbox {

namespace {

// Outage probing: the first probe after 1 s, doubling to at most 30 s between probes.
constexpr int64_t kProbeBaseMs = 1000;
constexpr int64_t kProbeMaxMs = 30000;
// The fast path is used while the destination acknowledges within this time on average. As the
// worker sees it, a backlog's second batch waits for the first one's acknowledgements (Kafka: a
// partition's next request goes out once the previous one is acknowledged), so this is about two
// round trips: up to ~100 ms each, a fast batch (claims for 50 ms, then waits for the last
// acknowledgements) still ends within its 250 ms, and it writes one row version per message
// instead of a lease's three (new row version, two index entries) before the DELETE.
constexpr double kFastPathMaxAckMs = 200;
// A destination whose driver could not be built is retried this often.
constexpr int64_t kRebuildIntervalMs = 5000;
// Ended outages a destination remembers for "retry_budget" (older ones count as spent budget).
constexpr size_t kOutagesKept = 256;

}  // namespace

const char *DeadReasonName(DeadReason reason) {
    switch (reason) {
        case DeadReason::Rejected:
            return "rejected";
        case DeadReason::MaxAttempts:
            return "max_attempts";
        case DeadReason::Expired:
            return "expired";
        case DeadReason::Poison:
            return "poison";
    }
    return "rejected";
}

struct Dispatcher::Destination {
    DestinationSpec spec;
    std::unique_ptr<Driver> driver;
    std::string build_error;
    int64_t next_build_ms = 0;
    struct InFlight {
        int64_t lease_token;  // 0: locked by the worker's open transaction (fast path)
        int attempts;
        int64_t submitted_ms;
        int64_t first_failed_ms;  // the row's first_failed_at (0: none)
    };
    std::unordered_map<int64_t, InFlight> in_flight;  // by id
    bool want_more = true;    // the last claim was full, or we were woken since
    bool backlog = false;     // the last claim came back full (Room: the window is wide)
    bool lease_seen = false;  // an outcome of a leased claim was recorded since start
    double ack_ms = 0;        // moving average of submit-to-outcome time
    int outage_failures = 0;  // consecutive probes that found the destination unreachable
    int64_t next_probe_ms = 0;
    int64_t probe_id = 0;  // the probe in flight (0: none)
    int64_t probe_sent_ms = 0;
    // "retry_budget": when the current outage began (valid while outage_failures > 0), and the
    // outages that ended since the worker started, oldest first, as [start, end) in ms.
    int64_t outage_started_ms = 0;
    std::deque<std::pair<int64_t, int64_t>> outages;

    // The destination answered again: the outage (if any) ends now.
    void EndOutage(int64_t now_ms) {
        if (outage_failures == 0)
            return;
        outages.emplace_back(outage_started_ms, now_ms);
        if (outages.size() > kOutagesKept)
            outages.pop_front();
        outage_failures = 0;
    }
    // Milliseconds of [from_ms, now_ms) the destination was unreachable.
    int64_t UnreachableMs(int64_t from_ms, int64_t now_ms) const {
        int64_t total = 0;
        auto add = [&](int64_t start, int64_t end) {
            start = std::max(start, from_ms);
            end = std::min(end, now_ms);
            if (end > start)
                total += end - start;
        };
        for (const auto &[start, end] : outages)
            add(start, end);
        if (outage_failures > 0)
            add(outage_started_ms, now_ms);
        return total;
    }
};

Dispatcher::Dispatcher(DriverFactory factory, uint64_t seed)
    : factory_(std::move(factory)), random_state_(seed ? seed : 0x9E3779B97F4A7C15ull) {}

Dispatcher::~Dispatcher() = default;

// xorshift64*: jitter needs spread, not cryptographic strength.
uint64_t Dispatcher::NextRandom() {
    random_state_ ^= random_state_ >> 12;
    random_state_ ^= random_state_ << 25;
    random_state_ ^= random_state_ >> 27;
    return random_state_ * 0x2545F4914F6CDD1Dull;
}

void Dispatcher::SetDestinations(std::vector<DestinationSpec> specs) {
    std::map<std::string, std::unique_ptr<Destination>> next;
    for (DestinationSpec &spec : specs) {
        auto it = destinations_.find(spec.name);
        if (it != destinations_.end() && it->second->spec.config_json == spec.config_json &&
            it->second->spec.config_by_superuser == spec.config_by_superuser) {
            // Same config: keep driver and state, take the new paused flag.
            it->second->spec.paused = spec.paused;
            it->second->want_more = true;
            next.emplace(spec.name, std::move(it->second));
            destinations_.erase(it);
            continue;
        }
        auto d = std::make_unique<Destination>();
        d->spec = std::move(spec);
        // A new config is a new start of the outage state, but the outages that ended still
        // spent no retry budget.
        if (it != destinations_.end())
            d->outages = it->second->outages;
        next.emplace(d->spec.name, std::move(d));
    }
    // Dropped or reconfigured: finish what is in flight on the old driver, then let it go.
    for (auto &[name, d] : destinations_)
        Retire(d);
    destinations_ = std::move(next);
}

void Dispatcher::Retire(std::unique_ptr<Destination> &d) {
    if (d->driver && d->driver->InFlight() > 0)
        retired_.push_back(std::move(d));
}

void Dispatcher::SetSettings(const DispatchSettings &settings) {
    bool rebuild = settings.batch_size != settings_.batch_size ||
                   settings.lease_timeout_ms != settings_.lease_timeout_ms;
    bool rebuild_webhooks = settings.webhook_allowed_networks != settings_.webhook_allowed_networks;
    bool rebuild_brokers = settings.broker_allowed_networks != settings_.broker_allowed_networks;
    settings_ = settings;
    if (!rebuild && !rebuild_webhooks && !rebuild_brokers)
        return;
    for (auto &[name, d] : destinations_) {
        bool webhook =
            d->spec.config.kind != nullptr && d->spec.config.kind->network == NetworkRule::Webhook;
        if (!d->driver || (!rebuild && !(webhook ? rebuild_webhooks : rebuild_brokers)))
            continue;
        // The old driver finishes its messages under a retired copy of the destination.
        auto old = std::make_unique<Destination>();
        old->spec = d->spec;
        old->driver = std::move(d->driver);
        old->in_flight = std::move(d->in_flight);
        d->in_flight.clear();
        Retire(old);
    }
}

void Dispatcher::WakeAll() {
    for (auto &[name, d] : destinations_)
        d->want_more = true;
}

int Dispatcher::MaxAttempts(const Destination &d) const {
    return d.spec.config.retry.max_attempts > 0 ? d.spec.config.retry.max_attempts
                                                : settings_.max_attempts;
}

void Dispatcher::EnsureDriver(Destination &d, int64_t now_ms) {
    if (d.driver || now_ms < d.next_build_ms)
        return;
    std::string error = d.spec.config_error;
    if (error.empty())
        d.driver = factory_(d.spec, &error);
    if (!d.driver) {
        if (error != d.build_error)
            log_.push_back(d.spec.name + ": " + error);
        d.build_error = error;
        d.next_build_ms = now_ms + kRebuildIntervalMs;
    } else {
        d.build_error.clear();
        drivers_built_++;
    }
}

std::vector<ClaimRequest> Dispatcher::PlanClaims(int64_t now_ms) {
    // A claim of up to `limit` rows for `d`, in the destination's ordering mode. The fast path
    // (row locks held while the destination acknowledges) is for destinations that answer
    // within milliseconds; it starts only once a leased claim went through since the worker
    // started, so a message that kills the worker is still counted (poison) at each restart.
    auto Request = [this](const Destination &d, int limit) {
        ClaimRequest r;
        r.destination = d.spec.name;
        r.config_json = d.spec.config_json;
        r.limit = limit;
        r.ordered = d.spec.config.ordering == Ordering::Key;
        r.block_on_dead = r.ordered && d.spec.config.on_dead == OnDead::Block;
        r.exactly_once = d.spec.config.delivery == Delivery::ExactlyOnce;
        // Exactly-once: always leased, the claim committed before its transaction begins.
        r.hold_locks = d.outage_failures == 0 && d.lease_seen && d.ack_ms < kFastPathMaxAckMs &&
                       !stopping_ && d.spec.config.delivery != Delivery::ExactlyOnce;
        return r;
    };
    std::vector<ClaimRequest> plan;
    if (stopping_)
        return plan;
    for (auto &[name, d] : destinations_) {
        if (d->spec.paused)
            continue;
        if (d->driver && d->driver->Broken() && d->driver->InFlight() == 0)
            d->driver.reset();
        EnsureDriver(*d, now_ms);
        if (!d->driver || d->driver->Broken())
            continue;
        size_t in_flight = d->driver->InFlight();
        if (d->outage_failures > 0) {
            // Unreachable: one row at a time, when the probe is due.
            if (now_ms >= d->next_probe_ms && in_flight == 0)
                plan.push_back(Request(*d, 1));
            continue;
        }
        if (!d->want_more)
            continue;
        // Exactly-once: one batch at a time. The marker names the last committed batch only, so
        // a batch is written back before the next one is claimed (in the same transaction).
        if (d->spec.config.delivery == Delivery::ExactlyOnce && in_flight > 0)
            continue;
        size_t capacity = Room(*d);
        size_t batch = static_cast<size_t>(std::max(1, settings_.batch_size));
        // Claim when idle, or when a whole batch fits: no trickle of tiny claims while busy.
        if (capacity == 0 || (in_flight > 0 && capacity < batch))
            continue;
        plan.push_back(Request(*d, static_cast<int>(std::min(capacity, batch))));
    }
    return plan;
}

void Dispatcher::Submit(const std::string &destination, int asked, std::vector<Message> rows,
                        int64_t now_ms) {
    auto it = destinations_.find(destination);
    if (it == destinations_.end())
        return;  // dropped meanwhile: the leases lapse
    Destination &d = *it->second;
    d.want_more = static_cast<int>(rows.size()) >= asked;
    d.backlog = d.want_more;

    std::vector<Resolution> &resolved = resolved_[destination];
    std::vector<Message> send;
    send.reserve(rows.size());
    int max_attempts = MaxAttempts(d);
    // The request of an earlier claim of the row, still in flight (on this driver or on one
    // retired since), or nullptr.
    auto in_flight = [&](int64_t id) -> Destination::InFlight * {
        auto f = d.in_flight.find(id);
        if (f != d.in_flight.end())
            return &f->second;
        for (auto &old : retired_) {
            if (old->spec.name != destination)
                continue;
            auto g = old->in_flight.find(id);
            if (g != old->in_flight.end())
                return &g->second;
        }
        return nullptr;
    };
    for (Message &m : rows) {
        if (Destination::InFlight *earlier = in_flight(m.id)) {
            // Claimed again while its request is in flight: not sent twice. The outcome of
            // that request presents the new lease (the old one no longer matches the row).
            earlier->lease_token = m.lease_token;
            earlier->attempts = m.attempts;
            earlier->first_failed_ms = m.first_failed_at_ms;
            continue;
        }
        Resolution r;
        r.id = m.id;
        r.lease_token = m.lease_token;
        r.action = Resolution::Action::Bury;
        if (m.expires_at_ms != 0 && m.expires_at_ms <= now_ms) {
            r.dead_reason = DeadReason::Expired;
            r.error = "expired before it could be delivered";
            resolved.push_back(std::move(r));
        } else if (m.attempts > max_attempts) {
            // Claimed again and again without any outcome recorded: whatever delivering it does
            // kills the worker. Stop before it takes the relay down with it.
            r.dead_reason = DeadReason::Poison;
            r.error = "claimed " + std::to_string(m.attempts - 1) +
                      " times without an outcome (the worker stopped or crashed each time)";
            resolved.push_back(std::move(r));
        } else {
            d.in_flight[m.id] = {m.lease_token, m.attempts, now_ms, m.first_failed_at_ms};
            send.push_back(std::move(m));
        }
    }
    if (send.empty())
        return;
    if (!d.driver) {
        // No driver to take them (cannot happen within one loop turn): hand them back.
        for (Message &m : send) {
            d.in_flight.erase(m.id);
            Resolution r;
            r.id = m.id;
            r.lease_token = m.lease_token;
            r.action = Resolution::Action::Reschedule;
            r.refund_attempt = true;
            resolved.push_back(std::move(r));
        }
        return;
    }
    if (d.outage_failures > 0) {
        d.probe_id = send.front().id;
        d.probe_sent_ms = now_ms;
    }
    d.driver->Submit(std::move(send));
}

Resolution Dispatcher::Resolve(Destination &d, const Outcome &o, int attempts,
                               int64_t first_failed_ms, int64_t now_ms) {
    Resolution r;
    r.id = o.id;
    r.lease_token = o.lease_token;
    r.error = o.error;
    OutcomeKind kind = o.kind;
    if (stopping_ && (kind == OutcomeKind::Retry || kind == OutcomeKind::Defer ||
                      kind == OutcomeKind::Unacknowledged)) {
        // Handed back at shutdown: due at once, attempt refunded.
        r.action = Resolution::Action::Reschedule;
        r.refund_attempt = true;
        r.error.clear();
        return r;
    }
    const RetryPolicy &p = d.spec.config.retry;
    int64_t base = p.retry_base_ms > 0 ? p.retry_base_ms : settings_.retry_base_ms;
    int64_t max = p.retry_max_ms > 0 ? p.retry_max_ms : settings_.retry_max_ms;
    switch (kind) {
        case OutcomeKind::Delivered:
            r.action = Resolution::Action::Delete;
            if (d.outage_failures > 0) {
                d.EndOutage(now_ms);
                d.want_more = true;
            }
            break;
        case OutcomeKind::Dead:
            r.action = Resolution::Action::Bury;
            r.dead_reason = DeadReason::Rejected;
            break;
        case OutcomeKind::Retry:
            // The destination answered, so it is reachable.
            d.EndOutage(now_ms);
            if (attempts >= MaxAttempts(d)) {
                r.action = Resolution::Action::Bury;
                r.dead_reason = DeadReason::MaxAttempts;
                r.error += " (attempt " + std::to_string(attempts) + " of " +
                           std::to_string(MaxAttempts(d)) + ")";
            } else if (p.retry_budget_ms > 0 && first_failed_ms > 0 &&
                       now_ms - first_failed_ms - d.UnreachableMs(first_failed_ms, now_ms) >=
                           p.retry_budget_ms) {
                // "retry_budget": failing for longer than it since the first failed attempt,
                // not counting the time the destination was unreachable. Dead-lettered as
                // max_attempts would (the same reason: the retry limits are spent).
                r.action = Resolution::Action::Bury;
                r.dead_reason = DeadReason::MaxAttempts;
                r.error += " (attempt " + std::to_string(attempts) + ", retry_budget of " +
                           FormatDurationMs(p.retry_budget_ms) + " spent)";
            } else {
                r.action = Resolution::Action::Reschedule;
                r.delay_ms = RetryDelayMs(attempts, base, max, o.retry_after_ms, NextRandom());
            }
            break;
        case OutcomeKind::Defer:
            // Unreachable: no attempt spent; claim nothing more until a probe gets through.
            // The first Defer starts the outage and each failed probe lengthens it; late Defers
            // of the batch that was in flight when it began count for nothing. The interval
            // counts from the probe's start: a driver may have held the probe.
            if (d.outage_failures == 0 || (d.probe_id != 0 && o.id == d.probe_id)) {
                if (d.outage_failures == 0)
                    d.outage_started_ms = now_ms;
                int64_t from = d.outage_failures > 0 ? d.probe_sent_ms : now_ms;
                d.outage_failures++;
                d.probe_id = 0;
                d.next_probe_ms =
                    from + OutageProbeDelayMs(d.outage_failures, kProbeBaseMs, kProbeMaxMs);
            }
            // Due again at once, so it shows as pending while the destination is down; only
            // probes claim it until the destination answers.
            r.action = Resolution::Action::Reschedule;
            r.refund_attempt = true;
            // Why a broker a role other than a superuser configured cannot be reached is not
            // shown: a refused connection, a timeout and a stranger's protocol would tell what
            // listens at an address (the server log has the driver's own words).
            if (d.spec.config.kind != nullptr &&
                d.spec.config.kind->network == NetworkRule::Broker && !d.spec.config_by_superuser)
                r.error = kWhyHidden;
            r.error = "deferred, destination unreachable: " + r.error;
            break;
        case OutcomeKind::Unacknowledged:
            // The driver process died before it answered: the destination is not at fault, so
            // no attempt is spent and no outage begins. Due again at once, and claimed again.
            r.action = Resolution::Action::Reschedule;
            r.refund_attempt = true;
            d.want_more = true;
            break;
        case OutcomeKind::Gone:
            // The endpoint wants nothing more (Standard Webhooks: disable it). Instead of
            // dead-lettering message after message, the destination is paused (the write-back
            // sets outbox.destinations.paused, as outbox.pause does) and this message stays
            // queued with its attempt refunded; outbox.resume delivers it. Nothing more is
            // claimed meanwhile: the pause holds here until the destinations are read again.
            d.spec.paused = true;
            r.action = Resolution::Action::Reschedule;
            r.refund_attempt = true;
            r.pause_destination = true;
            r.error +=
                "; destination paused (the endpoint asked to receive no more webhooks): "
                "outbox.resume('" +
                d.spec.name + "') delivers the queued messages";
            break;
        case OutcomeKind::Poison:
            // In flight during outbox.poison_after driver process crashes.
            r.action = Resolution::Action::Bury;
            r.dead_reason = DeadReason::Poison;
            break;
        case OutcomeKind::Aborted:  // its transaction delivered nothing: due again, nothing spent
        case OutcomeKind::InDoubt:  // (Poll keeps these leased; Marker never gets here)
        case OutcomeKind::Marker:
            r.action = Resolution::Action::Reschedule;
            r.refund_attempt = true;
            d.want_more = true;
            break;
    }
    return r;
}

void Dispatcher::Poll(int64_t now_ms, Resolutions &out) {
    if (poll_hook_)
        poll_hook_();
    std::vector<Outcome> outcomes;
    auto serve = [&](Destination &d) {
        if (!d.driver)
            return;
        outcomes.clear();
        d.driver->Poll(outcomes);
        std::vector<std::string> lines;
        d.driver->TakeLog(lines);
        for (std::string &l : lines)
            log_.push_back(d.spec.name + ": " + l);
        if (outcomes.empty())
            return;
        std::vector<Resolution> &resolved = resolved_[d.spec.name];
        // With per-key ordering an outcome can make the next message of its key eligible.
        if (d.spec.config.ordering == Ordering::Key)
            d.want_more = true;
        bool exactly_once = d.spec.config.delivery == Delivery::ExactlyOnce;
        for (const Outcome &o : outcomes) {
            if (o.kind == OutcomeKind::Marker) {
                // The driver fenced its predecessor and read the last committed batch: the
                // write-back recovers the destination's leased rows before its next claim.
                Resolution r;
                r.action = Resolution::Action::Recover;
                r.lease_token = o.lease_token;
                resolved.push_back(std::move(r));
                d.want_more = true;
                continue;
            }
            auto a = d.in_flight.find(o.id);
            if (a == d.in_flight.end())
                continue;  // already handed back
            if (exactly_once &&
                (o.kind == OutcomeKind::InDoubt || o.kind == OutcomeKind::Unacknowledged ||
                 o.kind == OutcomeKind::Poison)) {
                // Its transaction may have committed: the row stays leased, and the marker the
                // next driver reads decides (Recover). Sending it again now could duplicate it.
                d.in_flight.erase(a);
                continue;
            }
            int attempts = a->second.attempts;
            Resolution r = Resolve(d, o, attempts, a->second.first_failed_ms, now_ms);
            // The claim's token as recorded here: the driver's copy may predate a re-lease.
            r.lease_token = a->second.lease_token;
            if (r.lease_token != 0)
                d.lease_seen = true;
            d.ack_ms = 0.9 * d.ack_ms + 0.1 * double(now_ms - a->second.submitted_ms);
            d.in_flight.erase(a);
            resolved.push_back(std::move(r));
        }
        d.driver->SetProbing(d.outage_failures > 0);
    };
    for (auto &[name, d] : destinations_)
        serve(*d);
    for (auto &d : retired_)
        serve(*d);
    PollAdoptions(now_ms);
    retired_.erase(std::remove_if(retired_.begin(), retired_.end(),
                                  [](const auto &d) { return d->driver->InFlight() == 0; }),
                   retired_.end());
    for (auto &[name, list] : resolved_) {
        if (list.empty())
            continue;
        auto &target = out[name];
        for (Resolution &r : list)
            target.push_back(std::move(r));
        list.clear();
    }
}

std::vector<std::string> Dispatcher::AdoptionChecksDue(int64_t now_ms) {
    std::vector<std::string> due;
    if (stopping_ || !adopt_factory_)
        return due;
    for (const auto &[name, d] : destinations_) {
        if (d->spec.paused || d->spec.config.delivery != Delivery::ExactlyOnce)
            continue;
        int64_t &at = adopt_check_at_[name];
        if (now_ms < at)
            continue;
        // A lease lapses after lease_timeout: looking more often finds nothing sooner.
        at = now_ms + std::max<int64_t>(100, settings_.lease_timeout_ms / 2);
        due.push_back(name);
    }
    return due;
}

bool Dispatcher::Adopt(const std::string &destination, const ForeignLeases &leases,
                       int64_t now_ms) {
    auto it = destinations_.find(destination);
    if (stopping_ || !adopt_factory_ || it == destinations_.end() || leases.tokens.empty() ||
        it->second->spec.config.delivery != Delivery::ExactlyOnce)
        return false;
    for (const Adoption &a : adoptions_)
        if (a.destination == destination && a.leases.worker_index == leases.worker_index)
            return false;
    auto key = std::make_pair(destination, leases.worker_index);
    auto wait = adopt_not_before_.find(key);
    if (wait != adopt_not_before_.end() && now_ms < wait->second)
        return false;
    // Never again within a lease: a worker that is alive after all fences the adopter in turn
    // when it restarts its producer, and then settles its leases itself.
    adopt_not_before_[key] = now_ms + settings_.lease_timeout_ms;
    std::string error;
    std::unique_ptr<Driver> driver = adopt_factory_(it->second->spec, leases.worker_index, &error);
    if (!driver) {
        log_.push_back(destination + ": could not adopt worker " +
                       std::to_string(leases.worker_index) + "'s transactional.id: " + error);
        return false;
    }
    drivers_built_++;
    Adoption a;
    a.destination = destination;
    a.leases = leases;
    a.driver = std::move(driver);
    a.deadline_ms = now_ms + std::max<int64_t>(10000, settings_.lease_timeout_ms);
    adoptions_.push_back(std::move(a));
    return true;
}

// An adoption's driver tells the marker (a Recover resolution of the adopted leases) or fails;
// either way it is closed at once: it only borrowed the other worker's transactional.id.
void Dispatcher::PollAdoptions(int64_t now_ms) {
    std::vector<Outcome> outcomes;
    for (auto it = adoptions_.begin(); it != adoptions_.end();) {
        Adoption &a = *it;
        const std::string who = a.destination + ": adopting worker " +
                                std::to_string(a.leases.worker_index) + "'s transactional.id: ";
        outcomes.clear();
        a.driver->Poll(outcomes);
        std::vector<std::string> lines;
        a.driver->TakeLog(lines);
        for (std::string &l : lines)
            log_.push_back(who + l);
        bool done = false;
        for (const Outcome &o : outcomes) {
            if (o.kind != OutcomeKind::Marker || done)
                continue;
            Resolution r;
            r.action = Resolution::Action::Recover;
            r.lease_token = o.lease_token;
            r.adopted_worker = a.leases.worker_index;
            r.adopted_tokens = a.leases.tokens;
            resolved_[a.destination].push_back(std::move(r));
            done = true;
        }
        if (!done && (a.driver->Broken() || now_ms >= a.deadline_ms)) {
            log_.push_back(who +
                           (a.driver->Broken() ? "it could not be fenced or its marker read"
                                               : "no answer in time") +
                           "; its " + std::to_string(a.leases.tokens.size()) +
                           " lapsed batches stay leased and are adopted again later");
            done = true;
        }
        if (done) {
            it = adoptions_.erase(it);
        } else {
            ++it;
        }
    }
}

int64_t Dispatcher::NextTimeoutMs(int64_t now_ms) const {
    int64_t best = -1;
    auto consider = [&](int64_t ms) {
        if (ms < 0)
            return;
        if (best < 0 || ms < best)
            best = ms;
    };
    auto serve = [&](const Destination &d) {
        if (d.driver)
            consider(d.driver->PollTimeoutMs());
        if (!d.driver && !d.spec.paused)
            consider(std::max<int64_t>(0, d.next_build_ms - now_ms));
        if (d.outage_failures > 0 && !d.spec.paused)
            consider(std::max<int64_t>(0, d.next_probe_ms - now_ms));
    };
    for (const auto &[name, d] : destinations_)
        serve(*d);
    for (const auto &d : retired_)
        serve(*d);
    for (const auto &[name, list] : resolved_)
        if (!list.empty())
            consider(0);
    for (const Adoption &a : adoptions_) {
        consider(a.driver->PollTimeoutMs());
        consider(std::max<int64_t>(0, a.deadline_ms - now_ms));
    }
    return best;
}

std::vector<int> Dispatcher::WaitFds() const {
    std::vector<int> fds;
    for (const auto &[name, d] : destinations_)
        if (d->driver && d->driver->WaitFd() >= 0)
            fds.push_back(d->driver->WaitFd());
    for (const auto &d : retired_)
        if (d->driver->WaitFd() >= 0)
            fds.push_back(d->driver->WaitFd());
    for (const Adoption &a : adoptions_)
        if (a.driver->WaitFd() >= 0)
            fds.push_back(a.driver->WaitFd());
    std::sort(fds.begin(), fds.end());
    fds.erase(std::unique(fds.begin(), fds.end()), fds.end());
    return fds;
}

void Dispatcher::StopAll() {
    stopping_ = true;
    adoptions_.clear();  // nothing of theirs is in flight: the leases stay for the next worker
    for (auto &[name, d] : destinations_)
        if (d->driver)
            d->driver->Abandon();
    for (auto &d : retired_)
        d->driver->Abandon();
}

void Dispatcher::ReleaseAll(Resolutions &out) {
    auto release = [&](Destination &d) {
        // Exactly-once: a transaction may still commit after the worker let go (its end was
        // sent): those rows stay leased, and the marker decides at the next start.
        if (d.spec.config.delivery == Delivery::ExactlyOnce)
            d.in_flight.clear();
        for (const auto &[id, f] : d.in_flight) {
            Resolution r;
            r.id = id;
            r.lease_token = f.lease_token;
            r.action = Resolution::Action::Reschedule;
            r.refund_attempt = true;
            out[d.spec.name].push_back(std::move(r));
        }
        d.in_flight.clear();
        d.driver.reset();
    };
    for (auto &[name, d] : destinations_)
        release(*d);
    for (auto &d : retired_)
        release(*d);
    retired_.clear();
    adoptions_.clear();
}

std::vector<int64_t> Dispatcher::LockedInFlight(const std::string &destination) const {
    std::vector<int64_t> ids;
    auto it = destinations_.find(destination);
    if (it != destinations_.end())
        for (const auto &[id, f] : it->second->in_flight)
            if (f.lease_token == 0)
                ids.push_back(id);
    return ids;
}

size_t Dispatcher::Capacity(const std::string &destination) const {
    auto it = destinations_.find(destination);
    if (it == destinations_.end() || !it->second->driver)
        return 0;
    return Room(*it->second);
}

// The claim window. While claims come back full (a backlog), a destination may fill its
// driver's whole room ("max_in_flight"): on a cluster whose acks=all round trip is long the
// drain runs one window per round trip. Once a claim comes back short (caught up), at most two
// batches stay in flight, so a claim waits until a whole batch fits and claims stay large while
// producers commit a row at a time: a wide window then had the worker claim a row or two per
// commit and fall behind 1,000 msg/s on real Kafka. Two batches is also the drivers' default
// "max_in_flight", where the two coincide.
size_t Dispatcher::Room(const Destination &d) const {
    size_t room = d.driver->Capacity();
    if (d.backlog)
        return room;
    size_t narrow = InFlightWindow(settings_.batch_size);
    size_t in_flight = d.driver->InFlight();
    return std::min(room, in_flight >= narrow ? 0 : narrow - in_flight);
}

void Dispatcher::Relet(const std::string &destination, const std::vector<int64_t> &ids,
                       int64_t token) {
    auto it = destinations_.find(destination);
    if (it == destinations_.end())
        return;
    for (int64_t id : ids) {
        auto f = it->second->in_flight.find(id);
        if (f != it->second->in_flight.end())
            f->second.lease_token = token;
    }
}

void Dispatcher::OrphanLocked() {
    auto orphan = [](Destination &d) {
        for (auto &[id, f] : d.in_flight)
            if (f.lease_token == 0)
                f.lease_token = -1;  // a token no row ever has
    };
    for (auto &[name, d] : destinations_)
        orphan(*d);
    for (auto &d : retired_)
        orphan(*d);
}

size_t Dispatcher::InFlight() const {
    size_t n = 0;
    for (const auto &[name, d] : destinations_)
        if (d->driver)
            n += d->driver->InFlight();
    for (const auto &d : retired_)
        n += d->driver->InFlight();
    return n;
}

std::vector<std::string> Dispatcher::OpenTransactions() const {
    std::vector<std::string> open;
    for (const auto &[name, d] : destinations_)
        if (d->spec.config.delivery == Delivery::ExactlyOnce && !d->in_flight.empty())
            open.push_back(name);
    return open;
}

void Dispatcher::TakeLog(std::vector<std::string> &lines) {
    for (std::string &l : log_)
        lines.push_back(std::move(l));
    log_.clear();
}

std::vector<std::pair<std::string, std::string>> Dispatcher::BuildErrors() const {
    std::vector<std::pair<std::string, std::string>> errors;
    for (const auto &[name, d] : destinations_)
        if (!d->build_error.empty())
            errors.emplace_back(name, d->build_error);
    return errors;
}

}  // namespace outbox
