// The fast path's decisions within one batch (one worker transaction that holds its rows locked
// while the brokers acknowledge, src/pg/worker.cpp, Worker::FastBatch): how long it claims, which
// requests may claim again, when it stops, and how long it may wait for acknowledgements. The
// worker does the claims, the write-backs and the waiting; this decides. No PostgreSQL, beside
// the dispatcher, unit-tested alone (test/unit/fast_batch_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "outbox/dispatcher.hpp"

namespace outbox {

class FastBatchPlan {
  public:
    // Claims stop this long after the batch began...
    static constexpr int64_t kClaimMs = 50;
    // ... or this long when one of its destinations is ordered (ordering = key): a transaction
    // pays for each key it holds (the row's lock, its note at the end), so one that claims for
    // an ordered destination claims for longer: each key goes further in it.
    static constexpr int64_t kClaimOrderedMs = 100;
    // The batch ends this long after it began; what is still unacknowledged then is leased.
    static constexpr int64_t kBatchMs = 250;

    // The batch of `requests` (fast-path claims, one per destination) began at `start_ms`.
    FastBatchPlan(const std::vector<ClaimRequest> &requests, int64_t start_ms);

    // Whether claims may go on at `now_ms`. Not once a destination changed (`reload`: its new
    // settings are read by the next turn, in a new transaction): no message is claimed under
    // the old ones, such as a dead letter requeued right after its destination got a new URL.
    bool MayClaim(int64_t now_ms, bool reload) const;
    // Whether request `i` is to be claimed now, its driver having room for `capacity` more.
    bool WantsClaim(size_t i, size_t capacity) const;
    // A claim of request `i` took `taken` rows: fewer than its limit and it is exhausted until
    // something changes. Returns whether it took its limit (more rows are probably due).
    bool Claimed(size_t i, size_t taken);
    // The outcomes of `destination` could not be written back: its rows stay locked, unchanged,
    // until the commit (due again then); it claims no more in this batch.
    void WriteBackFailed(const std::string &destination);
    // The outcomes of `destination` were written back: for an ordered destination a head that
    // is done lets its key's next message go, in this same transaction, so it may claim again.
    void WrittenBack(const std::string &destination);
    // A producer committed (the latch was set): its rows may join this batch, so every request
    // whose write-back has not failed may claim again.
    void LatchSet();

    // Whether a request could claim now without waiting for acknowledgements first (`room(i)`:
    // its driver has room for a claim of its limit), when `claiming`.
    bool MoreToClaim(bool claiming, const std::function<bool(size_t)> &room) const;
    // Whether the batch is over at `now_ms`, with `locked` rows still in flight: nothing locked
    // and nothing left to claim, or its time is up.
    bool Over(int64_t now_ms, size_t locked, bool claiming) const;
    // How long the worker may wait for acknowledgements at `now_ms`: not at all when there is
    // more to claim; else until the dispatcher's next timeout (`next_timeout_ms`, -1: none), at
    // most until the batch ends.
    int64_t WaitMs(int64_t now_ms, int64_t next_timeout_ms, bool more_to_claim) const;

  private:
    std::vector<std::string> destinations_;
    std::vector<bool> ordered_;
    std::vector<int> limits_;  // ClaimRequest::limit
    int64_t start_ms_;
    int64_t claim_ms_;
    std::vector<bool> exhausted_;
    std::vector<bool> write_back_failed_;
};

}  // namespace outbox
