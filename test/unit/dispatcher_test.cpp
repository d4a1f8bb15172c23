// The dispatcher's pure logic, driven the way the worker drives it (PlanClaims, Submit, Poll,
// StopAll, ReleaseAll) against a scripted in-memory driver: every test asserts what the worker's
// write-back would do with the rows. Time is passed in explicitly; nothing sleeps.
#include "outbox/brokers/kafka/kind.hpp"
#include "outbox/brokers/webhook/kind.hpp"
#include "outbox/dispatcher.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "outbox/backoff.hpp"
#include "outbox/broker_address.hpp"

namespace outbox {
namespace {

// A realistic wall clock (unix epoch milliseconds), far from 0.
constexpr int64_t kT0 = 1700000000000;

// A driver whose outcomes the test scripts. Messages stay in flight until the test pushes an
// outcome for them; the outcome is returned by the next Poll.
class ScriptedDriver : public Driver {
  public:
    ScriptedDriver(size_t max_in_flight, bool *destroyed)
        : max_in_flight_(max_in_flight), destroyed_(destroyed) {}
    ~ScriptedDriver() override {
        if (destroyed_ != nullptr)
            *destroyed_ = true;
    }

    void Submit(std::vector<Message> batch) override {
        for (Message &m : batch) {
            submitted.push_back(m);
            in_flight_[m.id] = m;
        }
    }

    void Poll(std::vector<Outcome> &out) override {
        for (Outcome &o : pending_)
            out.push_back(std::move(o));
        pending_.clear();
    }

    // Submitted messages whose outcome Poll has not returned yet (scripted ones included).
    size_t InFlight() const override { return in_flight_.size() + pending_.size(); }
    size_t Capacity() const override {
        return InFlight() >= max_in_flight_ ? 0 : max_in_flight_ - InFlight();
    }
    int WaitFd() const override { return -1; }
    int64_t PollTimeoutMs() const override { return -1; }

    void Abandon() override {
        abandoned = true;
        for (const auto &[id, m] : in_flight_)
            pending_.push_back(MakeOutcome(m, OutcomeKind::Defer, "abandoned", -1));
        in_flight_.clear();
    }

    void TakeLog(std::vector<std::string> &lines) override {
        for (std::string &l : log)
            lines.push_back(std::move(l));
        log.clear();
    }

    void SetProbing(bool probing) override { probing_calls.push_back(probing); }
    bool Broken() const override { return broken; }

    // Scripts the Marker outcome an exactly-once driver tells first (an adoption's only one).
    void TellMarker(int64_t token) {
        Outcome o;
        o.kind = OutcomeKind::Marker;
        o.lease_token = token;
        pending_.push_back(std::move(o));
    }

    // Scripts the outcome of in-flight message `id`; Poll returns it.
    void Finish(int64_t id, OutcomeKind kind, const std::string &error = "",
                int64_t retry_after_ms = -1) {
        auto it = in_flight_.find(id);
        ASSERT_NE(it, in_flight_.end()) << "message " << id << " is not in flight";
        pending_.push_back(MakeOutcome(it->second, kind, error, retry_after_ms));
        in_flight_.erase(it);
    }

    std::vector<Message> submitted;
    std::vector<bool> probing_calls;
    std::vector<std::string> log;
    bool abandoned = false;
    bool broken = false;

  private:
    static Outcome MakeOutcome(const Message &m, OutcomeKind kind, const std::string &error,
                               int64_t retry_after_ms) {
        Outcome o;
        o.id = m.id;
        o.lease_token = m.lease_token;
        o.kind = kind;
        o.error = error;
        o.retry_after_ms = retry_after_ms;
        return o;
    }

    size_t max_in_flight_;
    bool *destroyed_;
    std::map<int64_t, Message> in_flight_;
    std::vector<Outcome> pending_;
};

// What each scripted driver keeps in flight (a webhook's default "max_in_flight").
constexpr size_t kSinkInFlight = 32;

DestinationSpec Spec(const std::string &name, Ordering ordering = Ordering::None,
                     bool paused = false) {
    DestinationSpec spec;
    spec.name = name;
    spec.paused = paused;
    spec.config.kind = &kWebhookKind;
    spec.config.ordering = ordering;
    spec.config_json = std::string("{\"url\": \"http://sink.invalid/hook\", \"ordering\": \"") +
                       (ordering == Ordering::Key ? "key" : "none") + "\"}";
    return spec;
}

Message Row(int64_t id, int64_t lease_token, int attempts = 1) {
    Message m;
    m.id = id;
    m.lease_token = lease_token;
    m.event_id = "0190a000-0000-7000-8000-" + std::to_string(100000000000 + id);
    m.topic = "orders.created";
    m.key = "key-" + std::to_string(id);
    m.payload = "{\"n\": " + std::to_string(id) + "}";
    m.created_at_ms = kT0 - 60000;
    m.attempts = attempts;
    return m;
}

class DispatcherTest : public ::testing::Test {
  protected:
    DispatcherTest()
        : dispatcher_(
              [this](const DestinationSpec &spec, std::string *) -> std::unique_ptr<Driver> {
                  ++builds_[spec.name];
                  auto driver =
                      std::make_unique<ScriptedDriver>(kSinkInFlight, &destroyed_[spec.name]);
                  drivers_[spec.name] = driver.get();
                  return driver;
              },
              42) {}

    // The driver built for `name` (the test keeps a raw pointer; the dispatcher owns it).
    ScriptedDriver &DriverOf(const std::string &name) {
        EXPECT_EQ(drivers_.count(name), 1u) << "no driver built for " << name;
        return *drivers_.at(name);
    }

    // The one claim planned for `name` at `now`, or nullptr when none is.
    const ClaimRequest *Planned(const std::vector<ClaimRequest> &plan, const std::string &name) {
        const ClaimRequest *found = nullptr;
        for (const ClaimRequest &r : plan) {
            if (r.destination == name) {
                EXPECT_EQ(found, nullptr) << "two claims for " << name;
                found = &r;
            }
        }
        return found;
    }

    // Plans at `now`, expects a claim for `name`, and submits `rows` as its result.
    ClaimRequest ClaimAndSubmit(const std::string &name, std::vector<Message> rows, int64_t now) {
        std::vector<ClaimRequest> plan = dispatcher_.PlanClaims(now);
        const ClaimRequest *r = Planned(plan, name);
        EXPECT_NE(r, nullptr) << "nothing planned for " << name << " at " << now;
        if (r == nullptr)
            return ClaimRequest{};
        ClaimRequest request = *r;
        EXPECT_LE(rows.size(), static_cast<size_t>(request.limit));
        // A full claim, like a busy table: the dispatcher keeps wanting more.
        dispatcher_.Submit(name, static_cast<int>(rows.size()), std::move(rows), now);
        return request;
    }

    // Polls at `now` and returns what was resolved for `name`.
    std::vector<Resolution> PollFor(const std::string &name, int64_t now) {
        Resolutions out;
        dispatcher_.Poll(now, out);
        for (const auto &[dest, list] : out)
            if (dest != name)
                ADD_FAILURE() << "unexpected resolutions for " << dest;
        return out[name];
    }

    // The single resolution for `name` at `now`.
    Resolution PollOne(const std::string &name, int64_t now) {
        std::vector<Resolution> list = PollFor(name, now);
        EXPECT_EQ(list.size(), 1u);
        return list.empty() ? Resolution{} : list.front();
    }

