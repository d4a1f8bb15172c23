// The Kafka driver's window (KafkaDriverOptions): with the default one (base_in_flight set) it
// takes up to max_in_flight messages while those in flight weigh less than max_in_flight_bytes,
// then no more than base_in_flight; a window the config set is its count whatever the bytes.
// No broker is needed: librdkafka queues what it is handed until a broker answers, and nothing
// answers at 127.0.0.1:1, so everything submitted stays in flight.
#include "outbox/brokers/kafka/driver.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace outbox {
namespace {

std::unique_ptr<Driver> Make(size_t base, size_t max, size_t bytes) {
    KafkaDriverOptions o;
    o.config.default_topic = "window";
    o.config.properties = {{"bootstrap.servers", "127.0.0.1:1"}};
    o.client_id = "outbox-test-window";
    o.source = "/outbox/test";
    o.lease_timeout_ms = 30000;
    o.max_in_flight = max;
    o.base_in_flight = base;
    o.max_in_flight_bytes = bytes;
    std::string error;
    std::unique_ptr<Driver> d = MakeKafkaDriver(o, &error);
    EXPECT_NE(d, nullptr) << error;
    return d;
}

int64_t next_id = 1;

std::vector<Message> Batch(int n, size_t payload_bytes) {
    std::vector<Message> batch(n);
    for (Message &m : batch) {
        m.id = next_id++;
        m.lease_token = 1;
        m.event_id = "0190a3c2-7b1e-7cc1-9f4e-000000000001";
        m.topic = "window";
        m.key = "k";
        m.payload = std::string(payload_bytes, 'x');
        m.created_at_ms = 1700000000000;
        m.attempts = 1;
    }
    return batch;
}

TEST(KafkaWindow, DefaultIsWideWhileLight) {
    auto d = Make(/*base=*/4, /*max=*/40, /*bytes=*/100000);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->Capacity(), 40u);
    d->Submit(Batch(10, 10));
    EXPECT_EQ(d->InFlight(), 10u);
    EXPECT_EQ(d->Capacity(), 30u);
}

TEST(KafkaWindow, DefaultNarrowsOnceHeavy) {
    // A message weighs its payload, key and headers (the CloudEvents ones: some 150 bytes).
    auto d = Make(/*base=*/4, /*max=*/40, /*bytes=*/2500);
    ASSERT_NE(d, nullptr);
    d->Submit(Batch(2, 1000));  // under 2,500 bytes: still wide
    EXPECT_EQ(d->Capacity(), 38u);
    d->Submit(Batch(1, 1000));  // over: the base window, 4
    EXPECT_EQ(d->InFlight(), 3u);
    EXPECT_EQ(d->Capacity(), 1u);
    d->Submit(Batch(2, 1000));
    EXPECT_EQ(d->Capacity(), 0u);
}

TEST(KafkaWindow, ConfiguredCountsMessagesOnly) {
    auto d = Make(/*base=*/0, /*max=*/40, /*bytes=*/0);
    ASSERT_NE(d, nullptr);
    d->Submit(Batch(3, 100000));
    EXPECT_EQ(d->InFlight(), 3u);
    EXPECT_EQ(d->Capacity(), 37u);
}

}  // namespace
}  // namespace outbox
