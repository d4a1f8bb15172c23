// The driver process, driven as the worker drives it (Open, Submit, Service, Poll): the real
// outbox-driver binary ($OUTBOX_DRIVER, set by `make unit`; else ./outbox-driver) delivering to
// librdkafka's mock cluster, hosted in this test process on 127.0.0.1. It is killed with signals,
// made to crash, leak, hang and run out of memory (its test-only fault switch), and replaced by
// fake helpers that send malformed frames (this test binary itself, re-executed with
// --outbox-fake-helper=SCENARIO). Every test asserts what the worker would write back.
#include "outbox/ipc/supervisor.hpp"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "outbox/ipc/protocol.hpp"
#include "outbox/brokers/config_service.hpp"
#include "outbox/brokers/kafka/driver.hpp"
#include "kafka_mock.hpp"

namespace outbox {
namespace {

int64_t NowMs() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// --- fake helpers (this binary, re-executed by the supervisor) ----------------------------------

void WriteAll(const std::string &bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = write(3, bytes.data() + done, bytes.size() - done);
        if (n <= 0)
            _exit(9);
        done += size_t(n);
    }
}

std::string U32(uint32_t v) {
    std::string s;
    for (int i = 0; i < 4; i++)
        s.push_back(char(v >> (8 * i)));
    return s;
}

// Speaks the protocol like outbox-driver, then misbehaves as `scenario` says when the first
// Submit arrives.
int FakeHelper(const std::string &scenario) {
    fcntl(3, F_SETFL, fcntl(3, F_GETFL) & ~O_NONBLOCK);
    std::string out;
    if (scenario == "before-hello") {
        protocol::Encode(protocol::PongFrame{1}, &out);
        WriteAll(out);
    } else {
        protocol::Encode(protocol::HelloFrame{scenario == "bad-version" ? 999u : protocol::kVersion,
                                              uint32_t(getpid())},
                         &out);
        WriteAll(out);
    }
    protocol::FrameReader reader(protocol::kMaxToHelperFrame);
    for (;;) {
        char *at = reader.Reserve(65536);
        ssize_t n = read(3, at, 65536);
        if (n <= 0)
            return 0;
        reader.Commit(size_t(n));
        protocol::Frame frame;
        std::string error;
        while (reader.Next(&frame, &error) == protocol::FrameReader::Result::Frame) {
            out.clear();
            if (auto *open = std::get_if<protocol::OpenFrame>(&frame)) {
                protocol::Encode(protocol::OpenedFrame{open->handle, true, {}}, &out);
                protocol::EncodeOutcomes(open->handle, {}, protocol::DriverState{0, 100, false},
                                         &out);
                WriteAll(out);
                continue;
            }
            auto *submit = std::get_if<protocol::SubmitFrame>(&frame);
            if (submit == nullptr)
                continue;
            if (scenario == "answer-one-then-exit") {
                Outcome o;
                o.id = submit->messages[0].id;
                o.lease_token = submit->messages[0].lease_token;
                o.kind = OutcomeKind::Delivered;
                protocol::EncodeOutcomes(submit->handle, {o}, protocol::DriverState{0, 100, false},
                                         &out);
                WriteAll(out);
                _exit(0);
            } else if (scenario == "garbage") {
                WriteAll(U32(0x7FFFFFF0u) + "garbage that never ends");
            } else if (scenario == "outcome-kind-4") {
                Outcome o;
                o.id = submit->messages[0].id;
                o.lease_token = submit->messages[0].lease_token;
                protocol::EncodeOutcomes(submit->handle, {o}, protocol::DriverState{}, &out);
                out[protocol::kHeaderBytes + 8 + 4 + 8 + 8] = 4;  // Unacknowledged: not a driver's
                WriteAll(out);
            } else if (scenario == "worker-frame") {
                protocol::Encode(protocol::PingFrame{1}, &out);  // only the worker sends Ping
                WriteAll(out);
            }
        }
    }
}

// Runs before main: a copy of this binary started as a helper (argv[1] is
// --outbox-fake-helper=SCENARIO) becomes the fake helper and never returns.
const bool kIsFakeHelper = [] {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string flag = "--outbox-fake-helper=";
    size_t arg1 = cmdline.find('\0');
    if (arg1 != std::string::npos && cmdline.compare(arg1 + 1, flag.size(), flag) == 0)
        _exit(FakeHelper(cmdline.c_str() + arg1 + 1 + flag.size()));
    return false;
}();

// Options for a fake helper playing `scenario`.
DriverProcessOptions FakeOptions(DriverProcessOptions o, const std::string &scenario);

std::string SelfPath() {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

DriverProcessOptions FakeOptions(DriverProcessOptions o, const std::string &scenario) {
    o.program = SelfPath();
    o.args = {"--outbox-fake-helper=" + scenario};
    return o;
}

std::string HelperPath() {
    const char *env = getenv("OUTBOX_DRIVER");
    return env ? env : "./outbox-driver";
}

std::string ReadFile(const std::string &path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// --- the fixture ---------------------------------------------------------------------------

class DriverSupervisorTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(access(HelperPath().c_str(), X_OK), 0)
            << "outbox-driver not found at " << HelperPath() << " (run through make unit)";
        ASSERT_NO_FATAL_FAILURE(kafka_.Start());
        mock_ = kafka_.cluster();
        bootstrap_ = kafka_.bootstrap();
        rd_kafka_mock_topic_create(mock_, "t", 4, 1);
    }

    DriverProcessOptions Options() const {
        DriverProcessOptions o;
        o.program = HelperPath();
        o.restart_base_ms = 20;
        o.restart_max_ms = 200;
        o.answer_timeout_ms = 3000;
        o.ping_interval_ms = 200;
        o.hold_limit_ms = 10000;
        o.poison_after = 3;
        return o;
    }

    // A kafka destination's config as stored (`extra`: more keys, each with a leading comma).
    std::string KafkaJson(const std::string &extra = "") const {
        return "{\"bootstrap.servers\": \"" + bootstrap_ + "\", \"topic\": \"t\"" + extra + "}";
    }
    DriverContext Context() const {
        DriverContext c;
        c.destination = "orders";
        c.client_name = "outbox-test";
        c.source = "/outbox/test";
        c.lease_timeout_ms = 30000;
        c.default_in_flight = 1000;
        c.config_by_superuser = true;
        return c;
    }
    // The Open options of that destination.
    std::string Kafka() const { return protocol::EncodeOpenOptions(KafkaJson(), Context()); }

    std::unique_ptr<Driver> OpenKafka(DriverProcess &p, std::string *error = nullptr) {
        std::string e;
        auto d = p.Open("kafka", "orders", Kafka(), &e);
        EXPECT_NE(d, nullptr) << e;
        if (error)
            *error = e;
        return d;
    }

    static Message Msg(int64_t id, std::string key = "") {
        Message m;
        m.id = id;
        m.lease_token = 100 + id;
        m.event_id = "0190a5e2-3b4c-7d5e-8f60-" + std::to_string(100000000000 + id);
        m.topic = "t";
        m.key = key.empty() ? "k" + std::to_string(id) : key;
        m.payload = "{\"n\": " + std::to_string(id) + "}";
        m.created_at_ms = 1700000000000;
        m.attempts = 1;
        return m;
    }

    static std::vector<Message> Batch(int64_t first, int n) {
        std::vector<Message> b;
        for (int64_t id = first; id < first + n; id++)
            b.push_back(Msg(id));
        return b;
    }

    // Serves the process and polls `d` (as the dispatcher does) until done() or the timeout;
    // every outcome goes to got_ (by id, in arrival order).
    bool Pump(DriverProcess &p, Driver *d, const std::function<bool()> &done,
              int64_t timeout_ms = 15000) {
        int64_t deadline = NowMs() + timeout_ms;
        for (;;) {
            p.Service();
            std::vector<Outcome> out;
            d->Poll(out);
            for (Outcome &o : out)
                got_[o.id].push_back(o);
            std::vector<std::string> lines;
            p.TakeLog(lines);
            d->TakeLog(lines);
            for (std::string &l : lines)
                log_ += l + "\n";
            if (done())
                return true;
            if (NowMs() >= deadline)
                return false;
            int64_t t = p.TimeoutMs();
            int64_t dt = d->PollTimeoutMs();
            if (dt >= 0 && (t < 0 || dt < t))
                t = dt;
            struct pollfd pfd = {p.WaitFd(), POLLIN, 0};
            poll(&pfd, 1, int(t < 0 || t > 50 ? 50 : t));
        }
    }

    size_t Resolved(OutcomeKind kind) const {
        size_t n = 0;
        for (const auto &[id, list] : got_)
            if (!list.empty() && list.back().kind == kind)
                n++;
        return n;
    }

    // Each message's last outcome and its error, for a failure's message.
    std::string Outcomes() const {
        std::string s;
        for (const auto &[id, list] : got_)
            if (!list.empty())
                s += std::to_string(id) + ": " + std::to_string(int(list.back().kind)) + " " +
                     list.back().error + "\n";
        return s;
    }

    KafkaMock kafka_;
    rd_kafka_mock_cluster_t *mock_ = nullptr;
    std::string bootstrap_;
    std::map<int64_t, std::vector<Outcome>> got_;
    std::string log_;
};

TEST_F(DriverSupervisorTest, DeliversThroughTheHelper) {
    DriverProcess p(Options());
    auto d = OpenKafka(p);
    ASSERT_NE(d, nullptr);
    ASSERT_GT(p.pid(), 0);
    EXPECT_TRUE(Pump(p, d.get(), [&] { return d->Capacity() == 1000; }));
    d->Submit(Batch(1, 500));
    EXPECT_EQ(d->InFlight(), 500u);
    EXPECT_EQ(d->Capacity(), 500u);
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 500; })) << log_;
    EXPECT_EQ(Resolved(OutcomeKind::Delivered), 500u);
    for (const auto &[id, list] : got_) {
        ASSERT_EQ(list.size(), 1u) << id;
        EXPECT_EQ(list[0].lease_token, 100 + id);
        EXPECT_GE(list[0].partition, 0);  // where the broker stored it came through
        EXPECT_GE(list[0].offset, 0);
    }
    EXPECT_EQ(d->InFlight(), 0u);
    EXPECT_EQ(d->Capacity(), 1000u);
    EXPECT_EQ(p.restarts(), 0u);
}

