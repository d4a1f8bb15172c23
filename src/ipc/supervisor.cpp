// The worker's side of the driver process (see include/outbox/ipc/supervisor.hpp).
//
// Threads: none. Everything runs on the worker's thread, inside the dispatcher's calls. The
// helper is the only other party, and it is not trusted to be well-behaved: a malformed frame,
// a write that cannot make progress or a silence while an answer is due ends it.
#include "outbox/ipc/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <utility>

#include "outbox/clock.hpp"
#include "outbox/ipc/pipe_io.hpp"
#include "outbox/ipc/spawn.hpp"

namespace outbox {

namespace {

constexpr size_t kReadChunk = 256 * 1024;
// One Service reads at most this much, so a chatty helper cannot keep the worker from its loop.
constexpr size_t kMaxReadPerService = 64u << 20;

std::string Seconds(int64_t ms) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.1f s", double(ms) / 1000.0);
    return buf;
}

// "1 message", "37 messages".
std::string Messages(size_t n) {
    return std::to_string(n) + (n == 1 ? " message" : " messages");
}

// How a helper ended, for the log: never "terminated by signal" (the tests' crash check looks
// for PostgreSQL's own wording of a backend crash).
std::string DescribeStatus(int status) {
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *name = strsignal(sig);
        return "was killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
    }
    if (WIFEXITED(status)) {
        switch (WEXITSTATUS(status)) {
            case 0:
                return "exited";
            case protocol::kExitProtocol:
                return "exited after a protocol error";
            case protocol::kExitOutOfMemory:
                return "ran out of memory (outbox.driver_memory_limit) and exited";
            case protocol::kExitStartup:
                return "could not start (see the lines before this one)";
            case protocol::kExitError:
                return "stopped on an unexpected error (see the lines before this one)";
            case 127:
                return "exited with code 127 (it could not be run; see the lines before this one)";
            default:
                return "exited with code " + std::to_string(WEXITSTATUS(status));
        }
    }
    return "ended with status " + std::to_string(status);
}

// Same crash, shorter, for outbox.stats().last_error: "signal 11: Segmentation fault".
std::string ShortStatus(int status) {
    if (WIFSIGNALED(status)) {
        const char *name = strsignal(WTERMSIG(status));
        return "signal " + std::to_string(WTERMSIG(status)) + ": " + (name ? name : "?");
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == protocol::kExitOutOfMemory)
        return "out of memory";
    if (WIFEXITED(status))
        return "exit code " + std::to_string(WEXITSTATUS(status));
    return "status " + std::to_string(status);
}

bool SetNonBlocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// RemoteDriver: a Driver whose real driver lives in the helper.
// ---------------------------------------------------------------------------------------------

class RemoteDriver final : public Driver {
  public:
    enum class Link {
        Waiting,  // no helper now: opened once one runs
        Opening,  // Open sent, no answer yet
        Ready,
        Failed,  // the helper refused to build it (again): Broken
    };

    RemoteDriver(DriverProcess *process, uint64_t handle, std::string kind, std::string name,
                 std::string options)
        : process_(process),
          handle_(handle),
          kind_(std::move(kind)),
          name_(std::move(name)),
          options_(std::move(options)) {}

    ~RemoteDriver() override {
        if (process_ != nullptr)
            process_->Unregister(handle_);
    }

    void Submit(std::vector<Message> batch) override;
    void Poll(std::vector<Outcome> &out) override {
        for (Outcome &o : ready_)
            out.push_back(std::move(o));
        ready_.clear();
    }
    size_t InFlight() const override { return in_flight_.size() + ready_.size(); }
    size_t Capacity() const override {
        if (link_ != Link::Ready || state_.broken || process_ == nullptr)
            return 0;
        uint64_t total = state_.capacity + state_.in_flight;
        return total > InFlight() ? size_t(total - InFlight()) : 0;
    }
    int WaitFd() const override { return process_ ? process_->WaitFd() : -1; }
    int64_t PollTimeoutMs() const override {
        if (!ready_.empty())
            return 0;
        return process_ ? process_->TimeoutMs() : -1;
    }
    void Abandon() override;
    void TakeLog(std::vector<std::string> &lines) override {
        for (std::string &l : log_)
            lines.push_back(std::move(l));
        log_.clear();
    }
    void SetProbing(bool probing) override {
        if (probing == probing_)
            return;
        probing_ = probing;
        if (process_ && process_->Running() && link_ != Link::Waiting) {
            std::string bytes;
            protocol::Encode(protocol::SetProbingFrame{handle_, probing}, &bytes);
            process_->Send(std::move(bytes));
        }
    }
    bool Broken() const override { return link_ == Link::Failed || state_.broken; }

  private:
    friend class DriverProcess;
    struct Sent {
        int64_t lease_token;
        bool held;  // a suspect waiting in the process's queue, not in the helper
    };

