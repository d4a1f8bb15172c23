// "delivery": "exactly_once": lease tokens per worker, the marker's metadata and the recovery
// decision (exactly_once.hpp).
#include "outbox/exactly_once.hpp"

#include <algorithm>
#include <charconv>

namespace outbox {

namespace {
constexpr std::string_view kMarkerPrefix = "outbox-batch:";
constexpr uint64_t kLowMask = (uint64_t(1) << kLeaseTokenWorkerShift) - 1;
}  // namespace

int64_t LeaseTokenFor(int worker_index, uint64_t random) {
    uint64_t worker = uint64_t(std::clamp(worker_index, 0, kMaxLeaseTokenWorkers - 1)) + 1;
    // Odd by a shift, not by setting the low bit: `random | 1` gives consecutive values 2n and
    // 2n + 1 the same token, so two consecutive claims would share one, and a marker naming
    // the first would settle the second too.
    return int64_t((worker << kLeaseTokenWorkerShift) | ((random << 1) & kLowMask) | 1);
}

int LeaseTokenWorker(int64_t token) {
    if (token <= 0)
        return -1;
    return int(uint64_t(token) >> kLeaseTokenWorkerShift) - 1;
}

std::string MarkerMetadata(int64_t lease_token) {
    return std::string(kMarkerPrefix) + std::to_string(lease_token);
}

std::optional<int64_t> ParseMarkerMetadata(std::string_view metadata) {
    if (metadata.substr(0, kMarkerPrefix.size()) != kMarkerPrefix)
        return std::nullopt;
    std::string_view digits = metadata.substr(kMarkerPrefix.size());
    int64_t token = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), token);
    if (ec != std::errc() || end != digits.data() + digits.size() || token <= 0)
        return std::nullopt;
    return token;
}

RecoveryPlan PlanRecovery(int64_t marker_token, const std::vector<int64_t> &leased_tokens) {
    RecoveryPlan plan;
    for (int64_t token : leased_tokens) {
        auto &into = marker_token != 0 && token == marker_token ? plan.delivered : plan.released;
        if (std::find(into.begin(), into.end(), token) == into.end())
            into.push_back(token);
    }
    return plan;
}

std::vector<ForeignLeases> GroupForeignLeases(int own_index, const std::vector<int64_t> &tokens) {
    std::vector<ForeignLeases> out;
    for (int64_t token : tokens) {
        int index = LeaseTokenWorker(token);
        if (index < 0 || index == own_index)
            continue;
        auto it = std::find_if(out.begin(), out.end(),
                               [&](const ForeignLeases &f) { return f.worker_index == index; });
        if (it == out.end()) {
            out.push_back(ForeignLeases{index, {}});
            it = out.end() - 1;
        }
        if (std::find(it->tokens.begin(), it->tokens.end(), token) == it->tokens.end())
            it->tokens.push_back(token);
    }
    std::sort(out.begin(), out.end(), [](const ForeignLeases &a, const ForeignLeases &b) {
        return a.worker_index < b.worker_index;
    });
    return out;
}

int64_t ClaimWorkerTag(bool exactly_once, int64_t lease_token) {
    if (!exactly_once || lease_token <= 0)
        return 0;
    return int64_t(uint64_t(lease_token) >> kLeaseTokenWorkerShift);
}

int64_t LeaseTokenTag(int worker_index) {
    return int64_t(std::clamp(worker_index, 0, kMaxLeaseTokenWorkers - 1)) + 1;
}

}  // namespace outbox
