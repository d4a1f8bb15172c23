// Redis Streams driver: hiredis for the protocol only (redisFormatCommandArgv encodes a
// command, a redisReader parses replies); the socket, its connect and TLS (OpenSSL) are ours, so
// that the broker guard sees every address before anything is sent and no library thread
// exists.
//
// Threads: the connection is made (resolve, connect, TLS handshake, AUTH, SELECT, CLIENT
// SETNAME) in a short-lived, detached thread of ours (outbox/brokers/io_thread.hpp), blocking
// with connect_timeout; it hands the ready socket to the driver, which from then on only does
// non-blocking sends and receives in Poll, so the helper's loop never waits on Redis. The
// thread touches nothing of PostgreSQL's and runs with every signal blocked.
//
// Correlation: Redis answers the commands of one connection in the order they were sent, so the
// XADDs in flight are a FIFO; a WAIT after a batch ends that batch's FIFO segment. A lost
// connection hands back everything unanswered (Defer: a copy Redis did add is a duplicate the
// consumer drops by ce_id).
#include "outbox/brokers/redis/driver.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>
#include <nlohmann/json.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "outbox/broker_address.hpp"
#include "outbox/brokers/cloudevents.hpp"
#include "outbox/brokers/io_thread.hpp"
#include "outbox/brokers/redis/classify.hpp"
#include "outbox/brokers/redis/connection.hpp"
#include "outbox/clock.hpp"

namespace outbox {

namespace {

// After this long without a connection, what is submitted comes back deferred.
constexpr int64_t kOutageMs = 1000;
// Reconnecting: the first retry soon, then at most this far apart.
constexpr int64_t kReconnectMinMs = 250;
constexpr int64_t kReconnectMaxMs = 2000;
// Bytes read per Poll at most, so that one busy destination does not starve the others.
constexpr size_t kReadPerPoll = 4 << 20;
// What the driver and its connector thread share: ThreadShared's `stop` (the driver is gone: the
// connector closes what it made), the notify pipe and the log; under mu, the connector's result.
struct Core : ThreadShared {
    RedisDriverOptions options;
    BrokerGuard guard;

    bool finished = false;  // the connector is done: `ready` or `error` holds the result
    RedisConnection ready;
    std::string error;

    ~Core() { ready.Close(); }
};

// One XADD (or WAIT) whose reply is awaited.
struct Pending {
    bool wait = false;  // a WAIT ending a batch: answers the XADDs in `acked` before it
    int64_t id = 0;
    int64_t lease_token = 0;
    std::string stream;
    int64_t sent_ms = 0;
};

class RedisDriver final : public ThreadedDriver {
  public:
    explicit RedisDriver(std::shared_ptr<Core> core)
        : ThreadedDriver(core, core->options.max_in_flight), core_(std::move(core)) {}
    ~RedisDriver() override;

    bool Start(std::string *error);

    void Submit(std::vector<Message> batch) override;
    void Poll(std::vector<Outcome> &out) override;
    int WaitFd() const override { return epoll_fd_; }
    int64_t PollTimeoutMs() const override;
    void Abandon() override;

  private:
    void StartConnector();
    void Adopt();
    void Send(std::vector<Message> &batch);
    void Encode(const std::vector<std::string> &args);
    bool Flush();
    bool Receive();
    void Reply(redisReply *reply);
    void Drop(const std::string &why, OutcomeKind kind);
    void Answer(int64_t id, int64_t lease, OutcomeKind kind, std::string error) {
        outcomes_.push_back(Outcome{id, lease, kind, std::move(error), -1});
    }
    void WatchOutput(bool on);
    void AddLog(std::string line) { core_->AddLog(std::move(line)); }