    std::map<std::string, int> builds_;
    std::map<std::string, bool> destroyed_;
    std::map<std::string, ScriptedDriver *> drivers_;
    Dispatcher dispatcher_;
};

std::vector<DestinationSpec> Specs(std::initializer_list<DestinationSpec> list) {
    return std::vector<DestinationSpec>(list);
}

// 1. Delivered: the row is deleted, presenting its claim's lease token.
TEST_F(DispatcherTest, DeliveredDeletesWithTheLeaseToken) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimRequest r = ClaimAndSubmit("hooks", {Row(7, 7001), Row(8, 7002)}, kT0);
    EXPECT_EQ(r.limit, 32);  // min(driver capacity, batch_size 500)
    EXPECT_FALSE(r.ordered);
    EXPECT_FALSE(r.block_on_dead);
    EXPECT_EQ(r.config_json, Spec("hooks").config_json);  // the claim's fence (queue.cpp)
    ScriptedDriver &driver = DriverOf("hooks");
    ASSERT_EQ(driver.submitted.size(), 2u);
    EXPECT_EQ(dispatcher_.InFlight(), 2u);

    driver.Finish(8, OutcomeKind::Delivered);
    Resolution res = PollOne("hooks", kT0 + 5);
    EXPECT_EQ(res.id, 8);
    EXPECT_EQ(res.lease_token, 7002);
    EXPECT_EQ(res.action, Resolution::Action::Delete);
    EXPECT_EQ(dispatcher_.InFlight(), 1u);

    driver.Finish(7, OutcomeKind::Delivered);
    res = PollOne("hooks", kT0 + 6);
    EXPECT_EQ(res.id, 7);
    EXPECT_EQ(res.lease_token, 7001);
    EXPECT_EQ(res.action, Resolution::Action::Delete);
    EXPECT_EQ(dispatcher_.InFlight(), 0u);
    // Nothing more to write back.
    EXPECT_TRUE(PollFor("hooks", kT0 + 7).empty());
}

// 2a. Retry below max_attempts: rescheduled within the backoff window, the attempt is spent.
TEST_F(DispatcherTest, RetryBelowMaxAttemptsReschedulesWithinTheBackoffWindow) {
    DispatchSettings settings;
    settings.max_attempts = 10;
    settings.retry_base_ms = 1000;
    settings.retry_max_ms = 300000;
    dispatcher_.SetSettings(settings);
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));

    // attempts 3: the window is [0, 1000 * 2^2].
    std::vector<Message> rows;
    for (int64_t id = 1; id <= 20; ++id)
        rows.push_back(Row(id, 500 + id, 3));
    ClaimAndSubmit("hooks", rows, kT0);
    ScriptedDriver &driver = DriverOf("hooks");
    for (int64_t id = 1; id <= 20; ++id)
        driver.Finish(id, OutcomeKind::Retry, "HTTP 503");
    std::vector<Resolution> list = PollFor("hooks", kT0 + 10);
    ASSERT_EQ(list.size(), 20u);
    std::set<int64_t> delays;
    for (const Resolution &res : list) {
        EXPECT_EQ(res.action, Resolution::Action::Reschedule) << res.id;
        EXPECT_EQ(res.lease_token, 500 + res.id);
        EXPECT_FALSE(res.refund_attempt);
        EXPECT_GE(res.delay_ms, 0);
        EXPECT_LE(res.delay_ms, 4000);
        EXPECT_EQ(res.error, "HTTP 503");
        delays.insert(res.delay_ms);
    }
    EXPECT_GT(delays.size(), 1u) << "retries are jittered";
}

// 2b. The destination's retry policy overrides the settings; Retry-After wins but is capped.
TEST_F(DispatcherTest, RetryUsesTheDestinationRetryPolicy) {
    DestinationSpec spec = Spec("hooks");
    spec.config.retry.retry_base_ms = 100;
    spec.config.retry.retry_max_ms = 250;
    spec.config.retry.max_attempts = 50;
    dispatcher_.SetDestinations(Specs({spec}));

    // attempts 20 is above the settings' max_attempts (10) but below the destination's (50).
    std::vector<Message> rows;
    for (int64_t id = 1; id <= 10; ++id)
        rows.push_back(Row(id, id, 20));
    rows.push_back(Row(11, 11, 20));
    rows.push_back(Row(12, 12, 20));
    ClaimAndSubmit("hooks", rows, kT0);
    ScriptedDriver &driver = DriverOf("hooks");
    ASSERT_EQ(driver.submitted.size(), 12u);  // none of them is poison
    for (int64_t id = 1; id <= 10; ++id)
        driver.Finish(id, OutcomeKind::Retry, "HTTP 500");
    driver.Finish(11, OutcomeKind::Retry, "HTTP 429", 120);
    driver.Finish(12, OutcomeKind::Retry, "HTTP 429", 86400000);
    std::vector<Resolution> list = PollFor("hooks", kT0 + 1);
    ASSERT_EQ(list.size(), 12u);
    for (const Resolution &res : list) {
        ASSERT_EQ(res.action, Resolution::Action::Reschedule) << res.id;
        EXPECT_FALSE(res.refund_attempt);
        if (res.id == 11) {
            EXPECT_EQ(res.delay_ms, 120);
        } else if (res.id == 12) {
            EXPECT_EQ(res.delay_ms, 250);
        } else {
            EXPECT_GE(res.delay_ms, 0);
            EXPECT_LE(res.delay_ms, 250);
        }
    }
}

// 2c. Retry of the last allowed attempt: to the dead letters, saying which attempt it was.
TEST_F(DispatcherTest, RetryAtMaxAttemptsBuries) {
    DispatchSettings settings;
    settings.max_attempts = 4;
    dispatcher_.SetSettings(settings);
    DestinationSpec limited = Spec("limited");
    limited.config.retry.max_attempts = 2;
    dispatcher_.SetDestinations(Specs({Spec("hooks"), limited}));

    ClaimAndSubmit("hooks", {Row(1, 11, 3), Row(2, 12, 4)}, kT0);
    DriverOf("hooks").Finish(1, OutcomeKind::Retry, "HTTP 502");
    DriverOf("hooks").Finish(2, OutcomeKind::Retry, "HTTP 502");
    std::vector<Resolution> list = PollFor("hooks", kT0 + 1);
    ASSERT_EQ(list.size(), 2u);
    std::sort(list.begin(), list.end(),
              [](const Resolution &a, const Resolution &b) { return a.id < b.id; });
    EXPECT_EQ(list[0].action, Resolution::Action::Reschedule);
    EXPECT_EQ(list[1].id, 2);
    EXPECT_EQ(list[1].lease_token, 12);
    EXPECT_EQ(list[1].action, Resolution::Action::Bury);
    EXPECT_EQ(list[1].dead_reason, DeadReason::MaxAttempts);
    EXPECT_NE(list[1].error.find("HTTP 502"), std::string::npos) << list[1].error;
    EXPECT_NE(list[1].error.find("attempt 4 of 4"), std::string::npos) << list[1].error;

    // The destination's own max_attempts.
    ClaimAndSubmit("limited", {Row(3, 13, 2)}, kT0 + 2);
    DriverOf("limited").Finish(3, OutcomeKind::Retry, "HTTP 500");
    Resolution res = PollOne("limited", kT0 + 3);
    EXPECT_EQ(res.action, Resolution::Action::Bury);
    EXPECT_EQ(res.dead_reason, DeadReason::MaxAttempts);
    EXPECT_NE(res.error.find("attempt 2 of 2"), std::string::npos) << res.error;
}

