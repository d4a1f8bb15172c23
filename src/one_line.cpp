// Error texts made safe for a text column and the server log (include/outbox/one_line.hpp).
// Pure logic: the webhook driver shows a response's first bytes with it.
#include "outbox/one_line.hpp"

#include "outbox/utf8.hpp"

namespace outbox {

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
