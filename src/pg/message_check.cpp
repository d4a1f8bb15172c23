// The check every INSERT into outbox.messages passes (the BEFORE INSERT row trigger
// outbox._messages_check): it refuses what cannot be delivered and fills in what the relay
// owns. The rest of the producer path is src/pg/producer.cpp.
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "outbox/broker_kind.hpp"
#include "outbox/config.hpp"
#include "outbox/headers.hpp"
#include "outbox/quote.hpp"
#include "outbox/trace_context.hpp"

extern "C" {
#include "postgres.h"
#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "tcop/tcopprot.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/destination_cache.hpp"
#include "outbox/pg/key_order.hpp"
#include "outbox/pg/producer.hpp"
#include "outbox/pg/queue_counts.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/trace_capture.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_messages_check(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_messages_check);
}

namespace outbox::pg {

constexpr int kMaxKeyBytes = 1024;  // keys are indexed for per-key ordering
constexpr int64 kMaxScheduleAheadUs = 366LL * USECS_PER_DAY;

// Attribute numbers of outbox.messages, looked up once per table incarnation.
struct MessageColumns {
    Oid relid;
    Oid id_sequence;
    int id, destination, topic, key, payload, payload_bytes, headers, available_at, expires_at,
        created_at, attempts, lease_token, last_error, first_failed_at, order_key;
    int compacts;  // 0: a schema before compaction ("compaction": "key" is then not applied)
};

static const MessageColumns &ColumnsOf(Relation rel) {
    static MessageColumns cols = {};
    if (cols.relid == RelationGetRelid(rel))
        return cols;
    TupleDesc desc = RelationGetDescr(rel);
    auto att = [desc](const char *name) {
        int n = SPI_fnumber(desc, name);
        if (n <= 0)
            ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                            errmsg("outbox.messages has no column \"%s\"", name),
                            errhint("Update the extension: ALTER EXTENSION outbox UPDATE;")));
        return n;
    };
    MessageColumns c = {};
    c.id = att("id");
    List *sequences = getOwnedSequences(RelationGetRelid(rel));  // messages_id_seq
    if (list_length(sequences) != 1)
        ereport(ERROR,
                (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("outbox.messages has no id sequence"),
                 errhint("Update the extension: ALTER EXTENSION outbox UPDATE;")));
    c.id_sequence = linitial_oid(sequences);
    c.destination = att("destination");
    c.topic = att("topic");
    c.key = att("key");
    c.payload = att("payload");
    c.payload_bytes = att("payload_bytes");
    c.headers = att("headers");
    c.available_at = att("available_at");
    c.expires_at = att("expires_at");
    c.created_at = att("created_at");
    c.attempts = att("attempts");
    c.lease_token = att("lease_token");
    c.last_error = att("last_error");
    c.first_failed_at = att("first_failed_at");
    c.order_key = att("order_key");
    c.compacts = SPI_fnumber(desc, "compacts");
    if (c.compacts <= 0)
        c.compacts = 0;
    c.relid = RelationGetRelid(rel);
    cols = c;
    return cols;
}

// Size in bytes of the payload as it will be delivered (its JSON text). The binary form does
// not bound it: a numeric such as 1e131071 takes a few bytes and prints 131072 digits.
static int64 DeliveredJsonSize(Datum payload) {
    Jsonb *jb = DatumGetJsonbP(payload);
    StringInfoData buf;
    initStringInfo(&buf);
    JsonbToCString(&buf, &jb->root, VARSIZE(jb));
    int64 size = buf.len;
    pfree(buf.data);
    return size;
}

// A row that carries its own id: a requeued dead letter (outbox.requeue) or a restored dump
// (pg_restore's COPY). Only the owner of outbox.messages — the extension's owner, whose rights
// outbox.requeue runs with, or a superuser — may insert one; it keeps every column it carries.
// For everyone else setting id is refused like any column the relay owns, and a NULL id is
// never kept: it is numbered.
static bool CarriesOwnId(HeapTuple tuple, TupleDesc desc, const MessageColumns &c, Relation rel) {
    bool isnull;
    heap_getattr(tuple, c.id, desc, &isnull);
    return !isnull && (superuser() || has_privs_of_role(GetUserId(), rel->rd_rel->relowner));
}

