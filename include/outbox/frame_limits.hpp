// The sizes of the frames between a worker and its driver process (ipc/protocol.hpp), as far as
// a driver or consumer must keep within them: how long a text may be, how large a consumed
// record. Pure code, so the drivers (src/brokers/) need not include the protocol, which is a
// layer above them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "outbox/consumer.hpp"

namespace outbox::protocol {

constexpr size_t kHeaderBytes = 5;
// The largest frame the helper accepts: a claim of one message of outbox.max_payload_bytes's
// maximum (1 GB) plus its other columns. Submit batches are split far below this.
constexpr size_t kMaxToHelperFrame = (size_t(1) << 30) + (size_t(16) << 20);
// The largest frame the worker accepts: outcomes and log lines only (texts are cut at
// kMaxTextBytes, batches at kSplitBytes), so anything near this is a broken or hostile helper.
constexpr size_t kMaxToWorkerFrame = size_t(16) << 20;
// Encoders start a new frame once the current one holds this much.
constexpr size_t kSplitBytes = size_t(4) << 20;
// Error texts and log lines are cut to this many bytes by the helper.
constexpr size_t kMaxTextBytes = 4096;
// The largest consumed record the helper sends (its encoded size, see RecordFits): a Records
// frame of one such record stays within kMaxToWorkerFrame. A larger record stops its partition
// with an error in ConsumerState (nothing is skipped).
constexpr size_t kMaxRecordBytes = kMaxToWorkerFrame - (size_t(64) << 10);

// `text` cut to at most `max_bytes`, never in the middle of a UTF-8 sequence.
inline std::string CutText(std::string_view text, size_t max_bytes) {
    if (text.size() <= max_bytes)
        return std::string(text);
    size_t end = max_bytes;
    // Back off continuation bytes so that no UTF-8 sequence is cut in half.
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
        end--;
    return std::string(text.substr(0, end));
}

// Whether `record` can travel to the worker (its encoded size, ipc/protocol.cpp's PutRecord, is
// at most kMaxRecordBytes).
inline bool RecordFits(const ConsumedRecord &record) {
    size_t n = 4 + record.topic.size() + 8 + 8 + 1 + 4 + 1 + 4 + 4 + 8 + RecordBytes(record) +
               8 * record.headers.size();
    return n <= kMaxRecordBytes;
}

}  // namespace outbox::protocol
