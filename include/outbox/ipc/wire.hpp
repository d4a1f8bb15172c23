// The byte-level codec of the frames between a worker and its driver process (protocol.hpp):
// fixed-width little-endian integers, length-prefixed strings, and a Reader that checks every
// length against the bytes present. Shared by protocol.cpp and options.cpp; pure code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "outbox/ipc/protocol.hpp"

namespace outbox::protocol::wire {

// --- writing -------------------------------------------------------------------------------

inline void PutU8(std::string *out, uint8_t v) {
    out->push_back(static_cast<char>(v));
}

inline void PutU32(std::string *out, uint32_t v) {
    char b[4];
    for (int i = 0; i < 4; i++)
        b[i] = static_cast<char>(v >> (8 * i));
    out->append(b, 4);
}

inline void PutU64(std::string *out, uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = static_cast<char>(v >> (8 * i));
    out->append(b, 8);
}

inline void PutI64(std::string *out, int64_t v) {
    PutU64(out, static_cast<uint64_t>(v));
}

inline void PutString(std::string *out, std::string_view s) {
    PutU32(out, static_cast<uint32_t>(s.size()));
    out->append(s.data(), s.size());
}

// Starts a frame of `type`; returns where its length goes (filled by EndFrame).
inline size_t BeginFrame(std::string *out, FrameType type) {
    size_t at = out->size();
    PutU32(out, 0);
    PutU8(out, static_cast<uint8_t>(type));
    return at;
}

inline void EndFrame(std::string *out, size_t at) {
    uint32_t len = static_cast<uint32_t>(out->size() - at - 4);
    for (int i = 0; i < 4; i++)
        (*out)[at + i] = static_cast<char>(len >> (8 * i));
}

// --- reading -------------------------------------------------------------------------------

// Reads fields off a frame body; the first failure sticks, and everything after it reads as
// zero, so a decoder checks ok() once at the end.
class Reader {
  public:
    explicit Reader(std::string_view bytes) : bytes_(bytes) {}

    bool ok() const { return ok_; }
    bool AtEnd() const { return ok_ && pos_ == bytes_.size(); }
    size_t Left() const { return bytes_.size() - pos_; }
    void Fail(const char *why) {
        if (ok_)
            why_ = why;
        ok_ = false;
    }
    const char *why() const { return why_; }

    uint8_t U8() {
        if (!Need(1))
            return 0;
        return static_cast<uint8_t>(bytes_[pos_++]);
    }
    uint32_t U32() {
        if (!Need(4))
            return 0;
        uint32_t v = 0;
        for (int i = 0; i < 4; i++)
            v |= uint32_t(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
        pos_ += 4;
        return v;
    }
    uint64_t U64() {
        if (!Need(8))
            return 0;
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
            v |= uint64_t(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
        pos_ += 8;
        return v;
    }
    int64_t I64() { return static_cast<int64_t>(U64()); }
    bool Bool() {
        uint8_t v = U8();
        if (v > 1)
            Fail("a boolean is neither 0 nor 1");
        return v == 1;
    }
    // A value of the int range stored as 64 bits.
    int Int() {
        int64_t v = I64();
        if (v < INT32_MIN || v > INT32_MAX)
            Fail("an integer is out of range");
        return ok_ ? static_cast<int>(v) : 0;
    }
    std::string_view View() {
        uint32_t len = U32();
        if (!Need(len))
            return {};
        std::string_view s = bytes_.substr(pos_, len);
        pos_ += len;
        return s;
    }
    std::string String() { return std::string(View()); }
    // A list count, checked against the bytes left (every element takes at least
    // `min_element_bytes`), so that a hostile count cannot make the caller reserve memory.
    uint32_t Count(size_t min_element_bytes) {
        uint32_t n = U32();
        if (ok_ && uint64_t(n) * min_element_bytes > Left()) {
            Fail("a list is longer than the frame");
            return 0;
        }
        return n;
    }

  private:
    bool Need(size_t n) {
        if (!ok_)
            return false;
        if (Left() < n) {
            Fail("the frame ends in the middle of a field");
            return false;
        }
        return true;
    }

    std::string_view bytes_;
    size_t pos_ = 0;
    bool ok_ = true;
    const char *why_ = "";
};

// The check frames' bodies (options.cpp).
void PutConfigQuery(std::string *out, const ConfigQuery &query);
ConfigQuery GetConfigQuery(Reader &r);
void PutConfigAnswer(std::string *out, const ConfigAnswer &answer);
ConfigAnswer GetConfigAnswer(Reader &r);

}  // namespace outbox::protocol::wire