// Headers must be a JSON object whose values are strings that can travel as HTTP or Kafka
// headers, and may not take the name of a header the relay sets itself.
static void CheckHeaders(Datum headers) {
    Jsonb *jb = DatumGetJsonbP(headers);
    if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("outbox message headers must be a JSON object of strings"),
                        errhint("For example: '{\"traceparent\": \"00-...\"}'.")));
    if (JB_ROOT_COUNT(jb) > static_cast<int>(kMaxHeaderCount))
        ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                        errmsg("outbox message has %u headers, more than the %zu allowed",
                               JB_ROOT_COUNT(jb), kMaxHeaderCount)));
    JsonbIterator *it = JsonbIteratorInit(&jb->root);
    JsonbValue v;
    JsonbIteratorToken token;
    char name[kMaxHeaderNameBytes + 1] = "";
    bool type_seen = false;
    bool current_is_type = false;
    while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE) {
        if (token == WJB_KEY) {
            std::string_view n(v.val.string.val, v.val.string.len);
            bool valid = IsValidHeaderName(n);
            // ce_type (or ce-type) is the producer's CloudEvents type: sent as the transport's
            // type attribute instead of the topic.
            bool is_type = valid && outbox::IsCloudEventTypeHeader(n);
            bool reserved = valid && !is_type && IsReservedHeaderName(n);
            if (is_type && type_seen)
                ereport(ERROR,
                        (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                         errmsg("outbox message sets the CloudEvents type twice"),
                         errdetail("Headers \"ce_type\" and \"ce-type\" (in any case) both set "
                                   "the type."),
                         errhint("Keep one of them.")));
            type_seen = type_seen || is_type;
            current_is_type = is_type;
            char shown[outbox::kQuotedBufferSize] = "";
            if (!valid || reserved)
                outbox::QuoteText(n, shown);
            if (!valid)
                ereport(ERROR,
                        (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                         errmsg("outbox message header name %s is not valid", shown),
                         errdetail("A header name is 1 to %zu characters of letters, digits and "
                                   "!#$%%&'*+-.^_`|~.",
                                   kMaxHeaderNameBytes)));
            if (reserved)
                ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                                errmsg("outbox message header %s is set by outbox itself", shown),
                                errhint("Event id, signature, CloudEvents and HTTP framing headers "
                                        "cannot be overridden; use another header name.")));
            memcpy(name, n.data(), n.size());
            name[n.size()] = '\0';
        } else if (token == WJB_VALUE) {
            if (v.type != jbvString)
                ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                                errmsg("outbox message header \"%s\" is not a string", name),
                                errhint("Header values are JSON strings; quote numbers and "
                                        "booleans.")));
            if (!IsValidHeaderValue(std::string_view(v.val.string.val, v.val.string.len)))
                ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                                errmsg("outbox message header \"%s\" has an invalid value", name),
                                errdetail("A header value is at most %zu bytes of UTF-8 without "
                                          "control characters (tab allowed).",
                                          kMaxHeaderValueBytes)));
            if (current_is_type && v.val.string.len == 0)
                ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                                errmsg("outbox message header \"%s\" is empty", name),
                                errdetail("A CloudEvents type is a non-empty string."),
                                errhint("Leave the header out to use the topic as the type.")));
        }
    }
}

