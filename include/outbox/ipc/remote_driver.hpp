// RemoteDriver: a Driver whose real driver lives in the helper (see
// include/outbox/ipc/supervisor.hpp). Used by the DriverProcess that made it, on the worker's
// thread; nothing else includes this header.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "outbox/driver.hpp"
#include "outbox/ipc/protocol.hpp"
#include "outbox/ipc/supervisor.hpp"

namespace outbox {

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

}  // namespace outbox
