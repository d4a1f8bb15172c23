// The inbox's Kafka consumer, driven as the worker drives it (OpenConsumer, Assign, Service,
// Take): the real outbox-driver binary ($OUTBOX_DRIVER, set by `make unit`) reading from
// librdkafka's mock cluster, hosted in this test process on 127.0.0.1, records produced by a
// plain librdkafka producer (keys, no keys, headers with and without values, a null value,
// binary bytes) to 2 topics of 3 partitions. Every test asserts what the worker would see: each
// record once, in offset order per partition, its fields intact; nothing of a replaced
// assignment; the window kept; the partitions and watermarks; a helper killed with -9 or
// stopped, and what the worker does about it (Epoch, Assign again).
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "outbox/consumer.hpp"
#include "outbox/ipc/supervisor.hpp"
#include "outbox/brokers/config_service.hpp"
#include "outbox/brokers/kafka/consumer.hpp"
#include "kafka_mock.hpp"

namespace outbox {
namespace {

int64_t NowMs() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string HelperPath() {
    const char *env = getenv("OUTBOX_DRIVER");
    return env ? env : "./outbox-driver";
}

using Partition = std::pair<std::string, int32_t>;

class KafkaConsumerTest : public ::testing::Test {
  protected:
    static constexpr int kRecords = 600;