TEST_F(DriverSupervisorTest, TheHelperRunsAloneWithItsLimit) {
    // A file this process has open without close-on-exec must not reach the helper.
    char path[] = "/tmp/outbox_supervisor_fd.XXXXXX";
    int leaked = mkstemp(path);
    ASSERT_GE(leaked, 0);
    DriverProcessOptions o = Options();
    o.memory_limit_bytes = 512ull << 20;
    DriverProcess p(o);
    auto d = OpenKafka(p);
    ASSERT_NE(d, nullptr);
    pid_t pid = p.pid();
    std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR *fds = opendir(dir.c_str());
    ASSERT_NE(fds, nullptr);
    while (struct dirent *e = readdir(fds)) {
        char target[4096] = {0};
        std::string link = dir + "/" + e->d_name;
        if (readlink(link.c_str(), target, sizeof target - 1) > 0) {
            EXPECT_NE(std::string(target), std::string(path)) << "fd " << e->d_name << " leaked";
        }
    }
    closedir(fds);
    close(leaked);
    unlink(path);
    EXPECT_EQ(getsid(pid), pid) << "the helper runs in a session of its own";
    std::string limits = ReadFile("/proc/" + std::to_string(pid) + "/limits");
    EXPECT_NE(limits.find("Max address space         536870912            unlimited"),
              std::string::npos)
        << limits;
    // A reload applies a new limit to the running helper.
    o.memory_limit_bytes = 768ull << 20;
    p.SetOptions(o);
    limits = ReadFile("/proc/" + std::to_string(pid) + "/limits");
    EXPECT_NE(limits.find("Max address space         805306368            unlimited"),
              std::string::npos)
        << limits;
    EXPECT_EQ(ReadFile("/proc/" + std::to_string(pid) + "/oom_score_adj"), "1000\n");
    // Stop: EOF, and the helper is gone.
    p.Stop(2000);
    EXPECT_FALSE(p.Running());
    EXPECT_NE(kill(pid, 0), 0);
}

