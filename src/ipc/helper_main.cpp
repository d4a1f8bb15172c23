// outbox-driver: the network drivers of one delivery worker, in a process of their own.
//
// Started by the worker (src/driver_supervisor.cpp) with fork + exec; fd 3 is its end of a
// socketpair, fd 2 the server log, 0 and 1 /dev/null. It includes no PostgreSQL header and
// shares nothing with the database server: it hosts the real drivers (Kafka, webhooks, AMQP,
// NATS), one per destination, and the inbox's Kafka consumers, one per subscription, and runs
// them on the worker's behalf. A crash here (librdkafka,
// libcurl, librabbitmq, libnats, OpenSSL, out of memory) ends this process only; the worker
// notices, redelivers what was unanswered and starts a new one.
//
// One loop: wait (epoll) on the socket and every driver's fd, for at most the drivers' poll
// timeouts; read everything the worker sent and act on it (open/close drivers, submit,
// abandon...); poll every driver; send their outcomes, state and log lines in one write. It
// exits when the worker closes the socket (EOF), at once, and dies with it (PR_SET_PDEATHSIG).
//
// `outbox-driver --check` answers one definition-time config check instead (AnswerOneCheck).
//
// Exit codes: 0 EOF; 2 a malformed frame from the worker; 3 out of memory
// (outbox.driver_memory_limit, RLIMIT_AS); 4 not started by a worker; 5 another error.
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/brokers/config_service.hpp"
#include "outbox/brokers/kafka/consumer.hpp"
#include "outbox/brokers/registry.hpp"
#include "outbox/driver.hpp"
#include "outbox/ipc/pipe_io.hpp"
#include "outbox/ipc/protocol.hpp"

namespace outbox {
namespace {

constexpr int kSocketFd = 3;
constexpr size_t kReadChunk = 256 * 1024;
constexpr size_t kMaxReadPerTurn = 64u << 20;
constexpr int kMaxEvents = 64;

// The test-only fault switch (outbox.debug_driver_fault, sent by the worker in a Configure
// frame; empty: off). "ACTION:KEY" acts when a message with key KEY is submitted: segv
// (raise SIGSEGV), abort, oom (allocate until the memory limit stops it; only with a limit),
// hang (stop answering); "leak:BYTES" keeps BYTES of every message submitted, never freed.
struct Fault {
    enum Kind { None, Segv, Abort, Oom, Hang, Leak } kind = None;
    std::string key;
    size_t bytes = 0;
};

bool ParseFault(const std::string &text, Fault *fault) {
    *fault = Fault{};
    if (text.empty())
        return true;
    size_t colon = text.find(':');
    if (colon == std::string::npos)
        return false;
    std::string action = text.substr(0, colon), arg = text.substr(colon + 1);
    static const std::pair<const char *, Fault::Kind> kKinds[] = {{"segv", Fault::Segv},
                                                                  {"abort", Fault::Abort},
                                                                  {"oom", Fault::Oom},
                                                                  {"hang", Fault::Hang},
                                                                  {"leak", Fault::Leak}};
    for (const auto &[name, kind] : kKinds)
        if (action == name)
            fault->kind = kind;
    if (fault->kind == Fault::None || arg.empty())
        return false;
    if (fault->kind == Fault::Leak) {
        char *end = nullptr;
        unsigned long long n = strtoull(arg.c_str(), &end, 10);
        if (*end != '\0' || n == 0)
            return false;
        fault->bytes = size_t(n);
    } else {
        fault->key = arg;
    }
    return true;
}

class Host {
  public:
    Host() : epoll_fd_(epoll_create1(EPOLL_CLOEXEC)) {}
    ~Host() {
        drivers_.clear();  // before the epoll fd: each driver closes its own fds
        consumers_.clear();
        if (epoll_fd_ >= 0)
            close(epoll_fd_);
    }

    int Run();

  private:
    struct Slot {
        std::unique_ptr<Driver> driver;
        std::string name;
        int fd = -1;
        protocol::DriverState sent;  // the state the worker was last told
        bool told = false;
    };

    // A consumer (kind "<kind>-consumer"): records go to the worker as far as its window allows.
    struct ConsumerSlot {
        std::unique_ptr<KafkaConsumer> consumer;
        std::string name;
        int fd = -1;
    };

