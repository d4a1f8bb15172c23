// Untrusted text (names, topics, config keys) shown inside an error message: always one
// printable line of valid UTF-8 whatever the input, so a message can neither break a client's
// encoding conversion nor inject lines into the server log.
#pragma once

#include <cstddef>
#include <string_view>

namespace outbox {

constexpr size_t kMaxQuotedBytes = 64;
// Enough for kMaxQuotedBytes escaped bytes, the quotes, "..." and the terminator.
constexpr size_t kQuotedBufferSize = 2 * kMaxQuotedBytes + 8;

// Writes `text` in double quotes to `out` (kQuotedBufferSize bytes, NUL-terminated): at most
// kMaxQuotedBytes bytes of it, cut on a UTF-8 character boundary and followed by "..." when
// cut; quotes and backslashes escaped; control characters shown as '?'. Never allocates.
void QuoteText(std::string_view text, char (&out)[kQuotedBufferSize]) noexcept;

}  // namespace outbox