// Columns the relay owns must not be set by a producer (a row that carries its own id keeps
// them: CarriesOwnId).
static void CheckManagedColumnsUnset(HeapTuple tuple, TupleDesc desc, const MessageColumns &c) {
    bool isnull;
    bool attempts_null;
    Datum attempts = heap_getattr(tuple, c.attempts, desc, &attempts_null);
    const char *column = nullptr;
    for (auto [att, name] : {std::pair{c.id, "id"}, {c.created_at, "created_at"}}) {
        heap_getattr(tuple, att, desc, &isnull);
        if (!isnull)
            column = name;
    }
    if (!attempts_null && DatumGetInt32(attempts) != 0)
        column = "attempts";
    if (c.compacts > 0) {
        heap_getattr(tuple, c.compacts, desc, &isnull);
        if (!isnull)
            column = "compacts";
    }
    for (auto [att, name] : {std::pair{c.order_key, "order_key"},
                             {c.lease_token, "lease_token"},
                             {c.last_error, "last_error"},
                             {c.first_failed_at, "first_failed_at"}}) {
        heap_getattr(tuple, att, desc, &isnull);
        if (!isnull)
            column = name;
    }
    if (column)
        ereport(ERROR, (errcode(ERRCODE_GENERATED_ALWAYS),
                        errmsg("column \"%s\" of outbox.messages is managed by outbox", column),
                        errdetail("Producers set destination, topic, key, payload or "
                                  "payload_bytes, headers, available_at, expires_at and "
                                  "optionally event_id."),
                        errhint("Leave \"%s\" out of the INSERT.", column)));
}

// The key's turn for an ordered message, taken last (after every check: a refused row takes no
// lock and no number). Returns the order key.
static int64 TakeTurnFor(std::string_view destination, HeapTuple tuple, TupleDesc desc,
                         const MessageColumns &c, TimestampTz available_at, bool keeps_id,
                         int64 id) {
    bool isnull;
    text *key = DatumGetTextPP(heap_getattr(tuple, c.key, desc, &isnull));
    std::string_view k(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key));
    int64 order_key = OrderKey(destination, k);
    TakeKeyTurn(destination, order_key, k, available_at, keeps_id, id);
    return order_key;
}

// "compaction": "key". The key's older queued messages that no worker holds: not leased
// (lease_token NULL) and not locked (a claim of the fast path locks rows without leasing them;
// SKIP LOCKED passes them, and every row another transaction is removing, without waiting).
// Only compacting rows (compacts) are looked at, through their own small index. The operators
// are named with their schema: this runs with the owner's rights and the producer's
// search_path.
#define SUPERSEDE_DELETE                                                                    \
    "DELETE FROM outbox.messages AS m"                                                      \
    " WHERE m.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("                                      \
    "   SELECT o.ctid FROM outbox.messages AS o"                                            \
    "    WHERE o.destination OPERATOR(pg_catalog.=) $1 AND o.key OPERATOR(pg_catalog.=) $2" \
    "      AND o.compacts AND o.lease_token IS NULL"                                        \
    "      FOR UPDATE OF o SKIP LOCKED))"
static const char *const kSupersedeSql = SUPERSEDE_DELETE;
// outbox.retention > 0: the same, into outbox.archive with reason 'superseded'.
static const char *const kSupersedeArchiveSql =
    "WITH gone AS (" SUPERSEDE_DELETE
    "  RETURNING m.id, m.event_id, m.destination, m.topic, m.key, m.payload, m.payload_bytes,"
    "            m.headers, m.created_at, m.attempts)"
    " INSERT INTO outbox.archive (id, event_id, destination, topic, key, payload, payload_bytes,"
    "       headers, created_at, attempts, reason)"
    " SELECT id, event_id, destination, topic, key, payload, payload_bytes, headers, created_at,"
    "        attempts, 'superseded' FROM gone";
#undef SUPERSEDE_DELETE
static SPIPlanPtr supersede_plan = nullptr, supersede_archive_plan = nullptr;