// A topic that does not exist rejects its messages (dead letters); once it is created, a
// message sent at once (a requeue right after the DBA created it) is delivered. librdkafka
// still holds "topic missing" from its last metadata for up to a second and would fail the
// message on the spot; the driver asks the cluster before it calls that permanent.
TEST_F(DriverSupervisorTest, ATopicCreatedAfterARejectionIsUsedAtOnce) {
    // The mock cluster creates a topic when asked about it; this one answers "unknown" until
    // its error is cleared, as a broker does for a topic created later.
    rd_kafka_mock_topic_set_error(mock_, "late", RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
    DriverContext c = Context();
    // "Unknown topic" is reported 2-3 s after the first produce (topic.metadata.propagation.max.ms
    // is half of message.timeout.ms, and librdkafka looks once a second), not after 7.5 s.
    c.lease_timeout_ms = 8000;
    DriverProcess p(Options());
    std::string error;
    auto d = p.Open("kafka", "orders", protocol::EncodeOpenOptions(KafkaJson(), c), &error);
    ASSERT_NE(d, nullptr) << error;
    auto late = [](int64_t id) {
        Message m = Msg(id);
        m.topic = "late";
        return m;
    };
    // On a loaded machine the message can still time out first (a retry, as the worker would
    // count it); it is sent again until the topic is reported missing.
    for (int attempt = 0; attempt < 3 && Resolved(OutcomeKind::Dead) == 0; attempt++) {
        got_.clear();
        d->Submit({late(1)});
        ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 1; })) << log_;
    }
    ASSERT_EQ(got_[1].back().kind, OutcomeKind::Dead) << Outcomes();
    EXPECT_NE(got_[1].back().error.find("UNKNOWN_TOPIC_OR_PART"), std::string::npos) << Outcomes();

    rd_kafka_mock_topic_set_error(mock_, "late", RD_KAFKA_RESP_ERR_NO_ERROR);
    got_.clear();
    d->Submit({late(1), late(2)});
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 2; })) << log_;
    EXPECT_EQ(Resolved(OutcomeKind::Delivered), 2u) << Outcomes();
    for (const auto &[id, list] : got_)
        EXPECT_EQ(list.size(), 1u) << Outcomes();  // no attempt spent on the stale "missing"
}

