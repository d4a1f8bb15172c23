// The proxies the worker holds for what lives in the helper: RemoteDriver
// (include/outbox/ipc/remote_driver.hpp) and RemoteConsumer (include/outbox/ipc/supervisor.hpp).
// Their DriverProcess is in src/ipc/supervisor.cpp.
#include "outbox/ipc/remote_driver.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "outbox/ipc/supervisor.hpp"

namespace outbox {

// ---------------------------------------------------------------------------------------------
// RemoteDriver
// ---------------------------------------------------------------------------------------------

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

}  // namespace outbox