    void OnOutcomes(protocol::OutcomesFrame &f);
    void OnOpened(const protocol::OpenedFrame &f);
    // The helper died: every message it had and did not answer comes back.
    size_t OnDeath(const std::string &crash, int *poisoned);
    void Resolve(int64_t id, int64_t token, OutcomeKind kind, std::string error) {
        Outcome o;
        o.id = id;
        o.lease_token = token;
        o.kind = kind;
        o.error = std::move(error);
        ready_.push_back(std::move(o));
    }

    DriverProcess *process_;  // nullptr once the process object is gone
    uint64_t handle_;
    std::string kind_, name_, options_;
    Link link_ = Link::Waiting;
    std::string open_error_;
    protocol::DriverState state_;
    bool probing_ = false;
    std::unordered_map<int64_t, Sent> in_flight_;  // no outcome yet
    std::vector<Outcome> ready_;                   // outcomes not yet returned by Poll
    std::vector<std::string> log_;
};

void RemoteDriver::Submit(std::vector<Message> batch) {
    if (process_ == nullptr || !process_->Running() || link_ == Link::Failed) {
        // The helper went away between the claim and now: nothing was sent.
        for (Message &m : batch)
            Resolve(m.id, m.lease_token, OutcomeKind::Unacknowledged,
                    "driver process not running; due again");
        return;
    }
    std::vector<Message> send;
    send.reserve(batch.size());
    for (Message &m : batch) {
        if (process_->IsSuspect(m.id)) {
            in_flight_[m.id] = Sent{m.lease_token, true};
            process_->Hold(handle_, std::move(m));
        } else {
            in_flight_[m.id] = Sent{m.lease_token, false};
            send.push_back(std::move(m));
        }
    }
    if (!send.empty()) {
        std::string bytes;
        protocol::EncodeSubmit(handle_, send, &bytes);
        process_->Send(std::move(bytes));  // may find the helper dead: OnDeath resolves them
    }
    if (process_ != nullptr)
        process_->PumpSuspects();
}

void RemoteDriver::Abandon() {
    if (process_ == nullptr)
        return;
    // Suspects still waiting here were never sent: handed back at once.
    std::vector<Message> dropped;
    process_->DropSuspects(handle_, &dropped);
    for (Message &m : dropped) {
        in_flight_.erase(m.id);
        Resolve(m.id, m.lease_token, OutcomeKind::Defer, "abandoned before it was sent");
    }
    if (process_->Running() && link_ != Link::Waiting) {
        std::string bytes;
        protocol::Encode(protocol::AbandonFrame{handle_}, &bytes);
        process_->Send(std::move(bytes));
    } else {
        // No helper has them: nothing to wait for.
        for (const auto &[id, sent] : in_flight_)
            Resolve(id, sent.lease_token, OutcomeKind::Defer, "abandoned; driver process down");
        in_flight_.clear();
    }
}

void RemoteDriver::OnOutcomes(protocol::OutcomesFrame &f) {
    state_ = f.state;
    for (Outcome &o : f.outcomes) {
        if (o.kind == OutcomeKind::Marker) {  // about the driver, not a message in flight
            ready_.push_back(std::move(o));
            continue;
        }
        auto it = in_flight_.find(o.id);
        if (it == in_flight_.end() || it->second.lease_token != o.lease_token || it->second.held)
            continue;  // already resolved here (abandoned, or from before a re-lease)
        in_flight_.erase(it);
        process_->Answered(handle_, o.id);
        ready_.push_back(std::move(o));
    }
}

void RemoteDriver::OnOpened(const protocol::OpenedFrame &f) {
    if (f.ok) {
        link_ = Link::Ready;
        return;
    }
    link_ = Link::Failed;
    open_error_ = f.error;
    log_.push_back("the driver process could not build the driver: " + f.error);
    // Nothing sent to it (or held for it) can go anywhere now; the helper drops the rest.
    std::vector<Message> dropped;
    process_->DropSuspects(handle_, &dropped);
    process_->ForgetSentSuspects(handle_);
    for (const auto &[id, sent] : in_flight_)
        Resolve(id, sent.lease_token, OutcomeKind::Unacknowledged,
                "the driver could not be built: " + f.error);
    in_flight_.clear();
}

