// The worker <-> driver process protocol: every frame survives a round trip, batches split and
// reassemble, and nothing a broken or hostile peer can send (truncated, oversized, unknown,
// trailing bytes, impossible counts and values, random bytes, bit flips) crashes the decoder or
// makes it allocate what the bytes do not hold: it says Error (the worker then kills the helper)
// or NeedMore (a frame not complete yet).
#include "outbox/ipc/protocol.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

namespace outbox::protocol {
namespace {

Message SampleMessage(int64_t id) {
    Message m;
    m.id = id;
    m.lease_token = 1000 + id;
    m.event_id = "0190a5e2-3b4c-7d5e-8f60-718293a4b5c6";
    m.topic = "orders";
    m.key = "customer-" + std::to_string(id);
    m.payload = std::string("{\"n\": ") + std::to_string(id) + "}";
    m.payload_is_json = true;
    m.headers = {{"traceparent", "00-abc-def-01"}, {"x-empty", ""}};
    m.created_at_ms = 1700000000000 + id;
    m.expires_at_ms = id % 2 ? 0 : 1800000000000;
    m.attempts = int(id % 7);
    return m;
}

void ExpectSameMessage(const Message &a, const Message &b) {
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.lease_token, b.lease_token);
    EXPECT_EQ(a.event_id, b.event_id);
    EXPECT_EQ(a.topic, b.topic);
    EXPECT_EQ(a.key, b.key);
    EXPECT_EQ(a.payload, b.payload);
    EXPECT_EQ(a.payload_is_json, b.payload_is_json);
    EXPECT_EQ(a.tombstone, b.tombstone);
    EXPECT_EQ(a.headers, b.headers);
    EXPECT_EQ(a.created_at_ms, b.created_at_ms);
    EXPECT_EQ(a.expires_at_ms, b.expires_at_ms);
    EXPECT_EQ(a.attempts, b.attempts);
}

// Every frame in `bytes`, which must decode completely and without error.
std::vector<Frame> DecodeAll(const std::string &bytes, size_t max_frame = kMaxToHelperFrame) {
    FrameReader reader(max_frame);
    reader.Append(bytes);
    std::vector<Frame> frames;
    Frame f;
    std::string error;
    for (;;) {
        FrameReader::Result r = reader.Next(&f, &error);
        if (r == FrameReader::Result::NeedMore)
            break;
        EXPECT_EQ(r, FrameReader::Result::Frame) << error;
        if (r != FrameReader::Result::Frame)
            break;
        frames.push_back(f);
    }
    EXPECT_EQ(reader.Buffered(), 0u);
    return frames;
}

// The result of feeding exactly `bytes` to a fresh reader, and the error text.
FrameReader::Result FeedOnce(const std::string &bytes, std::string *error,
                             size_t max_frame = kMaxToWorkerFrame) {
    FrameReader reader(max_frame);
    reader.Append(bytes);
    Frame f;
    FrameReader::Result r;
    do {
        r = reader.Next(&f, error);
    } while (r == FrameReader::Result::Frame);
    return r;
}

// A frame of `type` with `body`, length header computed.
std::string RawFrame(uint8_t type, const std::string &body) {
    std::string out;
    uint32_t len = uint32_t(body.size() + 1);
    for (int i = 0; i < 4; i++)
        out.push_back(char(len >> (8 * i)));
    out.push_back(char(type));
    out += body;
    return out;
}

std::string U32(uint32_t v) {
    std::string s;
    for (int i = 0; i < 4; i++)
        s.push_back(char(v >> (8 * i)));
    return s;
}
std::string U64(uint64_t v) {
    std::string s;
    for (int i = 0; i < 8; i++)
        s.push_back(char(v >> (8 * i)));
    return s;
}

TEST(DriverProtocolTest, SubmitRoundTripKeepsEveryField) {
    std::vector<Message> batch;
    for (int64_t id = 1; id <= 50; id++)
        batch.push_back(SampleMessage(id));
    batch[3].key.reset();  // no key is not the same as an empty key
    batch[4].key = "";
    batch[5].payload = std::string("\0\x01\xff binary", 10);
    batch[5].payload_is_json = false;
    batch[6].headers.clear();
    batch[7].topic.clear();
    batch[8].payload.clear();  // a Kafka tombstone: neither payload column, a null value
    batch[8].payload_is_json = false;
    batch[8].tombstone = true;
    std::string bytes;
    EncodeSubmit(42, batch, &bytes);
    std::vector<Frame> frames = DecodeAll(bytes);
    ASSERT_EQ(frames.size(), 1u);
    const auto *f = std::get_if<SubmitFrame>(&frames[0]);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->handle, 42u);
    ASSERT_EQ(f->messages.size(), batch.size());
    for (size_t i = 0; i < batch.size(); i++)
        ExpectSameMessage(f->messages[i], batch[i]);
    EXPECT_FALSE(f->messages[3].key.has_value());
    ASSERT_TRUE(f->messages[4].key.has_value());
    EXPECT_EQ(*f->messages[4].key, "");
    EXPECT_TRUE(f->messages[8].tombstone);
    EXPECT_FALSE(f->messages[9].tombstone);
}

// first_failed_at_ms is the worker's ("retry_budget"): the driver process never sees it.
TEST(DriverProtocolTest, SubmitLeavesTheWorkersFirstFailedAtBehind) {
    std::vector<Message> batch = {SampleMessage(1)};
    batch[0].first_failed_at_ms = 1700000000000;
    std::string bytes;
    EncodeSubmit(7, batch, &bytes);
    std::vector<Frame> frames = DecodeAll(bytes);
    ASSERT_EQ(frames.size(), 1u);
    const auto *f = std::get_if<SubmitFrame>(&frames[0]);
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(f->messages.size(), 1u);
    ExpectSameMessage(f->messages[0], batch[0]);
    EXPECT_EQ(f->messages[0].first_failed_at_ms, 0);
}

