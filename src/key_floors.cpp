// Key floors: the bookkeeping (include/outbox/key_floors.hpp).
#include "outbox/key_floors.hpp"

namespace outbox {

bool KeyFloors::Usable(uint64_t generation, bool reordering, uint32_t index, int64_t now_ms) {
    if (floors_.empty())
        return false;
    if (generation != generation_ || index != index_ || now_ms - since_ms_ > kMaxAgeMs ||
        now_ms < since_ms_) {
        Clear();
        return false;
    }
    // A transaction reordering now bumped the generation when it began, so floors learnt
    // under this one were learnt before it: they hold. Not using them costs only time.
    return !reordering;
}

void KeyFloors::Learn(uint64_t before, uint64_t after, bool reordering, uint32_t index,
                      int64_t now_ms) {
    std::vector<std::pair<int64_t, Floor>> found;
    found.swap(found_);
    if (before != after || reordering)
        return;
    if (!floors_.empty() && (before != generation_ || index != index_))
        Clear();
    if (floors_.empty()) {
        generation_ = before;
        index_ = index;
        since_ms_ = now_ms;
    }
    for (const auto &[key, floor] : found) {
        auto it = floors_.find(key);
        if (it != floors_.end())
            it->second = floor;  // the walk started at the floor: the head is not below it
        else if (floors_.size() < kMaxKeys)
            floors_.emplace(key, floor);
    }
}

void KeyFloors::Removed(int64_t key, int64_t id) {
    auto it = floors_.find(key);
    if (it != floors_.end() && it->second.id == id)
        it->second.id = id + 1;  // its entry stays where it was: a hint still
}

void KeyFloors::Clear() {
    floors_.clear();
    found_.clear();
}

}  // namespace outbox
