// ClaimBook: what a worker's claims carry from one transaction to the next, and what an abort
// undoes (src/pg/queue.cpp keeps its books there).
#include "outbox/claim_book.hpp"

#include <gtest/gtest.h>

namespace outbox {
namespace {

TEST(ClaimBook, FirstScanHasNoHintAndLaterClaimsDoNotRestart) {
    ClaimBook book;
    EXPECT_FALSE(book.DueScanStarted("d"));
    EXPECT_EQ(book.StartDueScan("d", 100, 200), nullptr);
    EXPECT_TRUE(book.DueScanStarted("d"));
    EXPECT_FALSE(book.DueScanStarted("other"));
}

TEST(ClaimBook, CommitMakesWhereTheClaimsGotToTheHint) {
    ClaimBook book;
    book.StartDueScan("d", /*oldest_open=*/1000, /*claim_now=*/2000);
    book.NoteClaimed("d", 5, {500, 7});
    book.NoteClaimed("d", 0, {900, 9});  // a claim that took nothing moves nothing
    book.TransactionEnded(true);
    EXPECT_FALSE(book.DueScanStarted("d"));
    const DuePosition *hint = book.StartDueScan("d", 3000, 4000);
    ASSERT_NE(hint, nullptr);
    EXPECT_EQ(hint->at, 500);
    EXPECT_EQ(hint->id, 7);
}

TEST(ClaimBook, AnOpenTransactionKeepsTheHintBeforeItsRows) {
    ClaimBook book;
    book.StartDueScan("d", /*oldest_open=*/300, /*claim_now=*/2000);
    book.NoteClaimed("d", 1, {500, 7});
    book.TransactionEnded(true);
    const DuePosition *hint = book.StartDueScan("d", 3000, 4000);
    ASSERT_NE(hint, nullptr);
    EXPECT_EQ(hint->at, 300);
    EXPECT_EQ(hint->id, INT64_MIN);
}

TEST(ClaimBook, NothingClaimedStartsTheNextScanAtTheClaimsClock) {
    ClaimBook book;
    book.StartDueScan("d", /*oldest_open=*/5000, /*claim_now=*/2000);
    book.TransactionEnded(true);
    const DuePosition *hint = book.StartDueScan("d", 6000, 7000);
    ASSERT_NE(hint, nullptr);
    EXPECT_EQ(hint->at, 2000);
    EXPECT_EQ(hint->id, INT64_MIN);
}

TEST(ClaimBook, AbortOrAReloadForgetsTheHints) {
    ClaimBook book;
    book.StartDueScan("d", 1000, 2000);
    book.NoteClaimed("d", 1, {500, 7});
    book.TransactionEnded(true);
    book.StartDueScan("d", 1000, 2000);
    book.TransactionEnded(false);
    EXPECT_EQ(book.StartDueScan("d", 1000, 2000), nullptr);

    book.NoteClaimed("d", 1, {500, 7});
    book.TransactionEnded(true);
    book.DestinationsChanged();
    EXPECT_EQ(book.StartDueScan("d", 1000, 2000), nullptr);
}

TEST(ClaimBook, Earlier) {
    EXPECT_TRUE(Earlier({1, 5}, {2, 0}));
    EXPECT_TRUE(Earlier({1, 5}, {1, 6}));
    EXPECT_FALSE(Earlier({1, 6}, {1, 6}));
    EXPECT_FALSE(Earlier({2, 0}, {1, 9}));
    EXPECT_TRUE(Earlier(DuePosition{}, {kTimestampNoBegin, 0}));
}

TEST(ClaimBook, ARemovedHeadRaisesItsKeysFloorAndIsLookedAtFirst) {
    ClaimBook book;
    book.held_heads[42] = {/*order_key=*/7, /*floor_version=*/3};
    book.HeadRemoved("d", 42);
    EXPECT_TRUE(book.held_heads.empty());
    const KeyRowNote &note = book.key_row_writes["d"][7];
    EXPECT_EQ(note.floor, 43);
    EXPECT_EQ(note.floor_version, 3);
    EXPECT_TRUE(note.head_removed);
    EXPECT_FALSE(note.has_due_at);
    ASSERT_EQ(book.heads_scans["d"].next.size(), 1u);
    EXPECT_EQ(book.heads_scans["d"].next[0].order_key, 7);
    EXPECT_EQ(book.heads_scans["d"].next[0].floor, 43);
    EXPECT_EQ(book.heads_scans["d"].next[0].floor_version, 3);

    // A lower head of the same key leaves the floor where it is.
    book.held_heads[40] = {7, 2};
    book.HeadRemoved("d", 40);
    EXPECT_EQ(book.key_row_writes["d"][7].floor, 43);
    EXPECT_EQ(book.key_row_writes["d"][7].floor_version, 3);

    // A head not held: nothing.
    book.HeadRemoved("d", 99);
    EXPECT_EQ(book.heads_scans["d"].next.size(), 2u);
    EXPECT_EQ(book.key_row_writes["d"].size(), 1u);
}

TEST(ClaimBook, CommitCarriesTheKeysToLookAtAndForgetsTheTransactionsOwn) {
    ClaimBook book;
    book.held_heads[42] = {7, 3};
    book.held_heads[50] = {8, 1};  // still in flight: kept
    book.HeadRemoved("d", 42);
    book.heads_scans["d"].started = true;
    book.heads_scans["e"].started = true;  // nothing to carry
    book.heads_claimed.insert(42);
    book.keys_held["d"][7] = {3, 4};
    book.key_cursors["d"] = {100, 7};
    book.key_followers["d"][8] = KeyFollowers{50, 1, {}, 0};

    book.TransactionEnded(true);
    EXPECT_TRUE(book.key_row_writes.empty());
    EXPECT_TRUE(book.heads_claimed.empty());
    EXPECT_TRUE(book.keys_held.empty());
    ASSERT_EQ(book.heads_scans.size(), 1u);
    EXPECT_FALSE(book.heads_scans["d"].started);  // the next transaction's scan starts afresh
    ASSERT_EQ(book.heads_scans["d"].next.size(), 1u);
    EXPECT_EQ(book.heads_scans["d"].next[0].order_key, 7);
    EXPECT_EQ(book.held_heads.count(50), 1u);
    EXPECT_EQ(book.key_cursors.count("d"), 1u);
    EXPECT_EQ(book.key_followers["d"].count(8), 1u);
}

TEST(ClaimBook, AbortForgetsTheFollowersAndTheKeysToLookAt) {
    ClaimBook book;
    book.held_heads[42] = {7, 3};
    book.HeadRemoved("d", 42);
    book.key_followers["d"][8] = KeyFollowers{50, 1, {}, 0};
    book.key_cursors["d"] = {100, 7};

    book.TransactionEnded(false);
    EXPECT_TRUE(book.key_row_writes.empty());
    EXPECT_TRUE(book.heads_scans.empty());
    EXPECT_TRUE(book.key_followers.empty());
    EXPECT_EQ(book.key_cursors.count("d"), 1u);  // only a place to start
}

TEST(ClaimBook, TooManyHeldHeadsOrFollowedKeysAreForgotten) {
    ClaimBook book;
    for (int64_t id = 0; id <= int64_t(ClaimBook::kMaxHeldHeads); id++)
        book.held_heads[id] = {id, 0};
    book.TrimHeldHeads();
    EXPECT_TRUE(book.held_heads.empty());
    book.held_heads[1] = {1, 0};
    book.TrimHeldHeads();
    EXPECT_EQ(book.held_heads.size(), 1u);

    auto &followers = book.key_followers["d"];
    for (int64_t key = 0; key <= int64_t(ClaimBook::kMaxFollowedKeys); key++)
        followers[key] = KeyFollowers{key, 0, {}, 0};
    book.key_followers["e"][1] = KeyFollowers{1, 0, {}, 0};
    EXPECT_TRUE(book.TrimmedFollowers("d").empty());
    EXPECT_EQ(book.TrimmedFollowers("e").size(), 1u);
}

TEST(ClaimBook, OrderedDestinationsAreNotedOnce) {
    ClaimBook book;
    book.NoteOrdered("a");
    book.NoteOrdered("b");
    book.NoteOrdered("a");
    book.TransactionEnded(false);
    ASSERT_EQ(book.OrderedDestinations().size(), 2u);
    EXPECT_EQ(book.OrderedDestinations()[0], "a");
    EXPECT_EQ(book.OrderedDestinations()[1], "b");
}

}  // namespace
}  // namespace outbox