TEST_F(DriverSupervisorTest, AProducerThatFailedBeforeTheMessageWasQueuedDeadLettersIt) {
    // A principal without WRITE: the idempotent producer's InitProducerId is refused, a fatal
    // error. A message handed to the driver after that, before the helper has told the worker it
    // is broken, is refused by librdkafka at once (_FATAL): it goes to the dead letters with the
    // reason, as the messages queued before the error do, instead of spending a retry on
    // "Local: Fatal error" (the next producer may well fail the same way before its message).
    constexpr int16_t kInitProducerId = 22;  // the Kafka protocol's API key
    rd_kafka_mock_push_request_errors(mock_, kInitProducerId, 1,
                                      RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED);
    DriverProcess p(Options());
    auto d = OpenKafka(p);
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(Pump(p, d.get(), [&] { return d->Broken(); })) << log_;
    d->Submit({Msg(1), Msg(2)});
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 2; })) << log_;
    for (const auto &[id, list] : got_) {
        ASSERT_EQ(list.size(), 1u) << Outcomes();
        EXPECT_EQ(list[0].kind, OutcomeKind::Dead) << Outcomes();
        EXPECT_EQ(list[0].error.rfind("CLUSTER_AUTHORIZATION_FAILED: ", 0), 0u) << Outcomes();
        EXPECT_NE(list[0].error.find("needs WRITE on the topic"), std::string::npos) << Outcomes();
    }
}

