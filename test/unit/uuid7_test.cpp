// UUIDv7: layout per RFC 9562 and strict monotonicity whatever the clock does.
#include "outbox/uuid7.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>

namespace outbox {
namespace {

int64_t EmbeddedMs(const Uuid &uuid) {
    int64_t ms = 0;
    for (int i = 0; i < 6; ++i) {
        ms = ms << 8 | uuid[i];
    }
    return ms;
}

struct RandomSource {
    std::mt19937 rng{1234};
    const uint8_t *Next() {
        for (uint8_t &b : bytes) {
            b = static_cast<uint8_t>(rng());
        }
        return bytes;
    }
    uint8_t bytes[10];
};

TEST(Uuid7Test, HasVersionSevenAndTheRfcVariant) {
    Uuid7Generator generator;
    RandomSource random;
    const uint8_t all_ones[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    const uint8_t all_zeros[10] = {};
    for (const uint8_t *bytes : {all_ones, all_zeros, random.Next()}) {
        Uuid uuid = generator.Next(1700000000000, bytes);
        EXPECT_EQ(uuid[6] >> 4, 7);
        EXPECT_EQ(uuid[8] >> 6, 2);  // 0b10
        std::string text = UuidToString(uuid);
        EXPECT_EQ(text[14], '7');
        EXPECT_TRUE(text[19] == '8' || text[19] == '9' || text[19] == 'a' || text[19] == 'b')
            << text;
    }
}

TEST(Uuid7Test, EmbedsTheTimestamp) {
    Uuid7Generator generator;
    RandomSource random;
    const int64_t ms = 1717171717171;  // 0x18fcf690433
    Uuid uuid = generator.Next(ms, random.Next());
    EXPECT_EQ(EmbeddedMs(uuid), ms);
    EXPECT_EQ(UuidToString(uuid).substr(0, 13), "018fcf69-0433");
    Uuid later = generator.Next(ms + 5, random.Next());
    EXPECT_EQ(EmbeddedMs(later), ms + 5);
}

TEST(Uuid7Test, UsesTheRandomBytes) {
    Uuid7Generator generator;
    const uint8_t bytes[10] = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x11, 0x22};
    Uuid uuid = generator.Next(1, bytes);
    EXPECT_EQ(uuid[8], 0x80 | 0x12);
    EXPECT_EQ(uuid[9], 0x34);
    EXPECT_EQ(uuid[15], 0xf0);
}

TEST(Uuid7Test, TextFormIsCanonical) {
    Uuid uuid{};
    for (int i = 0; i < 16; ++i) {
        uuid[i] = static_cast<uint8_t>(i * 17);
    }
    EXPECT_EQ(UuidToString(uuid), "00112233-4455-6677-8899-aabbccddeeff");
}

TEST(Uuid7Test, StrictlyIncreasingWithAFixedClock) {
    Uuid7Generator generator;
    RandomSource random;
    const int64_t ms = 1700000000000;
    Uuid previous = generator.Next(ms, random.Next());
    for (int i = 0; i < 100000; ++i) {
        Uuid next = generator.Next(ms, random.Next());
        ASSERT_LT(previous, next) << "call " << i;  // std::array compares bytewise
        previous = next;
    }
    // 100,000 ids in one millisecond borrow later milliseconds (4096 per millisecond), but not
    // more than needed.
    EXPECT_LE(EmbeddedMs(previous), ms + 100001 / 4096 + 1);
    EXPECT_GT(EmbeddedMs(previous), ms);
}

TEST(Uuid7Test, StrictlyIncreasingWhenTheClockStepsBack) {
    Uuid7Generator generator;
    RandomSource random;
    int64_t clock = 1700000000000;
    Uuid previous = generator.Next(clock, random.Next());
    std::set<std::string> seen;
    for (int i = 0; i < 100000; ++i) {
        // Mostly forward, with a step back of up to ten seconds every 1000 calls.
        clock += (i % 1000 == 999) ? -10000 : (i % 3 == 0 ? 1 : 0);
        Uuid next = generator.Next(clock, random.Next());
        ASSERT_LT(previous, next) << "call " << i;
        previous = next;
        seen.insert(UuidToString(next));
    }
    EXPECT_EQ(seen.size(), 100000u);
}

TEST(Uuid7Test, OutOfRangeClocksAreClamped) {
    Uuid7Generator generator;
    RandomSource random;
    Uuid negative = generator.Next(-5, random.Next());
    EXPECT_EQ(EmbeddedMs(negative), 0);
    Uuid huge = generator.Next(INT64_MAX, random.Next());
    EXPECT_EQ(EmbeddedMs(huge), (int64_t{1} << 48) - 1);
    EXPECT_EQ(huge[6] >> 4, 7);
}

}  // namespace
}  // namespace outbox