size_t RemoteDriver::OnDeath(const std::string &crash, int *poisoned) {
    link_ = Link::Waiting;
    state_ = protocol::DriverState{};
    size_t lost = 0;
    for (const auto &[id, sent] : in_flight_)
        if (!sent.held)
            lost++;
    std::string retry =
        "driver process crashed (" + crash + "); " + Messages(lost) + " in flight will be retried";
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
        if (it->second.held) {  // never reached this helper: waits for the next one
            ++it;
            continue;
        }
        int crashes = process_->CountCrash(it->first);
        if (crashes >= process_->options_.poison_after) {
            (*poisoned)++;
            log_.push_back("message " + std::to_string(it->first) + " was in flight during " +
                           std::to_string(crashes) +
                           " driver process crashes: moved to the dead letters as poison");
            Resolve(it->first, it->second.lease_token, OutcomeKind::Poison,
                    "in flight during " + std::to_string(crashes) +
                        " driver process crashes (outbox.poison_after), the last: " + crash);
        } else {
            Resolve(it->first, it->second.lease_token, OutcomeKind::Unacknowledged, retry);
        }
        it = in_flight_.erase(it);
    }
    return lost;
}

// ---------------------------------------------------------------------------------------------
// RemoteConsumer: a Kafka consumer whose librdkafka consumer lives in the helper.
// ---------------------------------------------------------------------------------------------

RemoteConsumer::~RemoteConsumer() {
    if (process_ != nullptr)
        process_->UnregisterConsumer(handle_);
}

void RemoteConsumer::SetLink(Link link, std::string error) {
    link_ = link;
    error_ = std::move(error);
}

void RemoteConsumer::Clear() {
    buffer_.clear();
    buffered_bytes_ = 0;
}

void RemoteConsumer::Assign(std::vector<ConsumerAssignment> assignment) {
    generation_++;
    assignment_ = std::move(assignment);
    Clear();
    // Waiting or Failed: sent with the next Open (SendOpen).
    if (process_ == nullptr || !process_->Running() ||
        (link_ != Link::Opening && link_ != Link::Ready))
        return;
    std::string bytes;
    protocol::Encode(protocol::AssignFrame{handle_, generation_, assignment_}, &bytes);
    process_->Send(std::move(bytes));
}

size_t RemoteConsumer::Take(std::vector<ConsumedRecord> *out, size_t max) {
    size_t n = 0, bytes = 0;
    while (n < max && !buffer_.empty()) {
        bytes += RecordBytes(buffer_.front());
        out->push_back(std::move(buffer_.front()));
        buffer_.pop_front();
        n++;
    }
    buffered_bytes_ -= std::min(bytes, buffered_bytes_);
    if (n > 0 && process_ != nullptr && process_->Running() && link_ == Link::Ready) {
        std::string frame;
        protocol::Encode(protocol::CreditFrame{handle_, n, bytes}, &frame);
        process_->Send(std::move(frame));
    }
    return n;
}

// ---------------------------------------------------------------------------------------------
// DriverProcess
// ---------------------------------------------------------------------------------------------

DriverProcess::DriverProcess(DriverProcessOptions options) : options_(std::move(options)) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
}

DriverProcess::~DriverProcess() {
    Stop(1000);
    for (auto &[handle, d] : drivers_)
        d->process_ = nullptr;
    drivers_.clear();
    for (auto &[handle, c] : consumers_) {
        c->process_ = nullptr;
        c->Clear();
        c->SetLink(RemoteConsumer::Link::Failed, "the driver process was stopped");
    }
    consumers_.clear();
    if (epoll_fd_ >= 0)
        close(epoll_fd_);
}

void DriverProcess::SetOptions(const DriverProcessOptions &options) {
    bool fault_changed = options.fault != options_.fault;
    bool limit_changed = options.memory_limit_bytes != options_.memory_limit_bytes;
    options_ = options;
    if (!Running())
        return;
    if (limit_changed) {
        // The running helper gets the new limit now; one above what it already uses just lets
        // it grow, one below makes its next allocations fail (it exits and starts again). Only
        // the soft limit is set, so that a later reload may raise it again without privileges.
        struct rlimit limit;
        bool ok = prlimit(pid_, RLIMIT_AS, nullptr, &limit) == 0;
        if (ok) {
            limit.rlim_cur = SoftLimit(options_.memory_limit_bytes, limit.rlim_max);
            ok = prlimit(pid_, RLIMIT_AS, &limit, nullptr) == 0;
        }
        if (!ok)
            AddLog("could not change the driver process's memory limit: " +
                   std::string(strerror(errno)) + "; it applies from its next start");
    }
    if (fault_changed) {
        std::string bytes;
        protocol::Encode(protocol::ConfigureFrame{{{"fault", options_.fault}}}, &bytes);
        Send(std::move(bytes));
    }
}

void DriverProcess::TakeLog(std::vector<std::string> &lines) {
    for (std::string &l : log_)
        lines.push_back(std::move(l));
    log_.clear();
}

int DriverProcess::CrashCount(int64_t id) const {
    auto it = crashes_.find(id);
    return it == crashes_.end() ? 0 : it->second;
}