    bool Handle(protocol::Frame &frame);
    void Open(protocol::OpenFrame &f);
    void OpenConsumer(protocol::OpenFrame &f, std::string_view kind);
    void PollConsumers();
    void Watch(int fd, uint64_t handle);
    void Submit(protocol::SubmitFrame &f);
    void ApplyFault(const Message &m);
    void PollDrivers();
    void Report(uint64_t handle, Slot &slot, std::vector<Outcome> &outcomes);
    bool Flush();
    void WatchOutput(bool on);
    void Log(std::string line) { host_log_.push_back(std::move(line)); }

    int epoll_fd_;
    protocol::FrameReader reader_{protocol::kMaxToHelperFrame};
    std::string out_;
    size_t out_done_ = 0;
    bool watching_output_ = false;
    std::map<uint64_t, Slot> drivers_;
    std::map<uint64_t, ConsumerSlot> consumers_;
    std::vector<std::string> host_log_;
    Fault fault_;
    bool held_ = false;  // Configure "hold": the drivers are not polled meanwhile
    std::vector<std::unique_ptr<char[]>> leaked_;
};

int Host::Run() {
    if (epoll_fd_ < 0)
        return protocol::kExitStartup;
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = kSocketFd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, kSocketFd, &ev) != 0)
        return protocol::kExitStartup;
    protocol::Encode(protocol::HelloFrame{protocol::kVersion, uint32_t(getpid())}, &out_);
    Flush();

    struct epoll_event events[kMaxEvents];
    for (;;) {
        int timeout = -1;
        for (auto &[handle, slot] : drivers_) {
            int64_t t = slot.driver->PollTimeoutMs();
            if (t >= 0 && (timeout < 0 || t < timeout))
                timeout = int(std::min<int64_t>(t, 60000));
        }
        for (auto &[handle, slot] : consumers_) {
            int64_t t = slot.consumer->PollTimeoutMs();
            if (t >= 0 && (timeout < 0 || t < timeout))
                timeout = int(std::min<int64_t>(t, 60000));
        }
        if (held_) {
            // The worker stands still (its tests' outbox.debug_pause): the drivers are not
            // polled, as a worker asleep did not poll the drivers inside it; librdkafka's own
            // threads still send. Only the socket is watched, for the end of the hold.
            struct pollfd p = {kSocketFd, POLLIN, 0};
            if (poll(&p, 1, -1) < 0 && errno != EINTR)
                return protocol::kExitStartup;
        } else {
            int n = epoll_wait(epoll_fd_, events, kMaxEvents, timeout);
            if (n < 0 && errno != EINTR)
                return protocol::kExitStartup;
        }
        bool eof = false;
        size_t total = 0;
        while (total < kMaxReadPerTurn) {
            char *at = reader_.Reserve(kReadChunk);
            ssize_t got = read(kSocketFd, at, kReadChunk);
            if (got > 0) {
                reader_.Commit(size_t(got));
                total += size_t(got);
                continue;
            }
            if (got == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
                eof = true;  // the worker is gone (or the socket broke): nothing left to do
            if (got < 0 && errno == EINTR)
                continue;
            break;
        }
        protocol::Frame frame;
        for (;;) {
            std::string error;
            protocol::FrameReader::Result r = reader_.Next(&frame, &error);
            if (r == protocol::FrameReader::Result::NeedMore)
                break;
            if (r == protocol::FrameReader::Result::Error) {
                fprintf(stderr, "outbox-driver: malformed frame from the worker: %s\n",
                        error.c_str());
                return protocol::kExitProtocol;
            }
            if (!Handle(frame))
                return protocol::kExitProtocol;
        }
        if (eof)
            return 0;
        if (!held_) {
            PollDrivers();
            PollConsumers();
        }
        if (!Flush())
            return 0;  // the worker closed its end
    }
}

bool Host::Handle(protocol::Frame &frame) {
    if (auto *f = std::get_if<protocol::SubmitFrame>(&frame)) {
        Submit(*f);
    } else if (auto *f = std::get_if<protocol::OpenFrame>(&frame)) {
        Open(*f);
    } else if (auto *f = std::get_if<protocol::CloseFrame>(&frame)) {
        auto it = drivers_.find(f->handle);
        if (it != drivers_.end()) {
            if (it->second.fd >= 0)
                epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
            drivers_.erase(it);
        }
        auto c = consumers_.find(f->handle);
        if (c != consumers_.end()) {
            if (c->second.fd >= 0)
                epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->second.fd, nullptr);
            consumers_.erase(c);
        }
    } else if (auto *f = std::get_if<protocol::AssignFrame>(&frame)) {
        auto it = consumers_.find(f->handle);
        if (it != consumers_.end())  // else closed meanwhile, or never opened
            it->second.consumer->Assign(f->generation, std::move(f->assignment));
    } else if (auto *f = std::get_if<protocol::CreditFrame>(&frame)) {
        auto it = consumers_.find(f->handle);
        if (it != consumers_.end())
            it->second.consumer->Credit(f->records, f->bytes);
    } else if (auto *f = std::get_if<protocol::AbandonFrame>(&frame)) {
        auto it = drivers_.find(f->handle);
        if (it != drivers_.end())
            it->second.driver->Abandon();
    } else if (auto *f = std::get_if<protocol::SetProbingFrame>(&frame)) {
        auto it = drivers_.find(f->handle);
        if (it != drivers_.end())
            it->second.driver->SetProbing(f->probing);
    } else if (auto *f = std::get_if<protocol::PingFrame>(&frame)) {
        protocol::Encode(protocol::PongFrame{f->seq}, &out_);
    } else if (auto *f = std::get_if<protocol::ConfigureFrame>(&frame)) {
        for (const auto &[key, value] : f->settings) {
            if (key == "hold") {
                held_ = value == "on";
                continue;
            }
            if (key != "fault")
                continue;  // a newer worker's setting: nothing this helper can do with it
            if (!ParseFault(value, &fault_))
                Log("ignoring the fault switch \"" + value + "\": not ACTION:KEY or leak:BYTES");
            else if (fault_.kind != Fault::None)
                Log("test-only fault switch on: " + value);
        }
    } else {
        fprintf(stderr, "outbox-driver: the worker sent a frame only the helper may send\n");
        return false;
    }
    return true;
}

