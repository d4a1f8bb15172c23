// Error texts made safe for a text column and the server log (include/outbox/one_line.hpp).
// Pure logic: the webhook driver shows a response's first bytes with it.
#include "outbox/one_line.hpp"

#include <cstdint>

namespace outbox {

size_t Utf8SequenceLength(std::string_view s, size_t i) {
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
        return 0;
    }
    if (i + len > s.size())
        return 0;
    for (size_t k = 1; k < len; ++k) {
        if ((byte(i + k) & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (byte(i + k) & 0x3F);
    }
    // No overlong forms, no surrogates, nothing above U+10FFFF.
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

std::string OneLine(std::string_view text, size_t max_bytes) {
    bool cut = text.size() > max_bytes;
    text = text.substr(0, max_bytes);
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        size_t len = Utf8SequenceLength(text, i);
        if (len == 0) {
            // A character cut in half by the limit is dropped rather than shown as garbage.
            if (cut && static_cast<unsigned char>(text[i]) >= 0xC2 && text.size() - i < 4)
                break;
            out.push_back('?');
            ++i;
            continue;
        }
        unsigned char c = static_cast<unsigned char>(text[i]);
        if (len == 1 && (c < 0x20 || c == 0x7F))
            out.push_back(' ');
        else
            out.append(text.substr(i, len));
        i += len;
    }
    size_t begin = out.find_first_not_of(' ');
    if (begin == std::string::npos)
        return std::string();
    size_t end = out.find_last_not_of(' ');
    return out.substr(begin, end - begin + 1);
}

}  // namespace outbox