std::unique_ptr<Driver> DriverProcess::Open(const std::string &kind, const std::string &name,
                                            std::string options, std::string *error) {
    if (epoll_fd_ < 0) {
        *error = "could not create an epoll fd for the driver process";
        return nullptr;
    }
    int64_t now = MonotonicMs();
    if (!Running() && now < restart_at_ms_ && !start_error_.empty()) {
        *error = start_error_;  // it cannot be started now; the dispatcher tries again later
        return nullptr;
    }
    auto d = std::make_unique<RemoteDriver>(this, next_handle_++, kind, name, std::move(options));
    drivers_[d->handle_] = d.get();
    if (Running())
        SendOpen(d.get());
    else if (now < restart_at_ms_)
        return d;  // restarting after a crash: opened with the others when it is back
    else if (!Restart(error))
        return nullptr;
    // Wait for the answer (building a producer takes milliseconds), routing whatever else comes.
    RemoteDriver *raw = d.get();
    AwaitOpened([raw] { return raw->link_ == RemoteDriver::Link::Opening; });
    if (d->link_ == RemoteDriver::Link::Failed) {
        *error = d->open_error_;
        return nullptr;  // unregisters
    }
    return d;
}

void DriverProcess::AwaitOpened(const std::function<bool()> &opening) {
    int64_t deadline = MonotonicMs() + options_.answer_timeout_ms;
    while (Running() && opening()) {
        int64_t left = deadline - MonotonicMs();
        if (left <= 0) {
            Kill("did not answer an Open within " + Seconds(options_.answer_timeout_ms));
            break;
        }
        struct pollfd p = {sock_, POLLIN, 0};
        int rc = poll(&p, 1, int(std::min<int64_t>(left, 1000)));
        if (rc < 0 && errno != EINTR) {
            Kill(std::string("poll failed: ") + strerror(errno));
            break;
        }
        if (rc > 0)
            Service();
    }
}

std::unique_ptr<RemoteConsumer> DriverProcess::OpenConsumer(const std::string &kind,
                                                            const std::string &name,
                                                            const std::string &config,
                                                            const ConsumerContext &context,
                                                            std::string *error) {
    if (epoll_fd_ < 0) {
        *error = "could not create an epoll fd for the driver process";
        return nullptr;
    }
    int64_t now = MonotonicMs();
    if (!Running() && now < restart_at_ms_ && !start_error_.empty()) {
        *error = start_error_;
        return nullptr;
    }
    std::unique_ptr<RemoteConsumer> c(new RemoteConsumer(
        this, next_handle_++, kind, name, protocol::EncodeOpenOptions(config, context),
        context.window_records, context.window_bytes));
    consumers_[c->handle_] = c.get();
    if (Running())
        SendOpen(c.get());
    else if (now < restart_at_ms_)
        return c;  // restarting after a crash: opened with the others when it is back
    else if (!Restart(error))
        return nullptr;
    RemoteConsumer *raw = c.get();
    AwaitOpened([raw] { return raw->link_ == RemoteConsumer::Link::Opening; });
    if (c->link_ == RemoteConsumer::Link::Failed) {
        *error = c->error_;
        return nullptr;  // unregisters
    }
    return c;
}

bool DriverProcess::Restart(std::string *error) {
    if (!Spawn(error))
        return false;
    // Every destination's driver again, in one go (the frames queue in the socket).
    for (auto &[handle, d] : drivers_)
        if (Running() && d->link_ != RemoteDriver::Link::Opening)
            SendOpen(d);
    for (auto &[handle, c] : consumers_)
        if (Running() && c->link_ != RemoteConsumer::Link::Opening)
            SendOpen(c);
    return Running();
}

void DriverProcess::SendOpen(RemoteDriver *d) {
    d->link_ = RemoteDriver::Link::Opening;
    std::string bytes;
    protocol::Encode(protocol::OpenFrame{d->handle_, d->kind_, d->name_, d->options_}, &bytes);
    // A driver opened again after a restart is still probing if it was.
    if (d->probing_)
        protocol::Encode(protocol::SetProbingFrame{d->handle_, true}, &bytes);
    Send(std::move(bytes));
}

void DriverProcess::SendOpen(RemoteConsumer *c) {
    c->SetLink(RemoteConsumer::Link::Opening, "opening in the driver process");
    std::string bytes;
    protocol::Encode(protocol::OpenFrame{c->handle_, c->kind_ + "-consumer", c->name_, c->options_},
                     &bytes);
    // An assignment made while there was no helper goes right after the Open.
    if (!c->assignment_.empty())
        protocol::Encode(protocol::AssignFrame{c->handle_, c->generation_, c->assignment_}, &bytes);
    Send(std::move(bytes));
}

void DriverProcess::UnregisterConsumer(uint64_t handle) {
    consumers_.erase(handle);
    if (Running()) {
        std::string bytes;
        protocol::Encode(protocol::CloseFrame{handle}, &bytes);
        Send(std::move(bytes));
    }
}

