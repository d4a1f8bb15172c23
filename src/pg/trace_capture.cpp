// The producer's trace context, captured by the INSERT check (src/pg/message_check.cpp): the
// message's own traceparent/tracestate headers, outbox.traceparent and outbox.tracestate, or the
// statement's SQLCommenter comment.
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "outbox/quote.hpp"
#include "outbox/trace_context.hpp"

extern "C" {
#include "postgres.h"
#include "access/xact.h"
#include "tcop/tcopprot.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/trace_capture.hpp"

namespace outbox::pg {

// Room for a traceparent (55 characters in version 00; later versions may be longer) and a
// tracestate (at most 512), each with its terminator.
constexpr size_t kTraceparentBuffer = 257;
constexpr size_t kTracestateBuffer = 513;

// The traceparent and tracestate of the statement's SQLCommenter comment, copied into the
// buffers; false when there is none. A value too long for its buffer (too long to be valid) is
// cut there and flagged, so that it is refused as malformed, not taken for a shorter one. C++
// that never ereports.
static bool CommentTraceContext(const char *statement, char (&traceparent)[kTraceparentBuffer],
                                char (&tracestate)[kTracestateBuffer], bool *traceparent_too_long,
                                bool *tracestate_too_long) noexcept {
    try {
        std::optional<outbox::SqlCommenterTrace> t = outbox::FindSqlCommenterTrace(statement);
        if (!t)
            return false;
        auto copy = [](const std::string &value, char *buffer, size_t size, bool *too_long) {
            *too_long = value.size() >= size;
            size_t n = *too_long ? size - 1 : value.size();
            memcpy(buffer, value.data(), n);
            buffer[n] = '\0';
        };
        copy(t->traceparent, traceparent, kTraceparentBuffer, traceparent_too_long);
        copy(t->tracestate, tracestate, kTracestateBuffer, tracestate_too_long);
        return true;
    } catch (...) {
        return false;  // out of memory: the message goes without the comment's context
    }
}

// Whether the headers object has a header called `lower` (compared case-insensitively).
static bool HasHeader(Datum headers, const char *lower) {
    Jsonb *jb = DatumGetJsonbP(headers);
    JsonbIterator *it = JsonbIteratorInit(&jb->root);
    JsonbValue v;
    JsonbIteratorToken token;
    size_t len = strlen(lower);
    while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
        if (token == WJB_KEY && size_t(v.val.string.len) == len &&
            pg_strncasecmp(v.val.string.val, lower, len) == 0)
            return true;
    return false;
}

// The first value of the header called `lower` (compared case-insensitively) that `valid`
// refuses, palloc'd; nullptr when every such header is valid or there is none. (CheckHeaders
// has made sure every value is a string.)
static char *MalformedHeader(Datum headers, const char *lower, bool (*valid)(std::string_view)) {
    Jsonb *jb = DatumGetJsonbP(headers);
    JsonbIterator *it = JsonbIteratorInit(&jb->root);
    JsonbValue v;
    JsonbIteratorToken token;
    size_t len = strlen(lower);
    bool named = false;
    while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE) {
        if (token == WJB_KEY) {
            named = size_t(v.val.string.len) == len &&
                    pg_strncasecmp(v.val.string.val, lower, len) == 0;
        } else if (token == WJB_VALUE && named && v.type == jbvString &&
                   !valid(std::string_view(v.val.string.val, v.val.string.len))) {
            return pnstrdup(v.val.string.val, v.val.string.len);
        }
    }
    return nullptr;
}

static bool ValidTraceparent(std::string_view value) {
    return outbox::IsValidTraceparent(value);
}

static bool ValidTracestate(std::string_view value) {
    return outbox::IsValidTracestate(value);
}

// Statement whose malformed trace context was already warned about (one WARNING per
// statement, not one per row).
static TimestampTz trace_warned_statement = 0;

constexpr const char *kTraceparentGrammar =
    "A traceparent is 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, lower case, ids not "
    "all zero (W3C Trace Context).";
constexpr const char *kTracestateGrammar =
    "A tracestate is up to 32 comma-separated key=value members, keys in lower case (W3C Trace "
    "Context); the traceparent is kept.";

// The WARNING of a malformed trace context: `what` (traceparent or tracestate) from `where`.
static void WarnTraceContext(const char *what, const char *where, const char *value,
                             const char *grammar, bool header) {
    if (trace_warned_statement == GetCurrentStatementStartTimestamp())
        return;
    trace_warned_statement = GetCurrentStatementStartTimestamp();
    char shown[outbox::kQuotedBufferSize];
    outbox::QuoteText(value, shown);
    if (header)
        ereport(WARNING,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("outbox ignores the malformed %s %s from %s", what, shown, where),
                 errdetail("The message is queued without that header. %s", grammar),
                 errhint("Fix the value, or leave the header out: outbox.traceparent or the "
                         "statement's SQLCommenter comment then supplies the trace context.")));
    else
        ereport(WARNING,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("outbox ignores the malformed %s %s from %s", what, shown, where),
                 errdetail("The message is queued without it. %s", grammar),
                 errhint("Fix what sets %s; or pass the header \"%s\" yourself.", where, what)));
}