    std::shared_ptr<Core> core_;
    int epoll_fd_ = -1;
    RedisConnection conn_;
    redisReader *reader_ = nullptr;
    bool connecting_ = false;
    bool watching_output_ = false;
    std::string out_;
    size_t out_done_ = 0;
    std::deque<Pending> pending_;
    std::vector<Pending> acked_;  // XADDs answered, awaiting their batch's WAIT
    std::deque<Message> held_;    // submitted while not connected
    std::vector<Outcome> outcomes_;
    bool ever_connected_ = false;
    int64_t started_ms_ = 0;
    int64_t down_since_ms_ = 0;
    int64_t next_connect_ms_ = 0;
    int64_t reconnect_delay_ms_ = kReconnectMinMs;
    int64_t probe_held_since_ms_ = 0;
    std::string last_error_;
};

bool RedisDriver::Start(std::string *error) {
    started_ms_ = MonotonicMs();
    if (!core_->notify.Open(error))
        return false;
    // The helper watches one descriptor per driver: an epoll set of the connector's pipe and,
    // once connected, the socket (level-triggered, so the outer set sees it readable).
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) {
        *error = std::string("could not create an epoll set: ") + strerror(errno);
        return false;
    }
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = core_->notify.fd();
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, core_->notify.fd(), &ev) != 0) {
        *error = std::string("could not watch the pipe: ") + strerror(errno);
        return false;
    }
    reader_ = redisReaderCreate();
    if (reader_ == nullptr) {
        *error = "out of memory creating the reply reader";
        return false;
    }
    StartConnector();
    return true;
}

RedisDriver::~RedisDriver() {
    core_->RequestStop();
    conn_.Close();
    if (reader_ != nullptr)
        redisReaderFree(reader_);
    if (epoll_fd_ >= 0)
        close(epoll_fd_);
}

// A thread that makes one connection and hands it over (Adopt).
void RedisDriver::StartConnector() {
    connecting_ = true;
    {
        std::lock_guard<std::mutex> lock(core_->mu);
        core_->finished = false;
        core_->error.clear();
    }
    std::shared_ptr<Core> core = core_;
    auto connect = [core] {
        RedisConnection c;
        std::string error;
        bool ok = false;
        try {
            ok = MakeRedisConnection(core->options.config, core->options.client_name, core->guard,
                                     &c, &error);
        } catch (const std::exception &e) {
            error = std::string("cannot connect to Redis: ") + e.what();
        }
        ERR_clear_error();
        if (!ok)
            c.Close();
        std::lock_guard<std::mutex> lock(core->mu);
        if (core->stop) {
            c.Close();
            return;
        }
        core->ready = c;
        core->error = error;
        core->finished = true;
        core->Notify();
    };
    std::thread connector;
    std::string error;
    if (!StartThread(&connector, core, connect, "the Redis connector thread", &error)) {
        connecting_ = false;
        last_error_ = error;
        next_connect_ms_ = MonotonicMs() + reconnect_delay_ms_;
        return;
    }
    connector.detach();
}

// Takes the connector's result.
void RedisDriver::Adopt() {
    RedisConnection c;
    std::string error;
    {
        std::lock_guard<std::mutex> lock(core_->mu);
        if (!core_->finished)
            return;
        c = core_->ready;
        core_->ready = RedisConnection{};
        error = core_->error;
        core_->finished = false;
    }
    connecting_ = false;
    int64_t now = MonotonicMs();
    if (c.fd < 0) {
        // A guarded destination shows only that its broker cannot be reached (the dispatcher
        // says so); the log keeps why, once per change.
        if (error != last_error_)
            AddLog(error);
        last_error_ = error;
        if (down_since_ms_ == 0)
            down_since_ms_ = now;
        next_connect_ms_ = now + reconnect_delay_ms_;
        reconnect_delay_ms_ = std::min(kReconnectMaxMs, reconnect_delay_ms_ * 2);
        return;
    }
    int flags = fcntl(c.fd, F_GETFL);
    fcntl(c.fd, F_SETFL, flags | O_NONBLOCK);
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = c.fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.fd, &ev) != 0) {
        c.Close();
        last_error_ = std::string("could not watch the socket: ") + strerror(errno);
        next_connect_ms_ = now + reconnect_delay_ms_;
        return;
    }
    conn_ = c;
    watching_output_ = false;
    redisReaderFree(reader_);
    reader_ = redisReaderCreate();
    if (ever_connected_ || !last_error_.empty())
        AddLog("connected to Redis at " + core_->options.config.host + ":" +
               std::to_string(core_->options.config.port) + (ever_connected_ ? " again" : ""));
    ever_connected_ = true;
    last_error_.clear();
    down_since_ms_ = 0;
    reconnect_delay_ms_ = kReconnectMinMs;
}

void RedisDriver::WatchOutput(bool on) {
    if (conn_.fd < 0 || on == watching_output_)
        return;
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN | (on ? uint32_t(EPOLLOUT) : 0u);
    ev.data.fd = conn_.fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn_.fd, &ev) == 0)
        watching_output_ = on;
}

