// W3C Trace Context checks and the SQLCommenter comment parser.
#include "outbox/trace_context.hpp"

#include <cstddef>

namespace outbox {

namespace {

bool IsLowerHex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

// `n` lower-case hex digits at `s`, not all of them zero when `nonzero`.
bool HexField(std::string_view s, size_t n, bool nonzero) {
    if (s.size() < n)
        return false;
    bool any = false;
    for (size_t i = 0; i < n; ++i) {
        if (!IsLowerHex(s[i]))
            return false;
        any = any || s[i] != '0';
    }
    return any || !nonzero;
}

bool IsLcAlpha(char c) {
    return c >= 'a' && c <= 'z';
}

bool IsKeyChar(char c) {
    return IsLcAlpha(c) || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' || c == '/';
}

// A tracestate key: simple-key, or tenant-id "@" system-id.
bool IsTracestateKey(std::string_view key) {
    size_t at = key.find('@');
    if (at == std::string_view::npos) {
        if (key.empty() || key.size() > 256 || !IsLcAlpha(key[0]))
            return false;
        for (char c : key)
            if (!IsKeyChar(c))
                return false;
        return true;
    }
    std::string_view tenant = key.substr(0, at), system = key.substr(at + 1);
    if (tenant.empty() || tenant.size() > 241 || system.empty() || system.size() > 14 ||
        !IsLcAlpha(system[0]))
        return false;
    if (!IsLcAlpha(tenant[0]) && !(tenant[0] >= '0' && tenant[0] <= '9'))
        return false;
    for (char c : tenant)
        if (!IsKeyChar(c))
            return false;
    for (char c : system)
        if (!IsKeyChar(c))
            return false;
    return true;
}

bool IsTracestateValue(std::string_view value) {
    if (value.empty() || value.size() > 256 || value.back() == ' ')
        return false;
    for (char c : value)
        if (c < 0x20 || c > 0x7E || c == ',' || c == '=')
            return false;
    return true;
}

std::string_view TrimOws(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
        s.remove_suffix(1);
    return s;
}

int HexValue(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

// %XX decoding; a '%' not followed by two hex digits is kept as it is.
std::string UrlDecode(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < s.size() && (hi = HexValue(s[i + 1])) >= 0 &&
            (lo = HexValue(s[i + 2])) >= 0) {
            out.push_back(static_cast<char>(hi * 16 + lo));
            i += 2;
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

// The key='value' pairs of one comment's text: traceparent and tracestate, when present.
std::optional<SqlCommenterTrace> ParseComment(std::string_view body) {
    SqlCommenterTrace trace;
    bool found = false;
    size_t i = 0;
    while (i < body.size()) {
        size_t eq = body.find('=', i);
        if (eq == std::string_view::npos)
            break;
        std::string key = UrlDecode(TrimOws(body.substr(i, eq - i)));
        size_t open = eq + 1;
        while (open < body.size() && (body[open] == ' ' || body[open] == '\t'))
            ++open;
        if (open >= body.size() || body[open] != '\'')
            return std::nullopt;  // not SQLCommenter
        size_t close = body.find('\'', open + 1);
        if (close == std::string_view::npos)
            return std::nullopt;
        std::string value = UrlDecode(body.substr(open + 1, close - open - 1));
        if (key == "traceparent") {
            trace.traceparent = std::move(value);
            found = true;
        } else if (key == "tracestate") {
            trace.tracestate = std::move(value);
        }
        i = close + 1;
        while (i < body.size() && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n'))
            ++i;
        if (i < body.size() && body[i] != ',')
            return std::nullopt;
        ++i;
    }
    if (!found)
        return std::nullopt;
    return trace;
}

}  // namespace

// The W3C traceparent grammar, version 00 (and the forward-compatible reading of later ones).
bool IsValidTraceparent(std::string_view v) {
    if (v.size() < 55 || !HexField(v, 2, false) || v.substr(0, 2) == "ff" || v[2] != '-' ||
        !HexField(v.substr(3), 32, true) || v[35] != '-' || !HexField(v.substr(36), 16, true) ||
        v[52] != '-' || !HexField(v.substr(53), 2, false))
        return false;
    if (v.substr(0, 2) == "00")
        return v.size() == 55;
    return v.size() == 55 || v[55] == '-';
}

// The W3C tracestate grammar.
bool IsValidTracestate(std::string_view v) {
    if (v.size() > 512)
        return false;
    size_t members = 0;
    size_t start = 0;
    while (start <= v.size()) {
        size_t comma = v.find(',', start);
        std::string_view member =
            TrimOws(v.substr(start, comma == std::string_view::npos ? v.npos : comma - start));
        if (!member.empty()) {
            size_t eq = member.find('=');
            if (eq == std::string_view::npos || !IsTracestateKey(member.substr(0, eq)) ||
                !IsTracestateValue(member.substr(eq + 1)))
                return false;
            if (++members > 32)
                return false;
        }
        if (comma == std::string_view::npos)
            break;
        start = comma + 1;
    }
    return true;
}

// Scans the statement as PostgreSQL's lexer would for comments, skipping literals.
std::optional<SqlCommenterTrace> FindSqlCommenterTrace(std::string_view s) {
    std::optional<SqlCommenterTrace> last;
    size_t i = 0;
    while (i < s.size()) {
        char c = s[i];
        if (c == '\'' || c == '"') {
            // A literal or quoted identifier; a doubled quote stays inside.
            size_t j = i + 1;
            while (j < s.size()) {
                if (s[j] == c) {
                    if (j + 1 < s.size() && s[j + 1] == c) {
                        j += 2;
                        continue;
                    }
                    break;
                }
                ++j;
            }
            i = j + 1;
        } else if (c == '-' && i + 1 < s.size() && s[i + 1] == '-') {
            size_t nl = s.find('\n', i);
            i = nl == std::string_view::npos ? s.size() : nl + 1;
        } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
            // PostgreSQL's block comments nest.
            size_t j = i + 2;
            int depth = 1;
            while (j < s.size() && depth > 0) {
                if (s[j] == '/' && j + 1 < s.size() && s[j + 1] == '*') {
                    ++depth;
                    j += 2;
                } else if (s[j] == '*' && j + 1 < s.size() && s[j + 1] == '/') {
                    --depth;
                    j += 2;
                } else {
                    ++j;
                }
            }
            if (depth == 0) {
                std::optional<SqlCommenterTrace> t = ParseComment(s.substr(i + 2, j - i - 4));
                if (t)
                    last = std::move(t);
            }
            i = j;
        } else {
            ++i;
        }
    }
    return last;
}

}  // namespace outbox
