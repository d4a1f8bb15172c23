// The worker's side of the driver process: starts `outbox-driver` (fork + exec), talks to it
// over one socketpair, and hands the dispatcher a Driver per destination (RemoteDriver) that
// forwards to the real driver in the helper. Pure code (POSIX, no PostgreSQL), so the unit
// tests drive it against the real helper binary.
//
// Why a helper process: librdkafka and libcurl run threads and C code of their own; a segfault,
// abort() or out-of-memory in them inside a PostgreSQL backend is a backend crash, and the
// postmaster restarts every session of the cluster. In the helper it is an event of the worker's:
//   - noticed at once (EOF on the socket), logged with the signal;
//   - what the helper had answered is kept (outcomes received before the EOF are returned as
//     usual), what it had not answered comes back from Poll as OutcomeKind::Unacknowledged: due
//     again at once, attempt refunded, not an outage;
//   - each message that was in flight counts one crash; a message in flight during
//     `poison_after` crashes comes back as OutcomeKind::Poison (dead letters, reason poison);
//   - a message with a crash against it (a suspect) waits for its turn: one group of suspects is
//     in the helper at a time, of up to kSuspectGroup messages, and a message one crash short of
//     poison goes alone. So the messages that happened to travel with a crashing message are
//     cleared instead of buried with it (only the one that crashes the helper when it is alone
//     reaches poison_after), while every message without a crash against it flows as usual;
//   - the helper is restarted after base_ms, doubling to max_ms while it keeps crashing (reset
//     once it has run healthy_after_ms), and every destination's driver is opened in it again;
//   - a helper that stops answering is killed and handled the same way: while an answer is due
//     (messages in flight, an Open) and nothing came for ping_interval_ms, it is pinged, and a
//     ping left unanswered for answer_timeout_ms ends it. (Silence alone is no proof: the broker
//     may be slow, or the worker itself was busy and did not listen.)
//
// The inbox's Kafka consumers live in the helper too (OpenConsumer, RemoteConsumer): records
// arrive through Service() and wait in the RemoteConsumer until the worker takes them. A helper
// that dies takes the consumers' assignments with it: each is opened again in the next helper,
// empty, and its Epoch() tells the worker to assign it again from the offsets it has applied.
// Consumers owe no answers (a quiet consumer is normal), but while one is open the helper is
// pinged after ping_interval_ms of silence like when an answer is due, so a hung helper is
// still found.
//
// Crash counts live in this object's memory, per message id: they survive helper restarts but
// not a worker restart (a worker that dies is itself counted by the claims' attempts, the
// existing poison rule). Entries go when the message gets any answer; at most kMaxCrashCounts
// are kept (oldest dropped first: such a message merely needs a few more crashes to be buried).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "outbox/consumer.hpp"
#include "outbox/ipc/protocol.hpp"
#include "outbox/driver.hpp"

namespace outbox {

struct DriverProcessOptions {
    std::string program;              // the outbox-driver executable
    std::vector<std::string> args;    // arguments after argv[0]
    uint64_t memory_limit_bytes = 0;  // the helper's RLIMIT_AS; 0: none
    int poison_after = 3;
    // How long a suspect may wait for its turn before it is handed back (due again, no crash
    // counted): well within the lease, so that no lease lapses while it waits.
    int64_t hold_limit_ms = 15000;
    std::string fault;  // test-only fault switch, passed to the helper (empty: off)
    int64_t ping_interval_ms = 1000;
    int64_t answer_timeout_ms = 10000;
    int64_t restart_base_ms = 100;
    int64_t restart_max_ms = 30000;
    int64_t healthy_after_ms = 60000;
};

class RemoteDriver;
class DriverProcess;

// A Kafka consumer in the helper (DriverProcess::OpenConsumer); owned by the caller, and must
// not outlive its DriverProcess's Service calls (it may outlive the object itself: then it is
// closed and empty).
class RemoteConsumer {
  public:
    ~RemoteConsumer();  // closes it in the helper
    RemoteConsumer(const RemoteConsumer &) = delete;
    RemoteConsumer &operator=(const RemoteConsumer &) = delete;

