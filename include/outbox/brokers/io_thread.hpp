// The skeleton the amqp, mqtt, nats and redis drivers share: a thread of the driver's own that
// talks to the broker (or makes its connection), what that thread and the worker's thread hand
// each other under one mutex (messages one way, outcomes and log lines the other), the pipes
// that wake each side, and the stop handshake. Each kind keeps only its connect, publish and
// acknowledgement handling (src/brokers/<kind>/driver.cpp).
//
// Why a thread at all: these client libraries block (connect, login, a send under flow control)
// or would resolve and connect on their own without the broker guard; the worker's loop must
// never wait on the network. The thread starts with every signal blocked, so PostgreSQL's
// handlers stay on the worker's thread, and it touches nothing of PostgreSQL's.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "outbox/driver.hpp"
#include "outbox/message.hpp"

namespace outbox {

// A non-blocking pipe whose read end a poll set watches: Signal writes one byte (a full pipe
// already wakes the reader), Drain empties it. Closed with the object.
class WakePipe {
  public:
    WakePipe() = default;
    ~WakePipe();
    WakePipe(const WakePipe &) = delete;
    WakePipe &operator=(const WakePipe &) = delete;

    // False with *error when the pipe could not be made.
    bool Open(std::string *error);
    int fd() const { return fds_[0]; }
    void Signal();
    void Drain();

  private:
    int fds_[2] = {-1, -1};
};

// What a driver (on the worker's thread) and its own thread share. A kind's Core derives from
// it and adds its own fields; both sides hold it by shared_ptr, so a thread left to finish a
// blocking call on its own never outlives what it writes to.
struct ThreadShared {
    std::mutex mu;
    std::condition_variable cv;  // `stop` and `done` changed
    bool stop = false;           // the driver is going: the thread finishes
    bool done = false;           // the thread has finished
    std::deque<Message> queue;   // submitted, for the thread to publish (amqp, mqtt)
    std::vector<Outcome> outcomes;
    std::vector<std::string> log;
    bool record_failed = false;        // a library callback could not record (out of memory)
    std::atomic<bool> probing{false};  // Driver::SetProbing, read by either side

    WakePipe notify;  // thread -> worker: the driver's WaitFd
    WakePipe wake;    // worker -> thread, for a thread that waits for work (amqp, mqtt)

    void Notify() { notify.Signal(); }
    void Wake() { wake.Signal(); }

    // Under mu. One byte in the pipe per batch of outcomes: Poll drains the pipe before it takes
    // them, so an outcome added to a non-empty list is collected with the ones before it.
    void AnswerLocked(int64_t id, int64_t token, OutcomeKind kind, std::string error);
    // Under mu: a line for the server log, once however often it repeats in a row.
    void AddLogLocked(std::string line);
    // Takes mu. Never throws: it is called from library callbacks too.
    void AddLog(std::string line);

    // The worker's side: the outcomes recorded so far into the empty `got`, and a line for
    // the log when a callback could not record one (`record_failed_line`).
    void TakeOutcomes(std::vector<Outcome> &got, const char *record_failed_line);
    void TakeLog(std::vector<std::string> &lines);

    // The stop handshake: the driver sets `stop` and wakes the thread; the thread, when its
    // body returns, sets `done`. WaitDone waits up to `ms` for it.
    void RequestStop();
    bool WaitDone(int64_t ms);
    void Finished();
};

// Starts `body` on `*thread` with every signal blocked; `shared` is marked done when `body`
// returns. False with *error ("could not start <what>: ...") when no thread could be made.
bool StartThread(std::thread *thread, std::shared_ptr<ThreadShared> shared,
                 std::function<void()> body, const std::string &what, std::string *error);

// Joins the thread when it finished (`done`), else detaches it: one still in a blocking call
// (a connect bounded by connect_timeout) finishes on its own, with its own reference to the
// shared state.
void JoinOrDetach(std::thread &thread, bool done);

// RequestStop, up to `wait_ms` for the thread, then JoinOrDetach. Nothing when not started.
void StopThread(std::thread &thread, ThreadShared &shared, int64_t wait_ms);

// The Driver methods every one of these drivers answers alike: in-flight accounting against
// max_in_flight, the notify pipe as WaitFd, the log, the probing flag.
class ThreadedDriver : public Driver {
  public:
    size_t InFlight() const override { return in_flight_; }
    size_t Capacity() const override {
        return in_flight_ >= max_in_flight_ ? 0 : max_in_flight_ - in_flight_;
    }
    int WaitFd() const override { return shared_->notify.fd(); }
    void SetProbing(bool probing) override { shared_->probing.store(probing); }
    void TakeLog(std::vector<std::string> &lines) override { shared_->TakeLog(lines); }

  protected:
    ThreadedDriver(std::shared_ptr<ThreadShared> shared, size_t max_in_flight)
        : shared_(std::move(shared)), max_in_flight_(max_in_flight) {}

    // Queues `batch` for the thread and wakes it.
    void Enqueue(std::vector<Message> &batch);
    // Moves `got` into `out`, each outcome counted off what is in flight.
    void Deliver(std::vector<Outcome> &got, std::vector<Outcome> &out);

    std::shared_ptr<ThreadShared> shared_;
    size_t max_in_flight_;
    size_t in_flight_ = 0;
};

}  // namespace outbox
