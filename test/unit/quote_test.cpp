#include <gtest/gtest.h>

#include <string>

#include "outbox/quote.hpp"

using outbox::kMaxQuotedBytes;
using outbox::kQuotedBufferSize;
using outbox::QuoteText;

static std::string Quoted(std::string_view text) {
    char out[kQuotedBufferSize];
    QuoteText(text, out);
    return out;
}

TEST(QuoteTest, ShortTextIsQuotedWhole) {
    EXPECT_EQ(Quoted("orders"), "\"orders\"");
    EXPECT_EQ(Quoted(""), "\"\"");
    EXPECT_EQ(Quoted("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
}

TEST(QuoteTest, QuotesBackslashesAndControlsCannotBreakTheLine) {
    EXPECT_EQ(Quoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
    EXPECT_EQ(Quoted("x\r\nLOG:  forged"), "\"x??LOG:  forged\"");
    EXPECT_EQ(Quoted(std::string("a\0b\x7f", 4)), "\"a?b?\"");
}

TEST(QuoteTest, LongTextIsCutOnACharacterBoundaryAndMarked) {
    EXPECT_EQ(Quoted(std::string(100, 'n')), "\"" + std::string(kMaxQuotedBytes, 'n') + "...\"");
    // 'é' is two bytes: 63 bytes of 'a' then 'é' straddles the 64-byte cut.
    std::string text = std::string(63, 'a') + "\xc3\xa9" + "tail";
    EXPECT_EQ(Quoted(text), "\"" + std::string(63, 'a') + "...\"");
    std::string all_escaped(200, '"');
    std::string expected = "\"";
    for (size_t i = 0; i < kMaxQuotedBytes; i++)
        expected += "\\\"";
    EXPECT_EQ(Quoted(all_escaped), expected + "...\"");
}