    // Replaces the assignment. Records of an earlier assignment (or an earlier helper) that are
    // still buffered here or in transit are dropped: Take never returns them. Made while the
    // helper is down, it is sent once the consumer is open again.
    void Assign(std::vector<ConsumerAssignment> assignment);
    // Moves up to `max` buffered records (of the current assignment, in offset order per
    // partition) to *out (appends); returns how many. Sends the credit back to the helper.
    size_t Take(std::vector<ConsumedRecord> *out, size_t max);
    size_t Buffered() const { return buffer_.size(); }
    // RecordBytes of the buffered records.
    size_t BufferedBytes() const { return buffered_bytes_; }
    // The helper's last report (metadata, watermarks, error); empty (known false) until the
    // first one, and again after a helper died.
    const ConsumerState &State() const { return state_; }
    // Incremented each time the helper that had the consumer open is gone (crash, kill, hang):
    // it is opened anew in the next helper with nothing assigned, and the buffer is cleared.
    // The caller must Assign again from the offsets it has applied (it knows them; the
    // supervisor does not) - records it took but did not apply come again then.
    uint64_t Epoch() const { return epoch_; }
    // The helper could not build it (bad config) or it is not open now: why; "" when fine.
    const std::string &Error() const { return error_; }
    const std::string &Name() const { return name_; }

  private:
    friend class DriverProcess;
    enum class Link { Waiting, Opening, Ready, Failed };

    RemoteConsumer(DriverProcess *process, uint64_t handle, std::string kind, std::string name,
                   std::string options, size_t window_records, size_t window_bytes)
        : process_(process),
          handle_(handle),
          kind_(std::move(kind)),
          name_(std::move(name)),
          options_(std::move(options)),
          window_records_(window_records),
          window_bytes_(window_bytes) {}
    void SetLink(Link link, std::string error);
    void Clear();

    DriverProcess *process_;  // nullptr once the process object is gone
    uint64_t handle_;
    std::string kind_, name_, options_;
    size_t window_records_, window_bytes_;
    Link link_ = Link::Waiting;
    std::string error_ = "not open yet";
    uint64_t generation_ = 0;
    std::vector<ConsumerAssignment> assignment_;
    std::deque<ConsumedRecord> buffer_;
    size_t buffered_bytes_ = 0;
    ConsumerState state_;
    uint64_t epoch_ = 0;
};

class DriverProcess {
  public:
    static constexpr size_t kMaxCrashCounts = 65536;
    static constexpr size_t kSuspectGroup = 64;

    explicit DriverProcess(DriverProcessOptions options);
    ~DriverProcess();  // stops the helper (Stop)
    DriverProcess(const DriverProcess &) = delete;
    DriverProcess &operator=(const DriverProcess &) = delete;

    // A driver for destination `name` of `kind` ("kafka", "webhook"...) built in the helper from
    // `options` (protocol::EncodeOpenOptions: its config, which the helper checks first, and
    // the DriverContext). When the helper runs, waits for its answer, so that
    // a refused config comes back here as nullptr with *error, as from an in-process factory;
    // while the helper is being restarted after a crash the driver opens once it is back.
    // nullptr with *error also when the helper cannot be started at all.
    std::unique_ptr<Driver> Open(const std::string &kind, const std::string &name,
                                 std::string options, std::string *error);
    // A consumer for subscription `name` of `kind` with config `config` (checked by the helper
    // first), built in the helper; like Open: waits for the helper's answer, nullptr with *error
    // when it refuses the config or cannot be started.
    std::unique_ptr<RemoteConsumer> OpenConsumer(const std::string &kind, const std::string &name,
                                                 const std::string &config,
                                                 const ConsumerContext &context,
                                                 std::string *error);

    // Reads everything the helper sent and routes it to the drivers; notices a death, restarts,
    // pings. Call before polling the drivers (Dispatcher::SetPollHook).
    void Service();

    // Readable when Service has something to read (constant for the object's life: the
    // socket of the current helper is inside it).
    int WaitFd() const { return epoll_fd_; }
    // Milliseconds until Service must run without WaitFd becoming readable; -1: never.
    int64_t TimeoutMs() const;

