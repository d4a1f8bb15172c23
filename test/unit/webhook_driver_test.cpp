// The webhook driver against the real test sink (test/tools/webhook_sink.py), driven the way the
// worker drives it: Submit what Capacity allows, sleep on WaitFd for PollTimeoutMs, Poll.
//
// The sink is found through $OUTBOX_WEBHOOK_SINK, else next to the test binary
// (../tools/webhook_sink.py), else at test/tools/webhook_sink.py from the current directory.
#include "outbox/brokers/webhook/driver.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "outbox/brokers/cloudevents.hpp"

namespace outbox {
namespace {

using Json = nlohmann::ordered_json;  // keeps the sink's header order

constexpr int64_t kCreatedAtMs = 1700000000123;  // 2023-11-14T22:13:20.123Z
constexpr char kKey1[] = "first test key \x01\x02\x03 with bytes";
constexpr char kKey2[] = "second-key-0123456789abcdef";

int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::string ReadFile(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Where the sink script is (see the file comment).
std::string SinkPath() {
    if (const char *env = getenv("OUTBOX_WEBHOOK_SINK"); env != nullptr && *env != '\0')
        return env;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        std::string dir(exe);
        dir.erase(dir.find_last_of('/'));
        std::string candidate = dir + "/../tools/webhook_sink.py";
        if (access(candidate.c_str(), R_OK) == 0)
            return candidate;
    }
    return "test/tools/webhook_sink.py";
}

// Independent Standard Webhooks signature: OpenSSL's one-shot HMAC() and EVP_EncodeBlock.
std::string ExpectedSignature(const std::string &key, const std::string &id, int64_t timestamp,
                              const std::string &body) {
    std::string content = id + "." + std::to_string(timestamp) + "." + body;
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
         reinterpret_cast<const unsigned char *>(content.data()), content.size(), mac, &mac_len);
    unsigned char b64[128];
    int b64_len = EVP_EncodeBlock(b64, mac, static_cast<int>(mac_len));
    return "v1," + std::string(reinterpret_cast<char *>(b64), static_cast<size_t>(b64_len));
}

std::string EventId(int n) {
    char buf[40];
    snprintf(buf, sizeof buf, "018f0000-0000-7000-8000-%012d", n);
    return buf;
}

Message MakeMessage(int n, std::string topic = "order.created") {
    Message m;
    m.id = n;
    m.lease_token = 1000 + n;
    m.event_id = EventId(n);
    m.topic = std::move(topic);
    m.payload = "{\"n\":" + std::to_string(n) + "}";
    m.created_at_ms = kCreatedAtMs;
    m.attempts = 1;
    return m;
}

std::vector<Message> MakeMessages(int count) {
    std::vector<Message> v;
    for (int i = 1; i <= count; ++i)
        v.push_back(MakeMessage(i));
    return v;
}

// A local port that nothing listens on.
int ClosedPort() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(fd, reinterpret_cast<struct sockaddr *>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<struct sockaddr *>(&addr), &len);
    close(fd);
    return ntohs(addr.sin_port);
}

