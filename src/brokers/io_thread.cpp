// The skeleton the threaded drivers share (include/outbox/brokers/io_thread.hpp).
#include "outbox/brokers/io_thread.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>

#include "outbox/brokers/signals.hpp"

namespace outbox {

WakePipe::~WakePipe() {
    for (int fd : fds_)
        if (fd >= 0)
            close(fd);
}

bool WakePipe::Open(std::string *error) {
    if (pipe2(fds_, O_NONBLOCK | O_CLOEXEC) != 0) {
        *error = std::string("could not create a pipe: ") + strerror(errno);
        return false;
    }
    return true;
}

void WakePipe::Signal() {
    if (fds_[1] < 0)
        return;
    char c = 1;
    ssize_t n = write(fds_[1], &c, 1);
    (void)n;  // a full pipe already wakes the reader
}

void WakePipe::Drain() {
    char buf[256];
    while (fds_[0] >= 0 && read(fds_[0], buf, sizeof buf) > 0) {
    }
}

void ThreadShared::AnswerLocked(int64_t id, int64_t token, OutcomeKind kind, std::string error) {
    bool wake_worker = outcomes.empty();
    outcomes.push_back(Outcome{id, token, kind, std::move(error), -1});
    if (wake_worker)
        Notify();
}

void ThreadShared::AddLogLocked(std::string line) {
    if (!log.empty() && log.back() == line)
        return;
    log.push_back(std::move(line));
}

void ThreadShared::AddLog(std::string line) {
    try {
        std::lock_guard<std::mutex> lock(mu);
        AddLogLocked(std::move(line));
    } catch (...) {
    }
}

void ThreadShared::TakeOutcomes(std::vector<Outcome> &got, const char *record_failed_line) {
    std::lock_guard<std::mutex> lock(mu);
    got.swap(outcomes);
    if (record_failed) {
        if (record_failed_line != nullptr)
            AddLogLocked(record_failed_line);
        record_failed = false;
    }
}

void ThreadShared::TakeLog(std::vector<std::string> &lines) {
    std::lock_guard<std::mutex> lock(mu);
    for (std::string &l : log)
        lines.push_back(std::move(l));
    log.clear();
}

void ThreadShared::RequestStop() {
    {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
        cv.notify_all();
    }
    Wake();
}

bool ThreadShared::WaitDone(int64_t ms) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::milliseconds(ms), [this] { return done; });
}

void ThreadShared::Finished() {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
}

bool StartThread(std::thread *thread, std::shared_ptr<ThreadShared> shared,
                 std::function<void()> body, const std::string &what, std::string *error) {
    SignalsBlocked blocked;
    try {
        *thread = std::thread([shared, body = std::move(body)] {
            body();
            shared->Finished();
        });
    } catch (const std::exception &e) {
        *error = "could not start " + what + ": " + e.what();
        return false;
    }
    return true;
}

void JoinOrDetach(std::thread &thread, bool done) {
    if (done)
        thread.join();
    else
        thread.detach();
}

void StopThread(std::thread &thread, ThreadShared &shared, int64_t wait_ms) {
    if (!thread.joinable())
        return;
    shared.RequestStop();
    JoinOrDetach(thread, shared.WaitDone(wait_ms));
}

void ThreadedDriver::Enqueue(std::vector<Message> &batch) {
    if (batch.empty())
        return;
    in_flight_ += batch.size();
    {
        std::lock_guard<std::mutex> lock(shared_->mu);
        for (Message &m : batch)
            shared_->queue.push_back(std::move(m));
    }
    shared_->Wake();
}

void ThreadedDriver::Deliver(std::vector<Outcome> &got, std::vector<Outcome> &out) {
    in_flight_ -= std::min(in_flight_, got.size());
    for (Outcome &o : got)
        out.push_back(std::move(o));
    got.clear();
}

}  // namespace outbox