    // New settings (reload): poison_after, hold limit, the memory limit (applied to the running
    // helper too) and the fault switch (sent to it).
    void SetOptions(const DriverProcessOptions &options);

    pid_t pid() const { return pid_; }
    // Helper starts after the first (restarts after a death).
    uint64_t restarts() const { return restarts_; }
    // Lines for the server log (crashes, restarts, poison messages).
    void TakeLog(std::vector<std::string> &lines);

    // Ends the helper: EOF, then up to `grace_ms` for it to exit, then SIGKILL.
    void Stop(int64_t grace_ms);
    // Holds or releases the helper's drivers (Configure "hold"): for the tests' pauses of the
    // worker (outbox.debug_pause). While held the helper polls no driver, as a sleeping worker
    // polled none of the drivers inside it: libcurl sends nothing, librdkafka's own threads go
    // on sending. Silence while held does not count as a helper that stopped answering.
    void Freeze(bool frozen);

    // For the tests: the crash count of a message id, and whether a helper runs now.
    int CrashCount(int64_t id) const;
    bool Running() const { return sock_ >= 0; }

  private:
    friend class RemoteDriver;
    friend class RemoteConsumer;
    struct Suspect {
        uint64_t handle;
        Message message;
        int64_t since_ms;
    };

    bool Spawn(std::string *error);
    bool Restart(std::string *error);
    void SendOpen(RemoteDriver *d);
    void SendOpen(RemoteConsumer *c);
    // Serves the helper until `opening` turns false (an Open answered) or answer_timeout_ms.
    void AwaitOpened(const std::function<bool()> &opening);
    void UnregisterConsumer(uint64_t handle);
    bool OnRecords(protocol::RecordsFrame &f, std::string *why);
    void Send(std::string bytes);
    bool Flush(std::string *why);
    bool ReadAvailable(bool *eof, std::string *why);
    bool Dispatch(std::string *why);
    void HandleDeath(const std::string &why, bool we_killed);
    void Kill(const std::string &why);
    bool AnswerDue() const;
    void Unregister(uint64_t handle);
    void Hold(uint64_t handle, Message m);
    void PumpSuspects();
    void ExpireSuspects(int64_t now);
    void DropSuspects(uint64_t handle, std::vector<Message> *dropped);
    void ForgetSentSuspects(uint64_t handle);
    void Answered(uint64_t handle, int64_t id);
    int CountCrash(int64_t id);
    bool IsSuspect(int64_t id) const { return crashes_.count(id) != 0; }
    void AddLog(std::string line) { log_.push_back(std::move(line)); }

    DriverProcessOptions options_;
    int epoll_fd_ = -1;
    int sock_ = -1;
    pid_t pid_ = 0;
    bool hello_ = false;
    bool started_once_ = false;
    uint64_t restarts_ = 0;
    int64_t started_ms_ = 0;
    int64_t last_rx_ms_ = 0;
    int64_t ping_sent_ms_ = 0;  // 0: no ping outstanding
    uint64_t ping_seq_ = 0;
    int64_t restart_at_ms_ = 0;
    int64_t restart_delay_ms_ = 0;
    std::string start_error_;  // why the last start failed; empty once one succeeded
    protocol::FrameReader reader_{protocol::kMaxToWorkerFrame};
    std::string out_;  // frames not yet written
    uint64_t next_handle_ = 1;
    std::map<uint64_t, RemoteDriver *> drivers_;
    std::map<uint64_t, RemoteConsumer *> consumers_;
    std::unordered_map<int64_t, int> crashes_;  // message id -> crashes it was in flight for
    std::deque<int64_t> crash_order_;           // ids in the order they were first counted
    std::deque<Suspect> suspects_;              // waiting to be sent alone
    // The suspects in the helper now (handle, id): the next ones go when all have answered.
    std::set<std::pair<uint64_t, int64_t>> suspects_sent_;
    std::vector<std::string> log_;
};

}  // namespace outbox
