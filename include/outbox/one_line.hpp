// Error texts made safe for a text column and the server log (see src/one_line.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace outbox {

// The first `max_bytes` of `text` as one trimmed line of valid UTF-8: error texts end up in a
// text column and in the server log, where a stray byte or a line break would do harm.
// Control characters become spaces, other invalid bytes '?'.
std::string OneLine(std::string_view text, size_t max_bytes);

}  // namespace outbox