TEST_F(DriverSupervisorTest, ARefusedConfigIsReportedAsInProcess) {
    DriverProcess p(Options());
    // The helper checks the config first, as the worker did before it: the same words.
    std::string json = KafkaJson(", \"no.such.property\": 1");
    std::string remote, local;
    EXPECT_EQ(p.Open("kafka", "orders", protocol::EncodeOpenOptions(json, Context()), &remote),
              nullptr);
    EXPECT_EQ(OpenDriver("kafka", json, Context(), &local), nullptr);
    EXPECT_EQ(remote, local);
    EXPECT_EQ(remote, "invalid config: unknown librdkafka property \"no.such.property\"");
    std::string error;
    EXPECT_EQ(p.Open("smtp", "n", "", &error), nullptr);
    EXPECT_EQ(error, "this outbox-driver has no driver of kind \"smtp\"");
    EXPECT_TRUE(p.Running()) << "a refused driver does not end the helper";
}

TEST_F(DriverSupervisorTest, AMissingHelperIsAnErrorNotACrash) {
    DriverProcessOptions o = Options();
    o.program = "/nonexistent/outbox-driver";
    DriverProcess p(o);
    std::string error;
    EXPECT_EQ(p.Open("kafka", "orders", Kafka(), &error), nullptr);
    EXPECT_EQ(error,
              "could not start the driver process /nonexistent/outbox-driver: No such file or "
              "directory");
    EXPECT_FALSE(p.Running());
}

TEST_F(DriverSupervisorTest, ACrashHandsBackWhatWasUnansweredAndTheHelperComesBack) {
    DriverProcess p(Options());
    auto d = OpenKafka(p);
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(Pump(p, d.get(), [&] { return d->Capacity() == 1000; }));
    d->Submit(Batch(1, 20));  // delivered and answered before the crash: kept
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 20; }));
    rd_kafka_mock_broker_set_rtt(mock_, 1, 5000);  // the next ones stay in flight
    d->Submit(Batch(101, 100));
    Pump(
        p, d.get(), [] { return false; }, 300);
    pid_t old = p.pid();
    ASSERT_EQ(kill(old, SIGSEGV), 0);
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 120; })) << log_;
    EXPECT_EQ(Resolved(OutcomeKind::Delivered), 20u);
    EXPECT_EQ(Resolved(OutcomeKind::Unacknowledged), 100u);
    EXPECT_NE(got_[101].back().error.find("driver process crashed (signal 11: Segmentation fault); "
                                          "100 messages in flight will be retried"),
              std::string::npos)
        << got_[101].back().error;
    EXPECT_NE(log_.find("driver process " + std::to_string(old) +
                        " was killed by signal 11 (Segmentation fault)"),
              std::string::npos)
        << log_;
    EXPECT_NE(log_.find("100 messages in flight without an answer will be delivered again "
                        "(orders: 100)"),
              std::string::npos)
        << log_;
    for (int64_t id = 101; id <= 200; id++)
        EXPECT_EQ(p.CrashCount(id), 1) << id;
    EXPECT_EQ(p.CrashCount(1), 0);
    EXPECT_EQ(d->InFlight(), 0u);
    // Restarted, the destination opened in it again, and the crash's messages go out again
    // (one at a time, as suspects) and are cleared.
    rd_kafka_mock_broker_set_rtt(mock_, 1, 0);
    ASSERT_TRUE(Pump(p, d.get(), [&] { return p.Running() && d->Capacity() > 0; })) << log_;
    EXPECT_NE(p.pid(), old);
    EXPECT_EQ(p.restarts(), 1u);
    got_.clear();
    d->Submit(Batch(101, 100));
    d->Submit(Batch(201, 50));
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 150; })) << log_;
    EXPECT_EQ(Resolved(OutcomeKind::Delivered), 150u);
    for (int64_t id = 101; id <= 200; id++)
        EXPECT_EQ(p.CrashCount(id), 0) << id;
}

