// Config durations: the units a DBA writes in postgresql.conf, in whole milliseconds.
#include "outbox/duration.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

namespace outbox {
namespace {

TEST(DurationTest, EveryUnit) {
    EXPECT_EQ(ParseDurationMs("250ms"), 250);
    EXPECT_EQ(ParseDurationMs("2s"), 2000);
    EXPECT_EQ(ParseDurationMs("5min"), 300000);
    EXPECT_EQ(ParseDurationMs("2h"), 7200000);
    EXPECT_EQ(ParseDurationMs("1d"), 86400000);
    EXPECT_EQ(ParseDurationMs("3000"), 3000);  // no unit: milliseconds
    EXPECT_EQ(ParseDurationMs("0"), 0);
    EXPECT_EQ(ParseDurationMs("0s"), 0);
}

TEST(DurationTest, FractionsRoundDown) {
    EXPECT_EQ(ParseDurationMs("1.5s"), 1500);
    EXPECT_EQ(ParseDurationMs("0.5min"), 30000);
    EXPECT_EQ(ParseDurationMs("1.9ms"), 1);
    EXPECT_EQ(ParseDurationMs("0.0009s"), 0);
    EXPECT_EQ(ParseDurationMs("0.0019s"), 1);
    EXPECT_EQ(ParseDurationMs("1.25h"), 4500000);
    // A long fraction must not lose a millisecond it reached exactly (1/3 of a second is
    // 333.33 ms; 0.001 s is exactly 1 ms however many zeros follow).
    EXPECT_EQ(ParseDurationMs("0.3333333333333333333333333s"), 333);
    EXPECT_EQ(ParseDurationMs("0.00100000000000000000000000s"), 1);
    EXPECT_EQ(ParseDurationMs("0.99999999999999999999999999s"), 999);
}

TEST(DurationTest, SpacesAroundAndBeforeTheUnit) {
    EXPECT_EQ(ParseDurationMs("  2s  "), 2000);
    EXPECT_EQ(ParseDurationMs("2 s"), 2000);
    EXPECT_EQ(ParseDurationMs("\t1.5 min\t"), 90000);
    EXPECT_EQ(ParseDurationMs(" 42 "), 42);
}

TEST(DurationTest, RejectsNegativeEmptyUnknownAndMalformed) {
    const char *invalid[] = {
        "",    "   ", "-1",    "-1s",    "+1s", "s",    "ms",   "1m",    "1sec", "1S",   "1 d d",
        "1.s", ".5s", "1..5s", "1.5.5s", "1e3", "0x10", "1,5s", "1s ms", "five", "1 2s",
    };
    for (const char *text : invalid) {
        EXPECT_EQ(ParseDurationMs(text), std::nullopt) << "\"" << text << "\"";
    }
}

TEST(DurationTest, OverflowIsRejected) {
    EXPECT_EQ(ParseDurationMs("9223372036854775807"), INT64_MAX);
    EXPECT_EQ(ParseDurationMs("9223372036854775808"), std::nullopt);
    EXPECT_EQ(ParseDurationMs("99999999999999999999999ms"), std::nullopt);
    EXPECT_EQ(ParseDurationMs("106751991168d"), std::nullopt);
    EXPECT_EQ(ParseDurationMs("106751991167d"), 106751991167LL * 86400000);
    EXPECT_EQ(ParseDurationMs("9223372036854775.807s"), INT64_MAX);
    EXPECT_EQ(ParseDurationMs("9223372036854775.808s"), std::nullopt);
}

}  // namespace
}  // namespace outbox