// 2d. "retry_budget": a message still failing that long after its first failed attempt goes to
// the dead letters as max_attempts, not before; whichever of the two limits comes first.
TEST_F(DispatcherTest, RetryPastTheRetryBudgetBuries) {
    DestinationSpec spec = Spec("hooks");
    spec.config.retry.retry_budget_ms = 2000;
    spec.config.retry.max_attempts = 100;
    dispatcher_.SetDestinations(Specs({spec}));

    auto failed_at = [](int64_t id, int attempts, int64_t first_failed_ms) {
        Message m = Row(id, 100 + id, attempts);
        m.first_failed_at_ms = first_failed_ms;
        return m;
    };
    // 1: never failed (its first failure starts the budget); 2: failed 1999 ms ago; 3: 2000 ms
    // ago; 4: long ago but at its last attempt (max_attempts first).
    ClaimAndSubmit("hooks",
                   {failed_at(1, 1, 0), failed_at(2, 5, kT0 - 1999), failed_at(3, 5, kT0 - 2000),
                    failed_at(4, 100, kT0 - 600000)},
                   kT0);
    for (int64_t id = 1; id <= 4; ++id)
        DriverOf("hooks").Finish(id, OutcomeKind::Retry, "HTTP 500");
    std::vector<Resolution> list = PollFor("hooks", kT0);
    ASSERT_EQ(list.size(), 4u);
    std::sort(list.begin(), list.end(),
              [](const Resolution &a, const Resolution &b) { return a.id < b.id; });
    EXPECT_EQ(list[0].action, Resolution::Action::Reschedule);
    EXPECT_EQ(list[1].action, Resolution::Action::Reschedule);
    EXPECT_EQ(list[2].action, Resolution::Action::Bury);
    EXPECT_EQ(list[2].dead_reason, DeadReason::MaxAttempts);
    EXPECT_EQ(list[2].error, "HTTP 500 (attempt 5, retry_budget of 2s spent)");
    EXPECT_EQ(list[3].action, Resolution::Action::Bury);
    EXPECT_EQ(list[3].error, "HTTP 500 (attempt 100 of 100)");
}

// 2e. Time the destination was unreachable spends no retry budget: a message that failed, then
// waited out an outage longer than the budget, is retried when the destination answers again.
TEST_F(DispatcherTest, AnOutageSpendsNoRetryBudget) {
    DestinationSpec spec = Spec("hooks");
    spec.config.retry.retry_budget_ms = 5000;
    dispatcher_.SetDestinations(Specs({spec}));
    ScriptedDriver *driver = nullptr;

    // Failed first at kT0; at kT0 + 1000 the destination is unreachable, for 20 s.
    Message m = Row(1, 11, 2);
    m.first_failed_at_ms = kT0;
    ClaimAndSubmit("hooks", {m}, kT0 + 1000);
    driver = &DriverOf("hooks");
    driver->Finish(1, OutcomeKind::Defer, "connection refused");
    EXPECT_EQ(PollOne("hooks", kT0 + 1000).action, Resolution::Action::Reschedule);
    // Probes until kT0 + 21000, when the destination answers with a 500 again: 21 s since the
    // first failure, 20 s of it unreachable, so 1 s of the budget spent.
    int64_t now = kT0 + 21000;
    m.lease_token = 12;
    ClaimAndSubmit("hooks", {m}, now);
    driver->Finish(1, OutcomeKind::Retry, "HTTP 500");
    Resolution res = PollOne("hooks", now);
    EXPECT_EQ(res.action, Resolution::Action::Reschedule) << res.error;
    // Still failing 4 s later (5 s of failing in all): the budget is spent.
    m.lease_token = 13;
    m.attempts = 3;
    ClaimAndSubmit("hooks", {m}, now + 4000);
    driver->Finish(1, OutcomeKind::Retry, "HTTP 500");
    res = PollOne("hooks", now + 4000);
    EXPECT_EQ(res.action, Resolution::Action::Bury);
    EXPECT_EQ(res.dead_reason, DeadReason::MaxAttempts);
    EXPECT_EQ(res.error, "HTTP 500 (attempt 3, retry_budget of 5s spent)");
}

// 3. Dead: to the dead letters at once as rejected, the driver's error kept.
TEST_F(DispatcherTest, DeadBuriesAsRejected) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(5, 55, 1)}, kT0);
    DriverOf("hooks").Finish(5, OutcomeKind::Dead, "HTTP 400: bad payload");
    Resolution res = PollOne("hooks", kT0 + 1);
    EXPECT_EQ(res.id, 5);
    EXPECT_EQ(res.lease_token, 55);
    EXPECT_EQ(res.action, Resolution::Action::Bury);
    EXPECT_EQ(res.dead_reason, DeadReason::Rejected);
    EXPECT_EQ(res.error, "HTTP 400: bad payload");
    EXPECT_STREQ(DeadReasonName(res.dead_reason), "rejected");
}

// 3b. Why a broker that a role other than a superuser configured cannot be reached is not shown
// (a refused connection and a stranger's protocol would tell what listens there); a superuser's
// broker and a webhook keep the driver's words; a broker's answer (Retry, Dead) is shown.
TEST_F(DispatcherTest, DeferOfANonSuperusersBrokerHidesWhatAnswered) {
    auto Broker = [](const std::string &name, bool by_superuser) {
        DestinationSpec spec = Spec(name);
        spec.config.kind = &kKafkaKind;
        spec.config_json = "{\"topic\": \"" + name + "\"}";
        spec.config_by_superuser = by_superuser;
        return spec;
    };
    dispatcher_.SetDestinations(Specs({Broker("tenant", false), Broker("own", true)}));
    ClaimAndSubmit("tenant", {Row(1, 11), Row(2, 12)}, kT0);
    DriverOf("tenant").Finish(1, OutcomeKind::Defer, "_TRANSPORT: Connection refused");
    EXPECT_EQ(PollOne("tenant", kT0 + 1).error,
              std::string("deferred, destination unreachable: ") + kWhyHidden);
    DriverOf("tenant").Finish(2, OutcomeKind::Retry, "topic authorization failed");
    EXPECT_EQ(PollOne("tenant", kT0 + 2).error, "topic authorization failed");
    ClaimAndSubmit("own", {Row(3, 13)}, kT0 + 3);
    DriverOf("own").Finish(3, OutcomeKind::Defer, "_TRANSPORT: Connection refused");
    EXPECT_EQ(PollOne("own", kT0 + 4).error,
              "deferred, destination unreachable: _TRANSPORT: Connection refused");
}

