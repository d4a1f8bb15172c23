// Retry-After parsing (RFC 9110 §10.2.3, HTTP-date forms of §5.6.7). libcurl's curl_getdate()
// turns the date into seconds (its own calendar arithmetic, independent of the locale and of the
// server's TZ); it is lenient by design (any zone, missing fields, 31 Feb rolled into March), so
// a date is accepted only when it reads back exactly: the value curl found, written again in
// the form the header used, must equal the header apart from letter case and the weekday name.
#include "outbox/brokers/webhook/retry_after.hpp"

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <curl/curl.h>

namespace outbox {

namespace {

constexpr int64_t kMsPerSecond = 1000;

constexpr std::string_view kDayNames[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr std::string_view kLongDayNames[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                              "Thursday", "Friday", "Saturday"};
constexpr const char *kMonthNames[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// Lower-cases ASCII only: HTTP dates are ASCII, and the locale must not matter.
char AsciiLower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// ASCII case-insensitive equality; servers in the wild do not all capitalise names as specified.
bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) {
        return false;
    }
    for (size_t i = 0; i < a.size(); ++i) {
        if (AsciiLower(a[i]) != AsciiLower(b[i])) {
            return false;
        }
    }
    return true;
}

// An ASCII digit, whatever the locale says.
bool IsDigit(char c) {
    return c >= '0' && c <= '9';
}

// Optional whitespace around a field value (RFC 9110 §5.6.3).
bool IsOws(char c) {
    return c == ' ' || c == '\t';
}

template <size_t N>
bool IsOneOf(std::string_view word, const std::string_view (&names)[N]) {
    for (std::string_view name : names) {
        if (EqualsIgnoreCase(word, name)) {
            return true;
        }
    }
    return false;
}

// The three forms, each split into its weekday name and the rest (what curl_getdate reads and
// what is compared after the round trip).
enum class DateForm { ImfFixdate, Rfc850, Asctime };

// "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"
std::optional<DateForm> FormOf(std::string_view value, std::string_view *rest) {
    size_t comma = value.find(',');
    if (comma != std::string_view::npos) {
        std::string_view day = value.substr(0, comma);
        *rest = value.substr(comma + 1);
        if (IsOneOf(day, kDayNames)) {
            return DateForm::ImfFixdate;
        }
        if (IsOneOf(day, kLongDayNames)) {
            return DateForm::Rfc850;
        }
        return std::nullopt;
    }
    if (value.size() > 4 && value[3] == ' ' && IsOneOf(value.substr(0, 3), kDayNames)) {
        *rest = value.substr(3);
        return DateForm::Asctime;
    }
    return std::nullopt;
}

// `seconds` written as the part after the weekday of `form`.
std::string Format(DateForm form, int64_t seconds) {
    time_t t = static_cast<time_t>(seconds);
    struct tm tm {};
    if (gmtime_r(&t, &tm) == nullptr || tm.tm_mon < 0 || tm.tm_mon > 11) {
        return std::string();
    }
    char text[64];
    long year = long(tm.tm_year) + 1900;
    switch (form) {
        case DateForm::ImfFixdate:
            snprintf(text, sizeof text, " %02d %s %04ld %02d:%02d:%02d GMT", tm.tm_mday,
                     kMonthNames[tm.tm_mon], year, tm.tm_hour, tm.tm_min, tm.tm_sec);
            break;
        case DateForm::Rfc850:
            snprintf(text, sizeof text, " %02d-%s-%02ld %02d:%02d:%02d GMT", tm.tm_mday,
                     kMonthNames[tm.tm_mon], year % 100, tm.tm_hour, tm.tm_min, tm.tm_sec);
            break;
        case DateForm::Asctime:
            snprintf(text, sizeof text, " %s %2d %02d:%02d:%02d %04ld", kMonthNames[tm.tm_mon],
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, year);
            break;
    }
    return text;
}

// The Gregorian year of a Unix time, in UTC.
int64_t YearOf(int64_t seconds) {
    time_t t = static_cast<time_t>(seconds);
    struct tm tm {};
    return gmtime_r(&t, &tm) == nullptr ? 1970 : int64_t(tm.tm_year) + 1900;
}

// Unix seconds of an HTTP-date, or nullopt.
std::optional<int64_t> ParseHttpDate(std::string_view value, int64_t now_s) {
    std::string_view rest;
    std::optional<DateForm> form = FormOf(value, &rest);
    if (!form) {
        return std::nullopt;
    }
    std::string text(rest);
    time_t parsed = curl_getdate(text.c_str(), nullptr);
    if (parsed == -1) {
        return std::nullopt;
    }
    if (!EqualsIgnoreCase(Format(*form, parsed), rest)) {
        return std::nullopt;
    }
    if (*form != DateForm::Rfc850) {
        return parsed;
    }
    // RFC 9110 §5.6.7: a two-digit year more than 50 years in the future is the most recent
    // past year with the same last two digits. curl picks the century its own way; the date is
    // read again with the year written out in full when the two disagree.
    int64_t now_year = YearOf(now_s);
    int64_t curl_year = YearOf(parsed);
    int64_t year = now_year - now_year % 100 + curl_year % 100;
    if (year > now_year + 50) {
        year -= 100;
    }
    if (year == curl_year) {
        return parsed;
    }
    // " 06-Nov-94 08:49:37 GMT" -> "06 Nov <year> 08:49:37 GMT"
    std::string full =
        text.substr(1, 2) + " " + text.substr(4, 3) + " " + std::to_string(year) + text.substr(10);
    parsed = curl_getdate(full.c_str(), nullptr);
    if (parsed == -1) {
        return std::nullopt;
    }
    return parsed;
}

// delay-seconds = 1*DIGIT; absurdly large values saturate (the caller caps the delay anyway).
std::optional<int64_t> ParseDelaySeconds(std::string_view text) {
    constexpr int64_t kMaxSeconds = std::numeric_limits<int64_t>::max() / kMsPerSecond;
    int64_t seconds = 0;
    for (char c : text) {
        if (!IsDigit(c)) {
            return std::nullopt;
        }
        if (seconds <= kMaxSeconds) {
            seconds = seconds * 10 + (c - '0');
        }
    }
    if (seconds > kMaxSeconds) {
        seconds = kMaxSeconds;
    }
    return seconds * kMsPerSecond;
}

}  // namespace

// How long the server asked us to wait; the caller uses it instead of its own backoff.
std::optional<int64_t> ParseRetryAfterMs(std::string_view value, int64_t now_unix_ms) {
    while (!value.empty() && IsOws(value.front())) {
        value.remove_prefix(1);
    }
    while (!value.empty() && IsOws(value.back())) {
        value.remove_suffix(1);
    }
    if (value.empty()) {
        return std::nullopt;
    }
    if (IsDigit(value.front())) {
        return ParseDelaySeconds(value);
    }
    // Floor division: the year of a (theoretical) negative clock must still be right.
    int64_t now_s = now_unix_ms / kMsPerSecond - (now_unix_ms % kMsPerSecond < 0 ? 1 : 0);
    std::optional<int64_t> date_s = ParseHttpDate(value, now_s);
    if (!date_s || *date_s > std::numeric_limits<int64_t>::max() / kMsPerSecond) {
        return std::nullopt;
    }
    int64_t date_ms = *date_s * kMsPerSecond;
    return date_ms > now_unix_ms ? date_ms - now_unix_ms : 0;
}

}  // namespace outbox