// Removes the queued messages of (destination, key) that the row being inserted supersedes,
// in the latest snapshot (a message committed while this transaction waited for its key's turn
// is seen, also under REPEATABLE READ), with the rights of the owner of outbox.messages (a
// producer needs only INSERT; restored on error by the transaction's abort, as for the key's
// turn). Counts them as superseded. Returns how many. C-style code: may ereport.
static int64 Supersede(Relation rel, const char *destination, Datum key) {
    Oid save_userid;
    int save_sec_context;
    GetUserIdAndSecContext(&save_userid, &save_sec_context);
    SetUserIdAndSecContext(rel->rd_rel->relowner,
                           save_sec_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_NOFORCE_RLS);
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "outbox: SPI_connect failed");
    bool archive = setting_retention_s > 0;
    SPIPlanPtr *slot = archive ? &supersede_archive_plan : &supersede_plan;
    if (*slot == nullptr) {
        Oid types[2] = {TEXTOID, TEXTOID};
        SPIPlanPtr plan = SPI_prepare(archive ? kSupersedeArchiveSql : kSupersedeSql, 2, types);
        if (plan == nullptr || SPI_keepplan(plan) != 0)
            elog(ERROR, "outbox: preparing the supersede statement failed: %s",
                 SPI_result_code_string(SPI_result));
        *slot = plan;
    }
    Datum args[2] = {CStringGetTextDatum(destination), key};
    // Its rows are counted here, as superseded, not by _messages_changed as removed.
    superseding = true;
    volatile int rc = 0;
    PG_TRY();
    {
        rc = SPI_execute_snapshot(*slot, args, nullptr, GetLatestSnapshot(), InvalidSnapshot, false,
                                  true, 0);
    }
    PG_FINALLY();
    { superseding = false; }
    PG_END_TRY();
    if (rc != (archive ? SPI_OK_INSERT : SPI_OK_DELETE))
        elog(ERROR, "outbox: superseding older messages failed: %s", SPI_result_code_string(rc));
    int64 n = int64(SPI_processed);
    SPI_finish();
    SetUserIdAndSecContext(save_userid, save_sec_context);
    if (n > 0)
        CountSuperseded(destination, n);
    return n;
}

// A row that carries its own id (CarriesOwnId) was checked when it was first queued: it is kept
// as it is, but for what the queue needs — its order key, its key's turn and floor (it may go
// back below its key's other messages), a NULL available_at or created_at. Its destination may
// not exist (yet): a dump's messages may be restored before its destinations, a dead letter
// requeued before its dropped destination is created again.
static Datum KeepOwnRow(HeapTuple tuple, TupleDesc desc, const MessageColumns &c) {
    bool isnull;
    int64 id = DatumGetInt64(heap_getattr(tuple, c.id, desc, &isnull));
    // The id must never meet a later producer's number (a dump's rows are restored before its
    // sequence): the sequence moves past it, with room for the rows that follow.
    constexpr int64 kIdRoom = 10000;
    if (id >= IdsBelow()) {
        int64 next = nextval_internal(c.id_sequence, false);
        if (next <= id) {
            next = id + kIdRoom;
            DirectFunctionCall2(setval_oid, ObjectIdGetDatum(c.id_sequence), Int64GetDatum(next));
        }
        SetIdsBelow(next);
    }
    text *dest_text = DatumGetTextPP(heap_getattr(tuple, c.destination, desc, &isnull));
    if (isnull)
        ereport(ERROR,
                (errcode(ERRCODE_NOT_NULL_VIOLATION), errmsg("outbox message has no destination")));
    std::string_view destination(VARDATA_ANY(dest_text), VARSIZE_ANY_EXHDR(dest_text));
    int replace_cols[4];
    Datum replace_values[4];
    bool replace_nulls[4] = {};
    int nreplace = 0;

    TimestampTz now = GetCurrentTransactionStartTimestamp();
    Datum available = heap_getattr(tuple, c.available_at, desc, &isnull);
    TimestampTz available_at = isnull ? now : DatumGetTimestampTz(available);
    if (isnull) {
        replace_cols[nreplace] = c.available_at;
        replace_values[nreplace++] = TimestampTzGetDatum(now);
    }
    heap_getattr(tuple, c.created_at, desc, &isnull);
    if (isnull) {
        replace_cols[nreplace] = c.created_at;
        replace_values[nreplace++] = TimestampTzGetDatum(now);
    }
    // Ordered as its destination orders now; a destination not known (yet) keeps what it had.
    const CachedDestination *dest = LookupDestination(destination.data(), int(destination.size()));
    heap_getattr(tuple, c.key, desc, &isnull);
    bool has_key = !isnull;
    Datum given = heap_getattr(tuple, c.order_key, desc, &isnull);
    bool ordered = dest ? dest->ordered && has_key : !isnull && has_key;
    // (Read now: the key's turn may run invalidations that drop the cached entry.)
    bool known = dest != nullptr, compacting = dest && dest->compacting && has_key;
    if (ordered) {
        int64 order_key = TakeTurnFor(destination, tuple, desc, c, available_at, true, id);
        if (isnull || DatumGetInt64(given) != order_key) {
            replace_cols[nreplace] = c.order_key;
            replace_values[nreplace++] = Int64GetDatum(order_key);
        }
    } else if (!isnull) {
        replace_cols[nreplace] = c.order_key;
        replace_nulls[nreplace++] = true;
    }
    // Compacted as its destination compacts now (it supersedes nothing: the operator or the
    // restore put it back on purpose; a later message of its key supersedes it).
    if (known && c.compacts > 0) {
        replace_cols[nreplace] = c.compacts;
        replace_values[nreplace] = BoolGetDatum(true);
        replace_nulls[nreplace++] = !compacting;
    }
    WakeAtCommit();
    if (nreplace == 0)
        return PointerGetDatum(tuple);
    return PointerGetDatum(heap_modify_tuple_by_cols(tuple, desc, nreplace, replace_cols,
                                                     replace_values, replace_nulls));
}

