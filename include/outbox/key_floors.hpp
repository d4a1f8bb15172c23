// Key floors: for an order key of a per-key ordered destination, an id below which the key has
// no message left. A walk over key heads (outbox._key_heads) starts each key at its floor
// instead of at the key's first index entry: the entries of a key's delivered messages stay in
// the index (dead) until VACUUM, and crossing them cost the ordered drain more than everything
// else together.
//
// Ids of a key follow commit order (producers of a key take turns), so once a walk found a
// key's head, nothing below it can appear again — except a message put back with its old id:
// a requeued dead letter, or a queued message given an order key by an ordering change. Every
// transaction that can do that bumps the generation when it starts and again once its commit is
// visible, and counts as reordering in between. Floors are learnt only from a walk whose
// snapshot was taken after `before` was read and while nothing was reordering, and hold only
// while the generation is the one they were learnt under (see the comments in key_order.cpp for
// why no reordered message can then be passed). This class is the bookkeeping; the generation
// lives in shared memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace outbox {

class KeyFloors {
  public:
    static constexpr int64_t kNone = INT64_MIN;
    // At most this many keys have a floor (a key without one is only slower to walk).
    static constexpr size_t kMaxKeys = 65536;
    // Floors are learnt afresh this often: the safety net for what no transaction announces
    // (a sequence reset below the ids of a live queue).
    static constexpr int64_t kMaxAgeMs = 10000;

    // Whether a walk whose snapshot was taken before these were read may use the floors;
    // drops them when they no longer hold (`index` names the index's storage: a truncate or
    // reindex gives it a new one).
    bool Usable(uint64_t generation, bool reordering, uint32_t index, int64_t now_ms);
    // The floor of `key`, or kNone.
    int64_t Floor(int64_t key) const {
        auto found = floors_.find(key);
        return found == floors_.end() ? kNone : found->second;
    }

    // A walk found `head_id`, the lowest visible id of `key`: kept by Learn().
    void Found(int64_t key, int64_t head_id) { found_.emplace_back(key, head_id); }
    // After the walk: keeps what it found if its snapshot was taken after `before` was read
    // and `after` (read after the walk) is the same generation with nothing reordering.
    void Learn(uint64_t before, uint64_t after, bool reordering, uint32_t index, int64_t now_ms);
    // The removal of `key`'s head `id` committed: the key's floor, if it was learnt from that
    // head, moves past it.
    void Removed(int64_t key, int64_t id);
    // Forgets every floor (an aborted transaction may bring back what its walks passed).
    void Clear();

    size_t size() const { return floors_.size(); }

  private:
    std::unordered_map<int64_t, int64_t> floors_;
    std::vector<std::pair<int64_t, int64_t>> found_;
    uint64_t generation_ = 0;
    uint32_t index_ = 0;
    int64_t since_ms_ = 0;
};

}  // namespace outbox