// 4. Defer: the row is due again with its attempt refunded, and the destination is probed one
// row at a time with a doubling interval counted from when each probe was sent.
TEST_F(DispatcherTest, DeferStartsAnOutageProbedWithOneRowAtATime) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(1, 101)}, kT0);
    ScriptedDriver &driver = DriverOf("hooks");
    EXPECT_TRUE(driver.probing_calls.empty());

    // The first Defer, polled at t1: the outage starts; the first probe is due 1 s later.
    const int64_t t1 = kT0 + 50;
    driver.Finish(1, OutcomeKind::Defer, "connection refused");
    Resolution res = PollOne("hooks", t1);
    EXPECT_EQ(res.id, 1);
    EXPECT_EQ(res.lease_token, 101);
    EXPECT_EQ(res.action, Resolution::Action::Reschedule);
    EXPECT_TRUE(res.refund_attempt);
    EXPECT_EQ(res.delay_ms, 0);
    EXPECT_EQ(res.error.rfind("deferred, destination unreachable", 0), 0u) << res.error;
    EXPECT_NE(res.error.find("connection refused"), std::string::npos) << res.error;
    ASSERT_FALSE(driver.probing_calls.empty());
    EXPECT_TRUE(driver.probing_calls.back());

    const int64_t first_probe = t1 + OutageProbeDelayMs(1, 1000, 30000);
    ASSERT_EQ(first_probe, t1 + 1000);
    EXPECT_EQ(dispatcher_.NextTimeoutMs(t1), 1000);
    dispatcher_.WakeAll();  // a commit does not end the outage
    EXPECT_EQ(Planned(dispatcher_.PlanClaims(t1), "hooks"), nullptr);
    EXPECT_EQ(Planned(dispatcher_.PlanClaims(first_probe - 1), "hooks"), nullptr);
    ClaimRequest probe = ClaimAndSubmit("hooks", {Row(1, 102)}, first_probe);
    EXPECT_EQ(probe.limit, 1);
    EXPECT_FALSE(probe.hold_locks);
    // While the probe is out, no other claim.
    EXPECT_EQ(Planned(dispatcher_.PlanClaims(first_probe + 100000), "hooks"), nullptr);

    // The probe is held by the driver and deferred 1.5 s later: the doubled interval counts
    // from when the probe was sent, not from when its Defer arrived.
    driver.Finish(1, OutcomeKind::Defer, "connection refused");
    res = PollOne("hooks", first_probe + 1500);
    EXPECT_EQ(res.action, Resolution::Action::Reschedule);
    EXPECT_TRUE(res.refund_attempt);
    EXPECT_EQ(res.lease_token, 102);
    EXPECT_TRUE(driver.probing_calls.back());
    const int64_t second_probe = first_probe + OutageProbeDelayMs(2, 1000, 30000);
    ASSERT_EQ(second_probe, first_probe + 2000);
    EXPECT_EQ(dispatcher_.NextTimeoutMs(first_probe + 1500), 500);
    EXPECT_EQ(Planned(dispatcher_.PlanClaims(second_probe - 1), "hooks"), nullptr);
    probe = ClaimAndSubmit("hooks", {Row(1, 103)}, second_probe);
    EXPECT_EQ(probe.limit, 1);

    // Deferred again at once: 4 s from this probe.
    driver.Finish(1, OutcomeKind::Defer, "connection refused");
    PollOne("hooks", second_probe + 10);
    const int64_t third_probe = second_probe + 4000;
    EXPECT_EQ(Planned(dispatcher_.PlanClaims(third_probe - 1), "hooks"), nullptr);
    probe = ClaimAndSubmit("hooks", {Row(1, 104)}, third_probe);
    EXPECT_EQ(probe.limit, 1);

    // The destination is back: the probe is delivered, probing ends, full claims resume.
    driver.Finish(1, OutcomeKind::Delivered);
    res = PollOne("hooks", third_probe + 20);
    EXPECT_EQ(res.action, Resolution::Action::Delete);
    EXPECT_EQ(res.lease_token, 104);
    EXPECT_FALSE(driver.probing_calls.back());
    EXPECT_EQ(dispatcher_.NextTimeoutMs(third_probe + 20), -1);
    const std::vector<ClaimRequest> full_plan = dispatcher_.PlanClaims(third_probe + 20);
    const ClaimRequest *full = Planned(full_plan, "hooks");
    ASSERT_NE(full, nullptr);
    EXPECT_EQ(full->limit, 32);
    // SetProbing(true) was never called before the first Defer, and the last call turned it off.
    EXPECT_EQ(std::count(driver.probing_calls.begin(), driver.probing_calls.end(), false), 1);
}

// 410 Gone: the message stays queued (attempt refunded), the write-back pauses the destination,
// nothing more is claimed until a resume is loaded; the messages in flight come back the same.
TEST_F(DispatcherTest, GonePausesTheDestinationAndKeepsTheMessages) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(1, 101), Row(2, 102)}, kT0);
    ScriptedDriver &driver = DriverOf("hooks");
    driver.Finish(1, OutcomeKind::Gone, "HTTP 410");
    Resolution res = PollOne("hooks", kT0 + 10);
    EXPECT_EQ(res.id, 1);
    EXPECT_EQ(res.action, Resolution::Action::Reschedule);
    EXPECT_TRUE(res.refund_attempt);
    EXPECT_EQ(res.delay_ms, 0);
    EXPECT_TRUE(res.pause_destination);
    EXPECT_EQ(res.error,
              "HTTP 410; destination paused (the endpoint asked to receive no more webhooks): "
              "outbox.resume('hooks') delivers the queued messages");
    EXPECT_EQ(Planned(dispatcher_.PlanClaims(kT0 + 100000), "hooks"), nullptr);
    driver.Finish(2, OutcomeKind::Gone, "HTTP 410");
    res = PollOne("hooks", kT0 + 20);
    EXPECT_EQ(res.id, 2);
    EXPECT_EQ(res.action, Resolution::Action::Reschedule);
    EXPECT_TRUE(res.pause_destination);
    // outbox.resume: the destinations are loaded again, not paused; claims go on.
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    EXPECT_NE(Planned(dispatcher_.PlanClaims(kT0 + 30), "hooks"), nullptr);
}

// 4b. Several messages of one batch deferred together count as one failure.
TEST_F(DispatcherTest, DefersOfOneBatchCountOnce) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(1, 1), Row(2, 2), Row(3, 3)}, kT0);
    for (int64_t id = 1; id <= 3; ++id)
        DriverOf("hooks").Finish(id, OutcomeKind::Defer, "timeout");
    std::vector<Resolution> list = PollFor("hooks", kT0 + 100);
    ASSERT_EQ(list.size(), 3u);
    for (const Resolution &res : list) {
        EXPECT_EQ(res.action, Resolution::Action::Reschedule);
        EXPECT_TRUE(res.refund_attempt);
    }
    // Probe after 1 s (one failure), not 4 s.
    EXPECT_EQ(Planned(dispatcher_.PlanClaims(kT0 + 1099), "hooks"), nullptr);
    const std::vector<ClaimRequest> probe_plan = dispatcher_.PlanClaims(kT0 + 1100);
    const ClaimRequest *probe = Planned(probe_plan, "hooks");
    ASSERT_NE(probe, nullptr);
    EXPECT_EQ(probe->limit, 1);
}

// 4c. Defers of the batch that was in flight when the outage began may trickle in after the
// first probe came due (e.g. a slow timeout). They are not probes, so they must not schedule
// the next probe from a probe send time that does not exist yet.
TEST_F(DispatcherTest, LateDefersOfTheFirstBatchDoNotInflateTheProbeInterval) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(1, 1), Row(2, 2), Row(3, 3), Row(4, 4), Row(5, 5)}, kT0 - 100);
    ScriptedDriver &driver = DriverOf("hooks");
    driver.Finish(1, OutcomeKind::Defer, "connection reset");
    PollOne("hooks", kT0);
    for (int64_t id = 2; id <= 5; ++id) {
        driver.Finish(id, OutcomeKind::Defer, "timeout");
        PollOne("hooks", kT0 + 1000 + 100 * (id - 1));  // 1100, 1200, 1300, 1400
    }
    const int64_t drained = kT0 + 1400;
    int64_t wait = dispatcher_.NextTimeoutMs(drained);
    ASSERT_GE(wait, 0);
    const int64_t probe_at = drained + wait;
    ClaimRequest probe = ClaimAndSubmit("hooks", {Row(1, 10)}, probe_at);
    EXPECT_EQ(probe.limit, 1);
    driver.Finish(1, OutcomeKind::Defer, "connection refused");
    PollOne("hooks", probe_at + 100);
    int64_t next_wait = dispatcher_.NextTimeoutMs(probe_at + 100);
    ASSERT_GE(next_wait, 0);
    // At most three failures were real (first Defer, possibly one late Defer, this probe).
    EXPECT_LE(probe_at + 100 + next_wait - probe_at, OutageProbeDelayMs(3, 1000, 30000));
    EXPECT_GE(probe_at + 100 + next_wait - probe_at, OutageProbeDelayMs(2, 1000, 30000));
}