class WebhookDriverTest : public ::testing::Test {
  protected:
    // Starts a fresh sink with its own log for every test.
    void SetUp() override {
        char tmpl[] = "/tmp/outbox_webhook_test.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        port_file_ = dir_ + "/port";
        log_file_ = dir_ + "/log.jsonl";
        std::string sink = SinkPath();
        std::vector<std::string> args = {"python3",  sink,    "--port-file",
                                         port_file_, "--log", log_file_};
        std::vector<char *> argv;
        for (std::string &a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        pid_t parent = getpid();
        sink_pid_ = fork();
        ASSERT_GE(sink_pid_, 0);
        if (sink_pid_ == 0) {
            // Only async-signal-safe calls until exec. The sink dies with the test process.
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent)
                _exit(1);
            int devnull = open("/dev/null", O_WRONLY);
            if (devnull >= 0)
                dup2(devnull, 1);
            execvp("python3", argv.data());
            _exit(127);
        }
        int64_t deadline = NowMs() + 10000;
        while (NowMs() < deadline) {
            std::string text = ReadFile(port_file_);
            if (!text.empty()) {
                port_ = atoi(text.c_str());
                break;
            }
            int status = 0;
            ASSERT_EQ(waitpid(sink_pid_, &status, WNOHANG), 0) << "the sink exited: " << sink;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        ASSERT_GT(port_, 0) << "the sink did not start: " << sink;
    }

    void TearDown() override {
        if (sink_pid_ > 0) {
            kill(sink_pid_, SIGTERM);
            int status = 0;
            waitpid(sink_pid_, &status, 0);
        }
        if (!dir_.empty()) {
            unlink(port_file_.c_str());
            unlink(log_file_.c_str());
            rmdir(dir_.c_str());
        }
    }

    std::string Url(const std::string &path) const {
        return "http://127.0.0.1:" + std::to_string(port_) + path;
    }

    WebhookDriverOptions Options(const std::string &path) const {
        WebhookDriverOptions o;
        o.config.url = Url(path);
        o.config.timeout_ms = 5000;
        o.config.max_in_flight = 8;
        o.destination = "orders";
        o.source = "/outbox/testdb";
        o.lease_timeout_ms = 60000;
        o.allowed_networks = "127.0.0.0/8, ::1";  // the sink is on loopback
        o.show_response_body = true;
        return o;
    }

    std::unique_ptr<Driver> Make(const WebhookDriverOptions &options) {
        std::string error;
        std::unique_ptr<Driver> d = MakeWebhookDriver(options, &error);
        EXPECT_NE(d, nullptr) << error;
        return d;
    }

    // Every request the sink logged so far.
    std::vector<Json> SinkLog() const {
        std::vector<Json> records;
        std::istringstream in(ReadFile(log_file_));
        for (std::string line; std::getline(in, line);)
            if (!line.empty())
                records.push_back(Json::parse(line));
        return records;
    }

    // Requests the sink has started to handle (counted on arrival, unlike the log, which is
    // written when the answer is ready), from its GET /_count endpoint.
    int SinkCount() const {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in addr = {};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<uint16_t>(port_));
        std::string reply;
        if (connect(fd, reinterpret_cast<struct sockaddr *>(&addr), sizeof addr) == 0) {
            const char request[] = "GET /_count HTTP/1.0\r\n\r\n";
            if (write(fd, request, sizeof request - 1) == ssize_t(sizeof request - 1)) {
                char buf[4096];
                for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
                    reply.append(buf, static_cast<size_t>(n));
            }
        }
        close(fd);
        size_t body = reply.find("\r\n\r\n");
        if (body == std::string::npos)
            return -1;
        return Json::parse(reply.substr(body + 4))["requests"].get<int>();
    }

    // One wait of the worker loop: sleep on WaitFd for at most PollTimeoutMs (capped).
    static void Wait(Driver &d, int64_t cap_ms) {
        int64_t timeout = d.PollTimeoutMs();
        if (timeout < 0 || timeout > cap_ms)
            timeout = cap_ms;
        struct pollfd p = {d.WaitFd(), POLLIN, 0};
        poll(&p, 1, static_cast<int>(timeout));
    }

    // Submits `messages` as Capacity allows and serves the driver until every outcome is in,
    // or until `limit_ms` passed. `max_seen` gets the highest InFlight observed.
    static std::vector<Outcome> Deliver(Driver &d, std::vector<Message> messages,
                                        int64_t limit_ms = 20000, size_t *max_seen = nullptr) {
        std::vector<Outcome> outcomes;
        size_t total = messages.size();
        size_t next = 0;
        int64_t deadline = NowMs() + limit_ms;
        while (outcomes.size() < total && NowMs() < deadline) {
            size_t room = d.Capacity();
            if (room > 0 && next < total) {
                size_t take = std::min(room, total - next);
                std::vector<Message> batch(std::make_move_iterator(messages.begin() + next),
                                           std::make_move_iterator(messages.begin() + next + take));
                next += take;
                d.Submit(std::move(batch));
            }
            if (max_seen)
                *max_seen = std::max(*max_seen, d.InFlight());
            Wait(d, 1000);
            d.Poll(outcomes);
        }
        return outcomes;
    }

    static std::map<int64_t, Outcome> ById(const std::vector<Outcome> &outcomes) {
        std::map<int64_t, Outcome> m;
        for (const Outcome &o : outcomes)
            m[o.id] = o;
        return m;
    }

    std::string dir_, port_file_, log_file_;
    pid_t sink_pid_ = -1;
    int port_ = 0;
};