TEST_F(DriverSupervisorTest, OnlyTheMessageThatCrashesTheHelperIsBuried) {
    DriverProcessOptions o = Options();
    o.fault = "segv:poison";
    DriverProcess p(o);
    auto d = OpenKafka(p);
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(Pump(p, d.get(), [&] { return d->Capacity() == 1000; }));
    // The culprit travels with two others: the first crash counts against all three.
    std::vector<Message> batch = {Msg(1), Msg(2, "poison"), Msg(3)};
    int claims = 0;
    std::map<int64_t, int> delivered;
    // Like the dispatcher: whatever comes back unanswered is claimed again, with fresh
    // messages next to it, until the culprit is buried.
    for (int round = 0; round < 10 && !got_.count(2); round++) {
        std::vector<Message> next = batch;
        for (int i = 0; i < 5; i++)
            next.push_back(Msg(1000 + round * 10 + i));  // new messages keep flowing
        claims++;
        d->Submit(next);
        std::map<int64_t, std::vector<Outcome>> before = got_;
        got_.clear();
        ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == next.size(); })) << log_;
        batch.clear();
        for (auto &[id, list] : got_) {
            if (list.back().kind == OutcomeKind::Delivered)
                delivered[id]++;
            else if (list.back().kind == OutcomeKind::Unacknowledged)
                batch.push_back(id == 2 ? Msg(2, "poison") : Msg(id));
            else
                before[id] = list;
        }
        got_ = before;
        ASSERT_TRUE(Pump(p, d.get(), [&] { return p.Running() && d->Capacity() > 0; })) << log_;
    }
    ASSERT_EQ(got_.count(2), 1u) << "the culprit was not buried; log:\n" << log_;
    EXPECT_EQ(got_[2].back().kind, OutcomeKind::Poison);
    EXPECT_NE(got_[2].back().error.find("in flight during 3 driver process crashes"),
              std::string::npos)
        << got_[2].back().error;
    EXPECT_EQ(claims, 3) << "buried at the third crash it was in flight for";
    EXPECT_EQ(p.restarts(), 3u);
    EXPECT_EQ(got_.size(), 1u) << "nothing else was buried";
    EXPECT_EQ(delivered[1], 1);
    EXPECT_EQ(delivered[3], 1);
    EXPECT_NE(log_.find("message 2 was in flight during 3 driver process crashes: moved to the "
                        "dead letters as poison"),
              std::string::npos)
        << log_;
}

TEST_F(DriverSupervisorTest, AbortAndOutOfMemoryAreCrashesLikeAnyOther) {
    DriverProcessOptions o = Options();
    o.fault = "abort:boom";
    DriverProcess p(o);
    auto d = OpenKafka(p);
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(Pump(p, d.get(), [&] { return d->Capacity() > 0; }));
    d->Submit({Msg(1, "boom")});
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 1; })) << log_;
    EXPECT_EQ(got_[1].back().kind, OutcomeKind::Unacknowledged);
    EXPECT_NE(log_.find("was killed by signal 6 (Aborted)"), std::string::npos) << log_;

    o.fault = "oom:big";
    o.memory_limit_bytes = 256ull << 20;
    p.SetOptions(o);  // for the restarted helper
    ASSERT_TRUE(Pump(p, d.get(), [&] { return p.Running() && d->Capacity() > 0; })) << log_;
    d->Submit({Msg(2, "big")});
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 2; })) << log_;
    EXPECT_EQ(got_[2].back().kind, OutcomeKind::Unacknowledged);
    EXPECT_NE(got_[2].back().error.find("driver process crashed (out of memory)"),
              std::string::npos)
        << got_[2].back().error;
    EXPECT_NE(log_.find("ran out of memory (outbox.driver_memory_limit) and exited"),
              std::string::npos)
        << log_;
}