// 4d. A Retry of the probe means the destination answered: the outage ends too.
TEST_F(DispatcherTest, RetryOfTheProbeEndsTheOutage) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(1, 1)}, kT0);
    DriverOf("hooks").Finish(1, OutcomeKind::Defer, "refused");
    PollOne("hooks", kT0);
    ClaimAndSubmit("hooks", {Row(1, 2, 2)}, kT0 + 1000);
    DriverOf("hooks").Finish(1, OutcomeKind::Retry, "HTTP 503");
    Resolution res = PollOne("hooks", kT0 + 1001);
    EXPECT_EQ(res.action, Resolution::Action::Reschedule);
    EXPECT_FALSE(res.refund_attempt);
    EXPECT_FALSE(DriverOf("hooks").probing_calls.back());
    const std::vector<ClaimRequest> full_plan = dispatcher_.PlanClaims(kT0 + 1001);
    const ClaimRequest *full = Planned(full_plan, "hooks");
    ASSERT_NE(full, nullptr);
    EXPECT_EQ(full->limit, 32);
}

// 5a. A row claimed more often than max_attempts without an outcome is poison: buried at once,
// never handed to the driver.
TEST_F(DispatcherTest, PoisonRowIsBuriedWithoutBeingSent) {
    DispatchSettings settings;
    settings.max_attempts = 5;
    dispatcher_.SetSettings(settings);
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(1, 11, 6), Row(2, 12, 5)}, kT0);
    ScriptedDriver &driver = DriverOf("hooks");
    ASSERT_EQ(driver.submitted.size(), 1u);
    EXPECT_EQ(driver.submitted[0].id, 2);          // attempts == max_attempts is still sent
    EXPECT_EQ(dispatcher_.NextTimeoutMs(kT0), 0);  // something to write back now

    Resolution res = PollOne("hooks", kT0);
    EXPECT_EQ(res.id, 1);
    EXPECT_EQ(res.lease_token, 11);
    EXPECT_EQ(res.action, Resolution::Action::Bury);
    EXPECT_EQ(res.dead_reason, DeadReason::Poison);
    EXPECT_NE(res.error.find("claimed 5 times"), std::string::npos) << res.error;
    EXPECT_STREQ(DeadReasonName(res.dead_reason), "poison");
    EXPECT_EQ(dispatcher_.InFlight(), 1u);
}

// 5b. An expired row is buried as expired, not sent.
TEST_F(DispatcherTest, ExpiredRowIsBuriedWithoutBeingSent) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    Message expired = Row(1, 11);
    expired.expires_at_ms = kT0;  // expires exactly now
    Message long_gone = Row(2, 12);
    long_gone.expires_at_ms = kT0 - 3600000;
    Message fresh = Row(3, 13);
    fresh.expires_at_ms = kT0 + 1;
    Message forever = Row(4, 14);  // expires_at_ms 0: never
    ClaimAndSubmit("hooks", {expired, long_gone, fresh, forever}, kT0);
    ScriptedDriver &driver = DriverOf("hooks");
    ASSERT_EQ(driver.submitted.size(), 2u);
    EXPECT_EQ(driver.submitted[0].id, 3);
    EXPECT_EQ(driver.submitted[1].id, 4);

    std::vector<Resolution> list = PollFor("hooks", kT0);
    ASSERT_EQ(list.size(), 2u);
    for (const Resolution &res : list) {
        EXPECT_TRUE(res.id == 1 || res.id == 2) << res.id;
        EXPECT_EQ(res.lease_token, 10 + res.id);
        EXPECT_EQ(res.action, Resolution::Action::Bury);
        EXPECT_EQ(res.dead_reason, DeadReason::Expired);
        EXPECT_FALSE(res.error.empty());
    }
}

// 6a. The fast path (hold_locks) starts only once a leased claim's outcome was recorded.
TEST_F(DispatcherTest, FastPathWaitsForALeasedOutcome) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimRequest r = ClaimAndSubmit("hooks", {Row(1, 0)}, kT0);
    EXPECT_FALSE(r.hold_locks);
    // Submitted but no outcome yet: still leased claims only.
    dispatcher_.WakeAll();
    EXPECT_EQ(dispatcher_.LockedInFlight("hooks"), std::vector<int64_t>{1});

    // An outcome of a locked row (lease token 0) does not count.
    DriverOf("hooks").Finish(1, OutcomeKind::Delivered);
    Resolution res = PollOne("hooks", kT0 + 1);
    EXPECT_EQ(res.lease_token, 0);
    EXPECT_TRUE(dispatcher_.LockedInFlight("hooks").empty());
    r = ClaimAndSubmit("hooks", {Row(2, 22)}, kT0 + 1);
    EXPECT_FALSE(r.hold_locks);
    dispatcher_.WakeAll();
    EXPECT_EQ(Planned(dispatcher_.PlanClaims(kT0 + 1), "hooks"), nullptr);  // busy

    // The leased claim's outcome is recorded: fast path from now on.
    DriverOf("hooks").Finish(2, OutcomeKind::Delivered);
    res = PollOne("hooks", kT0 + 2);
    EXPECT_EQ(res.lease_token, 22);
    const std::vector<ClaimRequest> fast_plan = dispatcher_.PlanClaims(kT0 + 2);
    const ClaimRequest *fast = Planned(fast_plan, "hooks");
    ASSERT_NE(fast, nullptr);
    EXPECT_TRUE(fast->hold_locks);
}

// 6b. Destinations with per-key ordering take the fast path too (the claim takes one head per
// key, and never a key twice in one transaction), and say how they order.
TEST_F(DispatcherTest, OrderedDestinationsClaimHeadsOnTheFastPath) {
    DestinationSpec spec = Spec("ordered", Ordering::Key);
    spec.config.on_dead = OnDead::Skip;
    dispatcher_.SetDestinations(Specs({spec}));
    ClaimRequest r = ClaimAndSubmit("ordered", {Row(1, 31)}, kT0);
    EXPECT_TRUE(r.ordered);
    EXPECT_FALSE(r.block_on_dead);
    EXPECT_FALSE(r.hold_locks);
    DriverOf("ordered").Finish(1, OutcomeKind::Delivered);
    Resolution res = PollOne("ordered", kT0 + 1);
    EXPECT_EQ(res.lease_token, 31);
    const std::vector<ClaimRequest> next_plan = dispatcher_.PlanClaims(kT0 + 1);
    const ClaimRequest *next = Planned(next_plan, "ordered");
    ASSERT_NE(next, nullptr);
    EXPECT_TRUE(next->ordered);
    EXPECT_TRUE(next->hold_locks);

    spec.config.on_dead = OnDead::Block;
    spec.config_json = R"({"ordering": "key", "on_dead": "block"})";  // a changed config
    dispatcher_.SetDestinations(Specs({spec}));
    const std::vector<ClaimRequest> block_plan = dispatcher_.PlanClaims(kT0 + 2);
    const ClaimRequest *block = Planned(block_plan, "ordered");
    ASSERT_NE(block, nullptr);
    EXPECT_TRUE(block->block_on_dead);
}