TEST_F(WebhookDriverTest, DeliversWithEveryHeaderAndAVerifiableSignature) {
    WebhookDriverOptions options = Options("/a");
    options.config.secret_keys = {kKey1};
    options.config.headers = {{"X-Static", "s"}, {"x-both", "static"}, {"x-empty", ""}};
    std::unique_ptr<Driver> d = Make(options);
    ASSERT_NE(d, nullptr);

    Message json = MakeMessage(1);
    json.headers = {{"X-Both", "producer"}, {"x-prod", "p"}};
    Message binary = MakeMessage(2, "");  // no topic: ce-type falls back to the destination
    binary.payload = std::string("\x00\xff\x01 raw", 7);
    binary.payload_is_json = false;
    Message typed = MakeMessage(3);
    typed.headers = {{"Content-Type", "application/cloudevents+json"}};

    int64_t before = time(nullptr);
    std::vector<Outcome> outcomes = Deliver(*d, {json, binary, typed});
    int64_t after = time(nullptr);
    ASSERT_EQ(outcomes.size(), 3u);
    for (const Outcome &o : outcomes) {
        EXPECT_EQ(o.kind, OutcomeKind::Delivered) << o.error;
        EXPECT_EQ(o.lease_token, 1000 + o.id);
        EXPECT_EQ(o.error, "");
        EXPECT_EQ(o.retry_after_ms, -1);
    }
    EXPECT_EQ(d->InFlight(), 0u);
    EXPECT_EQ(d->Capacity(), 8u);

    std::vector<Json> log = SinkLog();
    ASSERT_EQ(log.size(), 3u);
    std::map<std::string, Json> by_id;
    for (const Json &r : log)
        by_id[r["headers"]["webhook-id"].get<std::string>()] = r;
    const Message *sent[] = {&json, &binary, &typed};
    for (const Message *m : sent) {
        SCOPED_TRACE(m->id);
        ASSERT_EQ(by_id.count(m->event_id), 1u);
        const Json &r = by_id[m->event_id];
        const Json &h = r["headers"];
        EXPECT_EQ(r["path"], "/a");
        EXPECT_EQ(r["status"], 204);
        std::string body;
        body.resize(m->payload.size() + 4);
        std::string b64 = r["body_b64"];
        int n = EVP_DecodeBlock(reinterpret_cast<unsigned char *>(body.data()),
                                reinterpret_cast<const unsigned char *>(b64.data()),
                                static_cast<int>(b64.size()));
        ASSERT_GE(n, static_cast<int>(m->payload.size()));
        body.resize(m->payload.size());
        EXPECT_EQ(body, m->payload);

        EXPECT_EQ(h["webhook-id"], m->event_id);
        EXPECT_EQ(h["ce-id"], m->event_id);
        int64_t ts = std::stoll(h["webhook-timestamp"].get<std::string>());
        EXPECT_GE(ts, before);
        EXPECT_LE(ts, after);
        EXPECT_EQ(h["webhook-signature"], ExpectedSignature(kKey1, m->event_id, ts, m->payload));
        EXPECT_EQ(h["ce-source"], "/outbox/testdb");
        EXPECT_EQ(h["ce-time"], "2023-11-14T22:13:20.123Z");
        EXPECT_EQ(h["ce-specversion"], "1.0");
        EXPECT_EQ(h["user-agent"], "outbox/0.1");
        EXPECT_FALSE(h.contains("expect"));
        EXPECT_EQ(h["content-length"], std::to_string(m->payload.size()));
        EXPECT_EQ(h["x-static"], "s");
        EXPECT_EQ(h["x-empty"], "");
        // Order: ours first, then the destination's, then the producer's.
        std::vector<std::string> names;
        for (auto it = h.begin(); it != h.end(); ++it)
            names.push_back(it.key());
        auto pos = [&](const char *name) {
            return std::find(names.begin(), names.end(), name) - names.begin();
        };
        const char *order[] = {"content-type",      "webhook-id", "webhook-timestamp",
                               "webhook-signature", "ce-id",      "ce-type",
                               "ce-source",         "ce-time",    "ce-specversion",
                               "x-static",          "x-empty"};
        for (size_t i = 1; i < sizeof order / sizeof order[0]; ++i)
            EXPECT_LT(pos(order[i - 1]), pos(order[i])) << order[i - 1] << " / " << order[i];
    }
    const Json &h1 = by_id[json.event_id]["headers"];
    EXPECT_EQ(h1["content-type"], "application/json");
    EXPECT_EQ(h1["ce-type"], "order.created");
    EXPECT_EQ(h1["x-both"], "producer");  // replaced, not sent twice ("static, producer")
    EXPECT_EQ(h1["x-prod"], "p");
    const Json &h2 = by_id[binary.event_id]["headers"];
    EXPECT_EQ(h2["content-type"], "application/octet-stream");
    EXPECT_EQ(h2["ce-type"], "orders");
    EXPECT_EQ(h2["x-both"], "static");
    EXPECT_TRUE(by_id[binary.event_id]["body"].is_null());  // not UTF-8: sent as is
    const Json &h3 = by_id[typed.event_id]["headers"];
    EXPECT_EQ(h3["content-type"], "application/cloudevents+json");
}

