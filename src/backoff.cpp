// Retry scheduling. Every computation saturates instead of overflowing: attempts counts and
// delays come from user settings and from rows that may have been retried for years.
#include "outbox/backoff.hpp"

#include <cstdint>

namespace outbox {

namespace {

// min(cap_ms, base_ms * 2^(exponent)) for base_ms > 0, cap_ms >= base_ms, exponent >= 0,
// computed without overflow.
int64_t CappedDoubling(int64_t base_ms, int64_t cap_ms, int exponent) {
    // Past 62 doublings any positive base exceeds the int64 range, hence the cap.
    if (exponent >= 62) {
        return cap_ms;
    }
    if (base_ms > (cap_ms >> exponent)) {
        return cap_ms;
    }
    return base_ms << exponent;
}

// The upper bound of the backoff window, or 0 when backoff is disabled (base_ms <= 0).
int64_t BackoffCeilingMs(int attempts, int64_t base_ms, int64_t max_ms) {
    if (base_ms <= 0) {
        return 0;
    }
    if (max_ms < base_ms) {
        max_ms = base_ms;
    }
    if (attempts < 1) {
        attempts = 1;
    }
    return CappedDoubling(base_ms, max_ms, attempts - 1);
}

}  // namespace

// Full-jitter exponential backoff: spreads retries of many failed messages over the whole window
// so that they do not hit a recovering endpoint in lockstep.
int64_t BackoffDelayMs(int attempts, int64_t base_ms, int64_t max_ms, uint64_t random) {
    int64_t ceiling = BackoffCeilingMs(attempts, base_ms, max_ms);
    // ceiling <= INT64_MAX, so ceiling + 1 fits in uint64_t.
    uint64_t span = static_cast<uint64_t>(ceiling) + 1;
    return static_cast<int64_t>(random % span);
}

// The delay for a retry: the server knows best when it will recover, but a hostile or broken
// Retry-After must not park a message longer than the configured maximum.
int64_t RetryDelayMs(int attempts, int64_t base_ms, int64_t max_ms, int64_t retry_after_ms,
                     uint64_t random) {
    if (retry_after_ms < 0) {
        return BackoffDelayMs(attempts, base_ms, max_ms, random);
    }
    int64_t cap = max_ms < base_ms ? base_ms : max_ms;
    if (cap < 0) {
        cap = 0;
    }
    return retry_after_ms < cap ? retry_after_ms : cap;
}

// Probe interval during an outage: deterministic, because only one probe is in flight per
// destination and there is nothing to de-synchronise.
int64_t OutageProbeDelayMs(int failures, int64_t base_ms, int64_t max_ms) {
    return BackoffCeilingMs(failures, base_ms, max_ms);
}

}  // namespace outbox
