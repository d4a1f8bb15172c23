// The producer path: the check every INSERT into outbox.messages passes, the UUIDv7 default for
// event_id, and the wake-up of the workers when a producing transaction commits.
#include <ctime>
#include <string_view>
#include <utility>

#include "outbox/config.hpp"
#include "outbox/headers.hpp"
#include "outbox/quote.hpp"
#include "outbox/uuid7.hpp"

extern "C" {
#include "postgres.h"
#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

#include "outbox/pg/destination_cache.hpp"
#include "outbox/pg/key_order.hpp"
#include "outbox/pg/producer.hpp"
#include "outbox/pg/queue_counts.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/shmem.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_uuid_generate_v7(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_messages_check(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_wake(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_requeueing(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_uuid_generate_v7);
PG_FUNCTION_INFO_V1(outbox_messages_check);
PG_FUNCTION_INFO_V1(outbox_wake);
PG_FUNCTION_INFO_V1(outbox_requeueing);
}

namespace outbox::pg {

constexpr int kMaxKeyBytes = 1024;  // keys are indexed for per-key ordering
constexpr int64 kMaxScheduleAheadUs = 366LL * USECS_PER_DAY;

// Set by the producer check (and by changes to outbox.destinations), consumed at the end of
// the transaction.
static bool wake_at_commit = false;
static bool reload_at_commit = false;
// Set by outbox.requeue (through outbox._requeueing()) for the rest of its transaction: the
// rows it inserts are dead letters going back with their own id.
static bool requeueing = false;

static void OnTransactionEvent(XactEvent event, void *) {
    switch (event) {
        case XACT_EVENT_COMMIT:
            // Called after the commit is visible to other snapshots, so a woken worker sees
            // the rows.
            if (wake_at_commit || reload_at_commit)
                WakeWorkers(MyDatabaseId, reload_at_commit);
            wake_at_commit = reload_at_commit = false;
            requeueing = false;
            break;
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PREPARE:  // COMMIT PREPARED elsewhere is found by the poll
        case XACT_EVENT_PARALLEL_ABORT:
            wake_at_commit = reload_at_commit = false;
            requeueing = false;
            break;
        default:
            break;
    }
}

void RegisterProducerCallbacks() {
    RegisterXactCallback(OnTransactionEvent, nullptr);
}

void WakeAtCommit() {
    wake_at_commit = true;
}

void ReloadAtCommit() {
    reload_at_commit = true;
}

// UUIDv7 generation state of this process; the generator keeps values strictly increasing.
static Uuid7Generator uuid_generator;

void GenerateEventId(pg_uuid_t *out) {
    uint8 random[10];
    if (!pg_strong_random(random, sizeof random))
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                        errmsg("could not generate random bytes for a UUIDv7")));
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64 unix_ms = int64(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
    Uuid uuid = uuid_generator.Next(unix_ms, random);
    memcpy(out->data, uuid.data(), UUID_LEN);
}

// Attribute numbers of outbox.messages, looked up once per table incarnation.
struct MessageColumns {
    Oid relid;
    Oid id_sequence;
    int id, destination, topic, key, payload, payload_bytes, headers, available_at, expires_at,
        created_at, attempts, lease_token, last_error, first_failed_at, order_key;
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

// Per-key ordering: producers of one key take turns (key_order.hpp) and a message is numbered
// only once its producer holds the key, so ids follow commit order within a key. A requeued
// dead letter keeps its id, and so goes ahead of the messages of its key still queued.
static int64 PlaceOrdered(const MessageColumns &c, const CachedDestination &dest, HeapTuple tuple,
                          TupleDesc desc, bool requeued, int64 *id) {
    bool isnull;
    text *key = DatumGetTextPP(heap_getattr(tuple, c.key, desc, &isnull));
    int64 order_key =
        OrderKey(dest.name, std::string_view(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key)));
    LockOrderKey(order_key);
    if (requeued)
        ReorderingKeys();  // back ahead of its key's queued messages
    *id = requeued ? DatumGetInt64(heap_getattr(tuple, c.id, desc, &isnull))
                   : nextval_internal(c.id_sequence, false);
    return order_key;
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
    while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE) {
        if (token == WJB_KEY) {
            std::string_view n(v.val.string.val, v.val.string.len);
            bool valid = IsValidHeaderName(n);
            bool reserved = valid && IsReservedHeaderName(n);
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
        }
    }
}

// Columns the relay owns must not be set by a producer. A requeued dead letter (outbox.requeue)
// goes back with its own id and created_at.
static void CheckManagedColumnsUnset(HeapTuple tuple, TupleDesc desc, const MessageColumns &c,
                                     bool requeued) {
    bool isnull;
    bool attempts_null;
    Datum attempts = heap_getattr(tuple, c.attempts, desc, &attempts_null);
    const char *column = nullptr;
    for (auto [att, name] : {std::pair{c.id, "id"}, {c.created_at, "created_at"}}) {
        heap_getattr(tuple, att, desc, &isnull);
        if (!isnull && !requeued)
            column = name;
    }
    if (!attempts_null && DatumGetInt32(attempts) != 0)
        column = "attempts";
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

}  // namespace outbox::pg

using namespace outbox::pg;

// outbox.uuid_generate_v7(): the default of outbox.messages.event_id.
Datum outbox_uuid_generate_v7(PG_FUNCTION_ARGS) {
    auto *uuid = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    GenerateEventId(uuid);
    PG_RETURN_UUID_P(uuid);
}

// outbox._requeueing(): the rest of this transaction's inserts are requeued dead letters.
Datum outbox_requeueing(PG_FUNCTION_ARGS) {
    requeueing = true;
    PG_RETURN_VOID();
}