TEST_F(WebhookDriverTest, CeTypeFallsBackToTheDefaultTopic) {
    WebhookDriverOptions options = Options("/a");
    options.config.default_topic = "fallback.type";
    std::unique_ptr<Driver> d = Make(options);
    ASSERT_NE(d, nullptr);
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1, ""), MakeMessage(2, "own")});
    ASSERT_EQ(outcomes.size(), 2u);
    std::map<std::string, std::string> type_by_id;
    for (const Json &r : SinkLog()) {
        type_by_id[r["headers"]["ce-id"]] = r["headers"]["ce-type"];
        EXPECT_FALSE(r["headers"].contains("webhook-signature"));  // no secret, no signature
    }
    EXPECT_EQ(type_by_id[EventId(1)], "fallback.type");
    EXPECT_EQ(type_by_id[EventId(2)], "own");
}

TEST_F(WebhookDriverTest, TwoSecretsGiveTwoSignatures) {
    WebhookDriverOptions options = Options("/a");
    options.config.secret_keys = {kKey1, kKey2};
    std::unique_ptr<Driver> d = Make(options);
    ASSERT_NE(d, nullptr);
    Message m = MakeMessage(7);
    std::vector<Outcome> outcomes = Deliver(*d, {m});
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].kind, OutcomeKind::Delivered);
    std::vector<Json> log = SinkLog();
    ASSERT_EQ(log.size(), 1u);
    const Json &h = log[0]["headers"];
    int64_t ts = std::stoll(h["webhook-timestamp"].get<std::string>());
    EXPECT_EQ(h["webhook-signature"], ExpectedSignature(kKey1, m.event_id, ts, m.payload) + " " +
                                          ExpectedSignature(kKey2, m.event_id, ts, m.payload));
}

TEST_F(WebhookDriverTest, ServiceUnavailableIsRetry) {
    std::unique_ptr<Driver> d = Make(Options("/u;status=503"));
    ASSERT_NE(d, nullptr);
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1)});
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].kind, OutcomeKind::Retry);
    EXPECT_EQ(outcomes[0].error, "HTTP 503: {\"error\":\"service unavailable\"}");
    EXPECT_EQ(outcomes[0].retry_after_ms, -1);
}

TEST_F(WebhookDriverTest, TooManyRequestsHonoursRetryAfter) {
    std::unique_ptr<Driver> d = Make(Options("/t;status=429;retry_after=2"));
    ASSERT_NE(d, nullptr);
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1)});
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].kind, OutcomeKind::Retry);
    EXPECT_EQ(outcomes[0].retry_after_ms, 2000);
    EXPECT_EQ(outcomes[0].error.rfind("HTTP 429: ", 0), 0u) << outcomes[0].error;
}

// 410: Gone (the dispatcher pauses the destination), with the status and a body snippet.
TEST_F(WebhookDriverTest, GoneIsGoneWithTheStatusAndABodySnippet) {
    std::unique_ptr<Driver> d =
        Make(Options("/g;status=410;body=%0A%20endpoint%09removed%0D%0Afor%20good%20%0A"));
    ASSERT_NE(d, nullptr);
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1)});
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].kind, OutcomeKind::Gone);
    EXPECT_EQ(outcomes[0].http_status, 410);
    EXPECT_EQ(outcomes[0].error, "HTTP 410: endpoint removed  for good");
}

