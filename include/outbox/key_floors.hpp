// Key floors: for an order key of a per-key ordered destination, an id below which the key has
// no message left. A walk over key heads (outbox._key_heads) starts each key at its floor
// instead of at the key's first index entry: the entries of a key's delivered messages stay in
// the index (dead) until VACUUM, and crossing them (their line pointers, and the heap for
// those not marked dead yet) cost more with every message delivered.
//
// Ids of a key follow commit order (producers of a key take turns), so once a walk found a
// key's head, nothing below it can appear again — except a message put back with its old id:
// a requeued dead letter, or a queued message given an order key by an ordering change. Every
// transaction that can do that bumps the generation when it starts and again once its commit is
// visible, and counts as reordering in between. Floors are learnt only from a walk whose
// snapshot was taken after `before` was read and while nothing was reordering, and hold only
// while the generation is the one they were learnt under (see the comments in key_order.cpp for
// why no reordered message can then be passed). This class is the bookkeeping; the generation
// lives in shared memory. Each floor also keeps where the walk found the head and the key's last
// entry (leaf page and offset): hints that spare a search when still right, checked there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace outbox {

class KeyFloors {
  public:
    // A leaf position (block, offset); offset 0 is none. `buffer` is the shared buffer that
    // held the block then (0: not known): reading it again there, after checking that it still
    // holds the block, spares a lookup in the buffer mapping table.
    struct Position {
        uint32_t block = 0;
        uint16_t offset = 0;
        int32_t buffer = 0;
        bool known() const { return offset != 0; }
    };
    struct Floor {
        int64_t id;     // nothing of the key below this id can appear again
        Position head;  // where the head it was learnt from was found
        Position last;  // where its last entry was (the next key begins after it)
    };

    // At most this many keys have a floor (a key without one is only slower to walk).
    static constexpr size_t kMaxKeys = 65536;
    // Floors are learnt afresh this often: the safety net for what no transaction announces
    // (a sequence reset below the ids of a live queue). Learning them again costs a walk that
    // reads the heap for each message delivered since (their index entries were passed, not
    // marked dead), so not often.
    static constexpr int64_t kMaxAgeMs = 60000;

    // Whether a walk whose snapshot was taken before these were read may use the floors;
    // drops them when they no longer hold (`index` names the index's storage: a truncate or
    // reindex gives it a new one).
    bool Usable(uint64_t generation, bool reordering, uint32_t index, int64_t now_ms);
    // The floor of `key`, or nullptr.
    const Floor *Find(int64_t key) const {
        auto found = floors_.find(key);
        return found == floors_.end() ? nullptr : &found->second;
    }

    // A walk found `head_id`, the lowest visible id of `key`, at `at`: kept by Learn().
    void Found(int64_t key, int64_t head_id, Position at) {
        found_.push_back({key, {head_id, at, {}}});
    }
    // ... and its last entry is at `at`.
    void LastEntryAt(Position at) {
        if (!found_.empty())
            found_.back().second.last = at;
    }
    // After the walk: keeps what it found if its snapshot was taken after `before` was read
    // and `after` (read after the walk) is the same generation with nothing reordering.
    void Learn(uint64_t before, uint64_t after, bool reordering, uint32_t index, int64_t now_ms);
    // The worker removed `key`'s head `id` (its transaction no longer sees it; should that
    // transaction abort, Clear()): the key's floor, if it was learnt from that head, moves
    // past it.
    void Removed(int64_t key, int64_t id);
    // Forgets every floor (an aborted transaction may bring back what its walks passed).
    void Clear();

    size_t size() const { return floors_.size(); }

  private:
    std::unordered_map<int64_t, Floor> floors_;
    std::vector<std::pair<int64_t, Floor>> found_;
    uint64_t generation_ = 0;
    uint32_t index_ = 0;
    int64_t since_ms_ = 0;
};

}  // namespace outbox
