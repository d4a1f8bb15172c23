// The fast path's decisions within one batch (see include/outbox/fast_batch.hpp).
#include "outbox/fast_batch.hpp"

#include <algorithm>

namespace outbox {

FastBatchPlan::FastBatchPlan(const std::vector<ClaimRequest> &requests, int64_t start_ms)
    : start_ms_(start_ms),
      exhausted_(requests.size(), false),
      write_back_failed_(requests.size(), false) {
    bool any_ordered = false;
    for (const ClaimRequest &r : requests) {
        destinations_.push_back(r.destination);
        ordered_.push_back(r.ordered);
        limits_.push_back(r.limit);
        any_ordered = any_ordered || r.ordered;
    }
    claim_ms_ = any_ordered ? kClaimOrderedMs : kClaimMs;
}

bool FastBatchPlan::MayClaim(int64_t now_ms, bool reload) const {
    return now_ms - start_ms_ < claim_ms_ && !reload;
}

bool FastBatchPlan::WantsClaim(size_t i, size_t capacity) const {
    return !exhausted_[i] && !write_back_failed_[i] && capacity >= size_t(limits_[i]);
}

bool FastBatchPlan::Claimed(size_t i, size_t taken) {
    exhausted_[i] = int(taken) < limits_[i];
    return !exhausted_[i];
}

void FastBatchPlan::WriteBackFailed(const std::string &destination) {
    for (size_t i = 0; i < destinations_.size(); i++)
        if (destinations_[i] == destination)
            write_back_failed_[i] = true;
}

void FastBatchPlan::WrittenBack(const std::string &destination) {
    for (size_t i = 0; i < destinations_.size(); i++)
        if (ordered_[i] && destinations_[i] == destination)
            exhausted_[i] = write_back_failed_[i];
}

void FastBatchPlan::LatchSet() {
    exhausted_ = write_back_failed_;
}

bool FastBatchPlan::MoreToClaim(bool claiming, const std::function<bool(size_t)> &room) const {
    for (size_t i = 0; i < destinations_.size() && claiming; i++)
        if (!exhausted_[i] && room(i))
            return true;
    return false;
}

bool FastBatchPlan::Over(int64_t now_ms, size_t locked, bool claiming) const {
    bool claimable =
        claiming && std::find(exhausted_.begin(), exhausted_.end(), false) != exhausted_.end();
    return (locked == 0 && !claimable) || now_ms - start_ms_ >= kBatchMs;
}

int64_t FastBatchPlan::WaitMs(int64_t now_ms, int64_t next_timeout_ms, bool more_to_claim) const {
    if (more_to_claim)
        return 0;
    int64_t left = start_ms_ + kBatchMs - now_ms;
    return next_timeout_ms < 0 ? left : std::min(next_timeout_ms, left);
}

}  // namespace outbox
