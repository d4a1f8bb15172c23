// The one UTF-8 sequence rule (include/outbox/utf8.hpp).
#include "outbox/utf8.hpp"

#include <gtest/gtest.h>

#include <string_view>

namespace outbox {
namespace {

size_t LengthOf(std::string_view s) {
    return Utf8SequenceLength(s, 0);
}

TEST(Utf8SequenceLength, ValidSequencesAtEveryBoundary) {
    EXPECT_EQ(LengthOf(std::string_view("\0", 1)), 1u);
    EXPECT_EQ(LengthOf("A"), 1u);
    EXPECT_EQ(LengthOf("\x7F"), 1u);
    EXPECT_EQ(LengthOf("\xC2\x80"), 2u);          // U+0080
    EXPECT_EQ(LengthOf("\xC3\xA9"), 2u);          // é
    EXPECT_EQ(LengthOf("\xDF\xBF"), 2u);          // U+07FF
    EXPECT_EQ(LengthOf("\xE0\xA0\x80"), 3u);      // U+0800
    EXPECT_EQ(LengthOf("\xE2\x82\xAC"), 3u);      // €
    EXPECT_EQ(LengthOf("\xED\x9F\xBF"), 3u);      // U+D7FF, below the surrogates
    EXPECT_EQ(LengthOf("\xEE\x80\x80"), 3u);      // U+E000, above them
    EXPECT_EQ(LengthOf("\xEF\xBF\xBF"), 3u);      // U+FFFF
    EXPECT_EQ(LengthOf("\xF0\x90\x80\x80"), 4u);  // U+10000
    EXPECT_EQ(LengthOf("\xF0\x9F\x98\x80"), 4u);  // 😀
    EXPECT_EQ(LengthOf("\xF4\x8F\xBF\xBF"), 4u);  // U+10FFFF
}

TEST(Utf8SequenceLength, InvalidSequencesAreZero) {
    for (std::string_view bad : {
             "\x80",              // a continuation byte without a lead
             "\xBF",              //
             "\xC0\x80",          // overlong U+0000
             "\xC1\xBF",          // overlong U+007F
             "\xE0\x9F\xBF",      // overlong U+07FF
             "\xF0\x8F\xBF\xBF",  // overlong U+FFFF
             "\xED\xA0\x80",      // U+D800, a surrogate
             "\xED\xBF\xBF",      // U+DFFF
             "\xF4\x90\x80\x80",  // U+110000, above the last code point
             "\xF5\x80\x80\x80",  // leads that only such forms use
             "\xF8\x88\x80\x80",  //
             "\xFF",              //
             "\xC3\x28",          // a lead followed by no continuation
             "\xE2\x82\x28",      //
             "\xF0\x9F\x98\x28",  //
         })
        EXPECT_EQ(LengthOf(bad), 0u) << testing::PrintToString(std::string(bad));
}

TEST(Utf8SequenceLength, ASequenceCutOffByTheEndIsZero) {
    EXPECT_EQ(LengthOf("\xC3"), 0u);
    EXPECT_EQ(LengthOf("\xE2\x82"), 0u);
    EXPECT_EQ(LengthOf("\xF0\x9F\x98"), 0u);
    // The end of the view counts, not a terminator behind it.
    EXPECT_EQ(Utf8SequenceLength(std::string_view("\xE2\x82\xAC", 2), 0), 0u);
}

TEST(Utf8SequenceLength, ReadsAtTheGivenOffset) {
    std::string_view s = "a\xC3\xA9\xE2\x82\xAC\x80";
    EXPECT_EQ(Utf8SequenceLength(s, 0), 1u);
    EXPECT_EQ(Utf8SequenceLength(s, 1), 2u);
    EXPECT_EQ(Utf8SequenceLength(s, 2), 0u);  // inside é
    EXPECT_EQ(Utf8SequenceLength(s, 3), 3u);
    EXPECT_EQ(Utf8SequenceLength(s, 6), 0u);
}

}  // namespace
}  // namespace outbox