TEST(DriverProtocolTest, LargeBatchesAreSplitAndReassembledInOrder) {
    std::vector<Message> batch;
    for (int64_t id = 1; id <= 40; id++) {
        Message m = SampleMessage(id);
        m.payload.assign(300 * 1024, char('a' + id % 26));  // 12 MB in all
        batch.push_back(m);
    }
    Message huge = SampleMessage(99);
    huge.payload.assign(kSplitBytes + 1000, 'h');  // larger than a split: a frame of its own
    batch.insert(batch.begin() + 10, huge);
    std::string bytes;
    EncodeSubmit(7, batch, &bytes);
    std::vector<Frame> frames = DecodeAll(bytes);
    EXPECT_GE(frames.size(), 4u);
    std::vector<Message> got;
    for (Frame &frame : frames) {
        auto *f = std::get_if<SubmitFrame>(&frame);
        ASSERT_NE(f, nullptr);
        EXPECT_EQ(f->handle, 7u);
        EXPECT_FALSE(f->messages.empty());
        for (Message &m : f->messages)
            got.push_back(std::move(m));
    }
    ASSERT_EQ(got.size(), batch.size());
    for (size_t i = 0; i < got.size(); i++)
        ExpectSameMessage(got[i], batch[i]);
}

TEST(DriverProtocolTest, OutcomesRoundTripWithStateAndCutErrors) {
    std::vector<Outcome> outcomes;
    for (int64_t id = 1; id <= 20; id++) {
        Outcome o;
        o.id = id;
        o.lease_token = -id;
        o.kind = static_cast<OutcomeKind>(id % 4);
        o.error = id == 5 ? std::string(10000, 'e') : "error " + std::to_string(id);
        o.retry_after_ms = id == 3 ? 1500 : -1;
        o.partition = id % 4 == 0 ? -1 : int32_t(id % 4);
        o.offset = id * 100;
        o.http_status = id == 7 ? 503 : 0;
        outcomes.push_back(o);
    }
    std::string bytes;
    EncodeOutcomes(9, outcomes, DriverState{17, 983, true}, &bytes);
    std::vector<Frame> frames = DecodeAll(bytes, kMaxToWorkerFrame);
    ASSERT_EQ(frames.size(), 1u);
    const auto *f = std::get_if<OutcomesFrame>(&frames[0]);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->handle, 9u);
    EXPECT_EQ(f->state.in_flight, 17u);
    EXPECT_EQ(f->state.capacity, 983u);
    EXPECT_TRUE(f->state.broken);
    ASSERT_EQ(f->outcomes.size(), outcomes.size());
    for (size_t i = 0; i < outcomes.size(); i++) {
        const Outcome &a = outcomes[i], &b = f->outcomes[i];
        EXPECT_EQ(a.id, b.id);
        EXPECT_EQ(a.lease_token, b.lease_token);
        EXPECT_EQ(a.kind, b.kind);
        EXPECT_EQ(a.retry_after_ms, b.retry_after_ms);
        EXPECT_EQ(a.partition, b.partition);
        EXPECT_EQ(a.offset, b.offset);
        EXPECT_EQ(a.http_status, b.http_status);
        if (i == 4)
            EXPECT_EQ(b.error, std::string(kMaxTextBytes, 'e'));
        else
            EXPECT_EQ(a.error, b.error);
    }
}

TEST(DriverProtocolTest, EmptyOutcomesStillCarryTheState) {
    std::string bytes;
    EncodeOutcomes(3, {}, DriverState{0, 1000, false}, &bytes);
    std::vector<Frame> frames = DecodeAll(bytes, kMaxToWorkerFrame);
    ASSERT_EQ(frames.size(), 1u);
    const auto *f = std::get_if<OutcomesFrame>(&frames[0]);
    ASSERT_NE(f, nullptr);
    EXPECT_TRUE(f->outcomes.empty());
    EXPECT_EQ(f->state.capacity, 1000u);
}

TEST(DriverProtocolTest, SmallFramesRoundTrip) {
    std::string bytes;
    Encode(ConfigureFrame{{{"fault", "segv:k1"}, {"other", ""}}}, &bytes);
    Encode(OpenFrame{5, "kafka", "orders", std::string("opt\0ions", 8)}, &bytes);
    Encode(CloseFrame{5}, &bytes);
    Encode(AbandonFrame{6}, &bytes);
    Encode(SetProbingFrame{7, true}, &bytes);
    Encode(PingFrame{0xFFFFFFFFFFFFFFFFull}, &bytes);
    Encode(HelloFrame{kVersion, 4242}, &bytes);
    Encode(OpenedFrame{8, false, "librdkafka refused \"bogus\""}, &bytes);
    Encode(LogFrame{0, {"one", "", "three"}}, &bytes);
    Encode(PongFrame{11}, &bytes);
    std::vector<Frame> frames = DecodeAll(bytes);
    ASSERT_EQ(frames.size(), 10u);
    auto &configure = std::get<ConfigureFrame>(frames[0]);
    EXPECT_EQ(configure.settings, (Settings{{"fault", "segv:k1"}, {"other", ""}}));
    auto &open = std::get<OpenFrame>(frames[1]);
    EXPECT_EQ(open.handle, 5u);
    EXPECT_EQ(open.kind, "kafka");
    EXPECT_EQ(open.name, "orders");
    EXPECT_EQ(open.options, std::string("opt\0ions", 8));
    EXPECT_EQ(std::get<CloseFrame>(frames[2]).handle, 5u);
    EXPECT_EQ(std::get<AbandonFrame>(frames[3]).handle, 6u);
    EXPECT_TRUE(std::get<SetProbingFrame>(frames[4]).probing);
    EXPECT_EQ(std::get<PingFrame>(frames[5]).seq, 0xFFFFFFFFFFFFFFFFull);
    EXPECT_EQ(std::get<HelloFrame>(frames[6]).version, kVersion);
    EXPECT_EQ(std::get<HelloFrame>(frames[6]).pid, 4242u);
    EXPECT_FALSE(std::get<OpenedFrame>(frames[7]).ok);
    EXPECT_EQ(std::get<OpenedFrame>(frames[7]).error, "librdkafka refused \"bogus\"");
    EXPECT_EQ(std::get<LogFrame>(frames[8]).lines, (std::vector<std::string>{"one", "", "three"}));
    EXPECT_EQ(std::get<PongFrame>(frames[9]).seq, 11u);
}

