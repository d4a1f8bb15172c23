// UUIDv7 (RFC 9562): 48-bit unix milliseconds, then random bits. PostgreSQL 15 has no generator.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace outbox {

using Uuid = std::array<uint8_t, 16>;

// Generates UUIDv7 values that increase strictly within one process, even when the clock stands
// still or steps back (RFC 9562 §6.2 method 3: a 12-bit sub-millisecond counter in rand_a that
// spills into the timestamp when it overflows). Trivially destructible: safe as a static.
class Uuid7Generator {
  public:
    // random_bytes: 10 fresh random bytes (the caller supplies them, e.g. pg_strong_random).
    Uuid Next(int64_t unix_ms, const uint8_t random_bytes[10]);

  private:
    int64_t last_ms_ = 0;
    uint16_t counter_ = 0;
};

std::string UuidToString(const Uuid &uuid);  // 8-4-4-4-12 lower-case hex

}  // namespace outbox