void Host::Watch(int fd, uint64_t handle) {
    if (fd < 0)
        return;
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.u64 = handle;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void Host::OpenConsumer(protocol::OpenFrame &f, std::string_view kind) {
    std::string error, config;
    ConsumerContext context;
    std::unique_ptr<KafkaConsumer> consumer;
    if (protocol::DecodeOpenOptions(f.options, &config, &context, &error))
        consumer = outbox::OpenConsumer(kind, config, context, &error);
    if (!consumer) {
        protocol::Encode(protocol::OpenedFrame{f.handle, false, error}, &out_);
        return;
    }
    ConsumerSlot slot;
    slot.consumer = std::move(consumer);
    slot.name = f.name;
    slot.fd = slot.consumer->WaitFd();
    Watch(slot.fd, f.handle);
    protocol::Encode(protocol::OpenedFrame{f.handle, true, {}}, &out_);
    consumers_.emplace(f.handle, std::move(slot));
}

void Host::PollConsumers() {
    std::vector<ConsumedRecord> records;
    for (auto &[handle, slot] : consumers_) {
        records.clear();
        slot.consumer->Poll(records);
        if (!records.empty())
            protocol::EncodeRecords(handle, slot.consumer->Generation(), records, &out_);
        protocol::ConsumerStateFrame state{handle, {}};
        if (slot.consumer->TakeState(&state.state))
            protocol::Encode(state, &out_);
        std::vector<std::string> lines;
        slot.consumer->TakeLog(lines);
        if (!lines.empty())
            protocol::Encode(protocol::LogFrame{handle, std::move(lines)}, &out_);
    }
}

void Host::Open(protocol::OpenFrame &f) {
    constexpr std::string_view kConsumer = "-consumer";
    std::string error;
    std::unique_ptr<Driver> driver;
    std::string_view kind = f.kind;
    if (drivers_.count(f.handle) || consumers_.count(f.handle)) {
        error = "handle " + std::to_string(f.handle) + " is already open";
    } else if (kind.size() > kConsumer.size() &&
               kind.substr(kind.size() - kConsumer.size()) == kConsumer) {
        OpenConsumer(f, kind.substr(0, kind.size() - kConsumer.size()));
        return;
    } else if (FindBrokerKind(kind) == nullptr) {
        error = "this outbox-driver has no driver of kind \"" + f.kind + "\"";
    } else {
        std::string config;
        DriverContext context;
        if (protocol::DecodeOpenOptions(f.options, &config, &context, &error))
            driver = OpenDriver(kind, config, context, &error);
    }
    if (!driver) {
        protocol::Encode(protocol::OpenedFrame{f.handle, false, error}, &out_);
        return;
    }
    Slot slot;
    slot.driver = std::move(driver);
    slot.name = f.name;
    slot.fd = slot.driver->WaitFd();
    Watch(slot.fd, f.handle);
    protocol::Encode(protocol::OpenedFrame{f.handle, true, {}}, &out_);
    auto [it, added] = drivers_.emplace(f.handle, std::move(slot));
    std::vector<Outcome> none;
    Report(f.handle, it->second, none);  // its capacity
}

void Host::ApplyFault(const Message &m) {
    switch (fault_.kind) {
        case Fault::None:
            return;
        case Fault::Leak: {
            std::unique_ptr<char[]> block(new char[fault_.bytes]);
            memset(block.get(), 0x5a, fault_.bytes);  // touched: resident, not just reserved
            leaked_.push_back(std::move(block));
            return;
        }
        default:
            break;
    }
    if (!m.key || *m.key != fault_.key)
        return;
    fprintf(stderr, "outbox-driver: test-only fault switch: %s for message %lld\n",
            fault_.kind == Fault::Segv    ? "SIGSEGV"
            : fault_.kind == Fault::Abort ? "abort()"
            : fault_.kind == Fault::Oom   ? "allocating until the memory limit"
                                          : "hanging",
            static_cast<long long>(m.id));
    switch (fault_.kind) {
        case Fault::Segv:
            raise(SIGSEGV);
            break;
        case Fault::Abort:
            abort();
        case Fault::Oom: {
            struct rlimit limit;
            if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
                Log("the oom fault needs outbox.driver_memory_limit; ignored");
                return;
            }
            for (;;) {  // ends in std::bad_alloc: main exits with protocol::kExitOutOfMemory
                std::unique_ptr<char[]> block(new char[16u << 20]);
                memset(block.get(), 0x5a, 16u << 20);
                leaked_.push_back(std::move(block));
            }
        }
        case Fault::Hang:
            for (;;)
                pause();
        default:
            return;
    }
}

