// "delivery": "exactly_once": lease tokens per worker, the marker's metadata, and the recovery
// decision (include/outbox/exactly_once.hpp).
#include <gtest/gtest.h>

#include <set>

#include "outbox/exactly_once.hpp"

using namespace outbox;

TEST(ExactlyOnce, TokensCarryTheWorkerAndNeverRepeat) {
    std::set<int64_t> seen;
    uint64_t base = 0x123456789abcdefULL;
    for (uint64_t i = 0; i < 10000; i++) {
        int64_t t = LeaseTokenFor(3, base + i);
        EXPECT_GT(t, 0);
        EXPECT_EQ(t & 1, 1);
        EXPECT_EQ(LeaseTokenWorker(t), 3);
        // Consecutive claims get different tokens (a marker names exactly one batch).
        EXPECT_TRUE(seen.insert(t).second) << i;
    }
    EXPECT_EQ(LeaseTokenWorker(LeaseTokenFor(0, ~uint64_t(0))), 0);
    EXPECT_EQ(LeaseTokenWorker(LeaseTokenFor(kMaxLeaseTokenWorkers - 1, 7)),
              kMaxLeaseTokenWorkers - 1);
    EXPECT_NE(LeaseTokenFor(1, 7), LeaseTokenFor(2, 7));
    EXPECT_EQ(LeaseTokenWorker(0), -1);
    EXPECT_EQ(LeaseTokenWorker(-1), -1);
}

TEST(ExactlyOnce, MarkerMetadataRoundTrips) {
    int64_t t = LeaseTokenFor(5, 99);
    EXPECT_EQ(ParseMarkerMetadata(MarkerMetadata(t)), t);
    EXPECT_EQ(ParseMarkerMetadata(""), std::nullopt);
    EXPECT_EQ(ParseMarkerMetadata("outbox-batch:"), std::nullopt);
    EXPECT_EQ(ParseMarkerMetadata("outbox-batch:12x"), std::nullopt);
    EXPECT_EQ(ParseMarkerMetadata("outbox-batch:-5"), std::nullopt);
    EXPECT_EQ(ParseMarkerMetadata("someone else's offset metadata"), std::nullopt);
}

TEST(ExactlyOnce, RecoveryDeletesTheMarkersBatchAndReleasesTheRest) {
    // Rows leased under three batches; the marker names the second: it committed.
    RecoveryPlan plan = PlanRecovery(22, {11, 11, 22, 22, 22, 33});
    EXPECT_EQ(plan.delivered, (std::vector<int64_t>{22}));
    EXPECT_EQ(plan.released, (std::vector<int64_t>{11, 33}));
}

TEST(ExactlyOnce, RecoveryWithoutMarkerReleasesEverything) {
    RecoveryPlan plan = PlanRecovery(0, {11, 33});
    EXPECT_TRUE(plan.delivered.empty());
    EXPECT_EQ(plan.released, (std::vector<int64_t>{11, 33}));
}

TEST(ExactlyOnce, AMarkerOfABatchAlreadyWrittenBackSettlesNothingTwice) {
    // The committed batch's rows were deleted by the write-back before the crash: only the
    // batch after it, never committed, is leased.
    RecoveryPlan plan = PlanRecovery(22, {33, 33});
    EXPECT_TRUE(plan.delivered.empty());
    EXPECT_EQ(plan.released, (std::vector<int64_t>{33}));
}

TEST(ExactlyOnce, ForeignLeasesAreGroupedByTheWorkerThatMadeThem) {
    int64_t a1 = LeaseTokenFor(1, 10), a2 = LeaseTokenFor(1, 11);
    int64_t b1 = LeaseTokenFor(4, 10);
    int64_t own = LeaseTokenFor(0, 12);
    std::vector<ForeignLeases> found = GroupForeignLeases(0, {b1, a1, own, a2, a1, 0, -1});
    ASSERT_EQ(found.size(), 2u);
    EXPECT_EQ(found[0].worker_index, 1);
    EXPECT_EQ(found[0].tokens, (std::vector<int64_t>{a1, a2}));
    EXPECT_EQ(found[1].worker_index, 4);
    EXPECT_EQ(found[1].tokens, (std::vector<int64_t>{b1}));
    // Its own lapsed leases are never adopted: its own marker settles them.
    EXPECT_TRUE(GroupForeignLeases(1, {a1, a2}).empty());
}

TEST(ExactlyOnce, TheClaimsTagIsTheTokensHighBits) {
    for (int index : {0, 1, 7, kMaxLeaseTokenWorkers - 1})
        EXPECT_EQ(LeaseTokenFor(index, 12345) >> kLeaseTokenWorkerShift, LeaseTokenTag(index));
}

TEST(ExactlyOnce, OnlyExactlyOnceClaimsLeaveOtherWorkersLapsedLeasesAlone) {
    int64_t t = LeaseTokenFor(3, 99);
    EXPECT_EQ(ClaimWorkerTag(true, t), LeaseTokenTag(3));
    EXPECT_EQ(ClaimWorkerTag(false, t), 0);
    EXPECT_EQ(ClaimWorkerTag(true, 0), 0);  // the fast path's locks: never exactly-once
}