// Records for a consumer: kept when they are of its current assignment. The helper never sends
// more than the window (it counts what it sent since the Assign, less the credits): a helper
// that does is broken.
bool DriverProcess::OnRecords(protocol::RecordsFrame &f, std::string *why) {
    auto it = consumers_.find(f.handle);
    if (it == consumers_.end())
        return true;  // closed meanwhile
    RemoteConsumer *c = it->second;
    if (f.generation != c->generation_ || c->link_ != RemoteConsumer::Link::Ready)
        return true;  // of an earlier assignment
    for (ConsumedRecord &r : f.records) {
        c->buffered_bytes_ += RecordBytes(r);
        c->buffer_.push_back(std::move(r));
    }
    if (c->buffer_.size() > c->window_records_ ||
        c->buffered_bytes_ > c->window_bytes_ + protocol::kMaxRecordBytes) {
        *why = "sent more records than the window of subscription " + c->name_ + " allows (" +
               std::to_string(c->buffer_.size()) + " records, " +
               std::to_string(c->buffered_bytes_) + " bytes)";
        return false;
    }
    return true;
}

void DriverProcess::Unregister(uint64_t handle) {
    drivers_.erase(handle);
    std::vector<Message> dropped;
    DropSuspects(handle, &dropped);
    ForgetSentSuspects(handle);
    if (Running()) {
        std::string bytes;
        protocol::Encode(protocol::CloseFrame{handle}, &bytes);
        Send(std::move(bytes));
    }
}

bool DriverProcess::Spawn(std::string *error) {
    pid_t pid = 0;
    int sock = -1;
    std::string why;
    if (!SpawnHelper(options_.program, options_.args, options_.memory_limit_bytes, &pid, &sock,
                     &why)) {
        start_error_ = "could not start the driver process " + options_.program + ": " + why;
        *error = start_error_;
        AddLog(start_error_);
        restart_delay_ms_ = restart_delay_ms_ == 0
                                ? options_.restart_base_ms
                                : std::min(options_.restart_max_ms, restart_delay_ms_ * 2);
        restart_at_ms_ = MonotonicMs() + restart_delay_ms_;
        return false;
    }

    sock_ = sock;
    SetNonBlocking(sock_);
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = sock_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, sock_, &ev);
    pid_ = pid;
    hello_ = false;
    if (started_once_)
        restarts_++;
    started_once_ = true;
    started_ms_ = last_rx_ms_ = MonotonicMs();
    ping_sent_ms_ = 0;
    reader_ = protocol::FrameReader(protocol::kMaxToWorkerFrame);
    out_.clear();
    std::string bytes;
    protocol::Encode(protocol::ConfigureFrame{{{"fault", options_.fault}}}, &bytes);
    Send(std::move(bytes));
    return Running();
}

void DriverProcess::Send(std::string bytes) {
    if (!Running())
        return;
    if (out_.empty())
        out_ = std::move(bytes);
    else
        out_.append(bytes);
    std::string why;
    if (!Flush(&why)) {
        // What the helper answered before it went is still in the socket: it counts.
        bool eof = false;
        std::string ignored;
        if (Running() && ReadAvailable(&eof, &ignored))
            Dispatch(&ignored);
        HandleDeath(why, false);
    }
}

// Writes out_ completely. When the socket is full, waits for it (reading what the helper sends
// meanwhile, so neither side can block the other) for at most answer_timeout_ms.
bool DriverProcess::Flush(std::string *why) {
    size_t done = 0;
    int64_t deadline = 0;
    for (;;) {
        if (!SendAvailable(sock_, out_, &done)) {
            *why = std::string("the socket failed: ") + strerror(errno);
            return false;
        }
        if (done == out_.size())
            break;
        int64_t now = MonotonicMs();
        if (deadline == 0)
            deadline = now + options_.answer_timeout_ms;
        if (now >= deadline) {
            Kill("took nothing from the socket for " + Seconds(options_.answer_timeout_ms));
            return true;  // handled
        }
        struct pollfd p = {sock_, POLLOUT | POLLIN, 0};
        int rc = poll(&p, 1, int(std::min<int64_t>(deadline - now, 1000)));
        if (rc > 0 && (p.revents & POLLIN)) {
            bool eof = false;
            if (!ReadAvailable(&eof, why))
                return false;
            if (eof) {
                *why = "closed the socket";
                return false;
            }
        }
    }
    out_.clear();
    return true;
}