// 6c. Never while the destination is unreachable; back once a probe gets through.
TEST_F(DispatcherTest, NoFastPathDuringAnOutage) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(1, 41)}, kT0);
    DriverOf("hooks").Finish(1, OutcomeKind::Delivered);
    PollOne("hooks", kT0 + 1);
    ClaimRequest r = ClaimAndSubmit("hooks", {Row(2, 0)}, kT0 + 1);
    ASSERT_TRUE(r.hold_locks);

    DriverOf("hooks").Finish(2, OutcomeKind::Defer, "refused");
    PollOne("hooks", kT0 + 2);
    const std::vector<ClaimRequest> probe_plan = dispatcher_.PlanClaims(kT0 + 1002);
    const ClaimRequest *probe = Planned(probe_plan, "hooks");
    ASSERT_NE(probe, nullptr);
    EXPECT_EQ(probe->limit, 1);
    EXPECT_FALSE(probe->hold_locks);
    dispatcher_.Submit("hooks", 1, {Row(2, 42)}, kT0 + 1002);
    DriverOf("hooks").Finish(2, OutcomeKind::Delivered);
    PollOne("hooks", kT0 + 1003);
    const std::vector<ClaimRequest> after_plan = dispatcher_.PlanClaims(kT0 + 1003);
    const ClaimRequest *after = Planned(after_plan, "hooks");
    ASSERT_NE(after, nullptr);
    EXPECT_EQ(after->limit, 32);
    EXPECT_TRUE(after->hold_locks);
}

// 7a. Shutdown: after StopAll nothing is claimed; ReleaseAll hands every in-flight row back,
// due at once with its attempt refunded, and destroys the drivers.
TEST_F(DispatcherTest, StopAllThenReleaseAllHandsRowsBack) {
    dispatcher_.SetDestinations(Specs({Spec("hooks"), Spec("other")}));
    ClaimAndSubmit("hooks", {Row(1, 51, 3), Row(2, 52, 1), Row(3, 53, 2)}, kT0);
    ClaimAndSubmit("other", {Row(4, 54)}, kT0);
    DriverOf("hooks").Finish(1, OutcomeKind::Delivered);
    Resolutions out;
    dispatcher_.Poll(kT0 + 1, out);
    ASSERT_EQ(out["hooks"].size(), 1u);

    dispatcher_.StopAll();
    EXPECT_TRUE(DriverOf("hooks").abandoned);
    EXPECT_TRUE(DriverOf("other").abandoned);
    EXPECT_TRUE(dispatcher_.PlanClaims(kT0 + 2).empty());
    dispatcher_.WakeAll();
    EXPECT_TRUE(dispatcher_.PlanClaims(kT0 + 100000).empty());

    out.clear();
    dispatcher_.ReleaseAll(out);
    EXPECT_TRUE(destroyed_["hooks"]);
    EXPECT_TRUE(destroyed_["other"]);
    drivers_.clear();  // dangling now
    ASSERT_EQ(out["hooks"].size(), 2u);
    ASSERT_EQ(out["other"].size(), 1u);
    std::vector<Resolution> all = out["hooks"];
    all.push_back(out["other"][0]);
    std::set<int64_t> ids;
    for (const Resolution &res : all) {
        ids.insert(res.id);
        EXPECT_EQ(res.lease_token, 50 + res.id);
        EXPECT_EQ(res.action, Resolution::Action::Reschedule);
        EXPECT_TRUE(res.refund_attempt);
        EXPECT_EQ(res.delay_ms, 0);
    }
    EXPECT_EQ(ids, (std::set<int64_t>{2, 3, 4}));
    EXPECT_EQ(dispatcher_.InFlight(), 0u);
    EXPECT_TRUE(dispatcher_.PlanClaims(kT0 + 200000).empty());
}

// 7b. Outcomes that arrive after StopAll: abandoned (Defer) and Retry rows come back refunded
// with no delay, and no outage starts; delivered rows are still deleted.
TEST_F(DispatcherTest, OutcomesAfterStopAllAreHandedBack) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(1, 61, 9), Row(2, 62, 9), Row(3, 63, 9)}, kT0);
    ScriptedDriver &driver = DriverOf("hooks");
    driver.Finish(1, OutcomeKind::Retry, "HTTP 503");
    driver.Finish(2, OutcomeKind::Delivered);
    dispatcher_.StopAll();  // row 3 is abandoned: Defer
    std::vector<Resolution> list = PollFor("hooks", kT0 + 5);
    ASSERT_EQ(list.size(), 3u);
    for (const Resolution &res : list) {
        EXPECT_EQ(res.lease_token, 60 + res.id);
        if (res.id == 2) {
            EXPECT_EQ(res.action, Resolution::Action::Delete);
            continue;
        }
        EXPECT_EQ(res.action, Resolution::Action::Reschedule) << res.id;
        EXPECT_TRUE(res.refund_attempt) << res.id;
        EXPECT_EQ(res.delay_ms, 0) << res.id;
    }
    EXPECT_EQ(dispatcher_.InFlight(), 0u);
    Resolutions rest;
    dispatcher_.ReleaseAll(rest);
    drivers_.clear();
    for (const auto &[name, l] : rest)
        EXPECT_TRUE(l.empty()) << name;
}

// 8. A paused destination is never claimed for (and gets no driver); unpaused, it is.
TEST_F(DispatcherTest, PausedDestinationIsNeverPlanned) {
    dispatcher_.SetDestinations(Specs({Spec("paused", Ordering::None, true), Spec("live")}));
    for (int64_t t = kT0; t < kT0 + 60000; t += 5000) {
        dispatcher_.WakeAll();
        std::vector<ClaimRequest> plan = dispatcher_.PlanClaims(t);
        EXPECT_EQ(Planned(plan, "paused"), nullptr) << t;
        EXPECT_NE(Planned(plan, "live"), nullptr) << t;
    }
    EXPECT_EQ(builds_.count("paused"), 0u);
    EXPECT_EQ(dispatcher_.Capacity("paused"), 0u);

    // Unpaused (same config): claimed for.
    dispatcher_.SetDestinations(Specs({Spec("paused"), Spec("live")}));
    ClaimAndSubmit("paused", {Row(1, 71)}, kT0 + 60000);
    EXPECT_EQ(builds_["paused"], 1);

    // Paused again with a message in flight: its outcome is still recorded, nothing more is
    // claimed, even with room in the driver.
    dispatcher_.SetDestinations(Specs({Spec("paused", Ordering::None, true), Spec("live")}));
    EXPECT_EQ(dispatcher_.Capacity("paused"), 31u);
    DriverOf("paused").Finish(1, OutcomeKind::Delivered);
    Resolution res = PollOne("paused", kT0 + 60001);
    EXPECT_EQ(res.action, Resolution::Action::Delete);
    dispatcher_.WakeAll();
    EXPECT_EQ(Planned(dispatcher_.PlanClaims(kT0 + 60002), "paused"), nullptr);
}

// 9. The driver process died before it answered (Unacknowledged): due again at once with the
// attempt refunded, and no outage begins: the next claim is a full one, at once.
TEST_F(DispatcherTest, UnacknowledgedIsDueAgainWithoutAnOutage) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(1, 11), Row(2, 12)}, kT0);
    dispatcher_.Submit("hooks", 32, {}, kT0);  // a short claim: not wanting more by itself
    ScriptedDriver &driver = DriverOf("hooks");
    const std::string crash =
        "driver process crashed (signal 11: Segmentation fault); 2 messages in flight will be "
        "retried";
    driver.Finish(1, OutcomeKind::Unacknowledged, crash);
    driver.Finish(2, OutcomeKind::Unacknowledged, crash);
    std::vector<Resolution> list = PollFor("hooks", kT0 + 5);
    ASSERT_EQ(list.size(), 2u);
    for (const Resolution &res : list) {
        EXPECT_EQ(res.action, Resolution::Action::Reschedule);
        EXPECT_TRUE(res.refund_attempt);
        EXPECT_EQ(res.delay_ms, 0);
        EXPECT_EQ(res.error, crash);  // for last_error, as written (not "deferred, ...")
    }
    EXPECT_TRUE(driver.probing_calls.empty() || !driver.probing_calls.back());
    const std::vector<ClaimRequest> plan = dispatcher_.PlanClaims(kT0 + 5);
    const ClaimRequest *next = Planned(plan, "hooks");
    ASSERT_NE(next, nullptr) << "the rows due again are claimed at once";
    EXPECT_EQ(next->limit, 32);
}

