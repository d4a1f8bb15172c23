// CloudEvents attributes shared by the drivers.
#include "outbox/drivers/cloudevents.hpp"

#include <cstdio>
#include <ctime>

namespace outbox {

// RFC 3339 in UTC with milliseconds, the form CloudEvents receivers parse most reliably.
std::string FormatRfc3339Ms(int64_t unix_ms) {
    time_t seconds = static_cast<time_t>(unix_ms / 1000);
    int millis = static_cast<int>(unix_ms % 1000);
    if (millis < 0) {
        millis += 1000;
        seconds -= 1;
    }
    struct tm tm;
    gmtime_r(&seconds, &tm);
    char buf[40];
    size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, sizeof buf - n, ".%03dZ", millis);
    return buf;
}

}  // namespace outbox
