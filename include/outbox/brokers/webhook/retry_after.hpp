// Parsing the HTTP Retry-After header (RFC 9110 §10.2.3).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace outbox {

// Milliseconds to wait according to a Retry-After value: either delay-seconds ("120") or an
// HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT", also the obsolete RFC 850 and asctime forms),
// relative to now_unix_ms. A date in the past gives 0. Anything unparsable gives nullopt.
std::optional<int64_t> ParseRetryAfterMs(std::string_view value, int64_t now_unix_ms);

}  // namespace outbox