// 9b. In flight during outbox.poison_after driver crashes (Poison): to the dead letters as
// poison, with the supervisor's reason.
TEST_F(DispatcherTest, PoisonFromTheDriverProcessBuriesAsPoison) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(7, 77)}, kT0);
    DriverOf("hooks").Finish(7, OutcomeKind::Poison,
                             "in flight during 3 driver process crashes (outbox.poison_after), "
                             "the last: signal 6: Aborted");
    Resolution res = PollOne("hooks", kT0 + 1);
    EXPECT_EQ(res.action, Resolution::Action::Bury);
    EXPECT_EQ(res.dead_reason, DeadReason::Poison);
    EXPECT_EQ(res.lease_token, 77);
    EXPECT_NE(res.error.find("3 driver process crashes"), std::string::npos) << res.error;
}

// 9c. At shutdown an Unacknowledged row is handed back like any unfinished one.
TEST_F(DispatcherTest, UnacknowledgedAfterStopAllIsHandedBack) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(3, 33)}, kT0);
    DriverOf("hooks").Finish(3, OutcomeKind::Unacknowledged, "driver process crashed");
    dispatcher_.StopAll();  // the crash's outcome is read after the shutdown began
    Resolution res = PollOne("hooks", kT0 + 1);
    EXPECT_EQ(res.action, Resolution::Action::Reschedule);
    EXPECT_TRUE(res.refund_attempt);
    EXPECT_TRUE(res.error.empty());  // released, not deferred
}

// 10. The poll hook runs once per Poll, before the drivers are served.
TEST_F(DispatcherTest, PollHookRunsOncePerPoll) {
    int hooks = 0;
    dispatcher_.SetPollHook([&] { hooks++; });
    dispatcher_.SetDestinations(Specs({Spec("a"), Spec("b")}));
    ClaimAndSubmit("a", {Row(1, 1)}, kT0);
    ClaimAndSubmit("b", {Row(2, 2)}, kT0);
    Resolutions out;
    dispatcher_.Poll(kT0, out);
    dispatcher_.Poll(kT0 + 1, out);
    EXPECT_EQ(hooks, 2);
}

// 11. A reloaded batch_size or a changed config builds new drivers, and DriversBuilt says so: the
// worker rebuilds its wait set from it (a new driver's fd may reuse the old one's number).
TEST_F(DispatcherTest, RebuiltDriversAreCountedForTheWaitSet) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    EXPECT_EQ(dispatcher_.DriversBuilt(), 0u);
    dispatcher_.PlanClaims(kT0);
    EXPECT_EQ(dispatcher_.DriversBuilt(), 1u);
    dispatcher_.PlanClaims(kT0 + 1);
    EXPECT_EQ(dispatcher_.DriversBuilt(), 1u) << "an unchanged driver is kept";

    DispatchSettings settings = dispatcher_.Settings();
    settings.batch_size = 1;
    dispatcher_.SetSettings(settings);
    dispatcher_.PlanClaims(kT0 + 2);
    EXPECT_EQ(builds_["hooks"], 2);
    EXPECT_EQ(dispatcher_.DriversBuilt(), 2u);

    DestinationSpec changed = Spec("hooks");
    changed.config_json += " ";
    dispatcher_.SetDestinations(Specs({changed}));
    dispatcher_.PlanClaims(kT0 + 3);
    EXPECT_EQ(builds_["hooks"], 3);
    EXPECT_EQ(dispatcher_.DriversBuilt(), 3u);
}

// 12. A row claimed again while its request is in flight (its lease lapsed under a slow
// endpoint) is never sent a second time; the request's outcome presents the new lease token,
// which is the one the row has now.
TEST_F(DispatcherTest, RowClaimedAgainWhileInFlightIsNotSentTwice) {
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    ClaimAndSubmit("hooks", {Row(7, 7001), Row(8, 7002)}, kT0);
    ScriptedDriver &driver = DriverOf("hooks");
    ASSERT_EQ(driver.submitted.size(), 2u);
    // The lease lapsed; the next claim finds the row again (attempts + 1), with a new token.
    dispatcher_.Submit("hooks", 2, {Row(7, 7101, 2), Row(9, 7102)}, kT0 + 30000);
    ASSERT_EQ(driver.submitted.size(), 3u) << "only the new row 9 is sent";
    EXPECT_EQ(driver.submitted.back().id, 9);
    EXPECT_EQ(dispatcher_.InFlight(), 3u);

    driver.Finish(7, OutcomeKind::Delivered);
    Resolution res = PollOne("hooks", kT0 + 30005);
    EXPECT_EQ(res.id, 7);
    EXPECT_EQ(res.lease_token, 7101) << "written back with the lease the row has now";
    EXPECT_EQ(res.action, Resolution::Action::Delete);

    // A retry of it counts the attempt the new claim recorded.
    driver.Finish(8, OutcomeKind::Retry, "HTTP 503");
    res = PollOne("hooks", kT0 + 30006);
    EXPECT_EQ(res.lease_token, 7002);
    EXPECT_EQ(res.action, Resolution::Action::Reschedule);
}

// 13. outbox.webhook_allowed_networks changed by a reload: webhook drivers are rebuilt (they
// check addresses with it), other drivers are kept.
TEST_F(DispatcherTest, AllowedNetworksRebuildWebhookDriversOnly) {
    DestinationSpec kafka = Spec("stream");
    kafka.config.kind = &kKafkaKind;
    dispatcher_.SetDestinations(Specs({Spec("hooks"), kafka}));
    dispatcher_.PlanClaims(kT0);
    EXPECT_EQ(builds_["hooks"], 1);
    EXPECT_EQ(builds_["stream"], 1);
    DispatchSettings settings = dispatcher_.Settings();
    settings.webhook_allowed_networks = "127.0.0.0/8";
    dispatcher_.SetSettings(settings);
    dispatcher_.PlanClaims(kT0 + 1);
    EXPECT_EQ(builds_["hooks"], 2);
    EXPECT_EQ(builds_["stream"], 1);
    dispatcher_.SetSettings(settings);  // unchanged: nothing rebuilt
    dispatcher_.PlanClaims(kT0 + 2);
    EXPECT_EQ(builds_["hooks"], 2);
    // Who wrote the config changes what its errors may show: a new driver too.
    DestinationSpec hooks = Spec("hooks");
    hooks.config_by_superuser = true;
    dispatcher_.SetDestinations(Specs({hooks, kafka}));
    dispatcher_.PlanClaims(kT0 + 3);
    EXPECT_EQ(builds_["hooks"], 3);
    EXPECT_EQ(builds_["stream"], 1);
}