// outbox.wake(): nudge the workers of this database.
Datum outbox_wake(PG_FUNCTION_ARGS) {
    WakeWorkers(MyDatabaseId, true);
    ReloadAtCommit();
    PG_RETURN_VOID();
}

// BEFORE INSERT FOR EACH ROW on outbox.messages: refuse what cannot be delivered, with an error
// the producer can act on, and arrange the wake-up at commit. Written in C-style code only:
// everything here may ereport.
Datum outbox_messages_check(PG_FUNCTION_ARGS) {
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

    CheckManagedColumnsUnset(tuple, desc, c, requeueing);

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

    // Exactly one payload, within the size limit.
    Datum payload = heap_getattr(tuple, c.payload, desc, &isnull);
    bool has_json = !isnull;
    Datum payload_bytes = heap_getattr(tuple, c.payload_bytes, desc, &isnull);
    bool has_bytes = !isnull;
    if (has_json && has_bytes)
        ereport(ERROR, (errcode(ERRCODE_CHECK_VIOLATION),
                        errmsg("outbox message has both payload and payload_bytes"),
                        errhint("Set exactly one: payload for JSON, payload_bytes for binary "
                                "formats.")));
    if (!has_json && !has_bytes)
        ereport(ERROR,
                (errcode(ERRCODE_NOT_NULL_VIOLATION), errmsg("outbox message has no payload"),
                 errhint("Set payload (jsonb) or payload_bytes (bytea).")));
    int64 limit = setting_max_payload_bytes;
    int64 size = has_json ? DeliveredJsonSize(payload)
                          : int64(toast_raw_datum_size(payload_bytes)) - VARHDRSZ;
    if (size > limit)
        ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                        errmsg("outbox message payload is %lld bytes, over "
                               "outbox.max_payload_bytes (%lld)",
                               (long long)size, (long long)limit),
                        errhint("Send a reference to the data instead, or have a superuser "
                                "raise outbox.max_payload_bytes.")));

    Datum headers = heap_getattr(tuple, c.headers, desc, &isnull);
    if (!isnull)
        CheckHeaders(headers);

    Datum key = heap_getattr(tuple, c.key, desc, &isnull);
    bool has_key = !isnull;
    if (has_key && toast_raw_datum_size(key) - VARHDRSZ > kMaxKeyBytes)
        ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                        errmsg("outbox message key is longer than %d bytes", kMaxKeyBytes),
                        errhint("Use a shorter identifier, such as a hash of the key.")));

    // Values to replace: the destination's default topic, a NULL available_at, id and
    // created_at, and the order key of an ordered message.
    int replace_cols[7];
    Datum replace_values[7];
    bool replace_nulls[7] = {};
    int nreplace = 0;

    Datum topic = heap_getattr(tuple, c.topic, desc, &isnull);
    if (isnull && dest.is_kafka) {
        if (!dest.has_topic)
            ereport(ERROR,
                    (errcode(ERRCODE_NOT_NULL_VIOLATION),
                     errmsg("outbox message for kafka destination \"%s\" has no topic", dest.name),
                     errhint("Set topic in the message, or give the destination a default: "
                             "SELECT outbox.alter_destination('%s', '{\"topic\": \"...\"}');",
                             dest.name)));
        replace_cols[nreplace] = c.topic;
        replace_values[nreplace++] = CStringGetTextDatum(dest.topic);
    } else if (!isnull) {
        text *t = DatumGetTextPP(topic);
        std::string_view name(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
        // A webhook's topic travels as the ce-type header: it must be a safe header value.
        bool ok = dest.is_kafka
                      ? outbox::IsValidKafkaTopic(name)
                      : !name.empty() && name.size() <= 249 && outbox::IsValidHeaderValue(name);
        if (!ok) {
            outbox::QuoteText(name, shown);
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("outbox message topic %s is not valid for %s destination "
                                   "\"%s\"",
                                   shown, dest.is_kafka ? "kafka" : "webhook", dest.name),
                            dest.is_kafka ? errdetail("A Kafka topic name is 1 to 249 characters "
                                                      "of letters, digits, '.', '_' and '-'.")
                                          : errdetail("A topic is 1 to 249 bytes of UTF-8 without "
                                                      "control characters (it is sent as the "
                                                      "ce-type header).")));
        }
    }

    TimestampTz now = GetCurrentTransactionStartTimestamp();
    TimestampTz available_at = now;
    Datum available = heap_getattr(tuple, c.available_at, desc, &isnull);
    if (isnull) {
        replace_cols[nreplace] = c.available_at;
        replace_values[nreplace++] = TimestampTzGetDatum(now);
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
                        errhint("Leave expires_at NULL for messages that never expire.")));

    // Last, after every check: a refused row takes no lock and no number.
    if (dest.ordered && has_key) {
        int64 id;
        int64 order_key = PlaceOrdered(c, dest, tuple, desc, requeueing, &id);
        replace_cols[nreplace] = c.id;
        replace_values[nreplace++] = Int64GetDatum(id);
        replace_cols[nreplace] = c.order_key;
        replace_values[nreplace++] = Int64GetDatum(order_key);
    } else if (!requeueing) {
        replace_cols[nreplace] = c.id;
        replace_values[nreplace++] = Int64GetDatum(nextval_internal(c.id_sequence, false));
    }
    if (!requeueing) {
        replace_cols[nreplace] = c.created_at;
        replace_values[nreplace++] = TimestampTzGetDatum(now);
    }

    CountQueueChange(dest.name, 1, 1, 0);
    WakeAtCommit();

    if (nreplace == 0)
        return PointerGetDatum(tuple);
    return PointerGetDatum(heap_modify_tuple_by_cols(tuple, desc, nreplace, replace_cols,
                                                     replace_values, replace_nulls));
}
