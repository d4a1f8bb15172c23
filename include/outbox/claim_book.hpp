// What a delivery worker's claims know between transactions (src/pg/queue.cpp and
// claim_ordered.cpp claim, this keeps the books): where each destination's due messages begin
// (the due hints), and for ordering = key the heads it holds, the messages known to follow them,
// where the scan over the keys stopped, and what the current transaction learnt of its keys. One
// object, owned by the worker; TransactionEnded says what survives a commit and what an abort
// undoes. No PostgreSQL header: timestamps are PostgreSQL's TimestampTz as an int64 and a row's
// place is its parts, so the rules are unit-tested alone (test/unit/claim_book_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace outbox {

// PostgreSQL's TimestampTz (microseconds since 2000-01-01) and its infinities (DT_NOBEGIN,
// DT_NOEND; src/pg/claimed_rows.cpp checks that they match).
using Timestamp = int64_t;
constexpr Timestamp kTimestampNoBegin = std::numeric_limits<int64_t>::min();
constexpr Timestamp kTimestampNoEnd = std::numeric_limits<int64_t>::max();

// A row version's place in its table: PostgreSQL's ItemPointerData as its parts
// (src/pg/key_order.hpp converts).
struct RowTid {
    uint32_t block = 0;
    uint16_t offset = 0;
};

// What a worker saw of a key in its transaction, noted on the key's row at the end of it
// (src/pg/claim_ordered.cpp, WriteKeyRows), under the rules of outbox.ordered_keys.
struct KeyRowNote {
    int64_t order_key = 0;
    int64_t floor = 0;          // raise the floor to this (0: leave it)...
    int64_t floor_version = 0;  // ... if floor_version is still this
    int64_t version = 0;        // set due_at (below) only if version is still this
    Timestamp due_at = 0;       // kTimestampNoEnd: no queued message
    bool has_due_at = false;
    bool head_removed = false;  // the key is due now at the latest
};

// A queued message of an ordered key (src/pg/key_order.hpp, FindNextMessages): which row
// version it is.
struct NextMessage {
    int64_t order_key;
    int64_t id;
    RowTid tid;
    uint32_t xmin;  // PostgreSQL's TransactionId
};

// Unordered claims start where a destination's due messages are known to begin: its due hint
// (why that is safe: src/pg/queue.cpp, above PositionClaim). Claims take rows strictly after
// (at, id).
struct DuePosition {
    Timestamp at = kTimestampNoBegin;
    int64_t id = std::numeric_limits<int64_t>::min();
};
bool Earlier(const DuePosition &a, const DuePosition &b);

// This transaction's unordered claims of one destination.
struct DueScan {
    Timestamp oldest_open = kTimestampNoBegin;  // read before its first claim
    Timestamp claim_now = kTimestampNoBegin;    // the first claim's clock: rows not due then
                                                // were not looked at
    DuePosition last;                           // after the last row claimed
    bool found = false;
};

// A head this worker holds (claimed by lock in this transaction, or leased): its key, and the
// floor_version read when the claim found it. Needed when its outcome is written back, maybe
// transactions later.
struct HeldHead {
    int64_t order_key;
    int64_t floor_version;
};

// The messages that followed a head this worker claimed, found right after the claim: when that
// head is removed, the next is claimed where it lies, then the one after, without an index
// descent per message.
struct KeyFollowers {
    int64_t after;          // the head they follow (claimed, not yet known removed)
    int64_t floor_version;  // read when they were found
    std::vector<NextMessage> next;
    size_t taken = 0;  // next[taken] follows `after`
};

// A key whose head this transaction removed: its next message is looked for from `floor`.
struct NextOfKey {
    int64_t order_key, floor, floor_version;
};

// A place in a destination's due order of keys.
struct KeyPosition {
    Timestamp due = kTimestampNoBegin;
    int64_t key = std::numeric_limits<int64_t>::min();
};

// Per destination, this transaction: how far the scan over the due keys went (from `start` to
// the end, then from the beginning up to `start`: every key at most once), and the keys to look
// at again.
struct HeadsScan {
    bool started = false;
    KeyPosition start, after;
    bool wrapped = false, done = false;
    std::vector<NextOfKey> next;
};

