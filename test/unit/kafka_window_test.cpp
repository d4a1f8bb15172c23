// A Kafka destination's default window (window.hpp, KafkaDriverOptions): it starts at the
// worker's default, opens a round at a time while acknowledgements are fast, and is back to the
// default at a slow round or a failure; past max_in_flight_bytes in flight it is the default
// whatever the acknowledgements; a window the config set is its count whatever the bytes.
// The driver's own tests use librdkafka's mock cluster, hosted in this test process on
// 127.0.0.1 (acknowledgement times set with rd_kafka_mock_broker_set_rtt), or no broker at all
// (127.0.0.1:1: nothing answers, so everything submitted stays in flight).
#include "outbox/brokers/kafka/window.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "outbox/brokers/kafka/driver.hpp"
#include "outbox/clock.hpp"
#include "kafka_mock.hpp"

namespace outbox {
namespace {

// Acknowledges n messages, each after ack_ms.
void Ack(KafkaWindow &w, size_t n, int64_t ack_ms) {
    for (size_t i = 0; i < n; ++i)
        w.Acked(ack_ms);
}

constexpr int64_t kFast = KafkaWindow::kOpenAckMs - 1;
constexpr int64_t kSlow = KafkaWindow::kCloseAckMs;

TEST(KafkaWindow, StartsAtTheBaseAndDoublesWithEachFastRound) {
    KafkaWindow w(100, 1000);
    EXPECT_EQ(w.Width(), 100u);
    Ack(w, 99, 1);
    EXPECT_EQ(w.Width(), 100u);  // a round is a window's worth
    Ack(w, 1, 1);
    EXPECT_EQ(w.Width(), 200u);
    Ack(w, 200, kFast);
    EXPECT_EQ(w.Width(), 400u);
    Ack(w, 400, 0);
    EXPECT_EQ(w.Width(), 800u);
    Ack(w, 800, kFast);
    EXPECT_EQ(w.Width(), 1000u);  // no wider than wide
    Ack(w, 1000, 1);
    EXPECT_EQ(w.Width(), 1000u);
}

TEST(KafkaWindow, StaysBetweenTheThresholds) {
    KafkaWindow w(100, 1000);
    Ack(w, 100, 1);
    EXPECT_EQ(w.Width(), 200u);
    // A mean from kOpenAckMs to just under kCloseAckMs neither opens nor closes it.
    Ack(w, 1000, KafkaWindow::kOpenAckMs);
    EXPECT_EQ(w.Width(), 200u);
    Ack(w, 1000, KafkaWindow::kCloseAckMs - 1);
    EXPECT_EQ(w.Width(), 200u);
}

TEST(KafkaWindow, ASlowRoundClosesItOnceItHoldsABasesWorth) {
    KafkaWindow w(100, 1000);
    Ack(w, 100 + 200 + 400, 1);
    ASSERT_EQ(w.Width(), 800u);
    // 99 slow ones do not close it yet: fewer than a base's worth.
    Ack(w, 99, kSlow);
    EXPECT_EQ(w.Width(), 800u);
    Ack(w, 1, kSlow);
    EXPECT_EQ(w.Width(), 100u);
    // A new round: fast acks open it again, one doubling a round.
    Ack(w, 100, 1);
    EXPECT_EQ(w.Width(), 200u);
}

TEST(KafkaWindow, FastAcksBeforeSlowOnesKeepItOpenWhileTheMeanIsLow) {
    KafkaWindow w(100, 1000);
    Ack(w, 100 + 200, 1);
    ASSERT_EQ(w.Width(), 400u);
    Ack(w, 200, 0);
    Ack(w, 100, 2 * kSlow);  // a mean of 2/3 kCloseAckMs: not closed
    EXPECT_EQ(w.Width(), 400u);
    Ack(w, 100, kSlow);  // the round ends at a mean of 3/4 kCloseAckMs: kept, not opened
    EXPECT_EQ(w.Width(), 400u);
    static_assert(3 * KafkaWindow::kCloseAckMs / 4 >= KafkaWindow::kOpenAckMs);
    Ack(w, 400, 1);
    EXPECT_EQ(w.Width(), 800u);
}

TEST(KafkaWindow, AFailureClosesIt) {
    KafkaWindow w(100, 1000);
    Ack(w, 100 + 200, 1);
    ASSERT_EQ(w.Width(), 400u);
    w.Failed();
    EXPECT_EQ(w.Width(), 100u);
    Ack(w, 99, 1);
    w.Failed();  // a failure starts a new round too
    Ack(w, 99, 1);
    EXPECT_EQ(w.Width(), 100u);
}

TEST(KafkaWindow, ACrampedConfigurationStaysSane) {
    KafkaWindow zero(0, 0);
    EXPECT_EQ(zero.Width(), 1u);
    Ack(zero, 10, 0);
    EXPECT_EQ(zero.Width(), 1u);
    KafkaWindow narrow(10, 5);  // wide below base: the base
    Ack(narrow, 100, 0);
    EXPECT_EQ(narrow.Width(), 10u);
}

int64_t next_id = 1;

std::vector<Message> Batch(int n, size_t payload_bytes, const std::string &topic = "window") {
    std::vector<Message> batch(n);
    for (Message &m : batch) {
        m.id = next_id++;
        m.lease_token = 1;
        m.event_id = "0190a3c2-7b1e-7cc1-9f4e-000000000001";
        m.topic = topic;
        m.key = "k" + std::to_string(m.id % 7);
        m.payload = std::string(payload_bytes, 'x');
        m.created_at_ms = 1700000000000;
        m.attempts = 1;
    }
    return batch;
}

std::unique_ptr<Driver> Make(const std::string &bootstrap, size_t base, size_t max, size_t bytes) {
    KafkaDriverOptions o;
    o.config.default_topic = "window";
    o.config.properties = {{"bootstrap.servers", bootstrap}};
    o.client_id = "outbox-test-window";
    o.source = "/outbox/test";
    o.lease_timeout_ms = 30000;
    o.max_in_flight = max;
    o.base_in_flight = base;
    o.max_in_flight_bytes = bytes;
    std::string error;
    std::unique_ptr<Driver> d = MakeKafkaDriver(o, &error);
    EXPECT_NE(d, nullptr) << error;
    return d;
}

TEST(KafkaWindowDriver, DefaultStartsAtTheBase) {
    auto d = Make("127.0.0.1:1", /*base=*/4, /*max=*/40, /*bytes=*/100000);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->Capacity(), 4u);
    d->Submit(Batch(3, 10));
    EXPECT_EQ(d->InFlight(), 3u);
    EXPECT_EQ(d->Capacity(), 1u);
}

TEST(KafkaWindowDriver, ConfiguredCountsMessagesOnly) {
    auto d = Make("127.0.0.1:1", /*base=*/0, /*max=*/40, /*bytes=*/0);
    ASSERT_NE(d, nullptr);
    d->Submit(Batch(3, 100000));
    EXPECT_EQ(d->InFlight(), 3u);
    EXPECT_EQ(d->Capacity(), 37u);
}

class KafkaWindowMockTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(kafka_.Start());
        mock_ = kafka_.cluster();
        bootstrap_ = kafka_.bootstrap();
        ASSERT_EQ(rd_kafka_mock_topic_create(mock_, "window", 3, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    }

    struct Seen {
        size_t widest = 0;     // the widest window (in flight + capacity) seen
        size_t in_flight = 0;  // the most messages in flight at once
    };
    // Drains `total` messages the way the dispatcher does during a backlog: a batch of `batch`
    // whenever the window has room for one, until all are delivered. All zero if something was
    // not delivered or it took over 30 s.
    Seen Drain(Driver &d, size_t total, size_t batch, size_t payload_bytes = 100) {
        size_t submitted = 0, delivered = 0;
        Seen seen;
        int64_t deadline = MonotonicMs() + 30000;
        std::vector<Outcome> out;
        while (delivered < total && MonotonicMs() < deadline) {
            seen.widest = std::max(seen.widest, d.Capacity() + d.InFlight());
            while (submitted < total && d.Capacity() >= batch) {
                d.Submit(Batch(int(batch), payload_bytes));
                submitted += batch;
                seen.in_flight = std::max(seen.in_flight, d.InFlight());
            }
            out.clear();
            d.Poll(out);
            for (const Outcome &o : out) {
                if (o.kind != OutcomeKind::Delivered) {
                    ADD_FAILURE() << o.error;
                    return {};
                }
                ++delivered;
            }
            if (out.empty())
                usleep(200);
        }
        EXPECT_EQ(delivered, total) << "not delivered within 30 s";
        return delivered == total ? seen : Seen{};
    }

    KafkaMock kafka_;
    rd_kafka_mock_cluster_t *mock_ = nullptr;
    std::string bootstrap_;
};

TEST_F(KafkaWindowMockTest, FastAcknowledgementsOpenIt) {
    auto d = Make(bootstrap_, /*base=*/100, /*max=*/1000, /*bytes=*/size_t(64) << 20);
    ASSERT_NE(d, nullptr);
    Seen seen = Drain(*d, 20000, 50);
    EXPECT_EQ(seen.widest, 1000u);
}

TEST_F(KafkaWindowMockTest, SlowAcknowledgementsKeepTheBase) {
    rd_kafka_mock_broker_set_rtt(mock_, 1, 2 * KafkaWindow::kCloseAckMs);
    auto d = Make(bootstrap_, /*base=*/100, /*max=*/1000, /*bytes=*/size_t(64) << 20);
    ASSERT_NE(d, nullptr);
    Seen seen = Drain(*d, 2000, 50);
    EXPECT_EQ(seen.widest, 100u);
    EXPECT_EQ(seen.in_flight, 100u);
}

TEST_F(KafkaWindowMockTest, HeavyMessagesKeepTheBase) {
    // Fast acknowledgements, but 200 messages of 10 kB weigh more than the bound.
    auto d = Make(bootstrap_, /*base=*/100, /*max=*/1000, /*bytes=*/200 * 10000);
    ASSERT_NE(d, nullptr);
    Seen seen = Drain(*d, 5000, 50, 10000);
    EXPECT_GT(seen.widest, 100u);     // opened while light
    EXPECT_LE(seen.in_flight, 250u);  // but took no batch past the bound
}

// A batch is prepared whole before any of it is produced (driver.cpp, Produce): every message
// still gets its own outcome, a tombstone and a keyless message among them.
TEST_F(KafkaWindowMockTest, EveryMessageOfABatchGetsItsOwnOutcome) {
    auto d = Make(bootstrap_, /*base=*/100, /*max=*/1000, /*bytes=*/size_t(64) << 20);
    ASSERT_NE(d, nullptr);
    std::vector<Message> batch = Batch(40, 100);
    batch[7].tombstone = true;
    batch[7].payload.clear();
    batch[12].key.reset();
    std::set<int64_t> expected;
    for (const Message &m : batch)
        expected.insert(m.id);
    d->Submit(std::move(batch));
    std::map<int64_t, int> seen;
    std::map<int32_t, std::set<int64_t>> offsets;
    std::vector<Outcome> out;
    int64_t deadline = MonotonicMs() + 30000;
    while (seen.size() < expected.size() && MonotonicMs() < deadline) {
        out.clear();
        d->Poll(out);
        for (const Outcome &o : out) {
            EXPECT_EQ(o.kind, OutcomeKind::Delivered) << o.error;
            EXPECT_EQ(expected.count(o.id), 1u) << "an outcome for an id never submitted";
            seen[o.id]++;
            EXPECT_TRUE(offsets[o.partition].insert(o.offset).second) << "an offset twice";
        }
        if (out.empty())
            usleep(1000);
    }
    EXPECT_EQ(seen.size(), expected.size());
    for (const auto &[id, n] : seen)
        EXPECT_EQ(n, 1) << "message " << id;
    EXPECT_EQ(d->InFlight(), 0u);
}

}  // namespace
}  // namespace outbox