void Host::Submit(protocol::SubmitFrame &f) {
    auto it = drivers_.find(f.handle);
    if (it == drivers_.end())
        return;  // closed meanwhile, or never opened: the worker resolves them itself
    if (fault_.kind != Fault::None)
        for (const Message &m : f.messages)
            ApplyFault(m);
    it->second.driver->Submit(std::move(f.messages));
}

void Host::PollDrivers() {
    std::vector<Outcome> outcomes;
    for (auto &[handle, slot] : drivers_) {
        outcomes.clear();
        slot.driver->Poll(outcomes);
        Report(handle, slot, outcomes);
        std::vector<std::string> lines;
        slot.driver->TakeLog(lines);
        if (!lines.empty())
            protocol::Encode(protocol::LogFrame{handle, std::move(lines)}, &out_);
    }
    if (!host_log_.empty()) {
        protocol::Encode(protocol::LogFrame{0, std::move(host_log_)}, &out_);
        host_log_.clear();
    }
}

void Host::Report(uint64_t handle, Slot &slot, std::vector<Outcome> &outcomes) {
    protocol::DriverState state{slot.driver->InFlight(), slot.driver->Capacity(),
                                slot.driver->Broken()};
    bool changed = !slot.told || state.broken != slot.sent.broken ||
                   state.capacity + state.in_flight != slot.sent.capacity + slot.sent.in_flight;
    if (outcomes.empty() && !changed)
        return;
    protocol::EncodeOutcomes(handle, outcomes, state, &out_);
    slot.sent = state;
    slot.told = true;
}

void Host::WatchOutput(bool on) {
    if (on == watching_output_)
        return;
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = on ? uint32_t(EPOLLIN | EPOLLOUT) : uint32_t(EPOLLIN);
    ev.data.fd = kSocketFd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, kSocketFd, &ev);
    watching_output_ = on;
}

