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

#include "outbox/consumer.hpp"
#include "outbox/brokers/amqp/driver.hpp"
#include "outbox/brokers/kafka/driver.hpp"
#include "outbox/brokers/nats/driver.hpp"
#include "outbox/brokers/webhook/driver.hpp"
#include "outbox/message.hpp"

namespace outbox::protocol {

// Bumped on any change of the frames; the helper says its version first (Hello) and a worker
// that finds another one does not use it (the module and the helper are installed together).
constexpr uint32_t kVersion = 3;  // 3: the Kafka consumer (Assign, Credit, Records, ConsumerState)

// How outbox-driver exits other than 0 (its worker's end closed) or by a signal; the supervisor
// names the cause in its log line.
constexpr int kExitProtocol = 2;     // a malformed frame from the worker
constexpr int kExitOutOfMemory = 3;  // an allocation failed (outbox.driver_memory_limit)
constexpr int kExitStartup = 4;      // it could not set itself up
constexpr int kExitError = 5;        // any other error

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
    // helper -> worker
    Hello = 64,     // first frame: protocol version and pid
    Opened = 65,    // the answer to Open
    Outcomes = 66,  // outcomes and driver state
    Log = 67,       // log lines of a driver (handle 0: of the helper itself)
    Pong = 68,
    Records = 69,        // records read by a consumer
    ConsumerState = 70,  // a consumer's metadata, watermarks and last error
};

using Settings = std::vector<std::pair<std::string, std::string>>;