// Reads what is there into reader_ (without acting on it).
bool DriverProcess::ReadAvailable(bool *eof, std::string *why) {
    size_t total = 0;
    while (total < kMaxReadPerService) {
        char *at = reader_.Reserve(kReadChunk);
        ssize_t n = read(sock_, at, kReadChunk);
        if (n > 0) {
            reader_.Commit(size_t(n));
            total += size_t(n);
            last_rx_ms_ = MonotonicMs();
            if (size_t(n) < kReadChunk)
                break;  // a short read: nothing more right now
            continue;
        }
        if (n == 0) {
            *eof = true;
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            break;
        if (errno == ECONNRESET) {
            *eof = true;
            break;
        }
        *why = std::string("reading the socket failed: ") + strerror(errno);
        return false;
    }
    return true;
}

// Acts on every complete frame in reader_.
bool DriverProcess::Dispatch(std::string *why) {
    protocol::Frame frame;
    for (;;) {
        std::string error;
        protocol::FrameReader::Result r = reader_.Next(&frame, &error);
        if (r == protocol::FrameReader::Result::NeedMore)
            return true;
        if (r == protocol::FrameReader::Result::Error) {
            *why = "sent a malformed frame (" + error + ")";
            return false;
        }
        if (auto *hello = std::get_if<protocol::HelloFrame>(&frame)) {
            if (hello->version != protocol::kVersion) {
                *why = "speaks protocol version " + std::to_string(hello->version) +
                       ", this module " + std::to_string(protocol::kVersion) +
                       " (install outbox-driver and the module from the same build)";
                return false;
            }
            hello_ = true;
            start_error_.clear();
            continue;
        }
        if (!hello_) {
            *why = "sent a frame before its Hello";
            return false;
        }
        if (auto *f = std::get_if<protocol::OutcomesFrame>(&frame)) {
            auto it = drivers_.find(f->handle);
            if (it != drivers_.end())
                it->second->OnOutcomes(*f);
        } else if (auto *f = std::get_if<protocol::RecordsFrame>(&frame)) {
            if (!OnRecords(*f, why))
                return false;
        } else if (auto *f = std::get_if<protocol::ConsumerStateFrame>(&frame)) {
            auto it = consumers_.find(f->handle);
            if (it != consumers_.end() && it->second->link_ == RemoteConsumer::Link::Ready)
                it->second->state_ = std::move(f->state);
        } else if (auto *f = std::get_if<protocol::OpenedFrame>(&frame)) {
            auto it = drivers_.find(f->handle);
            if (it != drivers_.end() && it->second->link_ == RemoteDriver::Link::Opening)
                it->second->OnOpened(*f);
            auto c = consumers_.find(f->handle);
            if (c != consumers_.end() && c->second->link_ == RemoteConsumer::Link::Opening) {
                if (f->ok)
                    c->second->SetLink(RemoteConsumer::Link::Ready, {});
                else
                    c->second->SetLink(RemoteConsumer::Link::Failed, f->error);
                if (!f->ok)
                    AddLog("subscription " + c->second->name_ +
                           ": the driver process could not build the consumer: " + f->error);
            }
        } else if (auto *f = std::get_if<protocol::LogFrame>(&frame)) {
            auto it = drivers_.find(f->handle);
            auto c = consumers_.find(f->handle);
            for (std::string &line : f->lines) {
                if (f->handle == 0)
                    AddLog("driver process: " + line);
                else if (it != drivers_.end())
                    it->second->log_.push_back(std::move(line));
                else if (c != consumers_.end())
                    AddLog("subscription " + c->second->name_ + ": " + line);
            }
        } else if (auto *f = std::get_if<protocol::PongFrame>(&frame)) {
            if (f->seq == ping_seq_)
                ping_sent_ms_ = 0;
        } else {
            *why = "sent a frame only the worker may send";
            return false;
        }
    }
}

bool DriverProcess::AnswerDue() const {
    if (ping_sent_ms_ != 0 || !suspects_sent_.empty())
        return true;
    // A consumer owes nothing, but a hung helper would starve it without a word: pinged too.
    for (const auto &[handle, c] : consumers_)
        if (c->link_ == RemoteConsumer::Link::Opening || c->link_ == RemoteConsumer::Link::Ready)
            return true;
    for (const auto &[handle, d] : drivers_) {
        if (d->link_ == RemoteDriver::Link::Opening)
            return true;
        for (const auto &[id, sent] : d->in_flight_)
            if (!sent.held)
                return true;
    }
    return false;
}

void DriverProcess::Service() {
    int64_t now = MonotonicMs();
    if (Running()) {
        bool eof = false;
        std::string why;
        bool ok = ReadAvailable(&eof, &why);
        // Frames that arrived before the end still count: what the helper answered is kept.
        if (ok)
            ok = Dispatch(&why);
        if (!ok)
            Kill(why);
        else if (eof)
            HandleDeath("closed the socket", false);
    }
    now = MonotonicMs();
    if (Running() && AnswerDue()) {
        // Silence alone proves nothing (the broker may be slow, or this worker was busy): a
        // ping decides. Only a ping left unanswered for answer_timeout_ms ends the helper.
        if (ping_sent_ms_ != 0 && now - ping_sent_ms_ >= options_.answer_timeout_ms) {
            Kill("stopped answering (no reply to a ping within " +
                 Seconds(options_.answer_timeout_ms) + ")");
        } else if (ping_sent_ms_ == 0 && now - last_rx_ms_ >= options_.ping_interval_ms) {
            std::string bytes;
            protocol::Encode(protocol::PingFrame{++ping_seq_}, &bytes);
            ping_sent_ms_ = now;
            Send(std::move(bytes));
        }
    }
    if (!Running() && (!drivers_.empty() || !consumers_.empty()) && now >= restart_at_ms_) {
        std::string error;
        Restart(&error);  // a failure is logged and tried again after the backoff
    }
    ExpireSuspects(now);
    PumpSuspects();
}

int64_t DriverProcess::TimeoutMs() const {
    int64_t now = MonotonicMs();
    int64_t best = -1;
    auto consider = [&](int64_t at) {
        int64_t ms = std::max<int64_t>(0, at - now);
        if (best < 0 || ms < best)
            best = ms;
    };
    if (!Running()) {
        if (!drivers_.empty() || !consumers_.empty())
            consider(restart_at_ms_);
    } else if (AnswerDue()) {
        if (ping_sent_ms_ != 0)
            consider(ping_sent_ms_ + options_.answer_timeout_ms);
        else
            consider(last_rx_ms_ + options_.ping_interval_ms);
    }
    if (!suspects_.empty())
        consider(suspects_.front().since_ms + options_.hold_limit_ms);
    return best;
}

void DriverProcess::Kill(const std::string &why) {
    if (!Running())
        return;
    HandleDeath(why, true);
}

void DriverProcess::HandleDeath(const std::string &why, bool we_killed) {
    if (!Running())
        return;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, sock_, nullptr);
    close(sock_);
    sock_ = -1;
    out_.clear();
    // Gone or going: SIGKILL changes nothing for a process that is already exiting (its status
    // is the original one), and ends one that closed the socket but lives on.
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    int64_t now = MonotonicMs();
    int64_t lived = now - started_ms_;
    std::string what = we_killed ? why + "; killed" : DescribeStatus(status);
    std::string crash = we_killed ? why : ShortStatus(status);
    pid_t pid = pid_;
    pid_ = 0;
    ping_sent_ms_ = 0;
    bool started = hello_;
    hello_ = false;

    size_t lost = 0;
    int poisoned = 0;
    std::string per_destination;
    for (auto &[handle, d] : drivers_) {
        size_t n = d->OnDeath(crash, &poisoned);
        lost += n;
        if (n > 0)
            per_destination +=
                (per_destination.empty() ? "" : ", ") + d->name_ + ": " + std::to_string(n);
    }
    suspects_sent_.clear();
    // The consumers' assignments went with the helper: each is opened again, empty, in the next
    // one, and its new epoch tells the worker to assign it again.
    for (auto &[handle, c] : consumers_) {
        c->Clear();
        c->assignment_.clear();
        c->state_ = ConsumerState{};
        c->epoch_++;
        c->SetLink(RemoteConsumer::Link::Waiting,
                   "the driver process " + what + "; opened again when it is back");
    }

    if (lived >= options_.healthy_after_ms || restart_delay_ms_ == 0)
        restart_delay_ms_ = options_.restart_base_ms;
    else
        restart_delay_ms_ = std::min(options_.restart_max_ms, restart_delay_ms_ * 2);
    restart_at_ms_ = now + restart_delay_ms_;
    if (!started)
        start_error_ = "the driver process " + what + " before it was ready";

    std::string line = "driver process " + std::to_string(pid) + " " + what + " after " +
                       Seconds(lived) + "; " + Messages(lost) +
                       " in flight without an answer will be delivered again";
    if (!per_destination.empty())
        line += " (" + per_destination + ")";
    if (poisoned > 0)
        line += ", " + std::to_string(poisoned) + " of them dead-lettered as poison";
    line += "; restarting it in " + std::to_string(restart_delay_ms_) + " ms";
    AddLog(line);
}

