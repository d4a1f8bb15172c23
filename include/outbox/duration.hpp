// Durations in destination configs: a JSON number of milliseconds, or a string with a unit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

// "250ms", "2s", "1.5s", "5min", "2h", "1d", "3000" (no unit = milliseconds); surrounding spaces
// allowed, space between number and unit allowed. Negative, empty, overflowing or unknown unit:
// nullopt. Result is whole milliseconds (fractions rounded down).
std::optional<int64_t> ParseDurationMs(std::string_view text);

// The other way, in the largest unit that is exact: "24h", "15min", "2s", "250ms" (what
// ParseDurationMs reads back), for a setting quoted in an error text.
std::string FormatDurationMs(int64_t ms);

}  // namespace outbox