struct ConfigureFrame {
    Settings settings;
};
// `handle` names one driver for its whole life (never reused within a worker): outcomes of a
// closed or replaced driver are recognised and dropped.
struct OpenFrame {
    uint64_t handle = 0;
    std::string kind;     // "kafka", "webhook", "amqp", "nats"
    std::string name;     // the destination, for the helper's own log lines
    std::string options;  // EncodeOptions of the kind's options struct
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

using Frame =
    std::variant<ConfigureFrame, OpenFrame, CloseFrame, SubmitFrame, AbandonFrame, SetProbingFrame,
                 PingFrame, HelloFrame, OpenedFrame, OutcomesFrame, LogFrame, PongFrame,
                 AssignFrame, CreditFrame, RecordsFrame, ConsumerStateFrame>;

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
// Submit and Outcomes batches: one frame per kSplitBytes of content (so a large batch is
// several frames; a single message larger than that is a frame of its own). Outcomes frames
// repeat the state; error texts are cut at kMaxTextBytes.
void EncodeSubmit(uint64_t handle, const std::vector<Message> &messages, std::string *out);
void EncodeSubmit(uint64_t handle, const Message *messages, size_t count, std::string *out);
void EncodeOutcomes(uint64_t handle, const std::vector<Outcome> &outcomes, const DriverState &state,
                    std::string *out);
// Records frames, split like Submit (nothing is written for no records). Every record must
// pass RecordFits.
void EncodeRecords(uint64_t handle, uint64_t generation, const std::vector<ConsumedRecord> &records,
                   std::string *out);
// Whether `record` can travel to the worker (its encoded size is at most kMaxRecordBytes).
bool RecordFits(const ConsumedRecord &record);

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
// Driver options, field by field. Each field is encoded with its name and a type tag, in the
// order of the visitor below, and decoding checks both: a module and a helper built from
// different sources refuse each other's options instead of misreading them. A field added to
// KafkaDriverOptions / WebhookDriverOptions / AmqpDriverOptions / NatsDriverOptions needs one line
// in its visitor (the static_asserts in driver_protocol.cpp notice a new field that was not added).
// KafkaConsumerOptions (the consumer, not a driver) is sent the same way.
// Supported field types: std::string, bool, int, int64_t, size_t, std::vector<std::string>,
// Headers, CloudEventsMode.
// ---------------------------------------------------------------------------------------------

template <typename Options, typename V>
void VisitKafkaOptions(Options &o, V &&v) {
    v("config.default_topic", o.config.default_topic);
    v("config.max_in_flight", o.config.max_in_flight);
    v("config.cloudevents", o.config.cloudevents);
    v("config.properties", o.config.properties);
    v("client_id", o.client_id);
    v("source", o.source);
    v("lease_timeout_ms", o.lease_timeout_ms);
    v("max_in_flight", o.max_in_flight);
    v("address_rule.guarded", o.address_rule.guarded);
    v("address_rule.allowed_networks", o.address_rule.allowed_networks);
}

template <typename Options, typename V>
void VisitWebhookOptions(Options &o, V &&v) {
    v("config.url", o.config.url);
    v("config.secret_keys", o.config.secret_keys);
    v("config.signing_keys", o.config.signing_keys);
    v("config.headers", o.config.headers);
    v("config.timeout_ms", o.config.timeout_ms);
    v("config.timeout_set", o.config.timeout_set);
    v("config.max_in_flight", o.config.max_in_flight);
    v("config.ca_file", o.config.ca_file);
    v("config.tls_verify", o.config.tls_verify);
    v("config.default_topic", o.config.default_topic);
    v("config.cloudevents", o.config.cloudevents);
    v("destination", o.destination);
    v("source", o.source);
    v("lease_timeout_ms", o.lease_timeout_ms);
    v("allowed_networks", o.allowed_networks);
    v("show_response_body", o.show_response_body);
}

template <typename Options, typename V>
void VisitAmqpOptions(Options &o, V &&v) {
    v("config.url", o.config.url);
    v("config.exchange", o.config.exchange);
    v("config.routing_key", o.config.routing_key);
    v("config.max_in_flight", o.config.max_in_flight);
    v("config.heartbeat_s", o.config.heartbeat_s);
    v("config.connect_timeout_ms", o.config.connect_timeout_ms);
    v("config.ca_file", o.config.ca_file);
    v("config.cert_file", o.config.cert_file);
    v("config.key_file", o.config.key_file);
    v("config.tls_verify", o.config.tls_verify);
    v("destination", o.destination);
    v("source", o.source);
    v("client_name", o.client_name);
    v("confirm_timeout_ms", o.confirm_timeout_ms);
    v("max_in_flight", o.max_in_flight);
    v("address_rule.guarded", o.address_rule.guarded);
    v("address_rule.allowed_networks", o.address_rule.allowed_networks);
}

template <typename Options, typename V>
void VisitNatsOptions(Options &o, V &&v) {
    v("config.servers", o.config.servers);
    v("config.subject", o.config.subject);
    v("config.user", o.config.user);
    v("config.password", o.config.password);
    v("config.token", o.config.token);
    v("config.creds_file", o.config.creds_file);
    v("config.nkey", o.config.nkey);
    v("config.nkey_seed_file", o.config.nkey_seed_file);
    v("config.ca_file", o.config.ca_file);
    v("config.cert_file", o.config.cert_file);
    v("config.key_file", o.config.key_file);
    v("config.tls", o.config.tls);
    v("config.tls_verify", o.config.tls_verify);
    v("config.max_in_flight", o.config.max_in_flight);
    v("config.ack_timeout_ms", o.config.ack_timeout_ms);
    v("config.connect_timeout_ms", o.config.connect_timeout_ms);
    v("destination", o.destination);
    v("source", o.source);
    v("client_name", o.client_name);
    v("ack_timeout_ms", o.ack_timeout_ms);
    v("max_in_flight", o.max_in_flight);
    v("address_rule.guarded", o.address_rule.guarded);
    v("address_rule.allowed_networks", o.address_rule.allowed_networks);
}

template <typename Options, typename V>
void VisitKafkaConsumerOptions(Options &o, V &&v) {
    v("name", o.name);
    v("topics", o.topics);
    v("properties", o.properties);
    v("client_id", o.client_id);
    v("metadata_interval_ms", o.metadata_interval_ms);
    v("window_records", o.window_records);
    v("window_bytes", o.window_bytes);
    v("address_rule.guarded", o.address_rule.guarded);
    v("address_rule.allowed_networks", o.address_rule.allowed_networks);
}

std::string EncodeOptions(const KafkaDriverOptions &options);
std::string EncodeOptions(const WebhookDriverOptions &options);
std::string EncodeOptions(const AmqpDriverOptions &options);
std::string EncodeOptions(const NatsDriverOptions &options);
std::string EncodeOptions(const KafkaConsumerOptions &options);
bool DecodeOptions(std::string_view bytes, KafkaDriverOptions *options, std::string *error);
bool DecodeOptions(std::string_view bytes, WebhookDriverOptions *options, std::string *error);
bool DecodeOptions(std::string_view bytes, AmqpDriverOptions *options, std::string *error);
bool DecodeOptions(std::string_view bytes, NatsDriverOptions *options, std::string *error);
bool DecodeOptions(std::string_view bytes, KafkaConsumerOptions *options, std::string *error);

// `text` cut to at most `max_bytes`, never in the middle of a UTF-8 sequence.
std::string CutText(std::string_view text, size_t max_bytes);

}  // namespace outbox::protocol