// The checks of a new row (CheckMessageRow), in the order they run. Written in C-style code
// only: everything here may ereport.

// The columns a checked row gets replaced (heap_modify_tuple_by_cols).
struct Replacements {
    int cols[8];
    Datum values[8];
    bool nulls[8];
    int n;

    void Set(int col, Datum value, bool null = false) {
        cols[n] = col;
        values[n] = value;
        nulls[n++] = null;
    }
};

// The row's destination, which must exist and be of a kind this module knows.
static CachedDestination DestinationOf(HeapTuple tuple, TupleDesc desc, const MessageColumns &c) {
    bool isnull;
    Datum destination = heap_getattr(tuple, c.destination, desc, &isnull);
    if (isnull)
        ereport(ERROR,
                (errcode(ERRCODE_NOT_NULL_VIOLATION), errmsg("outbox message has no destination"),
                 errhint("Set destination to the name of a destination created with "
                         "outbox.create_destination().")));
    text *dest_text = DatumGetTextPP(destination);
    const char *dest_name = VARDATA_ANY(dest_text);
    int dest_len = VARSIZE_ANY_EXHDR(dest_text);
    const CachedDestination *found = LookupDestination(dest_name, dest_len);
    char shown[outbox::kQuotedBufferSize];
    if (found == nullptr)
        outbox::QuoteText(std::string_view(dest_name, dest_len), shown);
    if (found == nullptr)
        ereport(ERROR, (errcode(ERRCODE_FOREIGN_KEY_VIOLATION),
                        errmsg("outbox destination %s does not exist", shown),
                        errhint("Create it with outbox.create_destination(), or check the name "
                                "against outbox.destinations.")));
    CachedDestination dest = *found;
    if (dest.kind == nullptr)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("outbox destination \"%s\" has a kind this module does not know",
                               dest.name),
                        errhint("Update the outbox module, or drop the destination.")));
    return dest;
}

// What a row carries that counts towards what it sends.
struct RowSizes {
    bool has_bytes, has_key, has_headers;
    int64 payload;  // bytes as delivered
    Datum key, headers;
};