TEST(DriverProtocolTest, BytesArrivingOneAtATimeGiveTheSameFrames) {
    std::string bytes;
    std::vector<Message> batch = {SampleMessage(1), SampleMessage(2)};
    EncodeSubmit(1, batch, &bytes);
    Encode(PingFrame{3}, &bytes);
    FrameReader reader(kMaxToHelperFrame);
    std::vector<Frame> frames;
    Frame f;
    std::string error;
    for (char c : bytes) {
        reader.Append(std::string_view(&c, 1));
        FrameReader::Result r;
        while ((r = reader.Next(&f, &error)) == FrameReader::Result::Frame)
            frames.push_back(f);
        ASSERT_EQ(r, FrameReader::Result::NeedMore) << error;
    }
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(std::get<SubmitFrame>(frames[0]).messages.size(), 2u);
    EXPECT_EQ(std::get<PingFrame>(frames[1]).seq, 3u);
}

TEST(DriverProtocolTest, EveryPrefixOfAFrameIsIncompleteNotAnError) {
    std::string bytes;
    EncodeOutcomes(2, {Outcome{1, 2, OutcomeKind::Retry, "HTTP 503", 1000}},
                   DriverState{1, 2, false}, &bytes);
    for (size_t n = 0; n < bytes.size(); n++) {
        std::string error;
        EXPECT_EQ(FeedOnce(bytes.substr(0, n), &error), FrameReader::Result::NeedMore) << n;
    }
}

TEST(DriverProtocolTest, ABodyCutShortUnderItsOwnLengthIsAnError) {
    // The header says the frame ends early: the fields do not fit in it.
    std::string bytes;
    Encode(OpenFrame{5, "kafka", "orders", "options"}, &bytes);
    for (size_t cut = 1; cut < bytes.size() - kHeaderBytes; cut++) {
        std::string body = bytes.substr(kHeaderBytes, bytes.size() - kHeaderBytes - cut);
        std::string error;
        EXPECT_EQ(FeedOnce(RawFrame(uint8_t(FrameType::Open), body), &error),
                  FrameReader::Result::Error)
            << cut;
        EXPECT_NE(error.find("ends in the middle"), std::string::npos) << error;
    }
}

TEST(DriverProtocolTest, OversizedAndEmptyFramesAreRefusedBeforeAnythingIsRead) {
    std::string error;
    // Declares 4 GB - 1: refused from the header alone, nothing is buffered or allocated.
    EXPECT_EQ(FeedOnce(U32(0xFFFFFFFFu) + "x", &error), FrameReader::Result::Error);
    EXPECT_NE(error.find("at most"), std::string::npos) << error;
    EXPECT_EQ(FeedOnce(U32(uint32_t(kMaxToWorkerFrame) + 1), &error), FrameReader::Result::Error);
    EXPECT_EQ(FeedOnce(U32(0), &error), FrameReader::Result::Error);
    EXPECT_NE(error.find("without a type"), std::string::npos) << error;
    // The worker's limit is far below the helper's: a Submit-sized frame from a helper is bad.
    std::string big;
    Message m = SampleMessage(1);
    m.payload.assign(kMaxToWorkerFrame, 'x');
    EncodeSubmit(1, {m}, &big);
    EXPECT_EQ(FeedOnce(big.substr(0, 4), &error, kMaxToWorkerFrame), FrameReader::Result::Error);
    EXPECT_EQ(FeedOnce(big, &error, kMaxToHelperFrame), FrameReader::Result::NeedMore);
}

TEST(DriverProtocolTest, UnknownTypesTrailingBytesAndBadValuesAreErrors) {
    std::string error;
    EXPECT_EQ(FeedOnce(RawFrame(0, ""), &error), FrameReader::Result::Error);
    EXPECT_NE(error.find("unknown frame type 0"), std::string::npos) << error;
    EXPECT_EQ(FeedOnce(RawFrame(200, U64(1)), &error), FrameReader::Result::Error);
    // A Ping with a byte after its field.
    EXPECT_EQ(FeedOnce(RawFrame(uint8_t(FrameType::Ping), U64(1) + "!"), &error),
              FrameReader::Result::Error);
    EXPECT_NE(error.find("after its last field"), std::string::npos) << error;
    // A boolean that is 2.
    EXPECT_EQ(
        FeedOnce(RawFrame(uint8_t(FrameType::SetProbing), U64(1) + std::string(1, '\2')), &error),
        FrameReader::Result::Error);
    // An outcome kind only the supervisor may produce (Unacknowledged), and one past the end.
    for (uint8_t kind :
         {uint8_t(OutcomeKind::Unacknowledged), uint8_t(OutcomeKind::Poison), uint8_t(77)}) {
        std::string good;
        EncodeOutcomes(1, {Outcome{1, 2, OutcomeKind::Delivered, "", -1}}, DriverState{}, &good);
        std::string bad = good;
        bad[kHeaderBytes + 8 + 4 + 8 + 8] = char(kind);  // handle, count, id, token, kind
        EXPECT_EQ(FeedOnce(bad, &error), FrameReader::Result::Error) << int(kind);
        EXPECT_NE(error.find("unknown kind"), std::string::npos) << error;
    }
    // An HTTP status that no server sends.
    std::vector<Outcome> outcomes(1);
    outcomes[0].http_status = 1000;
    std::string bad_status;
    EncodeOutcomes(1, outcomes, DriverState{}, &bad_status);
    EXPECT_EQ(FeedOnce(bad_status, &error), FrameReader::Result::Error);
    // A message (handle, count, id, token, event_id, topic, has_key, key, payload,
    // payload_is_json, tombstone, headers, created_at, expires_at, attempts) as bytes.
    auto submit = [](char has_key, const std::string &key, const std::string &payload,
                     char tombstone) {
        return RawFrame(uint8_t(FrameType::Submit),
                        U64(1) + U32(1) + U64(1) + U64(2) + U32(0) + U32(0) +
                            std::string(1, has_key) + U32(uint32_t(key.size())) + key +
                            U32(uint32_t(payload.size())) + payload + std::string(1, '\0') +
                            std::string(1, tombstone) + U32(0) + U64(0) + U64(0) + U64(1));
    };
    // The well-formed tombstone the cases below break: read whole, then nothing more.
    EXPECT_EQ(FeedOnce(submit('\1', "k", "", '\1'), &error, kMaxToHelperFrame),
              FrameReader::Result::NeedMore);
    // A message without a key that carries key bytes.
    EXPECT_EQ(FeedOnce(submit('\0', "k", "", '\0'), &error, kMaxToHelperFrame),
              FrameReader::Result::Error);
    EXPECT_NE(error.find("without a key"), std::string::npos) << error;
    // A tombstone that carries payload bytes, and a tombstone flag that is 2.
    EXPECT_EQ(FeedOnce(submit('\1', "k", "{}", '\1'), &error, kMaxToHelperFrame),
              FrameReader::Result::Error);
    EXPECT_NE(error.find("a tombstone carries payload bytes"), std::string::npos) << error;
    EXPECT_EQ(FeedOnce(submit('\1', "k", "", '\2'), &error, kMaxToHelperFrame),
              FrameReader::Result::Error);
    EXPECT_NE(error.find("neither 0 nor 1"), std::string::npos) << error;
}

