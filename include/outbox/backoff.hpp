// Retry scheduling: exponential backoff with full jitter, and the server's Retry-After.
#pragma once

#include <cstdint>

namespace outbox {

// Delay before the next try after `attempts` failed attempts (attempts >= 1):
// uniform in [0, min(max_ms, base_ms * 2^(attempts-1))] drawn from `random` ("full jitter").
// base_ms <= 0 yields 0; max_ms below base_ms is treated as base_ms. Never overflows.
int64_t BackoffDelayMs(int attempts, int64_t base_ms, int64_t max_ms, uint64_t random);

// The delay actually used for a retry: the server's retry_after_ms when it gave one (>= 0),
// capped by max_ms, otherwise BackoffDelayMs.
int64_t RetryDelayMs(int attempts, int64_t base_ms, int64_t max_ms, int64_t retry_after_ms,
                     uint64_t random);

// Probe interval for a destination in outage: base_ms doubling with each consecutive failed
// probe (failures >= 1), capped at max_ms, without jitter.
int64_t OutageProbeDelayMs(int failures, int64_t base_ms, int64_t max_ms);

}  // namespace outbox
