#include "outbox/quote.hpp"

namespace outbox {

void QuoteText(std::string_view text, char (&out)[kQuotedBufferSize]) noexcept {
    bool truncated = false;
    if (text.size() > kMaxQuotedBytes) {
        size_t cut = kMaxQuotedBytes;
        while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
            --cut;
        }
        text = text.substr(0, cut);
        truncated = true;
    }
    size_t n = 0;
    out[n++] = '"';
    for (char c : text) {
        unsigned char u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = c;
        } else if (u < 0x20 || u == 0x7F) {
            out[n++] = '?';
        } else {
            out[n++] = c;
        }
    }
    if (truncated) {
        for (char c : {'.', '.', '.'}) {
            out[n++] = c;
        }
    }
    out[n++] = '"';
    out[n] = '\0';
}

}  // namespace outbox