TEST(DriverProtocolTest, AHostileCountCannotMakeTheDecoderAllocate) {
    // 4 billion messages claimed in a 12-byte body: refused from the count alone.
    std::string error;
    EXPECT_EQ(FeedOnce(RawFrame(uint8_t(FrameType::Submit), U64(1) + U32(0xFFFFFFFFu)), &error,
                       kMaxToHelperFrame),
              FrameReader::Result::Error);
    EXPECT_NE(error.find("longer than the frame"), std::string::npos) << error;
    EXPECT_EQ(FeedOnce(RawFrame(uint8_t(FrameType::Log), U64(0) + U32(0x7FFFFFFFu)), &error),
              FrameReader::Result::Error);
    // A string claiming 4 GB.
    EXPECT_EQ(FeedOnce(RawFrame(uint8_t(FrameType::Opened),
                                U64(1) + std::string(1, '\0') + U32(0xFFFFFFF0u)),
                       &error),
              FrameReader::Result::Error);
    // A log line longer than a helper may send.
    EXPECT_EQ(FeedOnce(RawFrame(uint8_t(FrameType::Log), U64(0) + U32(1) + U32(kMaxTextBytes + 1) +
                                                             std::string(kMaxTextBytes + 1, 'x')),
                       &error),
              FrameReader::Result::Error);
}

TEST(DriverProtocolTest, AfterAnErrorTheReaderStaysInError) {
    FrameReader reader(kMaxToWorkerFrame);
    reader.Append(RawFrame(0, ""));
    std::string good;
    Encode(PongFrame{1}, &good);
    reader.Append(good);
    Frame f;
    std::string error;
    EXPECT_EQ(reader.Next(&f, &error), FrameReader::Result::Error);
    EXPECT_EQ(reader.Next(&f, &error), FrameReader::Result::Error);
}

TEST(DriverProtocolTest, RandomBytesAndBitFlipsNeverCrashTheDecoder) {
    std::mt19937_64 rng(20261201);
    std::string valid;
    std::vector<Message> batch = {SampleMessage(1), SampleMessage(2), SampleMessage(3)};
    EncodeSubmit(1, batch, &valid);
    EncodeOutcomes(1, {Outcome{1, 2, OutcomeKind::Retry, "x", 5}}, DriverState{1, 2, false},
                   &valid);
    Encode(LogFrame{1, {"a", "b"}}, &valid);
    Encode(OpenFrame{1, "webhook", "w", "o"}, &valid);
    int errors = 0, frames = 0;
    for (int round = 0; round < 20000; round++) {
        std::string bytes;
        if (round % 2 == 0) {
            bytes = valid;
            int flips = 1 + int(rng() % 4);
            for (int i = 0; i < flips; i++)
                bytes[rng() % bytes.size()] ^= char(1 << (rng() % 8));
        } else {
            bytes.resize(rng() % 64);
            for (char &c : bytes)
                c = char(rng());
            if (bytes.size() >= 5 && rng() % 2) {  // a plausible header more often than not
                uint32_t len = uint32_t(bytes.size() - 4);
                for (int i = 0; i < 4; i++)
                    bytes[i] = char(len >> (8 * i));
                bytes[4] = char(1 + rng() % 7 + (rng() % 2 ? 63 : 0));
            }
        }
        FrameReader reader(kMaxToWorkerFrame);
        reader.Append(bytes);
        Frame f;
        std::string error;
        FrameReader::Result r;
        while ((r = reader.Next(&f, &error)) == FrameReader::Result::Frame)
            frames++;
        if (r == FrameReader::Result::Error)
            errors++;
    }
    // Both outcomes happen (the test exercises the decoder, it does not only skip it).
    EXPECT_GT(errors, 1000);
    EXPECT_GT(frames, 1000);
}

