// The protocol between a delivery worker and its driver process (outbox-driver), over one
// socketpair per worker. Pure code: no PostgreSQL, no sockets; the worker side
// (driver_supervisor.cpp) and the helper (driver_host/main.cpp) both use it.
//
// A frame is a 4-byte little-endian length (of what follows it), a 1-byte type and its body.
// Integers are fixed-width little-endian, strings a 4-byte length and their bytes, lists a
// 4-byte count and their elements. Everything is batched: one Submit frame carries every message
// of a claim for one destination, one Outcomes frame every outcome the helper collected for one
// destination in one turn of its loop, together with that driver's state (in flight, capacity,
// broken), which is all the dispatcher asks a driver.
//
// Decoding never trusts the peer: every length and count is checked against the bytes that are
// there and against the frame limit before anything is allocated, and a frame that does not
// parse exactly (short, long, unknown type, unknown enum value) is an error. The worker kills a
// helper that sends one; the helper exits when the worker does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/config_query.hpp"
#include "outbox/consumer.hpp"
#include "outbox/frame_limits.hpp"
#include "outbox/message.hpp"

namespace outbox::protocol {

// Bumped on any change of the frames; the helper says its version first (Hello) and a worker
// that finds another one does not use it (the module and the helper are installed together).
// 3: the Kafka consumer (Assign, Credit, Records, ConsumerState); 4: Open carries the config
// (the helper checks it), Check and Checked; 5: the driver context's "adopt" (exactly_once.hpp).
constexpr uint32_t kVersion = 5;

// How outbox-driver exits other than 0 (its worker's end closed) or by a signal; the supervisor
// names the cause in its log line.
constexpr int kExitProtocol = 2;     // a malformed frame from the worker
constexpr int kExitOutOfMemory = 3;  // an allocation failed (outbox.driver_memory_limit)
constexpr int kExitStartup = 4;      // it could not set itself up
constexpr int kExitError = 5;        // any other error

enum class FrameType : uint8_t {
    // worker -> helper
    Configure = 1,   // process-wide settings (key/value), e.g. the test-only fault switch
    Open = 2,        // build a driver for a destination
    Close = 3,       // destroy it
    Submit = 4,      // messages for it
    Abandon = 5,     // Driver::Abandon
    SetProbing = 6,  // Driver::SetProbing
    Ping = 7,
    Assign = 8,  // a consumer's whole assignment (replaces the previous one)
    Credit = 9,  // the worker took records of a consumer: its window opens by that much
    Check = 10,  // a definition-time check (outbox-driver --check only)
    // helper -> worker
    Hello = 64,     // first frame: protocol version and pid
    Opened = 65,    // the answer to Open
    Outcomes = 66,  // outcomes and driver state
    Log = 67,       // log lines of a driver (handle 0: of the helper itself)
    Pong = 68,
    Records = 69,        // records read by a consumer
    ConsumerState = 70,  // a consumer's metadata, watermarks and last error
    Checked = 71,        // the answer to Check
};

using Settings = std::vector<std::pair<std::string, std::string>>;

struct ConfigureFrame {
    Settings settings;
};
// `handle` names one driver for its whole life (never reused within a worker): outcomes of a
// closed or replaced driver are recognised and dropped.
struct OpenFrame {
    uint64_t handle = 0;
    std::string kind;     // a broker kind's name; "<kind>-consumer" for a subscription's consumer
    std::string name;     // the destination, for the helper's own log lines
    std::string options;  // EncodeOpenOptions: the config, checked by the helper, and the context
};
struct CloseFrame {
    uint64_t handle = 0;
};
struct SubmitFrame {
    uint64_t handle = 0;
    std::vector<Message> messages;
};
struct AbandonFrame {
    uint64_t handle = 0;
};
struct SetProbingFrame {
    uint64_t handle = 0;
    bool probing = false;
};
struct PingFrame {
    uint64_t seq = 0;
};
struct HelloFrame {
    uint32_t version = 0;
    uint32_t pid = 0;
};
struct OpenedFrame {
    uint64_t handle = 0;
    bool ok = false;
    std::string error;  // when !ok
};
// The state of a driver as of the outcomes in the same frame.
struct DriverState {
    uint64_t in_flight = 0;
    uint64_t capacity = 0;
    bool broken = false;
};
struct OutcomesFrame {
    uint64_t handle = 0;
    std::vector<Outcome> outcomes;
    DriverState state;
};
struct LogFrame {
    uint64_t handle = 0;
    std::vector<std::string> lines;
};
struct PongFrame {
    uint64_t seq = 0;
};

// --- the Kafka consumer (Open with kind "kafka-consumer", Close as for drivers) ---------------
// `generation` names one assignment: the records of an earlier one, still in transit when the
// worker replaced it, are recognised and dropped. The helper's window (records and bytes sent
// and not yet credited) starts empty with each Assign: the worker credits only what it takes of
// the current assignment.
struct AssignFrame {
    uint64_t handle = 0;
    uint64_t generation = 0;
    std::vector<ConsumerAssignment> assignment;
};
struct CreditFrame {
    uint64_t handle = 0;
    uint64_t records = 0;
    uint64_t bytes = 0;  // RecordBytes of those records
};
struct RecordsFrame {
    uint64_t handle = 0;
    uint64_t generation = 0;
    std::vector<ConsumedRecord> records;
};
struct ConsumerStateFrame {
    uint64_t handle = 0;
    ConsumerState state;
};

// outbox-driver --check: one Check from the module, one Checked back (config_query.hpp).
struct CheckFrame {
    ConfigQuery query;
};
struct CheckedFrame {
    ConfigAnswer answer;
};

using Frame = std::variant<ConfigureFrame, OpenFrame, CloseFrame, SubmitFrame, AbandonFrame,
                           SetProbingFrame, PingFrame, HelloFrame, OpenedFrame, OutcomesFrame,
                           LogFrame, PongFrame, AssignFrame, CreditFrame, RecordsFrame,
                           ConsumerStateFrame, CheckFrame, CheckedFrame>;

// Encoders append one complete frame to *out.
void Encode(const ConfigureFrame &f, std::string *out);
void Encode(const OpenFrame &f, std::string *out);
void Encode(const CloseFrame &f, std::string *out);
void Encode(const AbandonFrame &f, std::string *out);
void Encode(const SetProbingFrame &f, std::string *out);
void Encode(const PingFrame &f, std::string *out);
void Encode(const HelloFrame &f, std::string *out);
void Encode(const OpenedFrame &f, std::string *out);
void Encode(const LogFrame &f, std::string *out);
void Encode(const PongFrame &f, std::string *out);
void Encode(const AssignFrame &f, std::string *out);
void Encode(const CreditFrame &f, std::string *out);
// The state's error is cut at kMaxTextBytes.
void Encode(const ConsumerStateFrame &f, std::string *out);
void Encode(const CheckFrame &f, std::string *out);
void Encode(const CheckedFrame &f, std::string *out);
// Submit and Outcomes batches: one frame per kSplitBytes of content (so a large batch is
// several frames; a single message larger than that is a frame of its own). Outcomes frames
// repeat the state; error texts are cut at kMaxTextBytes.
void EncodeSubmit(uint64_t handle, const std::vector<Message> &messages, std::string *out);
void EncodeSubmit(uint64_t handle, const Message *messages, size_t count, std::string *out);
void EncodeOutcomes(uint64_t handle, const std::vector<Outcome> &outcomes, const DriverState &state,
                    std::string *out);
// Records frames, split like Submit (nothing is written for no records). Every record must
// pass RecordFits (frame_limits.hpp).
void EncodeRecords(uint64_t handle, uint64_t generation, const std::vector<ConsumedRecord> &records,
                   std::string *out);

// Accumulates bytes read from the socket and cuts them into frames.
class FrameReader {
  public:
    explicit FrameReader(size_t max_frame) : max_frame_(max_frame) {}