// Closes the connection; everything unanswered comes back as `kind` with `why`.
void RedisDriver::Drop(const std::string &why, OutcomeKind kind) {
    if (conn_.fd >= 0)
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn_.fd, nullptr);
    conn_.Close();
    ERR_clear_error();
    out_.clear();
    out_done_ = 0;
    watching_output_ = false;
    for (const Pending &p : acked_)
        Answer(p.id, p.lease_token, kind, why);
    acked_.clear();
    for (const Pending &p : pending_)
        if (!p.wait)
            Answer(p.id, p.lease_token, kind, why);
    pending_.clear();
    if (why != last_error_)
        AddLog(why);
    last_error_ = why;
    int64_t now = MonotonicMs();
    down_since_ms_ = now;
    next_connect_ms_ = now + kReconnectMinMs;
}

void RedisDriver::Encode(const std::vector<std::string> &args) {
    std::vector<const char *> argv;
    std::vector<size_t> lens;
    argv.reserve(args.size());
    lens.reserve(args.size());
    for (const std::string &a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    char *cmd = nullptr;
    int len = redisFormatCommandArgv(&cmd, int(argv.size()), argv.data(), lens.data());
    if (len < 0)
        throw std::bad_alloc();
    out_.append(cmd, size_t(len));
    redisFreeCommand(cmd);
}

// XADDs for `batch` (and a WAIT after them with "wait"), queued for sending.
void RedisDriver::Send(std::vector<Message> &batch) {
    const RedisConfig &c = core_->options.config;
    const std::string &fallback = !c.stream.empty() ? c.stream : core_->options.destination;
    int64_t now = MonotonicMs();
    bool any = false;
    for (Message &m : batch) {
        const std::string &stream = !m.topic.empty() ? m.topic : c.stream;
        if (stream.empty()) {
            Answer(m.id, m.lease_token, OutcomeKind::Dead,
                   "message has no stream (no topic, no default \"stream\")");
            continue;
        }
        std::vector<std::string> args = {"XADD", stream};
        if (!c.create_stream)
            args.push_back("NOMKSTREAM");
        if (c.maxlen > 0) {
            args.push_back("MAXLEN");
            args.push_back("~");
            args.push_back(std::to_string(c.maxlen));
        }
        args.push_back("*");
        for (auto &[name, value] : RedisEntryFields(m, core_->options.source, fallback)) {
            args.push_back(std::move(name));
            args.push_back(std::move(value));
        }
        Encode(args);
        pending_.push_back(Pending{false, m.id, m.lease_token, stream, now});
        any = true;
    }
    if (any && c.wait_replicas > 0) {
        Encode({"WAIT", std::to_string(c.wait_replicas), std::to_string(c.wait_timeout_ms)});
        pending_.push_back(Pending{true, 0, 0, {}, now});
    }
}

void RedisDriver::Submit(std::vector<Message> batch) {
    in_flight_ += batch.size();
    if (conn_.fd < 0) {
        for (Message &m : batch)
            held_.push_back(std::move(m));
        return;
    }
    Send(batch);
    Flush();
}

// Sends what is queued; false when the connection broke (dropped).
bool RedisDriver::Flush() {
    while (conn_.fd >= 0 && out_done_ < out_.size()) {
        size_t want = std::min<size_t>(out_.size() - out_done_, 1 << 20);
        ssize_t n;
        if (conn_.ssl != nullptr) {
            n = SSL_write(conn_.ssl, out_.data() + out_done_, int(want));
            if (n <= 0) {
                int e = SSL_get_error(conn_.ssl, int(n));
                if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
                    break;
                Drop(RedisTlsError("connection to Redis lost (TLS write)"), OutcomeKind::Defer);
                return false;
            }
        } else {
            n = send(conn_.fd, out_.data() + out_done_, want, MSG_NOSIGNAL);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                break;
            if (n <= 0) {
                Drop(std::string("connection to Redis lost: ") + strerror(errno),
                     OutcomeKind::Defer);
                return false;
            }
        }
        out_done_ += size_t(n);
    }
    if (out_done_ == out_.size()) {
        out_.clear();
        out_done_ = 0;
    } else if (out_done_ > (4u << 20)) {
        out_.erase(0, out_done_);
        out_done_ = 0;
    }
    WatchOutput(!out_.empty());
    return true;
}

// Reads and answers what arrived; false when the connection broke (dropped).
bool RedisDriver::Receive() {
    char buf[65536];
    size_t total = 0;
    while (conn_.fd >= 0 && total < kReadPerPoll) {
        ssize_t n;
        if (conn_.ssl != nullptr) {
            n = SSL_read(conn_.ssl, buf, sizeof buf);
            if (n <= 0) {
                int e = SSL_get_error(conn_.ssl, int(n));
                if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
                    break;
                Drop(e == SSL_ERROR_ZERO_RETURN ? "Redis closed the connection"
                                                : RedisTlsError("connection to Redis lost (TLS)"),
                     OutcomeKind::Defer);
                return false;
            }
        } else {
            n = recv(conn_.fd, buf, sizeof buf, 0);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                break;
            if (n <= 0) {
                Drop(n == 0 ? "Redis closed the connection"
                            : std::string("connection to Redis lost: ") + strerror(errno),
                     OutcomeKind::Defer);
                return false;
            }
        }
        total += size_t(n);
        redisReaderFeed(reader_, buf, size_t(n));
        for (;;) {
            void *reply = nullptr;
            if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
                Drop(std::string("not a Redis reply: ") + reader_->errstr, OutcomeKind::Retry);
                return false;
            }
            if (reply == nullptr)
                break;
            redisReply *r = static_cast<redisReply *>(reply);
            bool drop = false;
            std::string error;
            if (r->type == REDIS_REPLY_ERROR) {
                error = std::string(r->str, r->len);
                drop = RedisErrorDropsConnection(error);
            }
            if (pending_.empty()) {
                freeReplyObject(r);
                Drop("a reply from Redis that answers nothing sent", OutcomeKind::Retry);
                return false;
            }
            Reply(r);
            freeReplyObject(r);
            if (drop) {
                Drop("connection to Redis remade after: " + error.substr(0, 300),
                     OutcomeKind::Defer);
                return false;
            }
        }
    }
    return true;
}

