// Header rules: names are HTTP tokens, values cannot inject header lines and are strict UTF-8,
// and the relay's own headers cannot be overridden in any letter case.
#include "outbox/headers.hpp"

#include <gtest/gtest.h>

#include <string>

namespace outbox {
namespace {

TEST(HeadersTest, TokenNamesAreValid) {
    for (const char *name : {"x-request-id", "X-Request-Id", "Authorization", "a", "x_y", "A1",
                             "!#$%&'*+-.^_`|~", "content-type"}) {
        EXPECT_TRUE(IsValidHeaderName(name)) << name;
    }
    EXPECT_TRUE(IsValidHeaderName(std::string(kMaxHeaderNameBytes, 'a')));
}

TEST(HeadersTest, NonTokenNamesAreInvalid) {
    for (const char *name : {"", "x y", "x:y", "x\ty", "x\r\ny", "(x)", "x/y", "x@y", "x\"y", "x,y",
                             "x;y", "x=y", "x{y}", "x[y]", "x?y", "x\\y", "caf\xc3\xa9", "\x7f"}) {
        EXPECT_FALSE(IsValidHeaderName(name)) << name;
    }
    EXPECT_FALSE(IsValidHeaderName(std::string("a\0b", 3)));
    EXPECT_FALSE(IsValidHeaderName(std::string(kMaxHeaderNameBytes + 1, 'a')));
}

TEST(HeadersTest, ValuesMayBeAnyUtf8Text) {
    for (const char *value :
         {"", "plain", "Bearer abc.def", " spaced \t tabbed ", "caf\xc3\xa9", "\xe2\x82\xac",
          "\xf0\x9f\x98\x80", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf" /* U+10FFFF */,
          "\xed\x9f\xbf" /* U+D7FF */, "\xee\x80\x80" /* U+E000 */}) {
        EXPECT_TRUE(IsValidHeaderValue(value)) << value;
    }
    EXPECT_TRUE(IsValidHeaderValue(std::string(kMaxHeaderValueBytes, 'v')));
}

TEST(HeadersTest, ValuesCannotInjectLines) {
    EXPECT_FALSE(IsValidHeaderValue("a\r\nX-Injected: 1"));
    EXPECT_FALSE(IsValidHeaderValue("a\nb"));
    EXPECT_FALSE(IsValidHeaderValue("a\rb"));
    EXPECT_FALSE(IsValidHeaderValue(std::string("a\0b", 3)));
    EXPECT_FALSE(IsValidHeaderValue(std::string(1, '\0')));
    EXPECT_FALSE(IsValidHeaderValue(std::string(kMaxHeaderValueBytes + 1, 'v')));
}

TEST(HeadersTest, ValuesHaveNoControlCharactersButTab) {
    for (const char *value : {"a\x01!", "\x1b[31mred", "del\x7f", "\x0b", "\x0c"})
        EXPECT_FALSE(IsValidHeaderValue(value)) << testing::PrintToString(std::string(value));
    EXPECT_TRUE(IsValidHeaderValue("a\tb"));
}

TEST(HeadersTest, InvalidUtf8IsRejected) {
    const char *invalid[] = {
        "\x80",  // lone continuation byte
        "abc\xbf",
        "\xc3",                      // truncated two-byte sequence
        "\xe2\x82",                  // truncated three-byte sequence
        "\xf0\x9f\x98",              // truncated four-byte sequence
        "\xc0\xaf",                  // overlong '/'
        "\xc1\xbf",                  // overlong
        "\xe0\x80\xaf",              // overlong '/' in three bytes
        "\xe0\x9f\xbf",              // overlong U+07FF
        "\xf0\x80\x80\xaf",          // overlong '/' in four bytes
        "\xf0\x8f\xbf\xbf",          // overlong U+FFFF
        "\xed\xa0\x80",              // lone high surrogate U+D800
        "\xed\xbf\xbf",              // lone low surrogate U+DFFF
        "\xed\xa0\xbd\xed\xb8\x80",  // surrogate pair in CESU-8
        "\xf4\x90\x80\x80",          // U+110000
        "\xf5\x80\x80\x80",
        "\xff",
        "\xfe\xfe",
        "\xc3\x28",  // bad continuation
        "\xe2\x28\xa1",
    };
    for (const char *value : invalid) {
        EXPECT_FALSE(IsValidHeaderValue(value)) << testing::PrintToString(std::string(value));
    }
}

TEST(HeadersTest, ReservedNamesInAnyCase) {
    for (const char *name : {"webhook-id",
                             "Webhook-Id",
                             "WEBHOOK-TIMESTAMP",
                             "webhook-Signature",
                             "ce-id",
                             "CE-Type",
                             "ce-source",
                             "Ce-Time",
                             "ce-specversion",
                             "ce_id",
                             "CE_TYPE",
                             "ce_source",
                             "ce_time",
                             "Ce_SpecVersion",
                             "host",
                             "HOST",
                             "Content-Length",
                             "transfer-encoding",
                             "Connection",
                             "keep-alive",
                             "TE",
                             "trailer",
                             "Upgrade",
                             "expect",
                             "Proxy-Authorization",
                             "proxy-connection",
                             "PROXY-anything"}) {
        EXPECT_TRUE(IsReservedHeaderName(name)) << name;
    }
}

TEST(HeadersTest, OrdinaryNamesAreNotReserved) {
    for (const char *name :
         {"x-webhook-id", "webhook-idx", "ce-idx", "ce-data", "hostname", "x-host", "content-type",
          "authorization", "proxy", "te-x", "t", "ce", "", "expected"}) {
        EXPECT_FALSE(IsReservedHeaderName(name)) << name;
    }
}

}  // namespace
}  // namespace outbox