TEST(DriverProtocolTest, DriverOpenOptionsRoundTripFieldByField) {
    DriverContext c;
    c.destination = "orders";
    c.source = "/outbox/app";
    c.client_name = "outbox-app-orders";
    c.lease_timeout_ms = 12345;
    c.default_in_flight = 777;
    c.answer_timeout_ms = 6000;
    c.config_by_superuser = true;
    c.address_rule = {true, "10.0.0.0/8"};
    c.webhook_allowed_networks = "192.168.0.0/16";
    c.transactional_id = "outbox-app-orders-1";
    c.adopt = true;
    const std::string config = R"({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 2})";
    std::string back_config, error;
    DriverContext back;
    ASSERT_TRUE(DecodeOpenOptions(EncodeOpenOptions(config, c), &back_config, &back, &error))
        << error;
    EXPECT_EQ(back_config, config);
    EXPECT_EQ(back.destination, c.destination);
    EXPECT_EQ(back.source, c.source);
    EXPECT_EQ(back.client_name, c.client_name);
    EXPECT_EQ(back.lease_timeout_ms, 12345);
    EXPECT_EQ(back.default_in_flight, 777u);
    EXPECT_EQ(back.answer_timeout_ms, 6000);
    EXPECT_TRUE(back.config_by_superuser);
    EXPECT_TRUE(back.address_rule.guarded);
    EXPECT_EQ(back.address_rule.allowed_networks, "10.0.0.0/8");
    EXPECT_EQ(back.webhook_allowed_networks, "192.168.0.0/16");
    EXPECT_EQ(back.transactional_id, "outbox-app-orders-1");
    EXPECT_TRUE(back.adopt);
}

TEST(DriverProtocolTest, OpenOptionsOfAnotherBuildOrCutShortAreRefused) {
    std::string config, error;
    DriverContext driver;
    ConsumerContext consumer;
    consumer.subscription = "in";
    // A consumer's options are not a driver's, nor the other way round: the field names differ.
    EXPECT_FALSE(DecodeOpenOptions(EncodeOpenOptions("{}", consumer), &config, &driver, &error));
    EXPECT_NE(error.find("do not match this build"), std::string::npos) << error;
    EXPECT_NE(error.find("destination"), std::string::npos) << error;
    EXPECT_FALSE(DecodeOpenOptions(EncodeOpenOptions("{}", driver), &config, &consumer, &error));
    std::string bytes = EncodeOpenOptions("{}", driver);
    for (size_t n = 0; n < bytes.size(); n++)
        EXPECT_FALSE(DecodeOpenOptions(bytes.substr(0, n), &config, &driver, &error)) << n;
    EXPECT_FALSE(DecodeOpenOptions(bytes + "x", &config, &driver, &error));
    EXPECT_NE(error.find("after their last field"), std::string::npos) << error;
}

TEST(DriverProtocolTest, CheckFramesRoundTripFieldByField) {
    ConfigQuery q;
    q.subscription = true;
    q.kind = "kafka";
    q.config = R"({"topics": ["t"]})";
    q.has_old = true;
    q.old_config = "{}";
    q.check_files = false;
    q.server.lease_timeout_ms = 4321;
    q.server.webhook_allowed_networks = "10.0.0.0/8";
    std::string bytes;
    Encode(CheckFrame{q}, &bytes);
    ConfigAnswer a;
    a.config.problems = {"p1", "p2"};
    a.config.hints = {"h"};
    a.config.privileged = {{"ssl.ca.location", "\"/x\"", ServerAccess::ReadsFiles, "reads"},
                           {"sasl.kerberos.kinit.cmd", "\"k\"", ServerAccess::RunsCode, "runs"}};
    a.config.hosts = {"b1", "[::1]"};
    a.old.problems = {"old"};
    a.server.refused = true;
    a.server.reason = "its URL names address 127.0.0.1";
    a.server.detail = "d";
    a.server.hint = "h2";
    a.server.problems = {"sp"};
    a.server.hints = {"sh"};
    Encode(CheckedFrame{a}, &bytes);
    FrameReader reader(kMaxToHelperFrame);
    reader.Append(bytes);
    Frame frame;
    std::string error;
    ASSERT_EQ(reader.Next(&frame, &error), FrameReader::Result::Frame) << error;
    const ConfigQuery &bq = std::get<CheckFrame>(frame).query;
    EXPECT_TRUE(bq.subscription);
    EXPECT_EQ(bq.kind, q.kind);
    EXPECT_EQ(bq.config, q.config);
    EXPECT_TRUE(bq.has_old);
    EXPECT_EQ(bq.old_config, q.old_config);
    EXPECT_FALSE(bq.check_files);
    EXPECT_EQ(bq.server.lease_timeout_ms, 4321);
    EXPECT_EQ(bq.server.webhook_allowed_networks, q.server.webhook_allowed_networks);
    ASSERT_EQ(reader.Next(&frame, &error), FrameReader::Result::Frame) << error;
    const ConfigAnswer &ba = std::get<CheckedFrame>(frame).answer;
    EXPECT_EQ(ba.config.problems, a.config.problems);
    EXPECT_EQ(ba.config.hints, a.config.hints);
    ASSERT_EQ(ba.config.privileged.size(), 2u);
    EXPECT_EQ(ba.config.privileged[0].key, "ssl.ca.location");
    EXPECT_EQ(ba.config.privileged[0].value, "\"/x\"");
    EXPECT_EQ(ba.config.privileged[0].access, ServerAccess::ReadsFiles);
    EXPECT_EQ(ba.config.privileged[0].problem, "reads");
    EXPECT_EQ(ba.config.privileged[1].access, ServerAccess::RunsCode);
    EXPECT_EQ(ba.config.hosts, a.config.hosts);
    EXPECT_EQ(ba.old.problems, a.old.problems);
    EXPECT_TRUE(ba.server.refused);
    EXPECT_EQ(ba.server.reason, a.server.reason);
    EXPECT_EQ(ba.server.detail, "d");
    EXPECT_EQ(ba.server.hint, "h2");
    EXPECT_EQ(ba.server.problems, a.server.problems);
    EXPECT_EQ(ba.server.hints, a.server.hints);
    // Cut anywhere, a check frame is incomplete, never misread.
    for (size_t n = 0; n < bytes.size(); n++) {
        FrameReader cut(kMaxToHelperFrame);
        cut.Append(bytes.substr(0, n));
        Frame f;
        FrameReader::Result r = cut.Next(&f, &error);
        if (r == FrameReader::Result::Frame)
            EXPECT_TRUE(std::holds_alternative<CheckFrame>(f)) << n;
        else
            EXPECT_EQ(r, FrameReader::Result::NeedMore) << n;
    }
}