// The reply to the oldest command in flight.
void RedisDriver::Reply(redisReply *r) {
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    const RedisConfig &c = core_->options.config;
    if (p.wait) {
        long long replicas = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        bool enough = replicas >= c.wait_replicas;
        std::string why;
        if (!enough)
            why = r->type == REDIS_REPLY_ERROR
                      ? "WAIT refused: " + std::string(r->str, r->len).substr(0, 300)
                      : "only " + std::to_string(std::max(0LL, replicas)) + " of " +
                            std::to_string(c.wait_replicas) + " replicas acknowledged within " +
                            std::to_string(c.wait_timeout_ms) + " ms (WAIT)";
        for (const Pending &a : acked_)
            Answer(a.id, a.lease_token, enough ? OutcomeKind::Delivered : OutcomeKind::Retry, why);
        acked_.clear();
        return;
    }
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        if (c.wait_replicas > 0)
            acked_.push_back(std::move(p));
        else
            Answer(p.id, p.lease_token, OutcomeKind::Delivered, "");
    } else if (r->type == REDIS_REPLY_NIL) {
        Answer(
            p.id, p.lease_token, OutcomeKind::Dead,
            "stream " + p.stream + " does not exist (\"create_stream\" is false: XADD NOMKSTREAM)");
    } else if (r->type == REDIS_REPLY_ERROR) {
        std::string error(r->str, r->len);
        if (error.size() > 300)
            error.resize(300);
        OutcomeKind kind = ClassifyRedisError(error);
        if (error.rfind("ERR Protocol error", 0) == 0)
            error += " (the entry is larger than the server's proto-max-bulk-len)";
        Answer(p.id, p.lease_token, kind, "XADD to stream " + p.stream + ": " + error);
    } else {
        Answer(p.id, p.lease_token, OutcomeKind::Retry,
               "XADD to stream " + p.stream + ": unexpected reply type " + std::to_string(r->type));
    }
}

int64_t RedisDriver::PollTimeoutMs() const {
    if (!out_.empty() && conn_.ssl != nullptr)
        return 5;  // a TLS write may wait for a read the socket set does not show
    if (in_flight_ == 0 && conn_.fd >= 0)
        return -1;
    return 100;
}