TEST_F(WebhookDriverTest, LongBodiesAreCutTo200Bytes) {
    // 150 two-byte characters: the cut at 200 bytes falls between characters, not inside one.
    std::string body;
    for (int i = 0; i < 150; ++i)
        body += "%C3%A9";  // é
    std::unique_ptr<Driver> d = Make(Options("/l;status=400;body=x" + body));
    ASSERT_NE(d, nullptr);
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1)});
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].kind, OutcomeKind::Dead);
    std::string expected = "HTTP 400: x";
    for (int i = 0; i < 99; ++i)  // 1 + 99 * 2 = 199 bytes; the 100th é would end at byte 201
        expected += "\xC3\xA9";
    EXPECT_EQ(outcomes[0].error, expected);
}

TEST_F(WebhookDriverTest, RedirectIsDead) {
    std::unique_ptr<Driver> d = Make(Options("/r;status=302"));
    ASSERT_NE(d, nullptr);
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1)});
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].kind, OutcomeKind::Dead);
    EXPECT_EQ(outcomes[0].error, "HTTP 302: redirects are not followed");
    EXPECT_EQ(SinkLog().size(), 1u);  // /elsewhere was not asked
}

TEST_F(WebhookDriverTest, ConnectionRefusedIsDeferAndNeverShowsTheUrl) {
    WebhookDriverOptions options = Options("/x");
    options.config.url = "http://user:hunter2secret@127.0.0.1:" + std::to_string(ClosedPort()) +
                         "/hooks/T0123/B0456/tokentokentoken?sig=abcdefgh";
    std::unique_ptr<Driver> d = Make(options);
    ASSERT_NE(d, nullptr);
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1), MakeMessage(2)});
    ASSERT_EQ(outcomes.size(), 2u);
    for (const Outcome &o : outcomes) {
        EXPECT_EQ(o.kind, OutcomeKind::Defer) << o.error;
        // libcurl's own words: "Couldn't connect to server" before 8.x, "Could not ..." after.
        EXPECT_NE(o.error.find("connect to server"), std::string::npos) << o.error;
        EXPECT_EQ(o.error.find("hunter2"), std::string::npos) << o.error;
        EXPECT_EQ(o.error.find("tokentoken"), std::string::npos) << o.error;
        EXPECT_EQ(o.error.find("abcdefgh"), std::string::npos) << o.error;
    }
    std::vector<std::string> lines;
    d->TakeLog(lines);
    EXPECT_TRUE(lines.empty());
}

TEST_F(WebhookDriverTest, SlowResponseIsRetryBecauseTheRequestWasSent) {
    WebhookDriverOptions options = Options("/s;delay_ms=3000");
    options.config.timeout_ms = 300;
    std::unique_ptr<Driver> d = Make(options);
    ASSERT_NE(d, nullptr);
    int64_t start = NowMs();
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1)});
    int64_t took = NowMs() - start;
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].kind, OutcomeKind::Retry) << outcomes[0].error;
    EXPECT_NE(outcomes[0].error.find("Timeout was reached"), std::string::npos)
        << outcomes[0].error;
    EXPECT_GE(took, 290);
    EXPECT_LT(took, 2000);
    EXPECT_EQ(d->InFlight(), 0u);
}

TEST_F(WebhookDriverTest, TlsVerificationOffIsLoggedOnce) {
    WebhookDriverOptions options = Options("/a");
    options.config.tls_verify = false;
    options.destination = "insecure-hooks";
    std::unique_ptr<Driver> d = Make(options);
    ASSERT_NE(d, nullptr);
    std::vector<std::string> lines;
    d->TakeLog(lines);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0], "TLS verification is OFF for destination insecure-hooks");
    lines.clear();
    d->TakeLog(lines);
    EXPECT_TRUE(lines.empty());
}

