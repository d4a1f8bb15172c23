// W3C Trace Context (https://www.w3.org/TR/trace-context/) as a producer hands it to the outbox:
// the checks of traceparent and tracestate, and the SQLCommenter comment
// (https://google.github.io/sqlcommenter/spec/) that carries them on a statement. Pure code:
// the producer check calls it on every INSERT that passed no traceparent header.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace outbox {

// version "-" trace-id "-" parent-id "-" trace-flags, lower-case hex: version 00 is exactly 55
// characters; a later version may append "-..." (and is read as 00). Refused: version ff,
// upper-case hex, an all-zero trace-id or parent-id.
bool IsValidTraceparent(std::string_view value);

// At most 32 comma-separated list members "key=value" (empty members and spaces around them
// allowed), at most 512 characters: key is lcalpha (lcalpha / digit / _ - * /){0,255}, or
// tenant@system; value is 1..256 printable ASCII characters but ',' and '=', not ending in a
// space.
bool IsValidTracestate(std::string_view value);

struct SqlCommenterTrace {
    std::string traceparent;  // URL-decoded; not yet validated
    std::string tracestate;   // empty when the comment has none
};

// The traceparent (and tracestate) of the last SQLCommenter comment in `statement` that has
// one: a /* ... */ comment of key='value' pairs separated by commas, keys and values
// URL-encoded (%XX), values in single quotes. nullopt when there is none. Text inside string
// literals, quoted identifiers and -- comments is not looked at.
std::optional<SqlCommenterTrace> FindSqlCommenterTrace(std::string_view statement);

}  // namespace outbox