// Exactly one payload (or a tombstone where the kind sends one), within the size limit.
static void CheckPayload(HeapTuple tuple, TupleDesc desc, const MessageColumns &c,
                         const outbox::BrokerKind &kind, RowSizes *sizes) {
    bool isnull;
    Datum payload = heap_getattr(tuple, c.payload, desc, &isnull);
    bool has_json = !isnull;
    Datum payload_bytes = heap_getattr(tuple, c.payload_bytes, desc, &isnull);
    bool has_bytes = !isnull;
    if (has_json && has_bytes)
        ereport(ERROR, (errcode(ERRCODE_CHECK_VIOLATION),
                        errmsg("outbox message has both payload and payload_bytes"),
                        errhint("Set exactly one: payload for JSON, payload_bytes for binary "
                                "formats.")));
    // Neither: a tombstone (a Kafka record with a null value deletes the key from a compacted
    // topic), which only such a kind can send and only for a key.
    if (!has_json && !has_bytes && !(kind.tombstones && !heap_attisnull(tuple, c.key, desc))) {
        if (kind.tombstones)
            ereport(ERROR,
                    (errcode(ERRCODE_NOT_NULL_VIOLATION), errmsg("outbox message has no payload"),
                     errdetail("A message to a %s destination without payload and "
                               "payload_bytes is a tombstone, and a tombstone needs a key.",
                               kind.title),
                     errhint("Set payload (jsonb) or payload_bytes (bytea), or set key to "
                             "send a tombstone for that key.")));
        ereport(ERROR,
                (errcode(ERRCODE_NOT_NULL_VIOLATION), errmsg("outbox message has no payload"),
                 errhint("Set payload (jsonb) or payload_bytes (bytea).")));
    }
    int64 limit = setting_max_payload_bytes;
    int64 size = has_json    ? DeliveredJsonSize(payload)
                 : has_bytes ? int64(toast_raw_datum_size(payload_bytes)) - VARHDRSZ
                             : 0;
    if (size > limit)
        ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                        errmsg("outbox message payload is %lld bytes, over "
                               "outbox.max_payload_bytes (%lld)",
                               (long long)size, (long long)limit),
                        errhint("Send a reference to the data instead, or have a superuser "
                                "raise outbox.max_payload_bytes.")));
    sizes->has_bytes = has_bytes;
    sizes->payload = size;
}

static void CheckKey(HeapTuple tuple, TupleDesc desc, const MessageColumns &c, RowSizes *sizes) {
    bool isnull;
    sizes->key = heap_getattr(tuple, c.key, desc, &isnull);
    sizes->has_key = !isnull;
    if (sizes->has_key && toast_raw_datum_size(sizes->key) - VARHDRSZ > kMaxKeyBytes)
        ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                        errmsg("outbox message key is longer than %d bytes", kMaxKeyBytes),
                        errhint("Use a shorter identifier, such as a hash of the key.")));
}

// A kind with a record limit (Kafka: message.max.bytes, librdkafka refuses more): a message
// that cannot fit is refused now, not dead-lettered later.
static void CheckRecordSize(const CachedDestination &dest, const RowSizes &sizes) {
    if (dest.max_message_bytes <= 0)
        return;
    const outbox::BrokerKind &kind = *dest.kind;
    const outbox::MessageLimit &limit_rule = kind.message_limit;
    // Structured mode sends payload_bytes as base64 inside the event.
    int64 value = dest.structured && sizes.has_bytes ? (sizes.payload + 2) / 3 * 4 : sizes.payload;
    int64 record = value + limit_rule.overhead_bytes +
                   (sizes.has_key ? int64(toast_raw_datum_size(sizes.key)) - VARHDRSZ : 0) +
                   (sizes.has_headers ? int64(toast_raw_datum_size(sizes.headers)) - VARHDRSZ : 0);
    if (record > dest.max_message_bytes)
        ereport(ERROR,
                (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                 errmsg("outbox message for %s destination \"%s\" is %lld bytes with its key "
                        "and headers, over what it sends (%s %lld)",
                        kind.name, dest.name, (long long)record, limit_rule.config_key,
                        (long long)dest.max_message_bytes),
                 errdetail("%lld bytes of that are kept for the headers outbox adds.",
                           (long long)limit_rule.overhead_bytes),
                 errhint("Send a reference to the data instead, or raise %s of the "
                         "destination%s: SELECT outbox.alter_destination('%s', "
                         "'{\"%s\": ...}');",
                         limit_rule.config_key, limit_rule.raise_also, dest.name,
                         limit_rule.config_key)));
}