TEST_F(DriverSupervisorTest, ALeakEndsInARestartAndNothingIsLost) {
    DriverProcessOptions o = Options();
    o.fault = "leak:1048576";  // 1 MB kept per message
    o.memory_limit_bytes = 192ull << 20;
    o.poison_after = 100;  // this test is about the restarts
    DriverProcess p(o);
    auto d = OpenKafka(p);
    ASSERT_NE(d, nullptr);
    std::map<int64_t, bool> done;
    std::vector<Message> todo = Batch(1, 600);
    for (int round = 0; round < 50 && done.size() < 600; round++) {
        ASSERT_TRUE(Pump(p, d.get(), [&] { return p.Running() && d->Capacity() > 0; })) << log_;
        got_.clear();
        size_t n = todo.size();
        d->Submit(todo);
        ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == n; })) << log_;
        todo.clear();
        for (auto &[id, list] : got_) {
            ASSERT_NE(list.back().kind, OutcomeKind::Poison);
            if (list.back().kind == OutcomeKind::Delivered)
                done[id] = true;
            else
                todo.push_back(Msg(id));
        }
    }
    EXPECT_EQ(done.size(), 600u) << log_;
    EXPECT_GE(p.restarts(), 2u);
    EXPECT_NE(log_.find("ran out of memory"), std::string::npos) << log_;
}

TEST_F(DriverSupervisorTest, AHelperThatStopsAnsweringIsKilled) {
    DriverProcessOptions o = Options();
    o.fault = "hang:stuck";
    o.answer_timeout_ms = 1000;
    DriverProcess p(o);
    auto d = OpenKafka(p);
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(Pump(p, d.get(), [&] { return d->Capacity() > 0; }));
    pid_t old = p.pid();
    int64_t t0 = NowMs();
    d->Submit({Msg(1, "stuck"), Msg(2)});
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 2; })) << log_;
    EXPECT_LT(NowMs() - t0, 3000);
    EXPECT_EQ(got_[1].back().kind, OutcomeKind::Unacknowledged);
    EXPECT_NE(log_.find("driver process " + std::to_string(old) +
                        " stopped answering (no reply to a ping within 1.0 s); killed"),
              std::string::npos)
        << log_;
    EXPECT_NE(kill(old, 0), 0) << "killed and reaped";
}

TEST_F(DriverSupervisorTest, ABusyWorkerDoesNotTakeASlowBrokerForAHungHelper) {
    DriverProcessOptions o = Options();
    o.answer_timeout_ms = 500;
    o.ping_interval_ms = 100;
    DriverProcess p(o);
    auto d = OpenKafka(p);
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(Pump(p, d.get(), [&] { return d->Capacity() > 0; }));
    pid_t pid = p.pid();
    // A first delivery before the broker slows down: the idempotent producer's id and the
    // metadata are fetched by then. (Fetched at 2.5 s a round trip, on a loaded machine, they
    // left the five messages below to time out.)
    d->Submit({Msg(100)});
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 1; })) << log_;
    ASSERT_EQ(Resolved(OutcomeKind::Delivered), 1u) << Outcomes() << log_;
    got_.clear();
    rd_kafka_mock_broker_set_rtt(mock_, 1, 2500);  // the helper has nothing to say for 2.5 s
    d->Submit(Batch(1, 5));
    usleep(1500 * 1000);  // and the worker does not listen for three answer timeouts
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 5; })) << log_;
    rd_kafka_mock_broker_set_rtt(mock_, 1, 0);
    EXPECT_EQ(Resolved(OutcomeKind::Delivered), 5u) << Outcomes() << log_;
    EXPECT_EQ(p.pid(), pid);
    EXPECT_EQ(log_.find("stopped answering"), std::string::npos) << log_;
}

