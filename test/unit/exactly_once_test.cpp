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
