// Retry-After parsing (RFC 9110 §10.2.3, HTTP-date forms of §5.6.7). Written by hand: the C
// library's strptime/timegm depend on the locale and the TZ of the database server.
#include "outbox/retry_after.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace outbox {

namespace {

constexpr int64_t kMsPerSecond = 1000;
constexpr int64_t kSecondsPerDay = 86400;

constexpr std::string_view kDayNames[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
constexpr std::string_view kLongDayNames[] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                              "Friday", "Saturday", "Sunday"};
constexpr std::string_view kMonthNames[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
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

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int m, int d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

// The Gregorian year containing a day count since the epoch (inverse of DaysFromCivil).
int64_t YearOfDays(int64_t z) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const int64_t doe = z - era * 146097;
    const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const int64_t mp = (5 * doy + 2) / 153;
    const int64_t m = mp < 10 ? mp + 3 : mp - 9;
    return yoe + era * 400 + (m <= 2);
}

// Gregorian leap year, so that 29 Feb is accepted exactly when it exists.
bool IsLeapYear(int64_t y) {
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

// The last valid day of month m (1..12) of year y.
int DaysInMonth(int64_t y, int m) {
    static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && IsLeapYear(y) ? 29 : kDays[m - 1];
}

// A cursor over the header value; every Take* consumes only on success.
class Cursor {
  public:
    explicit Cursor(std::string_view text) : text_(text) {}

    bool AtEnd() const { return pos_ == text_.size(); }

    bool TakeChar(char c) {
        if (pos_ < text_.size() && text_[pos_] == c) {
            ++pos_;
            return true;
        }
        return false;
    }

    // Exactly `count` digits.
    bool TakeDigits(size_t count, int *value) {
        if (text_.size() - pos_ < count) {
            return false;
        }
        int v = 0;
        for (size_t i = 0; i < count; ++i) {
            char c = text_[pos_ + i];
            if (!IsDigit(c)) {
                return false;
            }
            v = v * 10 + (c - '0');
        }
        pos_ += count;
        *value = v;
        return true;
    }

    // One of `names`, case-insensitively; the index goes to *index.
    template <size_t N>
    bool TakeName(const std::string_view (&names)[N], int *index) {
        for (size_t i = 0; i < N; ++i) {
            std::string_view name = names[i];
            if (text_.size() - pos_ >= name.size() &&
                EqualsIgnoreCase(text_.substr(pos_, name.size()), name)) {
                pos_ += name.size();
                *index = static_cast<int>(i);
                return true;
            }
        }
        return false;
    }

    bool TakeWord(std::string_view word) {
        if (text_.size() - pos_ >= word.size() &&
            EqualsIgnoreCase(text_.substr(pos_, word.size()), word)) {
            pos_ += word.size();
            return true;
        }
        return false;
    }

  private:
    std::string_view text_;
    size_t pos_ = 0;
};

struct CivilTime {
    int64_t year = 0;
    int month = 0;  // 1..12
    int day = 0;
    int hour = 0;
    int minute = 0;
    int second = 0;
};

// "HH:MM:SS"
bool TakeTimeOfDay(Cursor *c, CivilTime *t) {
    return c->TakeDigits(2, &t->hour) && c->TakeChar(':') && c->TakeDigits(2, &t->minute) &&
           c->TakeChar(':') && c->TakeDigits(2, &t->second);
}

// "Sun, 06 Nov 1994 08:49:37 GMT"
bool ParseImfFixdate(std::string_view text, CivilTime *t) {
    Cursor c(text);
    int index = 0, year = 0;
    if (!(c.TakeName(kDayNames, &index) && c.TakeChar(',') && c.TakeChar(' ') &&
          c.TakeDigits(2, &t->day) && c.TakeChar(' ') && c.TakeName(kMonthNames, &index))) {
        return false;
    }
    t->month = index + 1;
    if (!(c.TakeChar(' ') && c.TakeDigits(4, &year) && c.TakeChar(' ') && TakeTimeOfDay(&c, t) &&
          c.TakeChar(' ') && c.TakeWord("GMT") && c.AtEnd())) {
        return false;
    }
    t->year = year;
    return true;
}

// "Sunday, 06-Nov-94 08:49:37 GMT"; the two-digit year is resolved against now_year.
bool ParseRfc850Date(std::string_view text, int64_t now_year, CivilTime *t) {
    Cursor c(text);
    int index = 0, yy = 0;
    if (!(c.TakeName(kLongDayNames, &index) && c.TakeChar(',') && c.TakeChar(' ') &&
          c.TakeDigits(2, &t->day) && c.TakeChar('-') && c.TakeName(kMonthNames, &index))) {
        return false;
    }
    t->month = index + 1;
    if (!(c.TakeChar('-') && c.TakeDigits(2, &yy) && c.TakeChar(' ') && TakeTimeOfDay(&c, t) &&
          c.TakeChar(' ') && c.TakeWord("GMT") && c.AtEnd())) {
        return false;
    }
    // RFC 9110 §5.6.7: a year more than 50 years in the future is the most recent past year
    // with the same last two digits.
    int64_t year = now_year - now_year % 100 + yy;
    if (year > now_year + 50) {
        year -= 100;
    }
    t->year = year;
    return true;
}

// "Sun Nov  6 08:49:37 1994"
bool ParseAsctimeDate(std::string_view text, CivilTime *t) {
    Cursor c(text);
    int index = 0, year = 0;
    if (!(c.TakeName(kDayNames, &index) && c.TakeChar(' ') && c.TakeName(kMonthNames, &index) &&
          c.TakeChar(' '))) {
        return false;
    }
    t->month = index + 1;
    if (c.TakeChar(' ')) {
        if (!c.TakeDigits(1, &t->day)) {
            return false;
        }
    } else if (!c.TakeDigits(2, &t->day)) {
        return false;
    }
    if (!(c.TakeChar(' ') && TakeTimeOfDay(&c, t) && c.TakeChar(' ') && c.TakeDigits(4, &year) &&
          c.AtEnd())) {
        return false;
    }
    t->year = year;
    return true;
}

// Unix milliseconds of a parsed date, or nullopt when a field is out of range (e.g. 31 Feb).
std::optional<int64_t> ToUnixMs(const CivilTime &t) {
    if (t.month < 1 || t.month > 12 || t.day < 1 || t.day > DaysInMonth(t.year, t.month) ||
        t.hour > 23 || t.minute > 59 || t.second > 60) {
        return std::nullopt;
    }
    int64_t days = DaysFromCivil(t.year, t.month, t.day);
    int64_t seconds = days * kSecondsPerDay + t.hour * 3600 + t.minute * 60 + t.second;
    return seconds * kMsPerSecond;
}

// delay-seconds = 1*DIGIT; absurdly large values saturate (the caller caps the delay anyway).
std::optional<int64_t> ParseDelaySeconds(std::string_view text) {
    if (text.empty()) {
        return std::nullopt;
    }
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
    int64_t now_days = now_unix_ms / (kSecondsPerDay * kMsPerSecond);
    if (now_unix_ms % (kSecondsPerDay * kMsPerSecond) < 0) {
        --now_days;
    }
    CivilTime t;
    if (!ParseImfFixdate(value, &t) && !ParseRfc850Date(value, YearOfDays(now_days), &t) &&
        !ParseAsctimeDate(value, &t)) {
        return std::nullopt;
    }
    std::optional<int64_t> date_ms = ToUnixMs(t);
    if (!date_ms) {
        return std::nullopt;
    }
    return *date_ms > now_unix_ms ? *date_ms - now_unix_ms : 0;
}

}  // namespace outbox
