// The worker <-> driver process protocol (see include/outbox/ipc/protocol.hpp).
#include "outbox/ipc/protocol.hpp"

#include <cstring>
#include <tuple>
#include <type_traits>

#include "outbox/ipc/wire.hpp"

namespace outbox::protocol {

// A bool may land in padding without changing a size (Message.tombstone did): the round-trip
// tests in test/unit/driver_protocol_test.cpp set every field to a value other than its default.
// Message.first_failed_at_ms (208 -> 216) is the worker's own ("retry_budget") and deliberately
// not sent: SubmitRoundTripKeepsEveryField checks that it arrives as 0.
// (libstdc++ on 64-bit Linux, the only platform the extension is built for.)
static_assert(sizeof(Message) == 216,
              "Message changed: add the new field to PutMessage and GetMessage, then update this "
              "size");
static_assert(sizeof(ConsumedRecord) == 160,
              "ConsumedRecord changed: add the new field to PutRecord and GetRecord, then update "
              "this size");
static_assert(sizeof(PartitionInfo) == 56 && sizeof(ConsumerState) == 88,
              "ConsumerState changed: add the new field to Encode(ConsumerStateFrame) and its "
              "decoder, then update these sizes");

using namespace wire;

namespace {

void PutMessage(std::string *out, const Message &m) {
    PutI64(out, m.id);
    PutI64(out, m.lease_token);
    PutString(out, m.event_id);
    PutString(out, m.topic);
    PutU8(out, m.key ? 1 : 0);
    PutString(out, m.key ? std::string_view(*m.key) : std::string_view());
    PutString(out, m.payload);
    PutU8(out, m.payload_is_json ? 1 : 0);
    PutU8(out, m.tombstone ? 1 : 0);
    PutU32(out, static_cast<uint32_t>(m.headers.size()));
    for (const auto &[name, value] : m.headers) {
        PutString(out, name);
        PutString(out, value);
    }
    PutI64(out, m.created_at_ms);
    PutI64(out, m.expires_at_ms);
    PutI64(out, m.attempts);
}

void PutOutcome(std::string *out, const Outcome &o) {
    PutI64(out, o.id);
    PutI64(out, o.lease_token);
    PutU8(out, static_cast<uint8_t>(o.kind));
    PutString(out, CutText(o.error, kMaxTextBytes));
    PutI64(out, o.retry_after_ms);
    PutI64(out, o.partition);
    PutI64(out, o.offset);
    PutI64(out, o.http_status);
}

void PutState(std::string *out, const DriverState &s) {
    PutU64(out, s.in_flight);
    PutU64(out, s.capacity);
    PutU8(out, s.broken ? 1 : 0);
}

void PutOptional(std::string *out, const std::optional<std::string> &v) {
    PutU8(out, v ? 1 : 0);
    PutString(out, v ? std::string_view(*v) : std::string_view());
}

void PutRecord(std::string *out, const ConsumedRecord &r) {
    PutString(out, r.topic);
    PutI64(out, r.partition);
    PutI64(out, r.offset);
    PutOptional(out, r.key);
    PutOptional(out, r.value);
    PutU32(out, static_cast<uint32_t>(r.headers.size()));
    for (const auto &[name, value] : r.headers) {
        PutString(out, name);
        PutString(out, value);
    }
    PutI64(out, r.timestamp_ms);
}

// A topic, partition and offset as bytes of a consumer's frame; checked for what Kafka allows.
constexpr size_t kMaxTopicBytes = 249;

constexpr size_t kMinMessageBytes = 8 + 8 + 4 + 4 + 1 + 4 + 4 + 1 + 1 + 4 + 8 + 8 + 8;
constexpr size_t kMinOutcomeBytes = 8 + 8 + 1 + 4 + 8 + 8 + 8 + 8;

Message GetMessage(Reader &r) {
    Message m;
    m.id = r.I64();
    m.lease_token = r.I64();
    m.event_id = r.String();
    m.topic = r.String();
    bool has_key = r.Bool();
    std::string key = r.String();
    if (has_key)
        m.key = std::move(key);
    else if (!key.empty())
        r.Fail("a message without a key carries key bytes");
    m.payload = r.String();
    m.payload_is_json = r.Bool();
    m.tombstone = r.Bool();
    if (m.tombstone && !m.payload.empty())
        r.Fail("a tombstone carries payload bytes");
    uint32_t n = r.Count(8);
    m.headers.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        std::string name = r.String();
        std::string value = r.String();
        m.headers.emplace_back(std::move(name), std::move(value));
    }
    m.created_at_ms = r.I64();
    m.expires_at_ms = r.I64();
    m.attempts = r.Int();
    return m;
}

Outcome GetOutcome(Reader &r) {
    Outcome o;
    o.id = r.I64();
    o.lease_token = r.I64();
    uint8_t kind = r.U8();
    // Only what a driver can report: the supervisor's own kinds never come from the helper.
    if (kind > static_cast<uint8_t>(OutcomeKind::Marker) ||
        kind == static_cast<uint8_t>(OutcomeKind::Unacknowledged) ||
        kind == static_cast<uint8_t>(OutcomeKind::Poison))
        r.Fail("an outcome has an unknown kind");
    o.kind = static_cast<OutcomeKind>(kind);
    o.error = r.String();
    if (o.error.size() > kMaxTextBytes)
        r.Fail("an error text is longer than allowed");
    o.retry_after_ms = r.I64();
    int64_t partition = r.I64();
    o.offset = r.I64();
    int64_t status = r.I64();
    if (partition < -1 || partition > INT32_MAX || status < 0 || status > 999)
        r.Fail("an outcome has an impossible partition or HTTP status");
    o.partition = static_cast<int32_t>(partition);
    o.http_status = static_cast<int32_t>(status);
    return o;
}

constexpr size_t kMinRecordBytes = 4 + 8 + 8 + 1 + 4 + 1 + 4 + 4 + 8;
constexpr size_t kMinAssignmentBytes = 4 + 8 + 8;
constexpr size_t kMinPartitionBytes = 4 + 8 + 8 + 8;

std::string GetTopic(Reader &r) {
    std::string topic = r.String();
    if (r.ok() && (topic.empty() || topic.size() > kMaxTopicBytes))
        r.Fail("a topic name is empty or longer than Kafka allows");
    return topic;
}

int32_t GetPartition(Reader &r) {
    int64_t partition = r.I64();
    if (r.ok() && (partition < 0 || partition > INT32_MAX))
        r.Fail("a partition number is out of range");
    return r.ok() ? static_cast<int32_t>(partition) : 0;
}

std::optional<std::string> GetOptional(Reader &r, const char *what) {
    bool has = r.Bool();
    std::string bytes = r.String();
    if (has)
        return bytes;
    if (!bytes.empty())
        r.Fail(what);
    return std::nullopt;
}

ConsumedRecord GetRecord(Reader &r) {
    ConsumedRecord c;
    c.topic = GetTopic(r);
    c.partition = GetPartition(r);
    c.offset = r.I64();
    if (r.ok() && c.offset < 0)
        r.Fail("a record has a negative offset");
    c.key = GetOptional(r, "a record without a key carries key bytes");
    c.value = GetOptional(r, "a record with a null value carries value bytes");
    uint32_t n = r.Count(8);
    c.headers.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        std::string name = r.String();
        std::string value = r.String();
        c.headers.emplace_back(std::move(name), std::move(value));
    }
    c.timestamp_ms = r.I64();
    if (r.ok() && c.timestamp_ms < -1)
        r.Fail("a record has an impossible timestamp");
    return c;
}