int DriverProcess::CountCrash(int64_t id) {
    auto [it, added] = crashes_.emplace(id, 0);
    if (added) {
        crash_order_.push_back(id);
        while (crashes_.size() > kMaxCrashCounts && !crash_order_.empty()) {
            crashes_.erase(crash_order_.front());
            crash_order_.pop_front();
        }
        it = crashes_.find(id);
        if (it == crashes_.end())
            return 1;
    }
    int n = ++it->second;
    if (n >= options_.poison_after)
        crashes_.erase(it);  // buried: nothing more to count
    return n;
}

void DriverProcess::Answered(uint64_t handle, int64_t id) {
    // Answered, so not the cause of a crash. (crash_order_ keeps the id until it reaches the
    // front; erasing an id that is gone is harmless.)
    crashes_.erase(id);
    suspects_sent_.erase({handle, id});
    if (crash_order_.size() > 2 * kMaxCrashCounts) {
        std::deque<int64_t> live;
        for (int64_t x : crash_order_)
            if (crashes_.count(x))
                live.push_back(x);
        crash_order_.swap(live);
    }
}

void DriverProcess::Hold(uint64_t handle, Message m) {
    suspects_.push_back(Suspect{handle, std::move(m), MonotonicMs()});
}

// Sends the next group of suspects once the previous one has answered: up to kSuspectGroup of
// them, and a message one crash short of poison alone (see the header).
void DriverProcess::PumpSuspects() {
    if (!suspects_sent_.empty() || !Running())
        return;
    std::map<uint64_t, std::vector<Message>> group;
    size_t picked = 0;
    size_t limit = 0;  // decided by the first suspect that can go now
    for (auto it = suspects_.begin(); it != suspects_.end() && (limit == 0 || picked < limit);) {
        auto d = drivers_.find(it->handle);
        RemoteDriver *driver = d == drivers_.end() ? nullptr : d->second;
        auto f = driver ? driver->in_flight_.find(it->message.id)
                        : std::unordered_map<int64_t, RemoteDriver::Sent>::iterator();
        if (!driver || f == driver->in_flight_.end() || !f->second.held) {
            it = suspects_.erase(it);  // resolved meanwhile
            continue;
        }
        if (driver->link_ != RemoteDriver::Link::Ready) {
            ++it;  // its driver is opening again after a restart
            continue;
        }
        bool last_chance = CrashCount(it->message.id) >= options_.poison_after - 1;
        if (limit == 0)
            limit = last_chance ? 1 : kSuspectGroup;
        else if (last_chance) {
            ++it;  // goes alone, in a group of its own
            continue;
        }
        f->second.held = false;
        suspects_sent_.insert({it->handle, it->message.id});
        group[it->handle].push_back(std::move(it->message));
        it = suspects_.erase(it);
        picked++;
    }
    for (auto &[handle, messages] : group) {
        std::string bytes;
        protocol::EncodeSubmit(handle, messages, &bytes);
        Send(std::move(bytes));
    }
}