void RedisDriver::Poll(std::vector<Outcome> &out) {
    core_->notify.Drain();
    int64_t now = MonotonicMs();
    if (connecting_)
        Adopt();
    if (conn_.fd < 0 && !connecting_ && now >= next_connect_ms_)
        StartConnector();
    if (conn_.fd >= 0) {
        if (!held_.empty()) {
            std::vector<Message> batch(std::make_move_iterator(held_.begin()),
                                       std::make_move_iterator(held_.end()));
            held_.clear();
            Send(batch);
        }
        if (Flush() && Receive()) {
            Flush();
            // The oldest command unanswered for too long on a connection that looks alive:
            // the server may have run it, so the messages spend an attempt (Retry).
            int64_t limit =
                core_->options.ack_timeout_ms + (core_->options.config.wait_replicas > 0
                                                     ? core_->options.config.wait_timeout_ms
                                                     : 0);
            if (!pending_.empty() && now - pending_.front().sent_ms > limit)
                Drop("no reply from Redis within " + std::to_string(core_->options.ack_timeout_ms) +
                         " ms",
                     OutcomeKind::Retry);
        }
    }
    if (conn_.fd < 0 && !held_.empty()) {
        // Down: lost a while ago, or never connected within the first second (or refused).
        bool down = (down_since_ms_ != 0 && now - down_since_ms_ >= kOutageMs) ||
                    (!ever_connected_ && (now - started_ms_ >= kOutageMs || !last_error_.empty()));
        // A probe waits for the connection (up to the reply timeout), so delivery resumes as
        // soon as the server is back; everything else is handed back.
        bool hold = core_->probing.load() && held_.size() == 1;
        if (hold && probe_held_since_ms_ == 0)
            probe_held_since_ms_ = now;
        if (down && (!hold || now - probe_held_since_ms_ >= core_->options.ack_timeout_ms)) {
            std::string why = last_error_.empty() ? "not connected to Redis" : last_error_;
            for (Message &m : held_)
                Answer(m.id, m.lease_token, OutcomeKind::Defer, why);
            held_.clear();
            probe_held_since_ms_ = 0;
        }
    } else {
        probe_held_since_ms_ = 0;
    }
    Deliver(outcomes_, out);
}

void RedisDriver::Abandon() {
    if (!pending_.empty() || !acked_.empty())
        Drop("abandoned before Redis replied", OutcomeKind::Defer);
    for (Message &m : held_)
        Answer(m.id, m.lease_token, OutcomeKind::Defer, "abandoned before it was sent");
    held_.clear();
    core_->Notify();
}

}  // namespace

// The fields of the stream entry (see driver.hpp).
std::vector<std::pair<std::string, std::string>> RedisEntryFields(const Message &m,
                                                                  std::string_view source,
                                                                  std::string_view type_fallback) {
    std::vector<std::pair<std::string, std::string>> fields;
    fields.emplace_back("payload", m.payload);
    if (m.key)
        fields.emplace_back("key", *m.key);
    if (!m.headers.empty()) {
        nlohmann::ordered_json headers = nlohmann::ordered_json::object();
        for (const auto &[name, value] : m.headers)
            headers[name] = value;
        fields.emplace_back("headers",
                            headers.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    CloudEventAttributes a = AttributesOf(m, source, type_fallback);
    fields.emplace_back("ce_specversion", "1.0");
    fields.emplace_back("ce_id", std::move(a.id));
    fields.emplace_back("ce_source", std::move(a.source));
    fields.emplace_back("ce_type", std::move(a.type));
    fields.emplace_back("ce_time", std::move(a.time));
    if (!a.datacontenttype.empty())
        fields.emplace_back("ce_datacontenttype", std::move(a.datacontenttype));
    if (!a.traceparent.empty())
        fields.emplace_back("ce_traceparent", std::move(a.traceparent));
    if (!a.tracestate.empty())
        fields.emplace_back("ce_tracestate", std::move(a.tracestate));
    return fields;
}

std::unique_ptr<Driver> MakeRedisDriver(const RedisDriverOptions &options, std::string *error) {
    auto core = std::make_shared<Core>();
    core->options = options;
    if (core->options.max_in_flight == 0)
        core->options.max_in_flight = 1;
    if (core->options.ack_timeout_ms <= 0)
        core->options.ack_timeout_ms = 5000;
    if (!core->guard.Set(options.address_rule, error))
        return nullptr;
    auto driver = std::make_unique<RedisDriver>(std::move(core));
    if (!driver->Start(error))
        return nullptr;
    return driver;
}

}  // namespace outbox