DriverState GetState(Reader &r) {
    DriverState s;
    s.in_flight = r.U64();
    s.capacity = r.U64();
    s.broken = r.Bool();
    return s;
}

}  // namespace

void Encode(const ConfigureFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Configure);
    PutU32(out, static_cast<uint32_t>(f.settings.size()));
    for (const auto &[key, value] : f.settings) {
        PutString(out, key);
        PutString(out, value);
    }
    EndFrame(out, at);
}

void Encode(const OpenFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Open);
    PutU64(out, f.handle);
    PutString(out, f.kind);
    PutString(out, f.name);
    PutString(out, f.options);
    EndFrame(out, at);
}

void Encode(const CloseFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Close);
    PutU64(out, f.handle);
    EndFrame(out, at);
}

void Encode(const AbandonFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Abandon);
    PutU64(out, f.handle);
    EndFrame(out, at);
}

void Encode(const SetProbingFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::SetProbing);
    PutU64(out, f.handle);
    PutU8(out, f.probing ? 1 : 0);
    EndFrame(out, at);
}

void Encode(const PingFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Ping);
    PutU64(out, f.seq);
    EndFrame(out, at);
}

void Encode(const HelloFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Hello);
    PutU32(out, f.version);
    PutU32(out, f.pid);
    EndFrame(out, at);
}