// --- the Kafka consumer's frames -------------------------------------------------------------

ConsumedRecord SampleRecord(int64_t offset) {
    ConsumedRecord r;
    r.topic = offset % 2 ? "orders" : "payments";
    r.partition = int32_t(offset % 3);
    r.offset = offset;
    r.key = "customer-" + std::to_string(offset);
    r.value = "{\"n\": " + std::to_string(offset) + "}";
    r.headers = {{"ce_id", "0190a5e2-3b4c-7d5e-8f60-718293a4b5c6"}, {"x-null", ""}};
    r.timestamp_ms = 1700000000000 + offset;
    return r;
}

void ExpectSameRecord(const ConsumedRecord &a, const ConsumedRecord &b) {
    EXPECT_EQ(a.topic, b.topic);
    EXPECT_EQ(a.partition, b.partition);
    EXPECT_EQ(a.offset, b.offset);
    EXPECT_EQ(a.key, b.key);
    EXPECT_EQ(a.value, b.value);
    EXPECT_EQ(a.headers, b.headers);
    EXPECT_EQ(a.timestamp_ms, b.timestamp_ms);
}

TEST(DriverProtocolTest, AssignAndCreditRoundTrip) {
    std::string bytes;
    Encode(AssignFrame{4,
                       0xFFFFFFFFFFFFFFF0ull,
                       {{"orders", 0, 0}, {"orders", 2, 123456789012}, {"b", INT32_MAX, 7}}},
           &bytes);
    Encode(AssignFrame{5, 1, {}}, &bytes);  // nothing assigned
    Encode(CreditFrame{4, 100, 1u << 30}, &bytes);
    std::vector<Frame> frames = DecodeAll(bytes);
    ASSERT_EQ(frames.size(), 3u);
    auto &assign = std::get<AssignFrame>(frames[0]);
    EXPECT_EQ(assign.handle, 4u);
    EXPECT_EQ(assign.generation, 0xFFFFFFFFFFFFFFF0ull);
    ASSERT_EQ(assign.assignment.size(), 3u);
    EXPECT_EQ(assign.assignment[1].topic, "orders");
    EXPECT_EQ(assign.assignment[1].partition, 2);
    EXPECT_EQ(assign.assignment[1].offset, 123456789012);
    EXPECT_EQ(assign.assignment[2].partition, INT32_MAX);
    EXPECT_TRUE(std::get<AssignFrame>(frames[1]).assignment.empty());
    auto &credit = std::get<CreditFrame>(frames[2]);
    EXPECT_EQ(credit.handle, 4u);
    EXPECT_EQ(credit.records, 100u);
    EXPECT_EQ(credit.bytes, 1u << 30);
}

TEST(DriverProtocolTest, RecordsRoundTripKeepsEveryField) {
    std::vector<ConsumedRecord> records;
    for (int64_t offset = 0; offset < 30; offset++)
        records.push_back(SampleRecord(offset));
    records[1].key.reset();  // no key is not an empty key
    records[2].key = "";
    records[3].value.reset();  // a tombstone is not an empty value
    records[4].value = "";
    records[5].value = std::string("\0\x01\xff binary", 10);
    records[5].key = std::string("\0k", 2);
    records[6].headers.clear();
    records[7].timestamp_ms = -1;
    std::string bytes;
    EncodeRecords(8, 3, records, &bytes);
    std::vector<Frame> frames = DecodeAll(bytes, kMaxToWorkerFrame);
    ASSERT_EQ(frames.size(), 1u);
    auto &f = std::get<RecordsFrame>(frames[0]);
    EXPECT_EQ(f.handle, 8u);
    EXPECT_EQ(f.generation, 3u);
    ASSERT_EQ(f.records.size(), records.size());
    for (size_t i = 0; i < records.size(); i++)
        ExpectSameRecord(f.records[i], records[i]);
    EXPECT_FALSE(f.records[1].key.has_value());
    EXPECT_EQ(f.records[2].key, std::optional<std::string>(""));
    EXPECT_FALSE(f.records[3].value.has_value());
    EXPECT_EQ(f.records[4].value, std::optional<std::string>(""));
    // No records, no frame.
    std::string none;
    EncodeRecords(8, 3, {}, &none);
    EXPECT_TRUE(none.empty());
}

TEST(DriverProtocolTest, LargeRecordBatchesAreSplitWithinTheWorkersLimit) {
    std::vector<ConsumedRecord> records;
    for (int64_t offset = 0; offset < 40; offset++) {
        ConsumedRecord r = SampleRecord(offset);
        r.value->assign(300 * 1024, char('a' + offset % 26));  // 12 MB in all
        records.push_back(r);
    }
    ConsumedRecord huge = SampleRecord(99);
    huge.value->assign(kSplitBytes + 1000, 'h');  // larger than a split: a frame of its own
    records.insert(records.begin() + 10, huge);
    std::string bytes;
    EncodeRecords(1, 2, records, &bytes);
    std::vector<Frame> frames = DecodeAll(bytes, kMaxToWorkerFrame);
    EXPECT_GE(frames.size(), 4u);
    std::vector<ConsumedRecord> got;
    for (Frame &frame : frames) {
        auto &f = std::get<RecordsFrame>(frame);
        EXPECT_EQ(f.generation, 2u);
        EXPECT_FALSE(f.records.empty());
        for (ConsumedRecord &r : f.records)
            got.push_back(std::move(r));
    }
    ASSERT_EQ(got.size(), records.size());
    for (size_t i = 0; i < got.size(); i++)
        ExpectSameRecord(got[i], records[i]);
    // The largest record that may travel does, alone, under the worker's limit; one byte more
    // does not pass RecordFits (the helper stops its partition instead of sending it).
    ConsumedRecord max = SampleRecord(1);
    max.headers.clear();
    max.key.reset();
    max.value = std::string();
    size_t overhead = 0;
    {
        std::string empty;
        EncodeRecords(1, 1, {max}, &empty);
        overhead = empty.size();
    }
    max.value->assign(kMaxRecordBytes - (overhead - kHeaderBytes - 8 - 8 - 4), 'm');
    EXPECT_TRUE(RecordFits(max));
    std::string one;
    EncodeRecords(1, 1, {max}, &one);
    EXPECT_EQ(DecodeAll(one, kMaxToWorkerFrame).size(), 1u);
    max.value->push_back('m');
    EXPECT_FALSE(RecordFits(max));
}