void DriverProcess::ExpireSuspects(int64_t now) {
    while (!suspects_.empty() && now - suspects_.front().since_ms >= options_.hold_limit_ms) {
        Suspect s = std::move(suspects_.front());
        suspects_.pop_front();
        auto it = drivers_.find(s.handle);
        if (it == drivers_.end())
            continue;
        RemoteDriver *d = it->second;
        auto f = d->in_flight_.find(s.message.id);
        if (f == d->in_flight_.end() || !f->second.held)
            continue;
        d->in_flight_.erase(f);
        d->Resolve(s.message.id, s.message.lease_token, OutcomeKind::Unacknowledged,
                   "held back after a driver process crash (it was in flight then); due again");
    }
}

void DriverProcess::ForgetSentSuspects(uint64_t handle) {
    for (auto it = suspects_sent_.begin(); it != suspects_sent_.end();)
        it = it->first == handle ? suspects_sent_.erase(it) : std::next(it);
}

void DriverProcess::DropSuspects(uint64_t handle, std::vector<Message> *dropped) {
    for (auto it = suspects_.begin(); it != suspects_.end();) {
        if (it->handle == handle) {
            dropped->push_back(std::move(it->message));
            it = suspects_.erase(it);
        } else {
            ++it;
        }
    }
}

void DriverProcess::Freeze(bool frozen) {
    if (!Running())
        return;
    std::string bytes;
    protocol::Encode(protocol::ConfigureFrame{{{"hold", frozen ? "on" : "off"}}}, &bytes);
    Send(std::move(bytes));
    if (!frozen) {
        last_rx_ms_ = MonotonicMs();
        ping_sent_ms_ = 0;
    }
}

void DriverProcess::Stop(int64_t grace_ms) {
    if (!Running())
        return;
    // EOF tells the helper to destroy its drivers and exit; wait for its end of the socket.
    std::string why;
    Flush(&why);
    shutdown(sock_, SHUT_WR);
    int64_t deadline = MonotonicMs() + grace_ms;
    for (;;) {
        int64_t left = deadline - MonotonicMs();
        if (left <= 0 || !Running())
            break;
        struct pollfd p = {sock_, POLLIN, 0};
        int rc = poll(&p, 1, int(left));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            break;
        char buf[4096];
        ssize_t n = read(sock_, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            break;
    }
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, sock_, nullptr);
    close(sock_);
    sock_ = -1;
    kill(pid_, SIGKILL);  // nothing if it already exited
    int status;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = 0;
}

}  // namespace outbox