void Encode(const OpenedFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Opened);
    PutU64(out, f.handle);
    PutU8(out, f.ok ? 1 : 0);
    PutString(out, CutText(f.error, kMaxTextBytes));
    EndFrame(out, at);
}

void Encode(const LogFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Log);
    PutU64(out, f.handle);
    PutU32(out, static_cast<uint32_t>(f.lines.size()));
    for (const std::string &line : f.lines)
        PutString(out, CutText(line, kMaxTextBytes));
    EndFrame(out, at);
}

void Encode(const PongFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Pong);
    PutU64(out, f.seq);
    EndFrame(out, at);
}

void Encode(const AssignFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Assign);
    PutU64(out, f.handle);
    PutU64(out, f.generation);
    PutU32(out, static_cast<uint32_t>(f.assignment.size()));
    for (const ConsumerAssignment &a : f.assignment) {
        PutString(out, a.topic);
        PutI64(out, a.partition);
        PutI64(out, a.offset);
    }
    EndFrame(out, at);
}

void Encode(const CreditFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Credit);
    PutU64(out, f.handle);
    PutU64(out, f.records);
    PutU64(out, f.bytes);
    EndFrame(out, at);
}

void Encode(const CheckFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Check);
    PutConfigQuery(out, f.query);
    EndFrame(out, at);
}

void Encode(const CheckedFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::Checked);
    PutConfigAnswer(out, f.answer);
    EndFrame(out, at);
}

void Encode(const ConsumerStateFrame &f, std::string *out) {
    size_t at = BeginFrame(out, FrameType::ConsumerState);
    PutU64(out, f.handle);
    PutU8(out, f.state.known ? 1 : 0);
    PutU8(out, f.state.reachable ? 1 : 0);
    PutU32(out, static_cast<uint32_t>(f.state.partitions.size()));
    for (const PartitionInfo &p : f.state.partitions) {
        PutString(out, p.topic);
        PutI64(out, p.partition);
        PutI64(out, p.low);
        PutI64(out, p.high);
    }
    PutU32(out, static_cast<uint32_t>(f.state.missing_topics.size()));
    for (const std::string &t : f.state.missing_topics)
        PutString(out, t);
    PutString(out, CutText(f.state.error, kMaxTextBytes));
    EndFrame(out, at);
}

void EncodeRecords(uint64_t handle, uint64_t generation, const std::vector<ConsumedRecord> &records,
                   std::string *out) {
    size_t i = 0;
    while (i < records.size()) {
        size_t at = BeginFrame(out, FrameType::Records);
        PutU64(out, handle);
        PutU64(out, generation);
        size_t count_at = out->size();
        PutU32(out, 0);
        uint32_t n = 0;
        // At least one record per frame, then as many as fit in kSplitBytes.
        do {
            PutRecord(out, records[i++]);
            n++;
        } while (i < records.size() && out->size() - at < kSplitBytes);
        for (int b = 0; b < 4; b++)
            (*out)[count_at + b] = static_cast<char>(n >> (8 * b));
        EndFrame(out, at);
    }
}

void EncodeSubmit(uint64_t handle, const Message *messages, size_t count, std::string *out) {
    size_t i = 0;
    while (i < count) {
        size_t at = BeginFrame(out, FrameType::Submit);
        PutU64(out, handle);
        size_t count_at = out->size();
        PutU32(out, 0);
        uint32_t n = 0;
        // At least one message per frame, then as many as fit in kSplitBytes.
        do {
            PutMessage(out, messages[i++]);
            n++;
        } while (i < count && out->size() - at < kSplitBytes);
        for (int b = 0; b < 4; b++)
            (*out)[count_at + b] = static_cast<char>(n >> (8 * b));
        EndFrame(out, at);
    }
}

void EncodeSubmit(uint64_t handle, const std::vector<Message> &messages, std::string *out) {
    EncodeSubmit(handle, messages.data(), messages.size(), out);
}

void EncodeOutcomes(uint64_t handle, const std::vector<Outcome> &outcomes, const DriverState &state,
                    std::string *out) {
    size_t i = 0;
    do {  // an empty batch still reports the state
        size_t at = BeginFrame(out, FrameType::Outcomes);
        PutU64(out, handle);
        size_t count_at = out->size();
        PutU32(out, 0);
        uint32_t n = 0;
        while (i < outcomes.size() && out->size() - at < kSplitBytes) {
            PutOutcome(out, outcomes[i++]);
            n++;
        }
        for (int b = 0; b < 4; b++)
            (*out)[count_at + b] = static_cast<char>(n >> (8 * b));
        PutState(out, state);
        EndFrame(out, at);
    } while (i < outcomes.size());
}

