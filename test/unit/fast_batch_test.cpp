// FastBatchPlan: the fast path's decisions within one batch (src/pg/worker.cpp, FastBatch).
#include "outbox/fast_batch.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace outbox {
namespace {

ClaimRequest Request(const char *destination, int limit, bool ordered = false) {
    ClaimRequest r;
    r.destination = destination;
    r.limit = limit;
    r.ordered = ordered;
    r.hold_locks = true;
    return r;
}

TEST(FastBatchPlan, ClaimsFor50msOr100msWithAnOrderedDestinationAndNotAfterAReload) {
    FastBatchPlan plain({Request("a", 10), Request("b", 10)}, 1000);
    EXPECT_TRUE(plain.MayClaim(1000, false));
    EXPECT_TRUE(plain.MayClaim(1049, false));
    EXPECT_FALSE(plain.MayClaim(1050, false));
    EXPECT_FALSE(plain.MayClaim(1000, true));

    FastBatchPlan ordered({Request("a", 10), Request("k", 10, true)}, 1000);
    EXPECT_TRUE(ordered.MayClaim(1099, false));
    EXPECT_FALSE(ordered.MayClaim(1100, false));
}

TEST(FastBatchPlan, AShortClaimExhaustsItsRequestUntilTheLatch) {
    FastBatchPlan batch({Request("a", 10), Request("b", 10)}, 0);
    EXPECT_TRUE(batch.WantsClaim(0, 10));
    EXPECT_FALSE(batch.WantsClaim(0, 9));  // no room for a whole claim
    EXPECT_TRUE(batch.Claimed(0, 10));     // full: more are probably due
    EXPECT_TRUE(batch.WantsClaim(0, 10));
    EXPECT_FALSE(batch.Claimed(0, 3));
    EXPECT_FALSE(batch.WantsClaim(0, 100));
    EXPECT_TRUE(batch.WantsClaim(1, 10));
    batch.LatchSet();  // a producer committed
    EXPECT_TRUE(batch.WantsClaim(0, 10));
}

TEST(FastBatchPlan, AFailedWriteBackStopsItsDestinationEvenAfterTheLatch) {
    FastBatchPlan batch({Request("a", 10), Request("b", 10, true)}, 0);
    batch.WriteBackFailed("a");
    EXPECT_FALSE(batch.WantsClaim(0, 10));
    EXPECT_TRUE(batch.WantsClaim(1, 10));
    batch.LatchSet();
    EXPECT_FALSE(batch.WantsClaim(0, 10));
    batch.WrittenBack("a");  // not ordered: changes nothing
    EXPECT_FALSE(batch.WantsClaim(0, 10));
}

TEST(FastBatchPlan, AWrittenBackOrderedDestinationClaimsAgain) {
    FastBatchPlan batch({Request("plain", 10), Request("keys", 10, true)}, 0);
    batch.Claimed(0, 1);
    batch.Claimed(1, 1);
    EXPECT_FALSE(batch.WantsClaim(1, 10));
    batch.WrittenBack("plain");
    EXPECT_FALSE(batch.WantsClaim(0, 10));  // its next rows are not freed by a write-back
    batch.WrittenBack("keys");
    EXPECT_TRUE(batch.WantsClaim(1, 10));  // a head done lets its key's next go
    batch.WriteBackFailed("keys");
    batch.WrittenBack("keys");
    EXPECT_FALSE(batch.WantsClaim(1, 10));
}

TEST(FastBatchPlan, MoreToClaimNeedsClaimingRoomAndARequestNotExhausted) {
    FastBatchPlan batch({Request("a", 10), Request("b", 10)}, 0);
    auto room = [](size_t) { return true; };
    auto none = [](size_t) { return false; };
    EXPECT_TRUE(batch.MoreToClaim(true, room));
    EXPECT_FALSE(batch.MoreToClaim(false, room));
    EXPECT_FALSE(batch.MoreToClaim(true, none));
    batch.Claimed(0, 0);
    EXPECT_TRUE(batch.MoreToClaim(true, [](size_t i) { return i == 1; }));
    EXPECT_FALSE(batch.MoreToClaim(true, [](size_t i) { return i == 0; }));
}

TEST(FastBatchPlan, OverWhenNothingIsLockedOrLeftToClaimOrAt250ms) {
    FastBatchPlan batch({Request("a", 10)}, 1000);
    EXPECT_FALSE(batch.Over(1010, 0, true));   // may claim again
    EXPECT_TRUE(batch.Over(1010, 0, false));   // nothing locked, no more claims
    EXPECT_FALSE(batch.Over(1010, 5, false));  // waits for its acknowledgements
    EXPECT_TRUE(batch.Over(1250, 5, false));   // the rest is leased
    batch.Claimed(0, 0);
    EXPECT_TRUE(batch.Over(1010, 0, true));  // exhausted
}

TEST(FastBatchPlan, WaitsUntilTheNextTimeoutAtMostUntilTheEnd) {
    FastBatchPlan batch({Request("a", 10)}, 1000);
    EXPECT_EQ(batch.WaitMs(1100, 20, true), 0);  // more to claim: no wait
    EXPECT_EQ(batch.WaitMs(1100, 20, false), 20);
    EXPECT_EQ(batch.WaitMs(1100, 500, false), 150);
    EXPECT_EQ(batch.WaitMs(1100, -1, false), 150);
}

}  // namespace
}  // namespace outbox
