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

// The NATS binding's percent-encoding of a header value.
std::string PercentEncodeNatsHeaderValue(std::string_view value) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        unsigned char u = static_cast<unsigned char>(c);
        if (u < 0x21 || u > 0x7E || c == '"' || c == '%') {
            out.push_back('%');
            out.push_back(kHex[u >> 4]);
            out.push_back(kHex[u & 0x0F]);
        } else {
            out.push_back(c);
        }
    }
    return out;
}

}  // namespace outbox