// Concurrency from the sink's point of view: each request is at the sink from its arrival
// until its answer, 300 ms later.
TEST_F(WebhookDriverTest, MaxInFlightBoundsConcurrentRequests) {
    WebhookDriverOptions options = Options("/d;delay_ms=300");
    options.config.max_in_flight = 4;
    std::unique_ptr<Driver> d = Make(options);
    ASSERT_NE(d, nullptr);
    int64_t start = NowMs();
    size_t max_seen = 0;
    std::vector<Outcome> outcomes = Deliver(*d, MakeMessages(20), 20000, &max_seen);
    int64_t took = NowMs() - start;
    ASSERT_EQ(outcomes.size(), 20u);
    for (const Outcome &o : outcomes)
        EXPECT_EQ(o.kind, OutcomeKind::Delivered) << o.error;
    EXPECT_EQ(ById(outcomes).size(), 20u);
    EXPECT_LE(max_seen, 4u);

    std::vector<double> arrivals;
    for (const Json &r : SinkLog())
        arrivals.push_back(r["t"].get<double>());
    ASSERT_EQ(arrivals.size(), 20u);
    std::sort(arrivals.begin(), arrivals.end());
    size_t most = 0;
    for (double t : arrivals) {
        // Requests still at the sink when this one arrived (a 10 ms margin for the answer).
        size_t at_sink = std::count_if(arrivals.begin(), arrivals.end(),
                                       [&](double a) { return a <= t && t < a + 0.290; });
        most = std::max(most, at_sink);
    }
    EXPECT_EQ(most, 4u);
    // Five rounds of 300 ms.
    EXPECT_GE(took, 1450);
    EXPECT_LT(took, 4000);  // generous: the sink is a Python process on a shared machine
}

TEST_F(WebhookDriverTest, SequentialMessagesReuseOneConnection) {
    WebhookDriverOptions options = Options("/a");
    options.config.max_in_flight = 1;
    std::unique_ptr<Driver> d = Make(options);
    ASSERT_NE(d, nullptr);
    std::vector<Outcome> outcomes = Deliver(*d, MakeMessages(200));
    ASSERT_EQ(outcomes.size(), 200u);
    for (const Outcome &o : outcomes)
        ASSERT_EQ(o.kind, OutcomeKind::Delivered) << o.error;
    std::set<int> peers;
    for (const Json &r : SinkLog())
        peers.insert(r["peer"].get<int>());
    EXPECT_EQ(peers.size(), 1u);
}

TEST_F(WebhookDriverTest, ConcurrentMessagesUseAtMostMaxInFlightConnections) {
    WebhookDriverOptions options = Options("/a");
    options.config.max_in_flight = 8;
    std::unique_ptr<Driver> d = Make(options);
    ASSERT_NE(d, nullptr);
    std::vector<Outcome> outcomes = Deliver(*d, MakeMessages(400));
    ASSERT_EQ(outcomes.size(), 400u);
    for (const Outcome &o : outcomes)
        ASSERT_EQ(o.kind, OutcomeKind::Delivered) << o.error;
    std::set<int> peers;
    std::vector<Json> log = SinkLog();
    ASSERT_EQ(log.size(), 400u);
    for (const Json &r : log)
        peers.insert(r["peer"].get<int>());
    EXPECT_LE(peers.size(), 8u);
}

TEST_F(WebhookDriverTest, AbandonReturnsEveryMessage) {
    WebhookDriverOptions options = Options("/slow;delay_ms=10000");
    options.config.max_in_flight = 4;
    options.config.timeout_ms = 30000;
    std::unique_ptr<Driver> d = Make(options);
    ASSERT_NE(d, nullptr);
    // Six messages for four slots: two wait inside the driver, never sent.
    d->Submit(MakeMessages(6));
    EXPECT_EQ(d->InFlight(), 6u);
    EXPECT_EQ(d->Capacity(), 0u);
    std::vector<Outcome> outcomes;
    int64_t deadline = NowMs() + 10000;
    while (SinkCount() < 4 && NowMs() < deadline) {
        Wait(*d, 50);
        d->Poll(outcomes);
    }
    ASSERT_EQ(SinkCount(), 4);
    EXPECT_TRUE(outcomes.empty());

    int64_t start = NowMs();
    d->Abandon();
    EXPECT_EQ(d->PollTimeoutMs(), 0);
    d->Poll(outcomes);
    EXPECT_LT(NowMs() - start, 500);
    ASSERT_EQ(outcomes.size(), 6u);
    EXPECT_EQ(d->InFlight(), 0u);
    EXPECT_EQ(d->Capacity(), 4u);
    int retry = 0, defer = 0;
    for (const Outcome &o : outcomes) {
        EXPECT_EQ(o.lease_token, 1000 + o.id);
        if (o.kind == OutcomeKind::Retry)
            ++retry;
        if (o.kind == OutcomeKind::Defer)
            ++defer;
    }
    EXPECT_EQ(retry, 4);  // sent and waiting for an answer
    EXPECT_EQ(defer, 2);  // never started
    EXPECT_EQ(ById(outcomes).size(), 6u);
}