TEST(DriverProtocolTest, ConsumerStateRoundTripsWithItsErrorCut) {
    ConsumerState s;
    s.known = true;
    s.reachable = true;
    s.partitions = {{"a", 0, 0, 10}, {"a", 1, -1, -1}, {"b", 0, 5, 5}};
    s.missing_topics = {"zeta", "alpha"};  // in the subscription's order
    s.error = std::string(kMaxTextBytes + 100, 'e');
    std::string bytes;
    Encode(ConsumerStateFrame{6, s}, &bytes);
    Encode(ConsumerStateFrame{7, ConsumerState{}}, &bytes);
    std::vector<Frame> frames = DecodeAll(bytes, kMaxToWorkerFrame);
    ASSERT_EQ(frames.size(), 2u);
    auto &f = std::get<ConsumerStateFrame>(frames[0]);
    EXPECT_EQ(f.handle, 6u);
    EXPECT_TRUE(f.state.known);
    EXPECT_TRUE(f.state.reachable);
    EXPECT_EQ(f.state.partitions, s.partitions);
    EXPECT_EQ(f.state.missing_topics, s.missing_topics);
    EXPECT_EQ(f.state.error, std::string(kMaxTextBytes, 'e'));
    auto &empty = std::get<ConsumerStateFrame>(frames[1]);
    EXPECT_FALSE(empty.state.known);
    EXPECT_FALSE(empty.state.reachable);
    EXPECT_TRUE(empty.state.partitions.empty());
    EXPECT_EQ(empty.state.error, "");
}

TEST(DriverProtocolTest, ConsumerFramesCutShortAreErrorsAndEveryPrefixIsIncomplete) {
    ConsumerState s;
    s.known = true;
    s.partitions = {{"a", 0, 0, 10}};
    s.missing_topics = {"m"};
    s.error = "x";
    std::vector<std::string> frames(4);
    Encode(AssignFrame{1, 2, {{"t", 0, 5}}}, &frames[0]);
    Encode(CreditFrame{1, 2, 3}, &frames[1]);
    EncodeRecords(1, 2, {SampleRecord(3)}, &frames[2]);
    Encode(ConsumerStateFrame{1, s}, &frames[3]);
    for (const std::string &bytes : frames) {
        uint8_t type = uint8_t(bytes[4]);
        SCOPED_TRACE(int(type));
        for (size_t n = 0; n < bytes.size(); n++) {
            std::string error;
            EXPECT_EQ(FeedOnce(bytes.substr(0, n), &error, kMaxToHelperFrame),
                      FrameReader::Result::NeedMore)
                << n;
        }
        for (size_t cut = 1; cut < bytes.size() - kHeaderBytes; cut++) {
            std::string body = bytes.substr(kHeaderBytes, bytes.size() - kHeaderBytes - cut);
            std::string error;
            EXPECT_EQ(FeedOnce(RawFrame(type, body), &error, kMaxToHelperFrame),
                      FrameReader::Result::Error)
                << cut;
        }
        std::string error;
        EXPECT_EQ(
            FeedOnce(RawFrame(type, bytes.substr(kHeaderBytes) + "!"), &error, kMaxToHelperFrame),
            FrameReader::Result::Error);
        EXPECT_NE(error.find("after its last field"), std::string::npos) << error;
    }
}