// Writes what it can without blocking (the worker reads whenever it waits to write, so the
// rest goes out on a later turn); false when the worker's end is closed.
bool Host::Flush() {
    if (!SendAvailable(kSocketFd, out_, &out_done_))
        return false;
    if (out_done_ == out_.size()) {
        out_.clear();
        out_done_ = 0;
    } else if (out_done_ > (1u << 20)) {
        out_.erase(0, out_done_);
        out_done_ = 0;
    }
    WatchOutput(!out_.empty());
    return true;
}

// outbox-driver --check: one definition-time check for a backend that runs
// create/alter_destination or create/alter_subscription (src/ipc/check_client.cpp). Reads one
// Check frame from the socket, answers it with one Checked frame, and exits.
int AnswerOneCheck() {
    protocol::FrameReader reader(protocol::kMaxToHelperFrame);
    protocol::Frame frame;
    for (;;) {
        std::string error;
        protocol::FrameReader::Result r = reader.Next(&frame, &error);
        if (r == protocol::FrameReader::Result::Frame)
            break;
        if (r == protocol::FrameReader::Result::Error) {
            fprintf(stderr, "outbox-driver: malformed frame from the server: %s\n", error.c_str());
            return protocol::kExitProtocol;
        }
        char *at = reader.Reserve(kReadChunk);
        ssize_t got = read(kSocketFd, at, kReadChunk);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return 0;  // the server went away: nobody to answer
        reader.Commit(size_t(got));
    }
    auto *check = std::get_if<protocol::CheckFrame>(&frame);
    if (check == nullptr) {
        fprintf(stderr, "outbox-driver: --check was sent a frame other than Check\n");
        return protocol::kExitProtocol;
    }
    std::string out;
    protocol::Encode(protocol::CheckedFrame{AnswerConfigQuery(check->query)}, &out);
    size_t done = 0;
    while (done < out.size()) {
        ssize_t n = write(kSocketFd, out.data() + done, out.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        done += size_t(n);
    }
    return 0;
}

void IgnoreSignal(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(sig, &sa, nullptr);
}

}  // namespace
}  // namespace outbox

int main(int argc, char **argv) {
    using namespace outbox;
    struct stat st;
    bool check_mode = argc == 2 && strcmp(argv[1], "--check") == 0;
    if ((argc > 1 && !check_mode) || fstat(kSocketFd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
        fprintf(stderr,
                "%s: the network drivers of an outbox delivery worker. It is started by the "
                "worker (fd %d is its socket) and is not meant to be run by hand.\n",
                argc > 0 ? argv[0] : "outbox-driver", kSocketFd);
        return protocol::kExitStartup;
    }
    fcntl(kSocketFd, F_SETFD, FD_CLOEXEC);  // not inherited by anything a library runs
    if (!check_mode)
        fcntl(kSocketFd, F_SETFL, fcntl(kSocketFd, F_GETFL) | O_NONBLOCK);
    // The worker decides when this process ends (EOF, or SIGKILL); signals meant for the
    // server's processes do not end it. SIGPIPE: writes report EPIPE instead.
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2})
        IgnoreSignal(sig);
    // If the machine runs out of memory, this process is the one to lose: the worker restarts
    // it and redelivers what it had, where any PostgreSQL process would take the server down.
    int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (adj >= 0) {
        ssize_t ignored = write(adj, "1000", 4);
        (void)ignored;
        close(adj);
    }
    // Fewer malloc arenas: each reserves 64 MB of address space, which RLIMIT_AS counts.
    mallopt(M_ARENA_MAX, 2);
    try {
        InitBrokerKinds();  // the client libraries' global init, before any thread exists
        if (check_mode)
            _exit(AnswerOneCheck());
        Host host;
        int code = host.Run();
        // Straight out, without destroying the drivers: the worker has every answer it will
        // get, and librdkafka's orderly shutdown can take a second (the kernel closes the
        // connections just as well).
        _exit(code);
    } catch (const std::bad_alloc &) {
        static const char kMessage[] =
            "outbox-driver: out of memory (outbox.driver_memory_limit); exiting\n";
        ssize_t ignored = write(2, kMessage, sizeof kMessage - 1);
        (void)ignored;
        _exit(protocol::kExitOutOfMemory);
    } catch (const std::exception &e) {
        fprintf(stderr, "outbox-driver: %s\n", e.what());
        _exit(protocol::kExitError);
    }
}
