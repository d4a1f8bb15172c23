// UUIDv7 generation (RFC 9562 §5.7, monotonicity per §6.2 method 3).
#include "outbox/uuid7.hpp"

#include <cstdint>
#include <string>

namespace outbox {

namespace {

constexpr int64_t kMaxUnixMs = (int64_t{1} << 48) - 1;  // what fits the 48-bit field
constexpr uint16_t kMaxCounter = 0x0FFF;                // 12 bits of rand_a

}  // namespace

// The next identifier. event_id orders messages for consumers and indexes well in a btree only
// if it never goes backwards, whatever the clock does.
Uuid Uuid7Generator::Next(int64_t unix_ms, const uint8_t random_bytes[10]) {
    if (unix_ms < 0) {
        unix_ms = 0;
    }
    if (unix_ms > kMaxUnixMs) {
        unix_ms = kMaxUnixMs;
    }
    if (unix_ms > last_ms_) {
        last_ms_ = unix_ms;
        counter_ = 0;
    } else if (counter_ < kMaxCounter) {
        // Same millisecond, or the clock stepped back: count within the last millisecond.
        ++counter_;
    } else if (last_ms_ < kMaxUnixMs) {
        // 4096 ids in one millisecond: borrow the next millisecond rather than repeat an id.
        ++last_ms_;
        counter_ = 0;
    }
    // (At the end of the 48-bit range, year 10889, ids repeat; nothing sensible remains.)

    Uuid uuid{};
    uint64_t ms = static_cast<uint64_t>(last_ms_);
    for (int i = 0; i < 6; ++i) {
        uuid[i] = static_cast<uint8_t>(ms >> (40 - 8 * i));
    }
    uuid[6] = static_cast<uint8_t>(0x70 | (counter_ >> 8));  // version 7
    uuid[7] = static_cast<uint8_t>(counter_ & 0xFF);
    uuid[8] = static_cast<uint8_t>(0x80 | (random_bytes[0] & 0x3F));  // RFC 9562 variant 10
    for (int i = 9; i < 16; ++i) {
        uuid[i] = random_bytes[i - 8];
    }
    return uuid;
}

// The canonical text form that PostgreSQL's uuid type reads and prints.
std::string UuidToString(const Uuid &uuid) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(36);
    for (size_t i = 0; i < uuid.size(); ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) {
            out.push_back('-');
        }
        out.push_back(kHex[uuid[i] >> 4]);
        out.push_back(kHex[uuid[i] & 0x0F]);
    }
    return out;
}

}  // namespace outbox