    // The buffer to read into: at least `want` bytes at the returned pointer; then Commit(n).
    char *Reserve(size_t want);
    void Commit(size_t n) { size_ += n; }
    void Append(std::string_view bytes);

    enum class Result { Frame, NeedMore, Error };
    // The next complete frame, if any. After an Error the reader stays in error.
    Result Next(Frame *frame, std::string *error);

    size_t Buffered() const { return size_ - begin_; }

  private:
    size_t max_frame_;
    std::string buffer_;
    size_t begin_ = 0;  // first byte not consumed
    size_t size_ = 0;   // bytes of buffer_ in use
    bool failed_ = false;
    std::string error_;
};

// Decodes one frame body (the bytes after the header) of type `type`; false with *error when it
// is not exactly one well-formed frame. Exposed for the unit tests.
bool DecodeBody(uint8_t type, std::string_view body, Frame *frame, std::string *error);

// ---------------------------------------------------------------------------------------------
// Open options: the config as stored (the helper checks it with the kind's own check, the one
// create_destination ran, and builds the driver from what it parsed) and what the worker tells
// the driver besides (broker_kind.hpp: DriverContext, ConsumerContext). The context is encoded
// field by field with each field's name and a type tag, in the order of the visitors below, and
// decoding checks both: a module and a helper built from different sources refuse each other's
// options instead of misreading them. A field added to a context needs one line in its visitor
// (the static_asserts in options.cpp notice a new field that was not added).
// ---------------------------------------------------------------------------------------------

template <typename Context, typename V>
void VisitDriverContext(Context &c, V &&v) {
    v("destination", c.destination);
    v("source", c.source);
    v("client_name", c.client_name);
    v("worker_index", c.worker_index);
    v("lease_timeout_ms", c.lease_timeout_ms);
    v("default_in_flight", c.default_in_flight);
    v("answer_timeout_ms", c.answer_timeout_ms);
    v("config_by_superuser", c.config_by_superuser);
    v("address_rule.guarded", c.address_rule.guarded);
    v("address_rule.allowed_networks", c.address_rule.allowed_networks);
    v("webhook_allowed_networks", c.webhook_allowed_networks);
    v("transactional_id", c.transactional_id);
    v("adopt", c.adopt);
}

template <typename Context, typename V>
void VisitConsumerContext(Context &c, V &&v) {
    v("subscription", c.subscription);
    v("client_id", c.client_id);
    v("metadata_interval_ms", c.metadata_interval_ms);
    v("window_records", c.window_records);
    v("window_bytes", c.window_bytes);
    v("address_rule.guarded", c.address_rule.guarded);
    v("address_rule.allowed_networks", c.address_rule.allowed_networks);
}

std::string EncodeOpenOptions(const std::string &config, const DriverContext &context);
std::string EncodeOpenOptions(const std::string &config, const ConsumerContext &context);
bool DecodeOpenOptions(std::string_view bytes, std::string *config, DriverContext *context,
                       std::string *error);
bool DecodeOpenOptions(std::string_view bytes, std::string *config, ConsumerContext *context,
                       std::string *error);

}  // namespace outbox::protocol