TEST_F(WebhookDriverTest, IdleDriverAsksForNoWakeUps) {
    std::unique_ptr<Driver> d = Make(Options("/a"));
    ASSERT_NE(d, nullptr);
    EXPECT_GE(d->WaitFd(), 0);
    EXPECT_EQ(d->PollTimeoutMs(), -1);
    EXPECT_EQ(d->InFlight(), 0u);
    EXPECT_EQ(d->Capacity(), 8u);
    EXPECT_FALSE(d->Broken());
    std::vector<Outcome> outcomes;
    d->Poll(outcomes);
    EXPECT_TRUE(outcomes.empty());
    ASSERT_EQ(Deliver(*d, {MakeMessage(1)}).size(), 1u);
    // After a delivery only the kept-alive connection remains: still nothing to wake up for.
    d->Poll(outcomes);
    EXPECT_EQ(d->PollTimeoutMs(), -1);
    struct pollfd p = {d->WaitFd(), POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 0);
}

// outbox.webhook_allowed_networks: without it, loopback is refused when the socket would be
// opened. No request reaches the sink; the outcome is a dead letter that names the address.
TEST_F(WebhookDriverTest, RefusedAddressIsDeadAndNothingIsSent) {
    for (const char *host : {"127.0.0.1", "2130706433", "0.0.0.0", "127.1"}) {
        WebhookDriverOptions options = Options("/a");
        options.config.url = std::string("http://") + host + ":" + std::to_string(port_) + "/a";
        options.allowed_networks = "";
        std::unique_ptr<Driver> d = Make(options);
        ASSERT_NE(d, nullptr);
        std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1)});
        ASSERT_EQ(outcomes.size(), 1u) << host;
        EXPECT_EQ(outcomes[0].kind, OutcomeKind::Dead) << host;
        std::string address = std::string(host) == "0.0.0.0" ? "0.0.0.0" : "127.0.0.1";
        EXPECT_EQ(outcomes[0].error,
                  "address " + address + " is not allowed by outbox.webhook_allowed_networks")
            << host;
    }
    EXPECT_EQ(SinkCount(), 0) << "a refused address is never connected to";
    // 0.0.0.0 is not loopback: listing loopback does not allow it.
    WebhookDriverOptions options = Options("/a");
    options.config.url = "http://0.0.0.0:" + std::to_string(port_) + "/a";
    std::unique_ptr<Driver> d = Make(options);
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(2)});
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].error,
              "address 0.0.0.0 is not allowed by outbox.webhook_allowed_networks");
    EXPECT_EQ(SinkCount(), 0);
}

// A name with several addresses (libcurl resolves localhost to 127.0.0.1 and ::1): each is
// checked as it is tried; an allowed one is used, and only when none is allowed is it a dead
// letter.
TEST_F(WebhookDriverTest, EveryAddressOfANameIsChecked) {
    auto deliver = [&](const char *allowed, int n) {
        WebhookDriverOptions options = Options("/a");
        options.config.url = "http://localhost:" + std::to_string(port_) + "/a";
        options.allowed_networks = allowed;
        std::unique_ptr<Driver> d = Make(options);
        std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(n)});
        EXPECT_EQ(outcomes.size(), 1u) << allowed;
        return outcomes.empty() ? Outcome{} : outcomes[0];
    };
    Outcome o = deliver("127.0.0.0/8", 1);  // ::1 refused, 127.0.0.1 taken
    EXPECT_EQ(o.kind, OutcomeKind::Delivered) << o.error;
    EXPECT_EQ(SinkCount(), 1);

    o = deliver("", 2);  // both refused
    EXPECT_EQ(o.kind, OutcomeKind::Dead);
    EXPECT_NE(o.error.find(" is not allowed by outbox.webhook_allowed_networks (nor 1 other "
                           "address(es) of the host)"),
              std::string::npos)
        << o.error;

    o = deliver("::1", 3);  // 127.0.0.1 refused; ::1 allowed, but the sink does not listen there
    EXPECT_EQ(o.kind, OutcomeKind::Defer)
        << "an allowed address that refuses is an outage: " << o.error;
    EXPECT_EQ(SinkCount(), 1);
}

