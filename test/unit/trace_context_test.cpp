// W3C Trace Context values and the SQLCommenter comment, against the specifications' examples.
#include "outbox/trace_context.hpp"

#include <gtest/gtest.h>

#include <string>

namespace outbox {
namespace {

// The example of W3C Trace Context §3.2.
constexpr char kExample[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

TEST(Traceparent, TheSpecificationsExamplesAreValid) {
    EXPECT_TRUE(IsValidTraceparent(kExample));
    EXPECT_TRUE(IsValidTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
    // A later version may carry more fields after a '-'.
    EXPECT_TRUE(IsValidTraceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-xyz"));
}

TEST(Traceparent, MalformedValuesAreRefused) {
    for (const char *bad : {
             "",
             "00",
             "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",   // upper case
             "00-00000000000000000000000000000000-b7ad6b7169203331-01",   // zero trace-id
             "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",   // zero parent-id
             "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",   // version ff
             "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-",  // 00 is 55 chars
             "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",     // short trace-id
             "00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01",
             "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
             "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
             " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
         })
        EXPECT_FALSE(IsValidTraceparent(bad)) << bad;
}

TEST(Tracestate, Grammar) {
    EXPECT_TRUE(IsValidTracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
    EXPECT_TRUE(IsValidTracestate("rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE"));
    EXPECT_TRUE(IsValidTracestate("fw529a3039@dt=00f067aa0ba902b7"));
    EXPECT_TRUE(IsValidTracestate(""));
    EXPECT_FALSE(IsValidTracestate("Rojo=1"));            // keys are lower case
    EXPECT_FALSE(IsValidTracestate("rojo"));              // no value
    EXPECT_FALSE(IsValidTracestate("rojo=a=b"));          // '=' in the value
    EXPECT_FALSE(IsValidTracestate("rojo=caf\xc3\xa9"));  // not printable ASCII
    EXPECT_FALSE(IsValidTracestate(std::string(513, 'a')));
    std::string many;
    for (int i = 0; i < 33; ++i)
        many += (i ? ",k" : "k") + std::to_string(i) + "=v";
    EXPECT_FALSE(IsValidTracestate(many));  // more than 32 members
}

TEST(SqlCommenter, TheSpecificationsExample) {
    // The SQLCommenter specification's example statement.
    auto t = FindSqlCommenterTrace(
        "SELECT * FROM FOO /*action='%2Fparam*d',controller='index',framework='spring',"
        "traceparent='00-5bd66ef5095369c7b0d1f8f4bd33716a-c532cb4098ac3dd2-01',"
        "tracestate='congo%3Dt61rcWkgMzE%2Crojo%3D00f067aa0ba902b7'*/");
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->traceparent, "00-5bd66ef5095369c7b0d1f8f4bd33716a-c532cb4098ac3dd2-01");
    EXPECT_EQ(t->tracestate, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
}

TEST(SqlCommenter, TheLastCommentWithATraceparentCounts) {
    auto t = FindSqlCommenterTrace(
        "/*traceparent='00-11111111111111111111111111111111-1111111111111111-01'*/ INSERT INTO "
        "t VALUES (1) /* a note */ /*traceparent='" +
        std::string(kExample) + "'*/");
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->traceparent, kExample);
    EXPECT_EQ(t->tracestate, "");
}

TEST(SqlCommenter, LiteralsAndOtherCommentsAreNotComments) {
    std::string in_literal =
        "INSERT INTO t VALUES ('/*traceparent=''" + std::string(kExample) + "''*/')";
    EXPECT_FALSE(FindSqlCommenterTrace(in_literal).has_value());
    std::string in_identifier = "SELECT 1 AS \"/*traceparent='" + std::string(kExample) + "'*/\"";
    EXPECT_FALSE(FindSqlCommenterTrace(in_identifier).has_value());
    std::string in_line_comment = "SELECT 1 -- /*traceparent='" + std::string(kExample) + "'*/";
    EXPECT_FALSE(FindSqlCommenterTrace(in_line_comment).has_value());
    EXPECT_FALSE(FindSqlCommenterTrace("SELECT 1 /* traceparent is set below */").has_value());
    EXPECT_FALSE(FindSqlCommenterTrace("SELECT 1 /*traceparent='00-").has_value());
    EXPECT_FALSE(FindSqlCommenterTrace("").has_value());
}

TEST(SqlCommenter, NestedCommentsAndSpacing) {
    auto t = FindSqlCommenterTrace("SELECT 1 /* outer /* inner */ */ /*app='x', traceparent = '" +
                                   std::string(kExample) + "' */");
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->traceparent, kExample);
}

}  // namespace
}  // namespace outbox