namespace {

ConfigureFrame DecodeConfigure(Reader &r) {
    ConfigureFrame f;
    uint32_t n = r.Count(8);
    f.settings.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        std::string key = r.String();
        std::string value = r.String();
        f.settings.emplace_back(std::move(key), std::move(value));
    }
    return f;
}

OpenFrame DecodeOpen(Reader &r) {
    OpenFrame f;
    f.handle = r.U64();
    f.kind = r.String();
    f.name = r.String();
    f.options = r.String();
    return f;
}

SubmitFrame DecodeSubmit(Reader &r) {
    SubmitFrame f;
    f.handle = r.U64();
    uint32_t n = r.Count(kMinMessageBytes);
    f.messages.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++)
        f.messages.push_back(GetMessage(r));
    return f;
}

SetProbingFrame DecodeSetProbing(Reader &r) {
    SetProbingFrame f;
    f.handle = r.U64();
    f.probing = r.Bool();
    return f;
}

HelloFrame DecodeHello(Reader &r) {
    HelloFrame f;
    f.version = r.U32();
    f.pid = r.U32();
    return f;
}

OpenedFrame DecodeOpened(Reader &r) {
    OpenedFrame f;
    f.handle = r.U64();
    f.ok = r.Bool();
    f.error = r.String();
    if (f.error.size() > kMaxTextBytes)
        r.Fail("an error text is longer than allowed");
    return f;
}

OutcomesFrame DecodeOutcomes(Reader &r) {
    OutcomesFrame f;
    f.handle = r.U64();
    uint32_t n = r.Count(kMinOutcomeBytes);
    f.outcomes.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++)
        f.outcomes.push_back(GetOutcome(r));
    f.state = GetState(r);
    return f;
}

LogFrame DecodeLog(Reader &r) {
    LogFrame f;
    f.handle = r.U64();
    uint32_t n = r.Count(4);
    f.lines.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        f.lines.push_back(r.String());
        if (f.lines.back().size() > kMaxTextBytes)
            r.Fail("a log line is longer than allowed");
    }
    return f;
}

AssignFrame DecodeAssign(Reader &r) {
    AssignFrame f;
    f.handle = r.U64();
    f.generation = r.U64();
    uint32_t n = r.Count(kMinAssignmentBytes);
    f.assignment.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        ConsumerAssignment a;
        a.topic = GetTopic(r);
        a.partition = GetPartition(r);
        a.offset = r.I64();
        if (r.ok() && a.offset < 0)
            r.Fail("an assignment starts at a negative offset");
        f.assignment.push_back(std::move(a));
    }
    return f;
}

CreditFrame DecodeCredit(Reader &r) {
    CreditFrame f;
    f.handle = r.U64();
    f.records = r.U64();
    f.bytes = r.U64();
    return f;
}

RecordsFrame DecodeRecords(Reader &r) {
    RecordsFrame f;
    f.handle = r.U64();
    f.generation = r.U64();
    uint32_t n = r.Count(kMinRecordBytes);
    f.records.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++)
        f.records.push_back(GetRecord(r));
    return f;
}

ConsumerStateFrame DecodeConsumerState(Reader &r) {
    ConsumerStateFrame f;
    f.handle = r.U64();
    f.state.known = r.Bool();
    f.state.reachable = r.Bool();
    uint32_t n = r.Count(kMinPartitionBytes);
    f.state.partitions.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        PartitionInfo p;
        p.topic = GetTopic(r);
        p.partition = GetPartition(r);
        p.low = r.I64();
        p.high = r.I64();
        if (r.ok() && (p.low < -1 || p.high < -1))
            r.Fail("a watermark is below -1");
        if (r.ok() && !f.state.partitions.empty()) {
            const PartitionInfo &prev = f.state.partitions.back();
            if (std::tie(prev.topic, prev.partition) >= std::tie(p.topic, p.partition))
                r.Fail("the partitions are not sorted (topic, partition) without repeats");
        }
        f.state.partitions.push_back(std::move(p));
    }
    uint32_t m = r.Count(4);
    f.state.missing_topics.reserve(m);
    for (uint32_t i = 0; i < m && r.ok(); i++)
        f.state.missing_topics.push_back(GetTopic(r));
    f.state.error = r.String();
    if (f.state.error.size() > kMaxTextBytes)
        r.Fail("an error text is longer than allowed");
    return f;
}