// Some kinds need a topic (Kafka a topic, NATS a subject): the message's, else the
// destination's default. (An AMQP routing key may be empty: a fanout exchange ignores it.) A
// topic given must follow the kind's rule.
static void CheckTopic(HeapTuple tuple, TupleDesc desc, const MessageColumns &c,
                       const CachedDestination &dest, Replacements *replace) {
    const outbox::BrokerKind &kind = *dest.kind;
    bool isnull;
    Datum topic = heap_getattr(tuple, c.topic, desc, &isnull);
    if (isnull && kind.topic.required) {
        if (!dest.has_topic)
            ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION),
                            errmsg("outbox message for %s destination \"%s\" has no %s", kind.name,
                                   dest.name, kind.topic.noun),
                            errhint("Set topic in the message, or give the destination a default: "
                                    "SELECT outbox.alter_destination('%s', '{\"%s\": \"...\"}');",
                                    dest.name, kind.topic.default_key)));
        replace->Set(c.topic, CStringGetTextDatum(dest.topic));
    } else if (!isnull) {
        text *t = DatumGetTextPP(topic);
        std::string_view name(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
        if (!kind.topic.valid(name)) {
            char shown[outbox::kQuotedBufferSize];
            outbox::QuoteText(name, shown);
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("outbox message topic %s is not valid for %s destination "
                                   "\"%s\"",
                                   shown, kind.name, dest.name),
                            errdetail("%s", kind.topic.rule)));
        }
    }
}

// available_at (now when NULL, at most a year ahead) and expires_at (after available_at; the
// destination's "ttl" when NULL). Returns available_at.
static TimestampTz CheckSchedule(HeapTuple tuple, TupleDesc desc, const MessageColumns &c,
                                 const CachedDestination &dest, TimestampTz now,
                                 Replacements *replace) {
    bool isnull;
    TimestampTz available_at = now;
    Datum available = heap_getattr(tuple, c.available_at, desc, &isnull);
    if (isnull) {
        replace->Set(c.available_at, TimestampTzGetDatum(now));
    } else {
        available_at = DatumGetTimestampTz(available);
        if (available_at > now + kMaxScheduleAheadUs)
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("outbox message available_at is more than a year ahead"),
                            errdetail("available_at is %s.", timestamptz_to_str(available_at)),
                            errhint("Schedule messages at most 366 days ahead.")));
    }
    Datum expires = heap_getattr(tuple, c.expires_at, desc, &isnull);
    if (!isnull && DatumGetTimestampTz(expires) <= available_at)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("outbox message expires_at is not after available_at"),
                        errdetail("The message would expire before it could be delivered."),
                        errhint("Leave expires_at NULL for messages that never expire (or take the "
                                "destination's \"ttl\").")));
    // "ttl": the destination's default lifetime, counted from when the message is due (a
    // scheduled message gets the whole of it). The producer's own expires_at wins.
    if (isnull && dest.ttl_ms > 0)
        replace->Set(c.expires_at, TimestampTzGetDatum(available_at + dest.ttl_ms * 1000));
    return available_at;
}

// After every check of the row itself: compaction, the queue's room, the key's turn and the
// row's number.
static void QueueRow(Relation rel, HeapTuple tuple, TupleDesc desc, const MessageColumns &c,
                     const CachedDestination &dest, const RowSizes &sizes, TimestampTz available_at,
                     Replacements *replace) {
    // "compaction": "key": the key's older queued messages are superseded, before the row
    // reserves room (it takes the place of what it supersedes) and before it is numbered (every
    // row it can see then has a lower id). With "ordering": "key" the key's turn comes first:
    // producers of a key then take turns, and each supersedes what the one before committed.
    bool compacts = dest.compacting && sizes.has_key && c.compacts > 0;
    int64 order_key = 0;
    bool turn_taken = false;
    if (compacts && dest.ordered) {
        order_key = TakeTurnFor(dest.name, tuple, desc, c, available_at, false, 0);
        turn_taken = true;
    }
    if (compacts) {
        Supersede(rel, dest.name, sizes.key);
        replace->Set(c.compacts, BoolGetDatum(true));
    }

    // Back-pressure, after the checks of the row itself: a refused row takes no lock and no
    // number, and a row refused for another reason reserves no room.
    ReserveQueueRow(RelationGetRelid(rel), dest.name, dest.max_pending, setting_max_pending);

    // Last, after every check: a refused row takes no lock and no number. An ordered message is
    // numbered only once it has its key's turn, so ids follow commit order within a key.
    if (dest.ordered && sizes.has_key) {
        if (!turn_taken)
            order_key = TakeTurnFor(dest.name, tuple, desc, c, available_at, false, 0);
        replace->Set(c.order_key, Int64GetDatum(order_key));
    }
    replace->Set(c.id, Int64GetDatum(nextval_internal(c.id_sequence, false)));
}

}  // namespace outbox::pg

