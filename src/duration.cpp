// Duration parsing for destination configs. The units are PostgreSQL's GUC time units, so a
// DBA writes "5min" in a config exactly as in postgresql.conf.
#include "outbox/duration.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace outbox {

namespace {

// Fraction digits beyond this are dropped without changing the result: a millisecond boundary
// is k/unit_ms of a unit, which for these units has at most 10 decimals, so truncating after 18
// digits never moves the value below the boundary it had reached.
constexpr int kMaxFractionDigits = 18;

// The blanks allowed around a duration and before its unit.
bool IsSpace(char c) {
    return c == ' ' || c == '\t';
}

// An ASCII digit, whatever the locale says.
bool IsDigit(char c) {
    return c >= '0' && c <= '9';
}

// Milliseconds per unit, or 0 for an unknown unit. No unit means milliseconds.
int64_t UnitMs(std::string_view unit) {
    if (unit.empty() || unit == "ms") {
        return 1;
    }
    if (unit == "s") {
        return 1000;
    }
    if (unit == "min") {
        return 60 * 1000;
    }
    if (unit == "h") {
        return 60 * 60 * 1000;
    }
    if (unit == "d") {
        return 24 * 60 * 60 * 1000;
    }
    return 0;
}

}  // namespace

// A config duration in whole milliseconds.
std::optional<int64_t> ParseDurationMs(std::string_view text) {
    while (!text.empty() && IsSpace(text.front())) {
        text.remove_prefix(1);
    }
    while (!text.empty() && IsSpace(text.back())) {
        text.remove_suffix(1);
    }

    // 1*DIGIT [ "." 1*DIGIT ]
    size_t pos = 0;
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    int64_t whole = 0;
    size_t whole_digits = 0;
    while (pos < text.size() && IsDigit(text[pos])) {
        int digit = text[pos] - '0';
        if (whole > (kMax - digit) / 10) {
            return std::nullopt;
        }
        whole = whole * 10 + digit;
        ++whole_digits;
        ++pos;
    }
    if (whole_digits == 0) {
        return std::nullopt;
    }
    int64_t fraction = 0;  // the first kMaxFractionDigits digits, scaled to 10^18
    int64_t scale = 1;
    for (int i = 0; i < kMaxFractionDigits; ++i) {
        scale *= 10;
    }
    if (pos < text.size() && text[pos] == '.') {
        ++pos;
        size_t fraction_digits = 0;
        int64_t place = scale;
        while (pos < text.size() && IsDigit(text[pos])) {
            place /= 10;
            fraction += (text[pos] - '0') * place;  // place becomes 0 past digit 18
            ++fraction_digits;
            ++pos;
        }
        if (fraction_digits == 0) {
            return std::nullopt;
        }
    }

    while (pos < text.size() && IsSpace(text[pos])) {
        ++pos;
    }
    int64_t unit_ms = UnitMs(text.substr(pos));
    if (unit_ms == 0) {
        return std::nullopt;
    }

    if (whole > kMax / unit_ms) {
        return std::nullopt;
    }
    int64_t ms = whole * unit_ms;
    // fraction < 10^18 and unit_ms < 10^8: the product needs 128 bits.
    __int128 fraction_ms = static_cast<__int128>(fraction) * unit_ms / scale;
    if (fraction_ms > kMax - ms) {
        return std::nullopt;
    }
    return ms + static_cast<int64_t>(fraction_ms);
}

std::string FormatDurationMs(int64_t ms) {
    if (ms % (3600 * 1000) == 0)
        return std::to_string(ms / (3600 * 1000)) + "h";
    if (ms % (60 * 1000) == 0)
        return std::to_string(ms / (60 * 1000)) + "min";
    if (ms % 1000 == 0)
        return std::to_string(ms / 1000) + "s";
    return std::to_string(ms) + "ms";
}

}  // namespace outbox
