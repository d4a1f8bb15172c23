// One UTF-8 rule for the pure logic: error texts made one line (one_line.cpp) and the inbox's
// JSON text checked and escaped (inbox_record.cpp) both step through text with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace outbox {

// The length of the valid UTF-8 sequence at s[i] (1 to 4), or 0 when it is invalid or cut off
// by the end of `s`: shortest form only, no surrogates, nothing above U+10FFFF (RFC 3629).
// Inline: the inbox's JSON checker calls it for every non-ASCII character.
inline size_t Utf8SequenceLength(std::string_view s, size_t i) {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char c = byte(i);
    if (c < 0x80)
        return 1;
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;  // a continuation byte, or a lead only overlong or too large forms use
    }
    if (i + len > s.size())
        return 0;
    for (size_t k = 1; k < len; ++k) {
        if ((byte(i + k) & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (byte(i + k) & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

}  // namespace outbox