TEST_F(WebhookDriverTest, ABadNetworkListFailsTheDriver) {
    WebhookDriverOptions options = Options("/a");
    options.allowed_networks = "127.0.0.0/33";
    std::string error;
    EXPECT_EQ(MakeWebhookDriver(options, &error), nullptr);
    EXPECT_EQ(error,
              "outbox.webhook_allowed_networks is invalid: \"127.0.0.0/33\" has a prefix "
              "length above 32");
}

// A destination a non-superuser configured: the status only, never the body (it may carry an
// internal service's secrets, and error texts are what operators read).
TEST_F(WebhookDriverTest, ResponseBodyIsLeftOutUnlessShown) {
    WebhookDriverOptions options = Options("/g;status=403;body=token%3Dsecret-value");
    options.show_response_body = false;
    std::unique_ptr<Driver> d = Make(options);
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1)});
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].kind, OutcomeKind::Dead);
    EXPECT_EQ(outcomes[0].error, "HTTP 403");
    options.show_response_body = true;
    d = Make(options);
    outcomes = Deliver(*d, {MakeMessage(2)});
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].error, "HTTP 403: token=secret-value");
}

// timeout_ms longer than half of outbox.lease_timeout is lowered to it, with a log line: a
// request that outlived the lease would be taken over and sent again by another worker.
TEST_F(WebhookDriverTest, TimeoutIsLoweredToHalfTheLease) {
    WebhookDriverOptions options = Options("/s;delay_ms=3000");
    options.config.timeout_ms = 20000;
    options.lease_timeout_ms = 2000;
    std::unique_ptr<Driver> d = Make(options);
    std::vector<std::string> lines;
    d->TakeLog(lines);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0],
              "timeout_ms lowered from 20000 to 1000 ms to stay within half of "
              "outbox.lease_timeout (2000 ms): a longer request would outlive its lease");
    int64_t start = NowMs();
    std::vector<Outcome> outcomes = Deliver(*d, {MakeMessage(1)});
    int64_t took = NowMs() - start;
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].kind, OutcomeKind::Retry) << outcomes[0].error;
    EXPECT_GE(took, 950);
    EXPECT_LT(took, 2000);
}

// The time a message waits for one of max_in_flight connections counts too: from Submit to
// outcome, no message takes more than half the lease, even queued behind a slow endpoint.
TEST_F(WebhookDriverTest, QueuedMessagesStayWithinHalfTheLease) {
    WebhookDriverOptions options = Options("/s;delay_ms=600");
    options.config.max_in_flight = 1;
    options.lease_timeout_ms = 2000;  // 1000 ms from Submit to outcome
    std::unique_ptr<Driver> d = Make(options);
    int64_t start = NowMs();
    d->Submit({MakeMessage(1), MakeMessage(2), MakeMessage(3)});  // beyond max_in_flight
    std::map<int64_t, int64_t> took;
    std::map<int64_t, Outcome> outcomes;
    while (outcomes.size() < 3 && NowMs() - start < 5000) {
        Wait(*d, 50);
        std::vector<Outcome> got;
        d->Poll(got);
        for (Outcome &o : got) {
            took[o.id] = NowMs() - start;
            outcomes[o.id] = o;
        }
    }
    ASSERT_EQ(outcomes.size(), 3u);
    EXPECT_EQ(outcomes[1].kind, OutcomeKind::Delivered) << outcomes[1].error;
    // Started after ~600 ms of waiting: ~400 ms left, the endpoint takes 600.
    EXPECT_EQ(outcomes[2].kind, OutcomeKind::Retry) << outcomes[2].error;
    // Its turn came ~1000 ms after Submit: not sent at all, no attempt spent.
    EXPECT_EQ(outcomes[3].kind, OutcomeKind::Defer) << outcomes[3].error;
    EXPECT_NE(outcomes[3].error.find("not sent: waited "), std::string::npos) << outcomes[3].error;
    for (const auto &[id, ms] : took)
        EXPECT_LT(ms, 1000 + 250) << "message " << id;
    EXPECT_EQ(SinkCount(), 2);
}

}  // namespace
}  // namespace outbox
