// Retry-After: delay-seconds and all three HTTP-date forms, relative to "now".
#include "outbox/brokers/webhook/retry_after.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

namespace outbox {
namespace {

constexpr int64_t kOct21_2015_0728 = 1445412480LL * 1000;  // Wed, 21 Oct 2015 07:28:00 GMT
constexpr int64_t kNov6_1994_084937 = 784111777LL * 1000;  // Sun, 06 Nov 1994 08:49:37 GMT
constexpr int64_t kJan1_2024 = 1704067200LL * 1000;
constexpr int64_t kJan1_2030 = 1893456000LL * 1000;

TEST(RetryAfterTest, DelaySeconds) {
    EXPECT_EQ(ParseRetryAfterMs("120", kJan1_2024), 120000);
    EXPECT_EQ(ParseRetryAfterMs("0", kJan1_2024), 0);
    EXPECT_EQ(ParseRetryAfterMs("007", kJan1_2024), 7000);
    EXPECT_EQ(ParseRetryAfterMs(" 5\t", kJan1_2024), 5000);  // optional whitespace around
}

TEST(RetryAfterTest, HugeDelaySecondsSaturateInsteadOfOverflowing) {
    std::optional<int64_t> ms = ParseRetryAfterMs("99999999999999999999999999", kJan1_2024);
    ASSERT_TRUE(ms.has_value());
    EXPECT_GT(*ms, int64_t{1} << 60);
    ms = ParseRetryAfterMs("9223372036854775807", kJan1_2024);
    ASSERT_TRUE(ms.has_value());
    EXPECT_GT(*ms, 0);
}

TEST(RetryAfterTest, ImfFixdate) {
    EXPECT_EQ(ParseRetryAfterMs("Wed, 21 Oct 2015 07:28:00 GMT", kOct21_2015_0728 - 30000), 30000);
    EXPECT_EQ(ParseRetryAfterMs("Sun, 06 Nov 1994 08:49:37 GMT", kNov6_1994_084937 - 1500), 1500);
    EXPECT_EQ(ParseRetryAfterMs("Thu, 29 Feb 2024 12:00:00 GMT", 1709208000LL * 1000 - 1), 1);
}

TEST(RetryAfterTest, Rfc850Date) {
    EXPECT_EQ(ParseRetryAfterMs("Wednesday, 21-Oct-15 07:28:00 GMT", kOct21_2015_0728 - 60000),
              60000);
    EXPECT_EQ(ParseRetryAfterMs("Sunday, 06-Nov-94 08:49:37 GMT", kNov6_1994_084937 - 1000), 1000);
}

TEST(RetryAfterTest, Rfc850TwoDigitYearsFollowTheFiftyYearRule) {
    // From 2024, "30" is 2030 (6 years ahead) but "99" is 1999, not 2099 (75 years ahead).
    EXPECT_EQ(ParseRetryAfterMs("Tuesday, 01-Jan-30 00:00:00 GMT", kJan1_2024),
              kJan1_2030 - kJan1_2024);
    EXPECT_EQ(ParseRetryAfterMs("Friday, 01-Jan-99 00:00:00 GMT", kJan1_2024), 0);
    // "72" is 2072 (48 years ahead), where libcurl alone would read 1972.
    EXPECT_EQ(ParseRetryAfterMs("Friday, 01-Jan-72 00:00:00 GMT", kJan1_2024),
              3218832000LL * 1000 - kJan1_2024);
}

TEST(RetryAfterTest, AsctimeDate) {
    EXPECT_EQ(ParseRetryAfterMs("Wed Oct 21 07:28:00 2015", kOct21_2015_0728 - 2000), 2000);
    // Single-digit days are padded with a space.
    EXPECT_EQ(ParseRetryAfterMs("Sun Nov  6 08:49:37 1994", kNov6_1994_084937 - 3000), 3000);
}

TEST(RetryAfterTest, PastDateMeansNow) {
    EXPECT_EQ(ParseRetryAfterMs("Wed, 21 Oct 2015 07:28:00 GMT", kJan1_2024), 0);
    EXPECT_EQ(ParseRetryAfterMs("Wed, 21 Oct 2015 07:28:00 GMT", kOct21_2015_0728), 0);
    EXPECT_EQ(ParseRetryAfterMs("Sun Nov  6 08:49:37 1994", kJan1_2024), 0);
}

TEST(RetryAfterTest, GarbageIsRejected) {
    const char *garbage[] = {
        "",
        "   ",
        "soon",
        "-5",
        "+5",
        "1.5",
        "12a",
        "12 34",
        "0x10",
        "Wed, 21 Oct 2015 07:28:00 UTC",       // only GMT
        "Wed, 21 Oct 2015 07:28:00",           // zone missing
        "Wed, 21 Oct 15 07:28:00 GMT",         // two-digit year in the IMF form
        "Wed, 21 Oct 2015 07:28:00 GMT junk",  // trailing text
        "Wed, 31 Feb 2015 07:28:00 GMT",       // no such day
        "Wed, 29 Feb 2023 07:28:00 GMT",       // not a leap year
        "Wed, 00 Oct 2015 07:28:00 GMT",
        "Wed, 21 Foo 2015 07:28:00 GMT",
        "Wed, 21 Oct 2015 24:00:00 GMT",
        "Wed, 21 Oct 2015 07:60:00 GMT",
        "Wed, 21 Oct 2015 7:28:00 GMT",
        "Xyz, 21 Oct 2015 07:28:00 GMT",
        "Wed 21 Oct 2015 07:28:00 GMT",
        "Wednesday, 21-Oct-2015 07:28:00 GMT",
        "Wed Oct 21 07:28:00 15",
        "Wed Oct 21 07:28:00 2015 GMT",
        "2015-10-21T07:28:00Z",
    };
    for (const char *value : garbage) {
        EXPECT_EQ(ParseRetryAfterMs(value, kJan1_2024), std::nullopt) << "\"" << value << "\"";
    }
}

}  // namespace
}  // namespace outbox
