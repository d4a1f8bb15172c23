// The record -> outbox.inbox_message rules (include/outbox/inbox_record.hpp).
#include "outbox/inbox_record.hpp"

#include <gtest/gtest.h>

namespace outbox {
namespace {

TEST(InboxRecord, JsonbTextIsCheckedAsJsonbWould) {
    for (const char *ok : {"{}", "[]", " {\"a\": [1, 2.5e-3, true, false, null]} ", "\"x\"", "0",
                           "-1.0E+2", "{\"k\":\"\\u00e9\\ud83d\\ude00 \xC3\xA9\"}"})
        EXPECT_TRUE(IsJsonbText(ok)) << ok;
    for (const char *bad : {"",
                            " ",
                            "{",
                            "{\"a\":}",
                            "[1,]",
                            "01",
                            "1.",
                            "-",
                            "tru",
                            "{\"a\" 1}",
                            "\"\\u0000\"",
                            "\"\\ud800\"",
                            "\"\\udc00\"",
                            "\"\\x\"",
                            "\"\xC3\"",
                            "\"\xC0\xAF\"",
                            "{} {}",
                            "'a'",
                            "\"tab\there\"",
                            "NaN"})
        EXPECT_FALSE(IsJsonbText(bad)) << bad;
    EXPECT_TRUE(IsJsonbText(std::string(1000, '[') + std::string(1000, ']')));
    EXPECT_FALSE(IsJsonbText(std::string(1002, '[') + std::string(1002, ']')));
}

TEST(InboxRecord, PayloadFollowsTheContentTypeAndTheBytes) {
    Headers none;
    EXPECT_EQ(ClassifyPayload(std::nullopt, none), PayloadKind::Null);
    EXPECT_EQ(ClassifyPayload(std::string("{\"a\":1}"), none), PayloadKind::Json);
    EXPECT_EQ(ClassifyPayload(std::string("\x01\x02"), none), PayloadKind::Bytes);
    EXPECT_EQ(
        ClassifyPayload(std::string("{\"a\":1}"), {{"Content-Type", "application/octet-stream"}}),
        PayloadKind::Bytes);
    EXPECT_EQ(ClassifyPayload(std::string("{\"a\":1}"),
                              {{"content-type", "application/json; charset=utf-8"}}),
              PayloadKind::Json);
    EXPECT_EQ(ClassifyPayload(std::string("{\"a\":1}"),
                              {{"content-type", "application/cloudevents+json"}}),
              PayloadKind::Json);
    // Declared JSON that is not: bytes, nothing lost.
    EXPECT_EQ(ClassifyPayload(std::string("{oops"), {{"content-type", "application/json"}}),
              PayloadKind::Bytes);
    EXPECT_EQ(ClassifyPayload(std::string(""), none), PayloadKind::Bytes);
}

TEST(InboxRecord, HeadersBecomeAJsonObject) {
    EXPECT_EQ(HeadersJson({}), "{}");
    EXPECT_EQ(HeadersJson({{"ce_id", "1"}, {"x", "a\"b\\c\n"}}),
              "{\"ce_id\":\"1\",\"x\":\"a\\\"b\\\\c\\n\"}");
    EXPECT_EQ(HeadersJson({{"t", "1"}, {"u", "2"}, {"t", "3"}}),
              "{\"t\":[\"1\",\"3\"],\"u\":\"2\"}");
    std::string binary("a\xFF\x00z", 4);
    EXPECT_EQ(HeadersJson({{"b", binary}}), "{\"b\":\"a\xEF\xBF\xBD\\ufffdz\"}");
    EXPECT_TRUE(IsJsonbText(HeadersJson({{"b", binary}, {"\x01", "\x1f"}})));
}

}  // namespace
}  // namespace outbox