TEST_F(DriverSupervisorTest, AbandonBringsEverythingBackAsDeferred) {
    DriverProcess p(Options());
    auto d = OpenKafka(p);
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(Pump(p, d.get(), [&] { return d->Capacity() > 0; }));
    rd_kafka_mock_broker_set_rtt(mock_, 1, 5000);
    d->Submit(Batch(1, 10));
    Pump(
        p, d.get(), [] { return false; }, 300);
    d->Abandon();
    ASSERT_TRUE(Pump(
        p, d.get(), [&] { return got_.size() == 10; }, 5000))
        << log_;
    EXPECT_EQ(Resolved(OutcomeKind::Defer), 10u);
    rd_kafka_mock_broker_set_rtt(mock_, 1, 0);
}

TEST_F(DriverSupervisorTest, AnswersSentBeforeTheEndAreKept) {
    DriverProcess p(FakeOptions(Options(), "answer-one-then-exit"));
    std::string error;
    auto d = p.Open("kafka", "orders", Kafka(), &error);
    ASSERT_NE(d, nullptr) << error;
    ASSERT_TRUE(Pump(p, d.get(), [&] { return d->Capacity() > 0; }));
    d->Submit(Batch(1, 3));
    ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 3; })) << log_;
    EXPECT_EQ(got_[1].back().kind, OutcomeKind::Delivered);
    EXPECT_EQ(got_[2].back().kind, OutcomeKind::Unacknowledged);
    EXPECT_EQ(got_[3].back().kind, OutcomeKind::Unacknowledged);
    EXPECT_NE(log_.find(" exited after "), std::string::npos) << log_;
    EXPECT_NE(log_.find("2 messages in flight without an answer"), std::string::npos) << log_;
}

TEST_F(DriverSupervisorTest, AMisbehavingHelperIsKilledAndTheWorkerCarriesOn) {
    const std::pair<const char *, const char *> cases[] = {
        {"garbage", "sent a malformed frame (a frame of 2147483632 bytes (at most 16777216"},
        {"outcome-kind-4",
         "sent a malformed frame (bad frame of type 66: an outcome has an "
         "unknown kind)"},
        {"worker-frame", "sent a frame only the worker may send"},
    };
    for (const auto &[scenario, expected] : cases) {
        SCOPED_TRACE(scenario);
        got_.clear();
        log_.clear();
        DriverProcess p(FakeOptions(Options(), scenario));
        std::string error;
        auto d = p.Open("kafka", "orders", Kafka(), &error);
        ASSERT_NE(d, nullptr) << error;
        ASSERT_TRUE(Pump(p, d.get(), [&] { return d->Capacity() > 0; }));
        pid_t pid = p.pid();
        d->Submit(Batch(1, 2));
        ASSERT_TRUE(Pump(p, d.get(), [&] { return got_.size() == 2; })) << log_;
        EXPECT_EQ(Resolved(OutcomeKind::Unacknowledged), 2u);
        EXPECT_NE(log_.find("driver process " + std::to_string(pid) + " " + expected),
                  std::string::npos)
            << log_;
        EXPECT_NE(log_.find("; killed after"), std::string::npos) << log_;
        EXPECT_NE(kill(pid, 0), 0);
    }
    // A helper that does not say Hello first, or speaks another version, is not used.
    for (const char *scenario : {"before-hello", "bad-version"}) {
        SCOPED_TRACE(scenario);
        log_.clear();
        DriverProcess p(FakeOptions(Options(), scenario));
        std::string error;
        auto d = p.Open("kafka", "orders", Kafka(), &error);
        ASSERT_NE(d, nullptr);
        EXPECT_TRUE(Pump(
            p, d.get(), [&] { return !log_.empty(); }, 5000));
        EXPECT_EQ(d->Capacity(), 0u);
        EXPECT_NE(log_.find(std::string(scenario) == "bad-version"
                                ? "speaks protocol version 999, this module " +
                                      std::to_string(protocol::kVersion)
                                : "sent a frame before its Hello"),
                  std::string::npos)
            << log_;
    }
}

}  // namespace
}  // namespace outbox