    void SetUp() override {
        ASSERT_EQ(access(HelperPath().c_str(), X_OK), 0)
            << "outbox-driver not found at " << HelperPath() << " (run through make unit)";
        ASSERT_NO_FATAL_FAILURE(kafka_.Start());
        mock_ = kafka_.cluster();
        bootstrap_ = kafka_.bootstrap();
        for (const char *topic : {"a", "b"})
            ASSERT_EQ(rd_kafka_mock_topic_create(mock_, topic, 3, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
        Produce(kRecords);
    }

    // Record i: topic a or b, partition (i / 2) % 3; no key every 7th, a null value every 50th
    // (from the 3rd), binary bytes every 11th, and headers (one of them without a value) on
    // two thirds. Where each landed comes from its delivery report.
    static ConsumedRecord Planned(int i) {
        ConsumedRecord r;
        r.topic = i % 2 ? "b" : "a";
        r.partition = (i / 2) % 3;
        if (i % 7 != 0)
            r.key = "k" + std::to_string(i);
        if (i % 50 == 3)
            r.value.reset();
        else if (i % 11 == 0)
            r.value = std::string("\0\x01\xff\xfe bin ", 10) + std::to_string(i);
        else
            r.value = "{\"n\": " + std::to_string(i) + "}";
        if (i % 3 != 0)
            r.headers = {{"ce_id", "0190a5e2-3b4c-7d5e-8f60-" + std::to_string(100000000000 + i)},
                         {"h-null", ""},
                         {"h", std::string("v\0w", 3)}};
        r.timestamp_ms = 1700000000000 + i;
        return r;
    }

    static void OnDelivery(rd_kafka_t *, const rd_kafka_message_t *m, void *opaque) {
        auto *self = static_cast<KafkaConsumerTest *>(opaque);
        int i = int(reinterpret_cast<intptr_t>(m->_private));
        if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            self->produce_errors_++;
            return;
        }
        ConsumedRecord r = Planned(i);
        r.offset = m->offset;
        self->expected_[{r.topic, r.partition}][m->offset] = r;
    }

    void Produce(int n) {
        char err[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        ASSERT_EQ(rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap_.c_str(), err, sizeof err),
                  RD_KAFKA_CONF_OK);
        rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof err);
        rd_kafka_conf_set(conf, "linger.ms", "5", err, sizeof err);
        rd_kafka_conf_set_opaque(conf, this);
        rd_kafka_conf_set_dr_msg_cb(conf, OnDelivery);
        rd_kafka_t *producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
        ASSERT_NE(producer, nullptr) << err;
        for (int i = 0; i < n; i++) {
            ConsumedRecord r = Planned(i);
            rd_kafka_headers_t *headers = rd_kafka_headers_new(3);
            for (const auto &[name, value] : r.headers) {
                if (name == "h-null")
                    rd_kafka_header_add(headers, name.c_str(), -1, nullptr, 0);
                else
                    rd_kafka_header_add(headers, name.c_str(), -1, value.data(), value.size());
            }
            void *key = r.key ? const_cast<char *>(r.key->data()) : nullptr;
            size_t key_len = r.key ? r.key->size() : 0;
            void *value = r.value ? const_cast<char *>(r.value->data()) : nullptr;
            size_t value_len = r.value ? r.value->size() : 0;
            rd_kafka_resp_err_t e = rd_kafka_producev(
                producer, RD_KAFKA_V_TOPIC(r.topic.c_str()), RD_KAFKA_V_PARTITION(r.partition),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key, key_len),
                RD_KAFKA_V_VALUE(value, value_len), RD_KAFKA_V_TIMESTAMP(r.timestamp_ms),
                RD_KAFKA_V_HEADERS(headers),
                RD_KAFKA_V_OPAQUE(reinterpret_cast<void *>(intptr_t(i))), RD_KAFKA_V_END);
            ASSERT_EQ(e, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(e);
        }
        ASSERT_EQ(rd_kafka_flush(producer, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
        rd_kafka_destroy(producer);
        ASSERT_EQ(produce_errors_, 0);
        size_t total = 0;
        for (const auto &[tp, records] : expected_) {
            // Offsets 0..n-1 in each partition, one per record.
            ASSERT_EQ(records.begin()->first, 0) << tp.first << tp.second;
            ASSERT_EQ(records.rbegin()->first, int64_t(records.size()) - 1);
            total += records.size();
        }
        ASSERT_EQ(total, size_t(n));
        ASSERT_EQ(expected_.size(), 6u);
    }

    DriverProcessOptions Options() const {
        DriverProcessOptions o;
        o.program = HelperPath();
        o.restart_base_ms = 20;
        o.restart_max_ms = 200;
        o.answer_timeout_ms = 3000;
        o.ping_interval_ms = 200;
        return o;
    }

    // A subscription's config as stored, and what the worker tells its consumer besides.
    struct ConsumerSpec {
        std::string config;
        ConsumerContext context;
    };
    ConsumerSpec Consumer(std::vector<std::string> topics = {"a", "b"},
                          const std::string &extra = "") const {
        ConsumerSpec c;
        std::string list;
        for (const std::string &t : topics)
            list += (list.empty() ? "\"" : ", \"") + t + "\"";
        c.config = "{\"bootstrap.servers\": \"" + bootstrap_ + "\", \"topics\": [" + list + "]" +
                   extra + "}";
        c.context.subscription = "orders-in";
        c.context.client_id = "outbox-inbox-test-orders-in";
        c.context.metadata_interval_ms = 200;
        return c;
    }
    static std::unique_ptr<RemoteConsumer> Open(DriverProcess &p, const std::string &name,
                                                const ConsumerSpec &c, std::string *error) {
        return p.OpenConsumer("kafka", name, c.config, c.context, error);
    }

    // Every partition from `offset` (or from offsets[partition] when given).
    std::vector<ConsumerAssignment> All(int64_t offset,
                                        const std::map<Partition, int64_t> &offsets = {}) const {
        std::vector<ConsumerAssignment> a;
        for (const auto &[tp, records] : expected_) {
            auto it = offsets.find(tp);
            a.push_back({tp.first, tp.second, it == offsets.end() ? offset : it->second});
        }
        return a;
    }

    // Serves the process until done() or the timeout; `each` runs after every Service.
    bool Pump(DriverProcess &p, const std::function<bool()> &done, int64_t timeout_ms = 20000,
              const std::function<void()> &each = nullptr) {
        int64_t deadline = NowMs() + timeout_ms;
        for (;;) {
            p.Service();
            std::vector<std::string> lines;
            p.TakeLog(lines);
            for (std::string &l : lines)
                log_ += l + "\n";
            if (each)
                each();
            if (done())
                return true;
            if (NowMs() >= deadline)
                return false;
            int64_t t = p.TimeoutMs();
            struct pollfd pfd = {p.WaitFd(), POLLIN, 0};
            poll(&pfd, 1, int(t < 0 || t > 20 ? 20 : t));
        }
    }

    // Takes (up to `max` at a time) until `n` records in all were taken into got_.
    bool TakeUntil(DriverProcess &p, RemoteConsumer &c, size_t n, size_t max = 1000,
                   int64_t timeout_ms = 30000) {
        return Pump(
            p,
            [&] {
                c.Take(&got_, max);
                return got_.size() >= n;
            },
            timeout_ms);
    }

    // got_ by partition, in the order taken.
    std::map<Partition, std::vector<ConsumedRecord>> ByPartition() const {
        std::map<Partition, std::vector<ConsumedRecord>> by;
        for (const ConsumedRecord &r : got_)
            by[{r.topic, r.partition}].push_back(r);
        return by;
    }

    void ExpectRecord(const ConsumedRecord &got) {
        auto tp = expected_.find({got.topic, got.partition});
        ASSERT_NE(tp, expected_.end()) << got.topic << "[" << got.partition << "]";
        auto it = tp->second.find(got.offset);
        ASSERT_NE(it, tp->second.end()) << got.offset;
        const ConsumedRecord &want = it->second;
        EXPECT_EQ(got.key, want.key) << got.offset;
        EXPECT_EQ(got.value, want.value) << got.offset;
        EXPECT_EQ(got.headers, want.headers) << got.offset;
        EXPECT_EQ(got.timestamp_ms, want.timestamp_ms) << got.offset;
    }

    // Per partition, got_ holds exactly offsets [from[tp], end) once each, in order.
    void ExpectContiguous(const std::map<Partition, int64_t> &from) {
        auto by = ByPartition();
        for (const auto &[tp, records] : expected_) {
            SCOPED_TRACE(tp.first + "[" + std::to_string(tp.second) + "]");
            int64_t next = from.count(tp) ? from.at(tp) : 0;
            for (const ConsumedRecord &r : by[tp]) {
                ASSERT_EQ(r.offset, next);
                ExpectRecord(r);
                next++;
            }
            EXPECT_EQ(next, int64_t(records.size()));
        }
    }

    KafkaMock kafka_;
    rd_kafka_mock_cluster_t *mock_ = nullptr;
    std::string bootstrap_;
    int produce_errors_ = 0;
    std::map<Partition, std::map<int64_t, ConsumedRecord>> expected_;
    std::vector<ConsumedRecord> got_;
    std::string log_;
};

TEST_F(KafkaConsumerTest, EveryRecordOnceInOrderWithItsFieldsAndThePartitions) {
    DriverProcess p(Options());
    std::string error;
    auto c = Open(p, "orders-in", Consumer({"b", "nope", "a"}), &error);
    ASSERT_NE(c, nullptr) << error;
    EXPECT_EQ(c->Error(), "");
    EXPECT_EQ(c->Epoch(), 0u);
    // Metadata and watermarks: the 6 partitions, sorted, each with its high watermark; the
    // topic the cluster does not have.
    ASSERT_TRUE(Pump(p, [&] {
        return c->State().known && c->State().partitions.size() == 6 &&
               std::all_of(c->State().partitions.begin(), c->State().partitions.end(),
                           [](const PartitionInfo &i) { return i.high >= 0; });
    })) << log_;
    std::vector<PartitionInfo> want;
    for (const auto &[tp, records] : expected_)
        want.push_back({tp.first, tp.second, 0, int64_t(records.size())});
    EXPECT_EQ(c->State().partitions, want);
    EXPECT_EQ(c->State().missing_topics, std::vector<std::string>{"nope"});
    EXPECT_EQ(c->State().error, "");
    EXPECT_EQ(c->Buffered(), 0u) << "nothing is read before an Assign";

    c->Assign(All(0));
    ASSERT_TRUE(TakeUntil(p, *c, kRecords, 77)) << got_.size() << "\n" << log_;
    ExpectContiguous({});
    // Nothing more comes, and the tombstone, the missing key and the binary value are there.
    Pump(
        p, [] { return false; }, 500);
    EXPECT_EQ(c->Buffered(), 0u);
    size_t tombstones = 0, no_key = 0;
    for (const ConsumedRecord &r : got_) {
        tombstones += !r.value.has_value();
        no_key += !r.key.has_value();
    }
    EXPECT_EQ(tombstones, size_t(kRecords / 50));
    EXPECT_EQ(no_key, size_t((kRecords + 6) / 7));
    EXPECT_EQ(p.restarts(), 0u);
}

TEST_F(KafkaConsumerTest, AssignFromTheMiddleAndAgainDuringConsumption) {
    DriverProcess p(Options());
    std::string error;
    ConsumerSpec o = Consumer();
    o.context.window_records = 40;  // so that much is still in transit when the assignment changes
    auto c = Open(p, "orders-in", o, &error);
    ASSERT_NE(c, nullptr) << error;
    c->Assign(All(30));
    ASSERT_TRUE(TakeUntil(p, *c, 60, 7)) << log_;
    for (const ConsumedRecord &r : got_)
        ASSERT_GE(r.offset, 30);
    // Replaced while records of the first assignment are buffered here and in transit: none
    // of them is taken after this.
    Pump(
        p, [&] { return c->Buffered() > 0; }, 5000);
    ASSERT_GT(c->Buffered(), 0u);
    got_.clear();
    std::map<Partition, int64_t> from;
    int32_t k = 0;
    for (const auto &[tp, records] : expected_)
        from[tp] = 5 + 7 * k++;  // a different offset in each partition
    c->Assign(All(0, from));
    EXPECT_EQ(c->Buffered(), 0u);
    size_t rest = 0;
    for (const auto &[tp, records] : expected_)
        rest += records.size() - size_t(from[tp]);
    ASSERT_TRUE(TakeUntil(p, *c, rest, 13)) << got_.size() << " of " << rest << "\n" << log_;
    ExpectContiguous(from);
    Pump(
        p, [] { return false; }, 300);
    EXPECT_EQ(c->Buffered(), 0u);
    // An empty assignment stops it.
    c->Assign({});
    got_.clear();
    Pump(
        p, [] { return false; }, 300);
    EXPECT_EQ(c->Take(&got_, 1000), 0u);
}

TEST_F(KafkaConsumerTest, TheWindowBoundsWhatWaitsForTheWorker) {
    DriverProcess p(Options());
    std::string error;
    ConsumerSpec o = Consumer();
    o.context.window_records = 100;
    auto c = Open(p, "orders-in", o, &error);
    ASSERT_NE(c, nullptr) << error;
    c->Assign(All(0));
    size_t most = 0;
    auto watch = [&] { most = std::max(most, c->Buffered()); };
    ASSERT_TRUE(Pump(
        p, [&] { return c->Buffered() == 100; }, 20000, watch))
        << c->Buffered() << "\n"
        << log_;
    Pump(
        p, [] { return false; }, 500, watch);  // nothing more comes without a Take
    EXPECT_EQ(most, 100u);
    EXPECT_EQ(c->Take(&got_, 30), 30u);
    ASSERT_TRUE(Pump(
        p, [&] { return c->Buffered() == 100; }, 20000, watch));
    Pump(
        p, [] { return false; }, 300, watch);
    EXPECT_EQ(most, 100u);
    ASSERT_TRUE(TakeUntil(p, *c, kRecords, 1000)) << log_;
    ExpectContiguous({});
    EXPECT_EQ(most, 100u);

    // In bytes: at most window_bytes and one record more.
    got_.clear();
    ConsumerSpec b = Consumer();
    b.context.window_bytes = 2000;
    auto d = Open(p, "bytes-in", b, &error);
    ASSERT_NE(d, nullptr) << error;
    d->Assign(All(0));
    size_t most_bytes = 0;
    auto watch_bytes = [&] { most_bytes = std::max(most_bytes, d->BufferedBytes()); };
    ASSERT_TRUE(Pump(
        p, [&] { return d->BufferedBytes() >= 2000; }, 20000, watch_bytes));
    Pump(
        p, [] { return false; }, 500, watch_bytes);
    EXPECT_GE(most_bytes, 2000u);
    EXPECT_LT(most_bytes, 2000u + 200u);  // no record here is 200 bytes
    ASSERT_TRUE(Pump(
        p,
        [&] {
            d->Take(&got_, 1000);
            return got_.size() >= size_t(kRecords);
        },
        30000, watch_bytes));
    ExpectContiguous({});
    EXPECT_LT(most_bytes, 2000u + 200u);
}

TEST_F(KafkaConsumerTest, AKilledHelperIsANewEpochAndTheWorkerGoesOnFromItsOffsets) {
    DriverProcess p(Options());
    std::string error;
    auto c = Open(p, "orders-in", Consumer(), &error);
    ASSERT_NE(c, nullptr) << error;
    c->Assign(All(0));
    ASSERT_TRUE(TakeUntil(p, *c, kRecords / 2, 50)) << log_;
    // What the worker "applied": everything it took; the next offset of each partition.
    std::map<Partition, int64_t> next;
    for (const ConsumedRecord &r : got_)
        next[{r.topic, r.partition}] = r.offset + 1;
    Pump(
        p, [&] { return c->Buffered() > 0; }, 5000);
    pid_t old = p.pid();
    ASSERT_EQ(kill(old, SIGKILL), 0);
    ASSERT_TRUE(Pump(p, [&] { return c->Epoch() == 1; })) << log_;
    EXPECT_EQ(c->Buffered(), 0u) << "the dead helper's records are gone";
    EXPECT_FALSE(c->State().known);
    ASSERT_TRUE(Pump(p, [&] { return c->Error().empty() && p.Running(); })) << c->Error();
    EXPECT_NE(p.pid(), old);
    EXPECT_EQ(p.restarts(), 1u);
    EXPECT_NE(log_.find("driver process " + std::to_string(old) + " was killed by signal 9"),
              std::string::npos)
        << log_;
    // Opened again with nothing assigned: nothing comes until the worker assigns.
    Pump(
        p, [] { return false; }, 500);
    EXPECT_EQ(c->Buffered(), 0u);
    c->Assign(All(0, next));
    ASSERT_TRUE(TakeUntil(p, *c, kRecords, 50)) << got_.size() << "\n" << log_;
    ExpectContiguous({});
    ASSERT_TRUE(Pump(p, [&] { return c->State().known; }));
}

TEST_F(KafkaConsumerTest, AHungHelperIsFoundWhileOnlyAConsumerIsOpen) {
    DriverProcessOptions o = Options();
    o.answer_timeout_ms = 1000;
    DriverProcess p(o);
    std::string error;
    auto c = Open(p, "orders-in", Consumer(), &error);
    ASSERT_NE(c, nullptr) << error;
    ASSERT_TRUE(Pump(p, [&] { return c->State().known; })) << log_;
    // A quiet consumer is not a hung helper.
    Pump(
        p, [] { return false; }, 1500);
    EXPECT_EQ(c->Epoch(), 0u) << log_;
    pid_t old = p.pid();
    ASSERT_EQ(kill(old, SIGSTOP), 0);
    int64_t t0 = NowMs();
    ASSERT_TRUE(Pump(p, [&] { return c->Epoch() == 1; })) << log_;
    EXPECT_LT(NowMs() - t0, 4000);
    EXPECT_NE(log_.find("driver process " + std::to_string(old) +
                        " stopped answering (no reply to a ping within 1.0 s); killed"),
              std::string::npos)
        << log_;
    EXPECT_NE(c->Error(), "");
    c->Assign(All(0));  // made while there is no helper: sent once the consumer is open again
    ASSERT_TRUE(TakeUntil(p, *c, kRecords)) << log_;
    ExpectContiguous({});
}

TEST_F(KafkaConsumerTest, AHeldHelperReadsNothing) {
    DriverProcess p(Options());
    std::string error;
    auto c = Open(p, "orders-in", Consumer(), &error);
    ASSERT_NE(c, nullptr) << error;
    p.Freeze(true);
    c->Assign(All(0));
    Pump(
        p, [] { return false; }, 1000);
    EXPECT_EQ(c->Buffered(), 0u);
    EXPECT_EQ(c->Epoch(), 0u) << "silence while held is not a hang";
    p.Freeze(false);
    ASSERT_TRUE(TakeUntil(p, *c, kRecords)) << log_;
    ExpectContiguous({});
}

TEST_F(KafkaConsumerTest, ARefusedConfigIsReportedAsInProcess) {
    DriverProcess p(Options());
    // The helper checks the config first, as the worker did before it.
    ConsumerSpec o = Consumer({"a", "b"}, ", \"no.such.property\": 1");
    std::string remote, local;
    EXPECT_EQ(Open(p, "orders-in", o, &remote), nullptr);
    EXPECT_EQ(OpenConsumer("kafka", o.config, o.context, &local), nullptr);
    EXPECT_EQ(remote, local);
    EXPECT_EQ(remote, "the config is not valid: unknown librdkafka property \"no.such.property\"");
    std::string bad;
    o = Consumer({});
    EXPECT_EQ(Open(p, "orders-in", o, &bad), nullptr);
    EXPECT_EQ(bad,
              "the config is not valid: \"topics\" must be a non-empty array of Kafka topic "
              "names, such as [\"orders\"]");
    EXPECT_TRUE(p.Running()) << "a refused consumer does not end the helper";
    auto c = Open(p, "orders-in", Consumer(), &bad);
    EXPECT_NE(c, nullptr) << bad;
}

}  // namespace
}  // namespace outbox