using namespace outbox::pg;

static Datum CheckMessageRow(FunctionCallInfo fcinfo);

// BEFORE INSERT FOR EACH ROW on outbox.messages. Inside outbox's own SQL functions (publish,
// requeue: outbox.internal_call is on for their duration), the check's errors carry no CONTEXT,
// which would show the function's internal INSERT rather than anything the caller wrote; a
// producer's own INSERT keeps its context (the line of its function that inserted). On an
// error, the PG_TRY (or the top level) that catches it puts error_context_stack back.
Datum outbox_messages_check(PG_FUNCTION_ARGS) {
    if (!setting_internal_call)
        return CheckMessageRow(fcinfo);
    ErrorContextCallback *context = error_context_stack;
    error_context_stack = nullptr;
    Datum row = CheckMessageRow(fcinfo);
    error_context_stack = context;
    return row;
}

// Refuses what cannot be delivered, with an error the producer can act on, and arranges the
// wake-up at commit. Written in C-style code only: everything here may ereport.
static Datum CheckMessageRow(FunctionCallInfo fcinfo) {
    auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
    if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
        !TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_INSERT(td->tg_event))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._messages_check() must be a BEFORE INSERT row trigger")));

    Relation rel = td->tg_relation;
    TupleDesc desc = RelationGetDescr(rel);
    HeapTuple tuple = td->tg_trigtuple;
    const MessageColumns &c = ColumnsOf(rel);
    bool isnull;

    if (CarriesOwnId(tuple, desc, c, rel))
        return KeepOwnRow(tuple, desc, c);
    CheckManagedColumnsUnset(tuple, desc, c);

    CachedDestination dest = DestinationOf(tuple, desc, c);
    RowSizes sizes = {};
    CheckPayload(tuple, desc, c, *dest.kind, &sizes);
    sizes.headers = heap_getattr(tuple, c.headers, desc, &isnull);
    sizes.has_headers = !isnull;
    if (sizes.has_headers)
        CheckHeaders(sizes.headers);
    Datum traced_headers = CaptureTraceContext(sizes.headers, sizes.has_headers);
    CheckKey(tuple, desc, c, &sizes);
    CheckRecordSize(dest, sizes);

    // Values to replace: the destination's default topic, a NULL available_at, id and
    // created_at, and the order key of an ordered message.
    Replacements replace = {};
    if (traced_headers != Datum(0))
        replace.Set(c.headers, traced_headers);
    CheckTopic(tuple, desc, c, dest, &replace);
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    TimestampTz available_at = CheckSchedule(tuple, desc, c, dest, now, &replace);
    QueueRow(rel, tuple, desc, c, dest, sizes, available_at, &replace);
    replace.Set(c.created_at, TimestampTzGetDatum(now));

    // Counted once inserted (outbox._messages_inserted, after the statement): a row that an ON
    // CONFLICT clause or a later trigger leaves out is not in the queue. A paused destination's
    // messages wait for outbox.resume, which wakes the workers itself (one committed just as
    // the destination is resumed may wait for the next poll).
    if (!dest.paused)
        WakeAtCommit();

    if (replace.n == 0)
        return PointerGetDatum(tuple);
    return PointerGetDatum(heap_modify_tuple_by_cols(tuple, desc, replace.n, replace.cols,
                                                     replace.values, replace.nulls));
}
