// Backoff: every delay stays inside its window, whatever the inputs, and jitter uses all of it.
#include "outbox/backoff.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <vector>

namespace outbox {
namespace {

constexpr int64_t kInt64Max = INT64_MAX;

// The window's upper bound computed the slow, obviously right way.
int64_t ExpectedCeiling(int attempts, int64_t base, int64_t max) {
    long double ceiling = static_cast<long double>(base);
    for (int i = 1; i < attempts && ceiling <= max; ++i) {
        ceiling *= 2;
    }
    return ceiling > max ? max : static_cast<int64_t>(ceiling);
}

TEST(BackoffTest, StaysWithinTheWindowForAttemptsOneToHundred) {
    const uint64_t randoms[] = {0, 1, 12345, 0x8000000000000000ULL, UINT64_MAX - 1, UINT64_MAX};
    for (int attempts = 1; attempts <= 100; ++attempts) {
        int64_t ceiling = ExpectedCeiling(attempts, 1000, 300000);
        for (uint64_t random : randoms) {
            int64_t delay = BackoffDelayMs(attempts, 1000, 300000, random);
            EXPECT_GE(delay, 0) << "attempts " << attempts;
            EXPECT_LE(delay, ceiling) << "attempts " << attempts;
        }
    }
}

TEST(BackoffTest, WindowDoublesUntilTheMaximum) {
    // random == ceiling hits the top of the window exactly (random % (ceiling + 1)).
    EXPECT_EQ(BackoffDelayMs(1, 1000, 300000, 1000), 1000);
    EXPECT_EQ(BackoffDelayMs(2, 1000, 300000, 2000), 2000);
    EXPECT_EQ(BackoffDelayMs(3, 1000, 300000, 4000), 4000);
    EXPECT_EQ(BackoffDelayMs(9, 1000, 300000, 256000), 256000);
    EXPECT_EQ(BackoffDelayMs(10, 1000, 300000, 300000), 300000);
    EXPECT_EQ(BackoffDelayMs(100, 1000, 300000, 300000), 300000);
    // One past the top wraps to the bottom: the window has exactly ceiling + 1 values.
    EXPECT_EQ(BackoffDelayMs(3, 1000, 300000, 4001), 0);
    EXPECT_EQ(BackoffDelayMs(3, 1000, 300000, 0), 0);
}

TEST(BackoffTest, HugeInputsNeverOverflow) {
    const uint64_t randoms[] = {0, 1, kInt64Max, UINT64_MAX};
    const int attempts_list[] = {1, 2, 62, 63, 64, 65, 1000, INT_MAX};
    for (int attempts : attempts_list) {
        for (uint64_t random : randoms) {
            int64_t d = BackoffDelayMs(attempts, kInt64Max, kInt64Max, random);
            EXPECT_GE(d, 0);
            d = BackoffDelayMs(attempts, kInt64Max / 3, kInt64Max, random);
            EXPECT_GE(d, 0);
            d = BackoffDelayMs(attempts, 3, kInt64Max, random);
            EXPECT_GE(d, 0);
            EXPECT_LE(d, ExpectedCeiling(std::min(attempts, 70), 3, kInt64Max));
        }
    }
    // The largest window is reachable and not exceeded.
    EXPECT_EQ(BackoffDelayMs(INT_MAX, 1, kInt64Max, kInt64Max), kInt64Max);
    EXPECT_EQ(BackoffDelayMs(64, kInt64Max, kInt64Max, UINT64_MAX), kInt64Max);
}

TEST(BackoffTest, DegenerateSettings) {
    // base <= 0 disables backoff.
    EXPECT_EQ(BackoffDelayMs(5, 0, 1000, 999), 0);
    EXPECT_EQ(BackoffDelayMs(5, -10, 1000, 999), 0);
    // A maximum below the base is treated as the base.
    EXPECT_EQ(BackoffDelayMs(5, 100, 10, 100), 100);
    EXPECT_LE(BackoffDelayMs(5, 100, -1, UINT64_MAX), 100);
    // Attempts below 1 behave like the first attempt.
    EXPECT_EQ(BackoffDelayMs(0, 100, 1000, 100), 100);
    EXPECT_EQ(BackoffDelayMs(-7, 100, 1000, 101), 0);
    EXPECT_EQ(BackoffDelayMs(INT_MIN, 100, 1000, 100), 100);
}

TEST(BackoffTest, FullJitterCoversTheWholeWindow) {
    std::mt19937_64 rng(42);
    constexpr int64_t kCeiling = 800;  // attempts 4, base 100
    constexpr int kDraws = 100000;
    constexpr int kBuckets = 8;
    std::vector<int> buckets(kBuckets, 0);
    int64_t lowest = kCeiling, highest = 0;
    double sum = 0;
    for (int i = 0; i < kDraws; ++i) {
        int64_t d = BackoffDelayMs(4, 100, 10000, rng());
        ASSERT_GE(d, 0);
        ASSERT_LE(d, kCeiling);
        lowest = std::min(lowest, d);
        highest = std::max(highest, d);
        sum += static_cast<double>(d);
        ++buckets[std::min<int64_t>(d * kBuckets / (kCeiling + 1), kBuckets - 1)];
    }
    EXPECT_LE(lowest, 2);
    EXPECT_GE(highest, kCeiling - 2);
    EXPECT_NEAR(sum / kDraws, kCeiling / 2.0, 10.0);
    for (int count : buckets) {
        EXPECT_NEAR(count, kDraws / kBuckets, kDraws / kBuckets / 10);
    }
}

TEST(BackoffTest, RetryAfterWinsButIsCapped) {
    EXPECT_EQ(RetryDelayMs(1, 1000, 300000, 5000, UINT64_MAX), 5000);
    EXPECT_EQ(RetryDelayMs(50, 1000, 300000, 0, UINT64_MAX), 0);
    EXPECT_EQ(RetryDelayMs(1, 1000, 300000, 86400000, 0), 300000);
    EXPECT_EQ(RetryDelayMs(1, 1000, 300000, kInt64Max, 0), 300000);
    // Without a Retry-After it is the ordinary backoff.
    EXPECT_EQ(RetryDelayMs(3, 1000, 300000, -1, 4000), 4000);
    EXPECT_EQ(RetryDelayMs(3, 1000, 300000, -1, 4001), 0);
}

TEST(BackoffTest, OutageProbeDoublesWithoutJitterUpToTheMaximum) {
    EXPECT_EQ(OutageProbeDelayMs(1, 1000, 60000), 1000);
    EXPECT_EQ(OutageProbeDelayMs(2, 1000, 60000), 2000);
    EXPECT_EQ(OutageProbeDelayMs(6, 1000, 60000), 32000);
    EXPECT_EQ(OutageProbeDelayMs(7, 1000, 60000), 60000);
    EXPECT_EQ(OutageProbeDelayMs(INT_MAX, 1000, 60000), 60000);
    EXPECT_EQ(OutageProbeDelayMs(INT_MAX, kInt64Max, kInt64Max), kInt64Max);
    EXPECT_EQ(OutageProbeDelayMs(0, 1000, 60000), 1000);
    EXPECT_EQ(OutageProbeDelayMs(3, 0, 60000), 0);
    int64_t previous = 0;
    for (int failures = 1; failures <= 100; ++failures) {
        int64_t d = OutageProbeDelayMs(failures, 250, 300000);
        EXPECT_GE(d, previous);
        EXPECT_LE(d, 300000);
        previous = d;
    }
}

}  // namespace
}  // namespace outbox