TEST(DriverProtocolTest, ConsumerFramesWithHostileCountsOrImpossibleValuesAreErrors) {
    std::string error;
    auto feed = [&](uint8_t type, const std::string &body) {
        return FeedOnce(RawFrame(type, body), &error, kMaxToHelperFrame);
    };
    const uint8_t assign = uint8_t(FrameType::Assign), records = uint8_t(FrameType::Records),
                  state = uint8_t(FrameType::ConsumerState);
    // Counts that the bytes cannot hold: refused before anything is reserved.
    EXPECT_EQ(feed(assign, U64(1) + U64(1) + U32(0xFFFFFFFFu)), FrameReader::Result::Error);
    EXPECT_NE(error.find("longer than the frame"), std::string::npos) << error;
    EXPECT_EQ(feed(records, U64(1) + U64(1) + U32(0x7FFFFFFFu)), FrameReader::Result::Error);
    EXPECT_NE(error.find("longer than the frame"), std::string::npos) << error;
    EXPECT_EQ(feed(state, U64(1) + std::string(2, '\1') + U32(0xFFFFFFFFu)),
              FrameReader::Result::Error);
    EXPECT_NE(error.find("longer than the frame"), std::string::npos) << error;
    EXPECT_EQ(feed(state, U64(1) + std::string(2, '\1') + U32(0) + U32(0x10000000u)),
              FrameReader::Result::Error);
    EXPECT_NE(error.find("longer than the frame"), std::string::npos) << error;

    // One assignment as bytes: topic, partition, offset.
    auto one_assignment = [&](const std::string &topic, uint64_t partition, uint64_t offset) {
        return feed(assign, U64(1) + U64(1) + U32(1) + U32(uint32_t(topic.size())) + topic +
                                U64(partition) + U64(offset));
    };
    EXPECT_EQ(one_assignment("t", 0, 0), FrameReader::Result::NeedMore);  // well-formed
    EXPECT_EQ(one_assignment("t", uint64_t(-1), 0), FrameReader::Result::Error);
    EXPECT_NE(error.find("partition number is out of range"), std::string::npos) << error;
    EXPECT_EQ(one_assignment("t", uint64_t(INT32_MAX) + 1, 0), FrameReader::Result::Error);
    EXPECT_EQ(one_assignment("t", 0, uint64_t(-5)), FrameReader::Result::Error);
    EXPECT_NE(error.find("negative offset"), std::string::npos) << error;
    EXPECT_EQ(one_assignment("", 0, 0), FrameReader::Result::Error);
    EXPECT_NE(error.find("topic name is empty or longer"), std::string::npos) << error;
    EXPECT_EQ(one_assignment(std::string(250, 't'), 0, 0), FrameReader::Result::Error);

    // One record as bytes: topic, partition, offset, has_key, key, has_value, value, headers,
    // timestamp.
    auto one_record = [&](uint64_t offset, char has_key, const std::string &key, char has_value,
                          const std::string &value, uint64_t timestamp) {
        return feed(records, U64(1) + U64(1) + U32(1) + U32(1) + "t" + U64(0) + U64(offset) +
                                 std::string(1, has_key) + U32(uint32_t(key.size())) + key +
                                 std::string(1, has_value) + U32(uint32_t(value.size())) + value +
                                 U32(0) + U64(timestamp));
    };
    EXPECT_EQ(one_record(0, '\1', "k", '\1', "v", uint64_t(-1)), FrameReader::Result::NeedMore);
    EXPECT_EQ(one_record(0, '\0', "k", '\1', "v", 0), FrameReader::Result::Error);
    EXPECT_NE(error.find("without a key carries key bytes"), std::string::npos) << error;
    EXPECT_EQ(one_record(0, '\1', "k", '\0', "v", 0), FrameReader::Result::Error);
    EXPECT_NE(error.find("null value carries value bytes"), std::string::npos) << error;
    EXPECT_EQ(one_record(0, '\2', "", '\1', "v", 0), FrameReader::Result::Error);
    EXPECT_NE(error.find("neither 0 nor 1"), std::string::npos) << error;
    EXPECT_EQ(one_record(uint64_t(-1), '\1', "k", '\1', "v", 0), FrameReader::Result::Error);
    EXPECT_NE(error.find("negative offset"), std::string::npos) << error;
    EXPECT_EQ(one_record(0, '\1', "k", '\1', "v", uint64_t(-2)), FrameReader::Result::Error);
    EXPECT_NE(error.find("impossible timestamp"), std::string::npos) << error;

    // A state: partitions out of order or repeated, a watermark below -1, a long error.
    auto a_state = [&](const std::vector<PartitionInfo> &partitions, const std::string &err) {
        std::string body = U64(1) + std::string(2, '\1') + U32(uint32_t(partitions.size()));
        for (const PartitionInfo &p : partitions)
            body += U32(uint32_t(p.topic.size())) + p.topic + U64(uint64_t(p.partition)) +
                    U64(uint64_t(p.low)) + U64(uint64_t(p.high));
        return feed(state, body + U32(0) + U32(uint32_t(err.size())) + err);
    };
    EXPECT_EQ(a_state({{"a", 0, 0, 1}, {"a", 1, -1, -1}, {"b", 0, 0, 0}}, "e"),
              FrameReader::Result::NeedMore);
    EXPECT_EQ(a_state({{"a", 1, 0, 1}, {"a", 0, 0, 1}}, ""), FrameReader::Result::Error);
    EXPECT_NE(error.find("not sorted"), std::string::npos) << error;
    EXPECT_EQ(a_state({{"b", 0, 0, 1}, {"a", 0, 0, 1}}, ""), FrameReader::Result::Error);
    EXPECT_EQ(a_state({{"a", 0, 0, 1}, {"a", 0, 0, 1}}, ""), FrameReader::Result::Error);
    EXPECT_EQ(a_state({{"a", 0, -2, 1}}, ""), FrameReader::Result::Error);
    EXPECT_NE(error.find("watermark is below -1"), std::string::npos) << error;
    EXPECT_EQ(a_state({}, std::string(kMaxTextBytes + 1, 'e')), FrameReader::Result::Error);
    EXPECT_NE(error.find("error text is longer"), std::string::npos) << error;
}

TEST(DriverProtocolTest, ConsumerOpenOptionsRoundTripFieldByField) {
    ConsumerContext c;
    c.subscription = "orders-in";
    c.client_id = "outbox-inbox-app-orders-in";
    c.metadata_interval_ms = 250;
    c.window_records = 100;
    c.window_bytes = 12345;
    c.address_rule = {true, "10.0.0.0/8"};
    const std::string config = R"({"bootstrap.servers": "b:9092", "topics": ["orders"]})";
    ConsumerContext back;
    std::string back_config, error;
    ASSERT_TRUE(DecodeOpenOptions(EncodeOpenOptions(config, c), &back_config, &back, &error))
        << error;
    EXPECT_EQ(back_config, config);
    EXPECT_EQ(back.subscription, c.subscription);
    EXPECT_EQ(back.client_id, c.client_id);
    EXPECT_EQ(back.metadata_interval_ms, 250);
    EXPECT_EQ(back.window_records, 100u);
    EXPECT_EQ(back.window_bytes, 12345u);
    EXPECT_TRUE(back.address_rule.guarded);
    EXPECT_EQ(back.address_rule.allowed_networks, "10.0.0.0/8");
    std::string bytes = EncodeOpenOptions(config, c);
    for (size_t n = 0; n < bytes.size(); n++)
        EXPECT_FALSE(DecodeOpenOptions(bytes.substr(0, n), &back_config, &back, &error)) << n;
}

TEST(DriverProtocolTest, CutTextNeverSplitsACharacter) {
    EXPECT_EQ(CutText("short", 10), "short");
    EXPECT_EQ(CutText("abcdef", 3), "abc");
    // "é" is two bytes: a cut after its first byte drops it whole.
    EXPECT_EQ(CutText("ab\xc3\xa9z", 3), "ab");
    EXPECT_EQ(CutText("ab\xc3\xa9z", 4), "ab\xc3\xa9");
    EXPECT_EQ(CutText("\xe2\x82\xac\xe2\x82\xac", 5), "\xe2\x82\xac");
}

}  // namespace
}  // namespace outbox::protocol
