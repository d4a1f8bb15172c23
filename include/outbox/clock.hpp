// The monotonic clock in milliseconds, for timeouts and ages outside PostgreSQL (the drivers,
// the helper process and its supervisor); src/pg/ uses PostgreSQL's own clock.
#pragma once

#include <time.h>

#include <cstdint>

namespace outbox {

inline int64_t MonotonicMs() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Monotonic nanoseconds, for libcurl's timer.
inline int64_t MonotonicNs() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Wall-clock milliseconds, for Retry-After dates.
inline int64_t UnixMs() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace outbox
