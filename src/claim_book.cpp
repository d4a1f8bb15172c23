// What a worker's claims know between transactions (see include/outbox/claim_book.hpp).
#include "outbox/claim_book.hpp"

#include <algorithm>
#include <utility>

namespace outbox {

bool Earlier(const DuePosition &a, const DuePosition &b) {
    return a.at < b.at || (a.at == b.at && a.id < b.id);
}

const DuePosition *ClaimBook::StartDueScan(const std::string &destination, Timestamp oldest_open,
                                           Timestamp claim_now) {
    DueScan &scan = due_scans[destination];
    scan = DueScan{};
    scan.oldest_open = oldest_open;
    scan.claim_now = claim_now;
    auto hint = due_hints.find(destination);
    return hint == due_hints.end() ? nullptr : &hint->second;
}

void ClaimBook::NoteClaimed(const std::string &destination, uint64_t n, const DuePosition &last) {
    DueScan &scan = due_scans[destination];
    if (n == 0)
        return;
    scan.found = true;
    scan.last = last;
}

void ClaimBook::NoteOrdered(const std::string &destination) {
    if (std::find(ordered_destinations.begin(), ordered_destinations.end(), destination) ==
        ordered_destinations.end())
        ordered_destinations.push_back(destination);
}

void ClaimBook::TrimHeldHeads() {
    if (held_heads.size() > kMaxHeldHeads)
        held_heads.clear();
}

void ClaimBook::HeadRemoved(const std::string &destination, int64_t id) {
    auto found = held_heads.find(id);
    if (found == held_heads.end())
        return;
    HeldHead held = found->second;
    held_heads.erase(found);
    KeyRowNote &w = key_row_writes[destination][held.order_key];
    if (id + 1 > w.floor) {
        w.floor = id + 1;
        w.floor_version = held.floor_version;
    }
    w.head_removed = true;
    w.has_due_at = false;
    heads_scans[destination].next.push_back({held.order_key, id + 1, held.floor_version});
}

std::unordered_map<int64_t, KeyFollowers> &ClaimBook::TrimmedFollowers(
    const std::string &destination) {
    auto &followers = key_followers[destination];
    if (followers.size() > kMaxFollowedKeys)
        followers.clear();
    return followers;
}

void ClaimBook::TransactionEnded(bool committed) {
    // The unordered claims: a committed transaction's rows have moved, and where its claims got
    // to is where the due messages begin, unless an open transaction's rows may lie before.
    if (!committed) {
        due_hints.clear();
    } else {
        for (const auto &[destination, scan] : due_scans) {
            DuePosition next = scan.found ? scan.last : DuePosition{scan.claim_now, INT64_MIN};
            DuePosition open{scan.oldest_open, INT64_MIN};
            due_hints[destination] = Earlier(open, next) ? open : next;
        }
    }
    due_scans.clear();
    // Notes not written belong to an aborted transaction: what they describe was undone.
    key_row_writes.clear();
    heads_claimed.clear();
    keys_held.clear();  // its row locks are gone
    // Keys whose head a committed transaction removed after its last claim: the next
    // transaction claims their next messages first (without another scan over the keys).
    std::unordered_map<std::string, HeadsScan> carried;
    if (committed) {
        for (auto &[destination, scan] : heads_scans)
            if (!scan.next.empty())
                carried[destination].next = std::move(scan.next);
    } else {
        key_followers.clear();  // the heads it removed are back
    }
    heads_scans = std::move(carried);
}

}  // namespace outbox