// The frame of `type` in `r`; false for a type nobody sends.
bool DecodeFrame(FrameType type, Reader &r, Frame *frame) {
    switch (type) {
        case FrameType::Configure:
            *frame = DecodeConfigure(r);
            return true;
        case FrameType::Open:
            *frame = DecodeOpen(r);
            return true;
        case FrameType::Close:
            *frame = CloseFrame{r.U64()};
            return true;
        case FrameType::Submit:
            *frame = DecodeSubmit(r);
            return true;
        case FrameType::Abandon:
            *frame = AbandonFrame{r.U64()};
            return true;
        case FrameType::SetProbing:
            *frame = DecodeSetProbing(r);
            return true;
        case FrameType::Ping:
            *frame = PingFrame{r.U64()};
            return true;
        case FrameType::Assign:
            *frame = DecodeAssign(r);
            return true;
        case FrameType::Credit:
            *frame = DecodeCredit(r);
            return true;
        case FrameType::Check:
            *frame = CheckFrame{GetConfigQuery(r)};
            return true;
        case FrameType::Hello:
            *frame = DecodeHello(r);
            return true;
        case FrameType::Opened:
            *frame = DecodeOpened(r);
            return true;
        case FrameType::Outcomes:
            *frame = DecodeOutcomes(r);
            return true;
        case FrameType::Log:
            *frame = DecodeLog(r);
            return true;
        case FrameType::Pong:
            *frame = PongFrame{r.U64()};
            return true;
        case FrameType::Records:
            *frame = DecodeRecords(r);
            return true;
        case FrameType::ConsumerState:
            *frame = DecodeConsumerState(r);
            return true;
        case FrameType::Checked:
            *frame = CheckedFrame{GetConfigAnswer(r)};
            return true;
    }
    return false;
}

}  // namespace

bool DecodeBody(uint8_t type, std::string_view body, Frame *frame, std::string *error) {
    Reader r(body);
    if (!DecodeFrame(static_cast<FrameType>(type), r, frame)) {
        *error = "unknown frame type " + std::to_string(type);
        return false;
    }
    if (!r.ok()) {
        *error = std::string("bad frame of type ") + std::to_string(type) + ": " + r.why();
        return false;
    }
    if (!r.AtEnd()) {
        *error = std::string("bad frame of type ") + std::to_string(type) + ": " +
                 std::to_string(r.Left()) + " bytes after its last field";
        return false;
    }
    return true;
}

char *FrameReader::Reserve(size_t want) {
    if (begin_ > 0 && (begin_ == size_ || begin_ >= buffer_.size() / 2)) {
        // Move what is left to the front, so the buffer does not grow with the stream.
        std::memmove(&buffer_[0], buffer_.data() + begin_, size_ - begin_);
        size_ -= begin_;
        begin_ = 0;
    }
    if (buffer_.size() - size_ < want)
        buffer_.resize(size_ + want);
    return &buffer_[size_];
}

void FrameReader::Append(std::string_view bytes) {
    char *at = Reserve(bytes.size());
    if (!bytes.empty())
        std::memcpy(at, bytes.data(), bytes.size());
    Commit(bytes.size());
}

FrameReader::Result FrameReader::Next(Frame *frame, std::string *error) {
    if (failed_) {
        *error = error_;
        return Result::Error;
    }
    size_t have = size_ - begin_;
    if (have < 4)
        return Result::NeedMore;
    const auto *p = reinterpret_cast<const unsigned char *>(buffer_.data() + begin_);
    uint32_t len =
        uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    if (len < 1 || len > max_frame_) {
        failed_ = true;
        error_ = len < 1 ? "a frame without a type"
                         : "a frame of " + std::to_string(len) + " bytes (at most " +
                               std::to_string(max_frame_) + " allowed)";
        *error = error_;
        return Result::Error;
    }
    if (have < 4 + size_t(len))
        return Result::NeedMore;
    uint8_t type = p[4];
    std::string_view body(buffer_.data() + begin_ + kHeaderBytes, len - 1);
    if (!DecodeBody(type, body, frame, &error_)) {
        failed_ = true;
        *error = error_;
        return Result::Error;
    }
    begin_ += 4 + size_t(len);
    return Result::Frame;
}

}  // namespace outbox::protocol
