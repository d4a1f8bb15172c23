// Key floors: learnt only from a walk that no reordering transaction overlapped, dropped when
// the generation, the index storage or their age says they may no longer hold.
#include "outbox/key_floors.hpp"

#include <gtest/gtest.h>

namespace outbox {
namespace {

constexpr uint32_t kIndex = 16384;
constexpr int64_t kNoFloor = -1;

int64_t FloorOf(const KeyFloors &f, int64_t key) {
    const KeyFloors::Floor *floor = f.Find(key);
    return floor ? floor->id : kNoFloor;
}

TEST(KeyFloorsTest, LearnsTheHeadsOfAWalkUnderOneGeneration) {
    KeyFloors f;
    EXPECT_FALSE(f.Usable(7, false, kIndex, 0));  // nothing learnt yet
    f.Found(1, 100, {});
    f.Found(2, 205, {});
    f.Learn(7, 7, false, kIndex, 0);
    EXPECT_EQ(f.size(), 2u);
    EXPECT_TRUE(f.Usable(7, false, kIndex, 1));
    EXPECT_EQ(FloorOf(f, 1), 100);
    EXPECT_EQ(FloorOf(f, 2), 205);
    EXPECT_EQ(FloorOf(f, 3), kNoFloor);
}

TEST(KeyFloorsTest, LearnsNothingWhenTheGenerationMovedOrAReorderingRan) {
    KeyFloors f;
    f.Found(1, 100, {});
    f.Learn(7, 8, false, kIndex, 0);  // a requeue began or ended during the walk
    EXPECT_EQ(f.size(), 0u);
    f.Found(1, 100, {});
    f.Learn(7, 7, true, kIndex, 0);  // one was running after it
    EXPECT_EQ(f.size(), 0u);
    // What a refused walk found is not kept for a later one.
    f.Learn(7, 7, false, kIndex, 0);
    EXPECT_EQ(f.size(), 0u);
}

TEST(KeyFloorsTest, ANewGenerationDropsEveryFloor) {
    KeyFloors f;
    f.Found(1, 100, {});
    f.Learn(7, 7, false, kIndex, 0);
    EXPECT_FALSE(f.Usable(8, false, kIndex, 1));
    EXPECT_EQ(f.size(), 0u);
    // Learnt again under the new one, the old floors do not come back.
    f.Found(2, 300, {});
    f.Learn(8, 8, false, kIndex, 2);
    EXPECT_EQ(FloorOf(f, 1), kNoFloor);
    EXPECT_EQ(FloorOf(f, 2), 300);
}

TEST(KeyFloorsTest, AWalkUnderAnotherGenerationReplacesTheFloors) {
    KeyFloors f;
    f.Found(1, 100, {});
    f.Learn(7, 7, false, kIndex, 0);
    f.Found(2, 300, {});
    f.Learn(9, 9, false, kIndex, 1);
    EXPECT_EQ(FloorOf(f, 1), kNoFloor);
    EXPECT_EQ(FloorOf(f, 2), 300);
}

TEST(KeyFloorsTest, AReorderingRunningNowKeepsThemUnusedButKept) {
    KeyFloors f;
    f.Found(1, 100, {});
    f.Learn(7, 7, false, kIndex, 0);
    EXPECT_FALSE(f.Usable(7, true, kIndex, 1));
    EXPECT_EQ(f.size(), 1u);
}

TEST(KeyFloorsTest, NewIndexStorageOrAgeDropsThem) {
    KeyFloors f;
    f.Found(1, 100, {});
    f.Learn(7, 7, false, kIndex, 0);
    EXPECT_FALSE(f.Usable(7, false, kIndex + 1, 1));  // truncated or reindexed
    EXPECT_EQ(f.size(), 0u);
    f.Found(1, 100, {});
    f.Learn(7, 7, false, kIndex, 1000);
    EXPECT_TRUE(f.Usable(7, false, kIndex, 1000 + KeyFloors::kMaxAgeMs));
    EXPECT_FALSE(f.Usable(7, false, kIndex, 1001 + KeyFloors::kMaxAgeMs));
    EXPECT_EQ(f.size(), 0u);
    f.Found(1, 100, {});
    f.Learn(7, 7, false, kIndex, 5000);
    EXPECT_FALSE(f.Usable(7, false, kIndex, 4999));  // the clock went back
}

TEST(KeyFloorsTest, ARemovedHeadRaisesOnlyTheFloorLearntFromIt) {
    KeyFloors f;
    f.Found(1, 100, {});
    f.Found(2, 200, {});
    f.Learn(7, 7, false, kIndex, 0);
    f.Removed(1, 100);
    EXPECT_EQ(FloorOf(f, 1), 101);
    f.Removed(2, 150);  // not the head the floor came from (a requeued one, say)
    EXPECT_EQ(FloorOf(f, 2), 200);
    f.Removed(3, 1);  // no floor
    EXPECT_EQ(FloorOf(f, 3), kNoFloor);
}

TEST(KeyFloorsTest, ALaterWalkMovesAFloorEitherWay) {
    // Found heads are what the walk saw, not bounds to keep: the walk started at the floor.
    KeyFloors f;
    f.Found(1, 100, {});
    f.Learn(7, 7, false, kIndex, 0);
    f.Found(1, 140, {});
    f.Learn(7, 7, false, kIndex, 1);
    EXPECT_EQ(FloorOf(f, 1), 140);
}

TEST(KeyFloorsTest, KeepsWhereTheHeadAndTheLastEntryWere) {
    KeyFloors f;
    f.Found(1, 100, {7, 3});
    f.LastEntryAt({8, 1});
    f.Found(2, 200, {8, 5});  // its last entry not seen
    f.Learn(7, 7, false, kIndex, 0);
    const KeyFloors::Floor *one = f.Find(1);
    ASSERT_NE(one, nullptr);
    EXPECT_EQ(one->head.block, 7u);
    EXPECT_EQ(one->head.offset, 3);
    EXPECT_EQ(one->last.block, 8u);
    EXPECT_EQ(one->last.offset, 1);
    EXPECT_TRUE(f.Find(2)->head.known());
    EXPECT_FALSE(f.Find(2)->last.known());
    // A removed head leaves the hints as they were (its entry stays until VACUUM).
    f.Removed(1, 100);
    EXPECT_EQ(f.Find(1)->id, 101);
    EXPECT_EQ(f.Find(1)->head.offset, 3);
    // A key's next walk replaces them.
    f.Found(1, 101, {7, 4});
    f.Learn(7, 7, false, kIndex, 1);
    EXPECT_EQ(f.Find(1)->head.offset, 4);
    EXPECT_FALSE(f.Find(1)->last.known());
}

TEST(KeyFloorsTest, ClearForgetsFloorsAndWhatAWalkFound) {
    KeyFloors f;
    f.Found(1, 100, {});
    f.Learn(7, 7, false, kIndex, 0);
    f.Found(2, 200, {});
    f.Clear();
    f.Learn(7, 7, false, kIndex, 1);
    EXPECT_EQ(f.size(), 0u);
}

TEST(KeyFloorsTest, KeepsAtMostMaxKeys) {
    KeyFloors f;
    for (int64_t k = 0; k < int64_t(KeyFloors::kMaxKeys) + 10; k++)
        f.Found(k, k * 10, {});
    f.Learn(7, 7, false, kIndex, 0);
    EXPECT_EQ(f.size(), KeyFloors::kMaxKeys);
    // Keys it has are still updated.
    f.Found(0, 5, {});
    f.Learn(7, 7, false, kIndex, 1);
    EXPECT_EQ(FloorOf(f, 0), 5);
}

}  // namespace
}  // namespace outbox
