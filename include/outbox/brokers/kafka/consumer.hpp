// The Kafka consumer of the inbox: one librdkafka consumer per subscription, in the driver
// process (outbox-driver) only. The worker assigns partitions with explicit offsets (its own,
// stored in PostgreSQL with the records' effects); the consumer never subscribes to a group,
// never commits, and never reads past its window: at most window_records records (and about
// window_bytes bytes) handed out and not yet credited back by the worker.
//
// Metadata (the partitions of the topics) and watermarks are refreshed every
// metadata_interval_ms on a thread of its own, so that the helper's loop, which also serves the
// producing drivers, never waits for the cluster. Errors (transport, unknown topic or
// partition, offset out of range, authentication) go to ConsumerState::error and the log, never
// to a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "outbox/consumer.hpp"

namespace outbox {

class KafkaConsumer {
  public:
    virtual ~KafkaConsumer() = default;

    // Replaces the whole assignment; records read from now on belong to `generation`. The
    // window starts empty again (the worker drops what it had of the earlier assignment).
    virtual void Assign(uint64_t generation, std::vector<ConsumerAssignment> assignment) = 0;
    // The worker took `records` records of `bytes` (RecordBytes) of the current assignment.
    virtual void Credit(uint64_t records, uint64_t bytes) = 0;
    // Appends the records read now, as far as the window allows, in offset order per partition.
    // Never blocks.
    virtual void Poll(std::vector<ConsumedRecord> &out) = 0;
    // The generation of the records Poll returns.
    virtual uint64_t Generation() const = 0;
    // The state, when it changed since the last call that returned true (or never returned).
    virtual bool TakeState(ConsumerState *state) = 0;
    // Readable when Poll has work (records, metadata, errors); and the longest the caller may
    // wait before polling anyway (ms; -1: only the fd matters).
    virtual int WaitFd() const = 0;
    virtual int64_t PollTimeoutMs() const = 0;
    // Lines for the server log (errors and warnings, repeats held back).
    virtual void TakeLog(std::vector<std::string> &lines) = 0;
};

// A running consumer (with nothing assigned yet), or nullptr with *error (librdkafka refused
// the configuration, or the options are impossible).
std::unique_ptr<KafkaConsumer> MakeKafkaConsumer(const KafkaConsumerOptions &options,
                                                 std::string *error);

}  // namespace outbox