// The producer's trace context, captured at INSERT (OpenTelemetry: a message carries its
// creation context): the producer's own traceparent header; when it passed none, outbox.
// traceparent (with outbox.tracestate), else the statement's SQLCommenter comment. One rule for
// every source: a malformed traceparent or tracestate is left out with a WARNING (22023), never
// refusing the row (a bad trace id never fails a business transaction), and the message is
// queued as if it had not been given — so a malformed traceparent header takes its tracestate
// header with it (W3C: a vendor that cannot parse traceparent does not read tracestate), and
// outbox.traceparent or the comment then applies. Returns the headers to store, or 0 when they
// stay as they are.
Datum CaptureTraceContext(Datum headers, bool has_headers) {
    // The producer's own headers first.
    bool drop_parent = false, drop_state = false;
    if (has_headers) {
        if (char *bad = MalformedHeader(headers, "traceparent", ValidTraceparent)) {
            WarnTraceContext("traceparent", "the message's \"traceparent\" header", bad,
                             kTraceparentGrammar, true);
            drop_parent = true;
            drop_state = HasHeader(headers, "tracestate");
        } else if (char *bad_state = MalformedHeader(headers, "tracestate", ValidTracestate)) {
            WarnTraceContext("tracestate", "the message's \"tracestate\" header", bad_state,
                             kTracestateGrammar, true);
            drop_state = true;
        }
        if (!drop_parent && HasHeader(headers, "traceparent") && !drop_state)
            return Datum(0);  // the producer's own context, as it gave it
    }
    bool own_parent = has_headers && !drop_parent && HasHeader(headers, "traceparent");
    bool own_state = has_headers && !drop_state && HasHeader(headers, "tracestate");

    // Then the session's, or the statement's comment (unless the producer's own traceparent is
    // kept: it always wins).
    char comment_parent[kTraceparentBuffer];
    char comment_state[kTracestateBuffer];
    const char *traceparent = own_parent ? nullptr : setting_traceparent;
    const char *tracestate = setting_tracestate;
    const char *where = "outbox.traceparent";
    const char *state_where = "outbox.tracestate";
    bool parent_cut = false, state_cut = false;  // the comment's value was too long to keep
    if (!own_parent && (traceparent == nullptr || traceparent[0] == '\0')) {
        traceparent = nullptr;
        // Parsed once per statement, not once per row of a large multi-row INSERT.
        static TimestampTz parsed_statement = 0;
        static const char *parsed_query = nullptr;
        static bool parsed_found = false;
        static char parsed_parent[kTraceparentBuffer];
        static char parsed_state[kTracestateBuffer];
        static bool parent_too_long = false, state_too_long = false;
        if (debug_query_string != nullptr &&
            (parsed_statement != GetCurrentStatementStartTimestamp() ||
             parsed_query != debug_query_string)) {
            parsed_found = CommentTraceContext(debug_query_string, parsed_parent, parsed_state,
                                               &parent_too_long, &state_too_long);
            parsed_statement = GetCurrentStatementStartTimestamp();
            parsed_query = debug_query_string;
        }
        if (debug_query_string != nullptr && parsed_found) {
            memcpy(comment_parent, parsed_parent, sizeof comment_parent);
            memcpy(comment_state, parsed_state, sizeof comment_state);
            traceparent = comment_parent;
            tracestate = comment_state;
            where = state_where = "the statement's SQLCommenter comment";
            parent_cut = parent_too_long;
            state_cut = state_too_long;
        }
    }
    if (traceparent != nullptr && (parent_cut || !outbox::IsValidTraceparent(traceparent))) {
        WarnTraceContext("traceparent", where, traceparent, kTraceparentGrammar, false);
        traceparent = nullptr;
    }
    if (traceparent == nullptr || own_state)
        tracestate = nullptr;  // the producer's own tracestate header is kept as it is
    if (tracestate != nullptr && tracestate[0] != '\0' &&
        (state_cut || !outbox::IsValidTracestate(tracestate))) {
        WarnTraceContext("tracestate", state_where, tracestate, kTracestateGrammar, false);
        tracestate = nullptr;
    }
    if (traceparent == nullptr && !drop_parent && !drop_state)
        return Datum(0);  // nothing to add, nothing to leave out

    // The headers without those left out, with the context taken.
    JsonbBuild build;
    PushJsonb(&build, WJB_BEGIN_OBJECT, nullptr);
    if (has_headers) {
        Jsonb *jb = DatumGetJsonbP(headers);
        JsonbIterator *it = JsonbIteratorInit(&jb->root);
        JsonbValue v;
        JsonbIteratorToken token;
        bool skip = false;
        while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE) {
            if (token == WJB_KEY) {
                auto is = [&v](const char *lower) {
                    size_t len = strlen(lower);
                    return size_t(v.val.string.len) == len &&
                           pg_strncasecmp(v.val.string.val, lower, len) == 0;
                };
                skip = (drop_parent && is("traceparent")) || (drop_state && is("tracestate"));
            }
            if ((token == WJB_KEY || token == WJB_VALUE) && !skip)
                PushJsonb(&build, token, &v);
        }
    }
    auto push_string = [&build](JsonbIteratorToken token, const char *text) {
        JsonbValue v;
        v.type = jbvString;
        v.val.string.val = const_cast<char *>(text);
        v.val.string.len = int(strlen(text));
        PushJsonb(&build, token, &v);
    };
    if (traceparent != nullptr) {
        push_string(WJB_KEY, "traceparent");
        push_string(WJB_VALUE, traceparent);
        if (tracestate != nullptr && tracestate[0] != '\0') {
            push_string(WJB_KEY, "tracestate");
            push_string(WJB_VALUE, tracestate);
        }
    }
    PushJsonb(&build, WJB_END_OBJECT, nullptr);
    return JsonbPGetDatum(JsonbValueToJsonb(JsonbBuilt(&build)));
}

}  // namespace outbox::pg
