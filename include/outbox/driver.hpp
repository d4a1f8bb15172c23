// What the worker needs from a transport (Kafka, webhooks): hand over messages without
// blocking, collect per-message outcomes later. Drivers never include PostgreSQL headers, never
// block the worker loop, and never call back into it: the worker polls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "outbox/message.hpp"

namespace outbox {

class Driver {
  public:
    virtual ~Driver() = default;

    // Starts delivering `batch`. Outcomes (also for messages refused at once) arrive via Poll.
    virtual void Submit(std::vector<Message> batch) = 0;

    // Serves the transport library and appends every outcome that is now known. Never blocks.
    virtual void Poll(std::vector<Outcome> &out) = 0;

    // Messages submitted whose outcome has not been returned by Poll yet.
    virtual size_t InFlight() const = 0;

    // How many more messages the driver wants now (bounded in-flight per destination).
    virtual size_t Capacity() const = 0;

    // A file descriptor that becomes readable when Poll has work, or -1; and the longest the
    // caller may sleep before calling Poll anyway (ms; -1 when only the fd matters).
    virtual int WaitFd() const = 0;
    virtual int64_t PollTimeoutMs() const = 0;

    // Stops everything in flight now: each such message comes back from Poll (possibly after a
    // few more calls) as a Defer outcome unless its real outcome was already known.
    virtual void Abandon() = 0;

    // Moves lines worth a server log entry (transport errors, warnings) into `lines`.
    virtual void TakeLog(std::vector<std::string> &lines) = 0;

    // While the destination is unreachable the dispatcher sends one message at a time (a
    // probe). A driver whose transport reconnects on its own may hold the probe until it goes
    // through, so delivery resumes as soon as the destination is back.
    virtual void SetProbing(bool) {}

    // True when the driver cannot go on (e.g. a fatal producer error) and must be rebuilt once
    // InFlight() is 0.
    virtual bool Broken() const { return false; }
};

}  // namespace outbox