// The claim window: while claims come back full (a backlog) a destination fills its driver's
// room; once one comes back short (caught up) at most two batches stay in flight, and a claim
// waits until a whole batch fits; a full claim widens it again.
TEST_F(DispatcherTest, TheClaimWindowIsWideOnlyWhileClaimsComeBackFull) {
    DispatchSettings settings = dispatcher_.Settings();
    settings.batch_size = 4;  // two batches: 8; the driver takes 32
    dispatcher_.SetSettings(settings);
    dispatcher_.SetDestinations(Specs({Spec("hooks")}));
    int64_t next = 1;
    auto rows = [&next](int n) {
        std::vector<Message> v;
        for (int i = 0; i < n; i++, next++)
            v.push_back(Row(next, 1000 + next));
        return v;
    };
    // Claimed and answered: `n` rows of a claim for `limit`.
    auto claim = [&](int n, int64_t now) {
        std::vector<ClaimRequest> plan = dispatcher_.PlanClaims(now);
        const ClaimRequest *r = Planned(plan, "hooks");
        if (r == nullptr)
            return 0;
        int limit = r->limit;
        dispatcher_.Submit("hooks", limit, rows(n), now);
        return limit;
    };

    // The first claim is narrow until it comes back full; full claims go on past two batches.
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(claim(4, kT0 + i), 4) << "claim " << i;
    EXPECT_EQ(DriverOf("hooks").InFlight(), 32u);
    EXPECT_EQ(dispatcher_.Capacity("hooks"), 0u) << "the driver's room is the limit";
    EXPECT_EQ(claim(4, kT0 + 9), 0);

    for (int64_t id = 1; id < next; id++)
        DriverOf("hooks").Finish(id, OutcomeKind::Delivered);
    EXPECT_EQ(PollFor("hooks", kT0 + 10).size(), 32u);
    // Caught up: a claim of 4 brings 3. Now two batches (8) bound what is in flight.
    ASSERT_EQ(claim(3, kT0 + 11), 4);
    EXPECT_EQ(dispatcher_.Capacity("hooks"), 5u);
    dispatcher_.WakeAll();  // a commit: 5 fit, a whole batch
    ASSERT_EQ(claim(2, kT0 + 12), 4);
    EXPECT_EQ(dispatcher_.Capacity("hooks"), 3u);
    dispatcher_.WakeAll();  // 3 fit, less than a batch: the next claim waits
    EXPECT_EQ(claim(4, kT0 + 13), 0);

    // Two answered: a batch fits again, and that claim comes back full: the window is wide.
    DriverOf("hooks").Finish(next - 1, OutcomeKind::Delivered);
    DriverOf("hooks").Finish(next - 2, OutcomeKind::Delivered);
    EXPECT_EQ(PollFor("hooks", kT0 + 14).size(), 2u);
    dispatcher_.WakeAll();
    ASSERT_EQ(claim(4, kT0 + 15), 4);
    EXPECT_EQ(DriverOf("hooks").InFlight(), 7u);
    EXPECT_EQ(dispatcher_.Capacity("hooks"), 25u);
    ASSERT_EQ(claim(4, kT0 + 16), 4) << "past two batches while claims come back full";
}

// Exactly-once (issue 41): another worker index's lapsed leases are adopted through a driver of
// that index's transactional.id, built once per lease at most and closed as soon as it told
// the marker, which then settles exactly the batches that were found.
TEST_F(DispatcherTest, AdoptionBorrowsTheOtherWorkersIdOnceAndSettlesWhatItFound) {
    std::map<int, int> adopt_builds;
    ScriptedDriver *adopter = nullptr;
    bool adopter_destroyed = false;
    dispatcher_.SetAdoptFactory(
        [&](const DestinationSpec &spec, int index, std::string *) -> std::unique_ptr<Driver> {
            EXPECT_EQ(spec.name, "settlements");
            ++adopt_builds[index];
            adopter_destroyed = false;
            auto d = std::make_unique<ScriptedDriver>(0, &adopter_destroyed);
            adopter = d.get();
            return d;
        });
    DestinationSpec eos = Spec("settlements");
    eos.config.kind = &kKafkaKind;
    eos.config.delivery = Delivery::ExactlyOnce;
    DispatchSettings settings = dispatcher_.Settings();
    settings.lease_timeout_ms = 4000;
    dispatcher_.SetSettings(settings);
    dispatcher_.SetDestinations(Specs({eos, Spec("hooks")}));
    // Only the exactly-once destination is looked at, at most every half lease.
    EXPECT_EQ(dispatcher_.AdoptionChecksDue(kT0), std::vector<std::string>{"settlements"});
    EXPECT_TRUE(dispatcher_.AdoptionChecksDue(kT0 + 1999).empty());
    EXPECT_EQ(dispatcher_.AdoptionChecksDue(kT0 + 2000).size(), 1u);
    // Its claims leave other workers' lapsed leases alone; the others' claims do not.
    std::vector<ClaimRequest> plan = dispatcher_.PlanClaims(kT0);
    ASSERT_NE(Planned(plan, "settlements"), nullptr);
    ASSERT_NE(Planned(plan, "hooks"), nullptr);
    EXPECT_TRUE(Planned(plan, "settlements")->exactly_once);
    EXPECT_FALSE(Planned(plan, "hooks")->exactly_once);

    int64_t a1 = LeaseTokenFor(1, 10), a2 = LeaseTokenFor(1, 11);
    ForeignLeases leases{1, {a1, a2}};
    EXPECT_FALSE(dispatcher_.Adopt("hooks", leases, kT0));  // not exactly-once
    EXPECT_TRUE(dispatcher_.Adopt("settlements", leases, kT0));
    EXPECT_FALSE(dispatcher_.Adopt("settlements", leases, kT0 + 1));  // under way
    EXPECT_EQ(adopt_builds[1], 1);
    EXPECT_EQ(dispatcher_.AdoptionsUnderWay(), 1u);
    EXPECT_TRUE(PollFor("settlements", kT0 + 2).empty());  // no marker yet
    adopter->TellMarker(a2);
    Resolution res = PollOne("settlements", kT0 + 3);
    EXPECT_EQ(res.action, Resolution::Action::Recover);
    EXPECT_EQ(res.lease_token, a2);
    EXPECT_EQ(res.adopted_worker, 1);
    EXPECT_EQ(res.adopted_tokens, (std::vector<int64_t>{a1, a2}));
    EXPECT_TRUE(adopter_destroyed);  // closed at once: the id was only borrowed
    EXPECT_EQ(dispatcher_.AdoptionsUnderWay(), 0u);

    // Not again within a lease of the last try, whatever the next look finds.
    EXPECT_FALSE(dispatcher_.Adopt("settlements", leases, kT0 + 3999));
    EXPECT_TRUE(dispatcher_.Adopt("settlements", leases, kT0 + 4000));
    EXPECT_EQ(adopt_builds[1], 2);
    // A driver that could not fence the id or read the marker is dropped and logged; the rows
    // stay leased (nothing is resolved) until a later try.
    adopter->broken = true;
    EXPECT_TRUE(PollFor("settlements", kT0 + 4001).empty());
    EXPECT_TRUE(adopter_destroyed);
    std::vector<std::string> lines;
    dispatcher_.TakeLog(lines);
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines.back().find("adopting worker 1's transactional.id"), std::string::npos)
        << lines.back();
    EXPECT_FALSE(dispatcher_.Adopt("settlements", leases, kT0 + 5000));
    // One that does not answer is dropped at its deadline (a lease, at least 10 s).
    EXPECT_TRUE(dispatcher_.Adopt("settlements", leases, kT0 + 8001));
    EXPECT_TRUE(PollFor("settlements", kT0 + 18000).empty());
    EXPECT_EQ(dispatcher_.AdoptionsUnderWay(), 1u);
    EXPECT_TRUE(PollFor("settlements", kT0 + 18001).empty());
    EXPECT_EQ(dispatcher_.AdoptionsUnderWay(), 0u);
    // Shutdown drops one under way, and starts none.
    EXPECT_TRUE(dispatcher_.Adopt("settlements", leases, kT0 + 30000));
    dispatcher_.StopAll();
    EXPECT_EQ(dispatcher_.AdoptionsUnderWay(), 0u);
    EXPECT_FALSE(dispatcher_.Adopt("settlements", leases, kT0 + 60000));
    EXPECT_TRUE(dispatcher_.AdoptionChecksDue(kT0 + 60000).empty());
}

}  // namespace
}  // namespace outbox