// A key row this transaction holds FOR KEY SHARE: what it said when the transaction took it.
struct KeyHeld {
    int64_t floor_version, version;
};

class ClaimBook {
  public:
    // Entries of heads whose outcome never came back; more and they are forgotten (only floors
    // raised later are lost).
    static constexpr size_t kMaxHeldHeads = 100000;
    // Followed keys per destination; more and their next messages are looked for again.
    static constexpr size_t kMaxFollowedKeys = 20000;

    // Unordered claims. The first claim of `destination` in this transaction starts its scan:
    // returns the due hint it may start after, or nullptr (no hint yet). Later claims of the
    // transaction go on after the rows the earlier ones took (DueScanStarted is true).
    bool DueScanStarted(const std::string &destination) const {
        return due_scans.count(destination) != 0;
    }
    const DuePosition *StartDueScan(const std::string &destination, Timestamp oldest_open,
                                    Timestamp claim_now);
    // A claim of `destination` took `n` rows, the last of them at `last`.
    void NoteClaimed(const std::string &destination, uint64_t n, const DuePosition &last);

    // ordering = key. Notes that `destination` is ordered by this worker (its idle key rows are
    // swept).
    void NoteOrdered(const std::string &destination);
    const std::vector<std::string> &OrderedDestinations() const { return ordered_destinations; }
    // Forgets every held head when there are more than kMaxHeldHeads.
    void TrimHeldHeads();
    // A held head of `destination` was removed (delivered, buried, expired): its key's floor
    // goes past it and the key is due now; a claim later in this transaction looks for its next
    // message first. Nothing when `id` is not a held head.
    void HeadRemoved(const std::string &destination, int64_t id);
    // The followed keys of `destination`, forgotten first when there are more than
    // kMaxFollowedKeys.
    std::unordered_map<int64_t, KeyFollowers> &TrimmedFollowers(const std::string &destination);

    // The destinations were loaded again: a changed one's queue may have changed too (its
    // ordering), so its hints and followers go.
    void DestinationsChanged() {
        due_hints.clear();
        key_followers.clear();
    }

    // The worker's transaction ended. Committed: where its unordered claims got to becomes each
    // destination's due hint (unless a transaction open when it claimed may hold rows before),
    // and the keys whose head it removed are looked at first by the next one. Aborted: the hints
    // and the followers go (the rows it removed are back). Either way what it held and noted
    // goes: its notes are written before the commit (or undone with it), its locks are gone.
    void TransactionEnded(bool committed);

    // The books themselves, read and written by the claims (src/pg/queue.cpp, claim_ordered.cpp).
    // By destination: where due messages begin; this transaction's unordered claims.
    std::unordered_map<std::string, DuePosition> due_hints;
    std::unordered_map<std::string, DueScan> due_scans;
    // By destination, then order key: what this transaction saw of a key's row, written on it
    // at the end (WriteKeyRows).
    std::map<std::string, std::unordered_map<int64_t, KeyRowNote>> key_row_writes;
    // By head id. Kept across transactions (a leased head is removed by a later one).
    std::unordered_map<int64_t, HeldHead> held_heads;
    // By destination, then order key. Kept across transactions; forgotten when one aborts.
    std::map<std::string, std::unordered_map<int64_t, KeyFollowers>> key_followers;
    // Where each destination's last scan over its keys stopped: the next transaction goes on
    // from there, and round to the beginning.
    std::unordered_map<std::string, KeyPosition> key_cursors;
    // By destination, this transaction (the `next` of a committed one carried to the next).
    std::unordered_map<std::string, HeadsScan> heads_scans;
    // The heads claimed in this transaction: a key's row can move in due order while the
    // transaction runs, and a claim of this transaction's own locked head would not skip it.
    std::unordered_set<int64_t> heads_claimed;
    // The key rows this transaction holds FOR KEY SHARE, by destination, then order key.
    std::map<std::string, std::unordered_map<int64_t, KeyHeld>> keys_held;
    // Destinations whose keys this worker claimed.
    std::vector<std::string> ordered_destinations;
};

}  // namespace outbox
