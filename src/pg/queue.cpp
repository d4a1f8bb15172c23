// The claim / write-back SQL (see include/outbox/pg/queue.hpp).
//
// While a worker holds a row, the row's available_at is the end of its lease: a lapsed lease
// makes the row due again, so one index (destination, available_at) serves new messages,
// retries and lease recovery alike. Every write-back statement matches id AND lease_token, so a
// worker whose lease lapsed cannot overwrite the outcome of the row's new owner.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "outbox/config.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "storage/itemptr.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

#include "outbox/pg/destination_cache.hpp"
#include "outbox/pg/guard.hpp"
#include "outbox/pg/key_order.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/queue.hpp"

namespace outbox::pg {

namespace {

// Every claim takes rows only while the destination's config is the one the worker loaded
// (ClaimRequest::config_json), checked in the claim's own snapshot: a change committed together
// with messages (alter_destination and requeue in one transaction) is then either not visible
// to the claim, or visible along with them, and the claim takes nothing; the change's wake-up
// (the reload flag) makes the worker load the new config first. (An InitPlan: read once per
// claim.)
#define CONFIG_UNCHANGED(param) \
    "(SELECT d.config::text FROM outbox.destinations AS d WHERE d.name = $1) = " param "::text"

const char *const kClaimSql =
    "WITH due AS ("
    "  SELECT c.id FROM outbox.messages AS c"
    "   WHERE c.destination = $1 AND c.available_at <= now() AND c.order_key IS NULL"
    "     AND " CONFIG_UNCHANGED("$5")
    "   ORDER BY c.available_at, c.id LIMIT $4"
    "   FOR UPDATE SKIP LOCKED)"
    " UPDATE outbox.messages AS m"
    "    SET lease_token = $2, available_at = now() + $3 * interval '1 millisecond',"
    "        attempts = m.attempts + 1"
    "   FROM due WHERE m.id = due.id"
    " RETURNING m.id, m.event_id, m.topic, m.key, m.payload, m.payload_bytes, m.headers,"
    "           m.created_at, m.expires_at, m.attempts";

// The fast path: lock due rows for the rest of the transaction without writing them; the
// worker records their outcomes before it commits. attempts + 1 is the attempt this is.
// $3, $4: the (available_at, id) of the last row this transaction locked, so that the next
// batch starts after it (rows locked by this transaction are not skipped by SKIP LOCKED).
const char *const kLockSql =
    "SELECT c.id, c.event_id, c.topic, c.key, c.payload, c.payload_bytes, c.headers,"
    "       c.created_at, c.expires_at, c.attempts + 1, c.available_at, c.ctid"
    "  FROM outbox.messages AS c"
    " WHERE c.destination = $1 AND c.available_at <= now() AND c.order_key IS NULL"
    "   AND (c.available_at, c.id) > ($3, $4) AND " CONFIG_UNCHANGED("$5")
    " ORDER BY c.available_at, c.id LIMIT $2"
    "   FOR UPDATE SKIP LOCKED";

// The fast path ran out of time: rows locked by this transaction become leased instead.
const char *const kLeaseLockedSql =
    "UPDATE outbox.messages"
    "   SET lease_token = $2, available_at = now() + $3 * interval '1 millisecond',"
    "       attempts = attempts + 1"
    " WHERE id = ANY ($1)";

// ordering = key: the heads of the keys in order keys [$2, $3] that are due, at most $4 of them
// (key_order.hpp), each locked unless another worker holds it or ($5: on_dead = block) a dead
// letter holds its key (looked up per key only if the destination has any). Columns as in
// kLockSql, then the order key; how many heads were looked at and the last one's key come from
// LastKeyHeads(). The heads are found in this statement's snapshot and fetched by ctid all at
// once (one TID scan): if a head's worker delivered it since, the lock finds it gone and the key
// is skipped this time — never its next message; a head changed since (a retry scheduled) is
// the same message, checked again as it is now.
const char *const kHeadsSql =
    "SELECT m.id, m.event_id, m.topic, m.key, m.payload, m.payload_bytes, m.headers,"
    "       m.created_at, m.expires_at, m.attempts + 1, m.available_at, m.ctid, m.order_key"
    "  FROM outbox.messages AS m"
    " WHERE " CONFIG_UNCHANGED("$6")
    "   AND m.ctid = ANY (ARRAY(SELECT h.tid FROM outbox._key_heads($1, $2, $3, $4, true) AS h))"
    "   AND m.order_key IS NOT NULL AND m.destination = $1 AND m.available_at <= now()"
    "   AND NOT ((SELECT $5 AND EXISTS ("
    "                 SELECT FROM outbox.dead_letters AS d"
    "                  WHERE d.destination = $1 AND d.skipped_at IS NULL"
    "                    AND d.reason IN ('rejected', 'max_attempts', 'poison')))"
    "            AND EXISTS ("
    "                SELECT FROM outbox.dead_letters AS d"
    "                 WHERE d.destination = $1 AND d.key = m.key AND d.id < m.id"
    "                   AND d.skipped_at IS NULL"
    "                   AND d.reason IN ('rejected', 'max_attempts', 'poison')))"
    "   FOR UPDATE OF m SKIP LOCKED";

// Delivered rows that this transaction holds locked (the fast path) are deleted where they
// are: nobody else can move a locked row, so its ctid from the claim still names it, and a
// TID scan costs no index descent per row.
const char *const kDeleteLockedSql = "DELETE FROM outbox.messages WHERE ctid = ANY ($1)";

// Every write-back matches the claim's lease token, or token 0 for rows this transaction holds
// locked (the fast path; their attempt was not counted when they were claimed).
const char *const kDeleteSql =
    "DELETE FROM outbox.messages AS m"
    " USING unnest($1::bigint[], $2::bigint[]) AS r(id, token)"
    " WHERE m.id = r.id AND (m.lease_token = r.token OR r.token = 0)";

// outbox.retention > 0: delivered rows move to outbox.archive instead.
const char *const kArchiveSql =
    "WITH moved AS ("
    "  DELETE FROM outbox.messages AS m"
    "   USING unnest($1::bigint[], $2::bigint[]) AS r(id, token)"
    "   WHERE m.id = r.id AND (m.lease_token = r.token OR r.token = 0)"
    "  RETURNING m.*, r.token)"
    " INSERT INTO outbox.archive (id, event_id, destination, topic, key, payload, payload_bytes,"
    "       headers, created_at, attempts)"
    " SELECT id, event_id, destination, topic, key, payload, payload_bytes, headers, created_at,"
    "        attempts + CASE WHEN token = 0 THEN 1 ELSE 0 END"
    "   FROM moved";

// Archived rows older than the retention, a bounded batch at a time (never one huge DELETE).
const char *const kSweepSql =
    "DELETE FROM outbox.archive WHERE id IN ("
    "  SELECT id FROM outbox.archive"
    "   WHERE delivered_at < now() - $1 * interval '1 second'"
    "   ORDER BY delivered_at LIMIT $2)";

// kind: 0 retry (attempt spent), 1 deferred by an outage, 2 released at shutdown.
const char *const kRescheduleSql =
    "UPDATE outbox.messages AS m"
    "   SET available_at = now() + r.delay * interval '1 millisecond', lease_token = NULL,"
    "       attempts = m.attempts + CASE WHEN r.token = 0 THEN 1 ELSE 0 END"
    "                             - CASE WHEN r.kind = 0 THEN 0 ELSE 1 END,"
    "       last_error = coalesce(r.err, m.last_error),"
    "       first_failed_at = CASE WHEN r.kind = 0 THEN coalesce(m.first_failed_at, now())"
    "                              ELSE m.first_failed_at END"
    "  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::int[], $5::text[])"
    "       AS r(id, token, delay, kind, err)"
    " WHERE m.id = r.id AND (m.lease_token = r.token OR r.token = 0)"
    " RETURNING r.kind";

const char *const kBurySql =
    "WITH moved AS ("
    "  DELETE FROM outbox.messages AS m"
    "   USING unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[]) AS r(id, token, reason, "
    "err)"
    "   WHERE m.id = r.id AND (m.lease_token = r.token OR r.token = 0)"
    "  RETURNING m.*, r.token, r.reason, r.err)"
    " INSERT INTO outbox.dead_letters (id, event_id, destination, topic, key, payload,"
    "       payload_bytes, headers, expires_at, created_at, attempts, reason, last_error,"
    "       first_failed_at)"
    " SELECT id, event_id, destination, topic, key, payload, payload_bytes, headers, expires_at,"
    "        created_at,"
    "        attempts + CASE WHEN token = 0 THEN 1 ELSE 0 END"
    "                 - CASE WHEN reason IN ('expired', 'poison') THEN 1 ELSE 0 END,"
    "        reason, err,"
    "        CASE WHEN reason = 'expired' THEN first_failed_at"
    "             ELSE coalesce(first_failed_at, now()) END"
    "   FROM moved"
    " RETURNING reason = 'expired'";

const char *const kLoadSql =
    // created_by_superuser through to_jsonb: the column is new in 0.2.0, and a worker of this
    // library may meet a 0.1.0 schema until ALTER EXTENSION UPDATE (then: false).
    "SELECT d.name, d.kind, d.config::text, d.paused,"
    "       coalesce((to_jsonb(d) ->> 'created_by_superuser')::boolean, false)"
    "  FROM outbox.destinations AS d ORDER BY d.name";

// Plans survive across transactions (SPI_keepplan); a plan whose tables were dropped and
// created again is re-analysed by the plan cache on its next use.
SPIPlanPtr Prepare(SPIPlanPtr *slot, const char *sql, int nargs, Oid *types) {
    if (*slot == nullptr) {
        SPIPlanPtr plan = SPI_prepare(sql, nargs, types);
        if (plan == nullptr)
            elog(ERROR, "outbox: SPI_prepare failed (%s) for: %s",
                 SPI_result_code_string(SPI_result), sql);
        if (SPI_keepplan(plan) != 0)
            elog(ERROR, "outbox: SPI_keepplan failed");
        *slot = plan;
    }
    return *slot;
}

SPIPlanPtr claim_plan, lock_plan, heads_plan, lease_locked_plan, delete_plan, delete_locked_plan,
    archive_plan, sweep_plan, reschedule_plan, bury_plan, load_plan;

// The fast path: what the current transaction holds locked, valid only in that transaction
// (forgotten when the worker says it ended, or when another one is seen).
struct FastPathState {
    LocalTransactionId lxid = InvalidLocalTransactionId;
    // where its locked rows are, by id
    std::unordered_map<int64_t, ItemPointerData> tids;
    // ordering = key: the order keys of the heads it holds, by id
    std::unordered_map<int64_t, int64_t> head_keys;

    FastPathState &Current() {
        if (lxid != MyProc->lxid) {
            Forget();
            lxid = MyProc->lxid;
        }
        return *this;
    }
    void Forget() {
        tids.clear();
        head_keys.clear();
    }
    // A head it held is removed (delivered or buried): its key's next walk starts past it
    // (should the transaction abort, key_order.cpp forgets every floor).
    void Removed(int64_t id) {
        auto found = head_keys.find(id);
        if (found == head_keys.end())
            return;
        KeyHeadRemoved(found->second, id);
        head_keys.erase(found);
    }
};
FastPathState fast_path;

int64 TimestampToUnixMs(TimestampTz ts) {
    return ts / 1000 + int64(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
}

// One claimed row, pointing into SPI memory (valid until SPI_finish).
struct RawRow {
    int64 id;
    char event_id[37];
    const char *topic;
    int topic_len;
    const char *key;  // nullptr when NULL
    int key_len;
    const char *payload;
    int payload_len;
    bool payload_is_json;
    int nheaders;
    const char **header_names;
    int *header_name_lens;
    const char **header_values;
    int *header_value_lens;
    int64 created_ms;
    int64 expires_ms;
    int attempts;
    ItemPointerData tid;  // the fast path's locked rows only
    int64 order_key;      // heads only
};

void FormatUuid(const pg_uuid_t *uuid, char out[37]) {
    static const char hex[] = "0123456789abcdef";
    int o = 0;
    for (int i = 0; i < UUID_LEN; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[uuid->data[i] >> 4];
        out[o++] = hex[uuid->data[i] & 0xF];
    }
    out[o] = '\0';
}

void ReadHeaders(Datum datum, RawRow *row) {
    Jsonb *jb = DatumGetJsonbP(datum);
    int n = JB_ROOT_COUNT(jb);
    row->header_names = static_cast<const char **>(palloc(sizeof(char *) * (n + 1)));
    row->header_name_lens = static_cast<int *>(palloc(sizeof(int) * (n + 1)));
    row->header_values = static_cast<const char **>(palloc(sizeof(char *) * (n + 1)));
    row->header_value_lens = static_cast<int *>(palloc(sizeof(int) * (n + 1)));
    JsonbIterator *it = JsonbIteratorInit(&jb->root);
    JsonbValue v;
    JsonbIteratorToken token;
    int i = 0;
    while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE && i < n) {
        // The producer check guarantees an object of strings.
        if (token == WJB_KEY) {
            row->header_names[i] = v.val.string.val;
            row->header_name_lens[i] = v.val.string.len;
        } else if (token == WJB_VALUE && v.type == jbvString) {
            row->header_values[i] = v.val.string.val;
            row->header_value_lens[i] = v.val.string.len;
            i++;
        }
    }
    row->nheaders = i;
}

// The claimed rows of the last SPI statement (columns as in kClaimSql, then those of kLockSql:
// its ctid is column 12, and kHeadsSql: the order key), pointing into SPI memory.
RawRow *ReadClaimedRows(uint64 *count) {
    uint64 n = SPI_processed;
    *count = n;
    auto *rows = static_cast<RawRow *>(palloc0(sizeof(RawRow) * (n + 1)));
    TupleDesc desc = SPI_tuptable->tupdesc;
    for (uint64 i = 0; i < n; i++) {
        HeapTuple tuple = SPI_tuptable->vals[i];
        RawRow *row = &rows[i];
        bool isnull;
        row->id = DatumGetInt64(heap_getattr(tuple, 1, desc, &isnull));
        FormatUuid(DatumGetUUIDP(heap_getattr(tuple, 2, desc, &isnull)), row->event_id);
        Datum d = heap_getattr(tuple, 3, desc, &isnull);
        if (!isnull) {
            text *t = DatumGetTextPP(d);
            row->topic = VARDATA_ANY(t);
            row->topic_len = VARSIZE_ANY_EXHDR(t);
        }
        d = heap_getattr(tuple, 4, desc, &isnull);
        if (!isnull) {
            text *t = DatumGetTextPP(d);
            row->key = VARDATA_ANY(t);
            row->key_len = VARSIZE_ANY_EXHDR(t);
        }
        d = heap_getattr(tuple, 5, desc, &isnull);
        if (!isnull) {
            Jsonb *jb = DatumGetJsonbP(d);
            StringInfoData buf;
            initStringInfo(&buf);
            JsonbToCString(&buf, &jb->root, VARSIZE(jb));
            row->payload = buf.data;
            row->payload_len = buf.len;
            row->payload_is_json = true;
        } else {
            d = heap_getattr(tuple, 6, desc, &isnull);
            if (!isnull) {
                bytea *b = DatumGetByteaPP(d);
                row->payload = VARDATA_ANY(b);
                row->payload_len = VARSIZE_ANY_EXHDR(b);
            }
        }
        d = heap_getattr(tuple, 7, desc, &isnull);
        if (!isnull)
            ReadHeaders(d, row);
        row->created_ms =
            TimestampToUnixMs(DatumGetTimestampTz(heap_getattr(tuple, 8, desc, &isnull)));
        d = heap_getattr(tuple, 9, desc, &isnull);
        row->expires_ms = isnull ? 0 : TimestampToUnixMs(DatumGetTimestampTz(d));
        row->attempts = DatumGetInt32(heap_getattr(tuple, 10, desc, &isnull));
        if (desc->natts >= 12)
            row->tid = *reinterpret_cast<ItemPointer>(
                DatumGetPointer(heap_getattr(tuple, 12, desc, &isnull)));
        if (desc->natts >= 13)
            row->order_key = DatumGetInt64(heap_getattr(tuple, 13, desc, &isnull));
    }
    return rows;
}

// Runs the lease claim; C-style code only (may ereport).
RawRow *ClaimRaw(const ClaimRequest *request, int limit, int64 lease_ms, int64 token,
                 uint64 *count) {
    Oid types[5] = {TEXTOID, INT8OID, INT8OID, INT4OID, TEXTOID};
    SPIPlanPtr plan = Prepare(&claim_plan, kClaimSql, 5, types);
    Datum args[5] = {CStringGetTextDatum(request->destination.c_str()), Int64GetDatum(token),
                     Int64GetDatum(lease_ms), Int32GetDatum(limit),
                     CStringGetTextDatum(request->config_json.c_str())};
    int rc = SPI_execute_plan(plan, args, nullptr, false, 0);
    if (rc != SPI_OK_UPDATE_RETURNING)
        elog(ERROR, "outbox: claim failed: %s", SPI_result_code_string(rc));
    return ReadClaimedRows(count);
}

// Runs the lock claim of the fast path; C-style code only (may ereport).
RawRow *LockRaw(ClaimRequest *request, int limit, uint64 *count) {
    Oid types[5] = {TEXTOID, INT4OID, TIMESTAMPTZOID, INT8OID, TEXTOID};
    SPIPlanPtr plan = Prepare(&lock_plan, kLockSql, 5, types);
    Datum args[5] = {CStringGetTextDatum(request->destination.c_str()), Int32GetDatum(limit),
                     TimestampTzGetDatum(request->after_available_at),
                     Int64GetDatum(request->after_id),
                     CStringGetTextDatum(request->config_json.c_str())};
    int rc = SPI_execute_plan(plan, args, nullptr, false, 0);
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "outbox: locking rows failed: %s", SPI_result_code_string(rc));
    RawRow *rows = ReadClaimedRows(count);
    if (*count > 0) {
        bool isnull;
        HeapTuple last = SPI_tuptable->vals[*count - 1];
        request->after_available_at =
            DatumGetTimestampTz(heap_getattr(last, 11, SPI_tuptable->tupdesc, &isnull));
        request->after_id = rows[*count - 1].id;
    }
    return rows;
}

// Runs the heads claim over order keys [from, to]; C-style code only (may ereport). *looked_at:
// how many heads it looked at (at most n), *last_key: the order key of the last one.
RawRow *HeadsRaw(const ClaimRequest *request, int64 from, int64 to, int n, uint64 *count,
                 uint64 *looked_at, int64 *last_key) {
    Oid types[6] = {TEXTOID, INT8OID, INT8OID, INT4OID, BOOLOID, TEXTOID};
    SPIPlanPtr plan = Prepare(&heads_plan, kHeadsSql, 6, types);
    Datum args[6] = {CStringGetTextDatum(request->destination.c_str()),
                     Int64GetDatum(from),
                     Int64GetDatum(to),
                     Int32GetDatum(n),
                     BoolGetDatum(request->block_on_dead),
                     CStringGetTextDatum(request->config_json.c_str())};
    uint64 generation = BeginKeyWalk();
    int rc = SPI_execute_plan(plan, args, nullptr, false, 0);
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "outbox: claiming key heads failed: %s", SPI_result_code_string(rc));
    EndKeyWalk(generation);
    *looked_at = uint64(LastKeyHeads().heads);
    *last_key = LastKeyHeads().last_key;
    return ReadClaimedRows(count);
}

Datum Int8Array(const std::vector<int64_t> &values) {
    Datum *datums = static_cast<Datum *>(palloc(sizeof(Datum) * (values.size() + 1)));
    for (size_t i = 0; i < values.size(); i++)
        datums[i] = Int64GetDatum(values[i]);
    return PointerGetDatum(
        construct_array(datums, int(values.size()), INT8OID, 8, true, TYPALIGN_DOUBLE));
}

Datum TidArray(const std::vector<ItemPointerData> &values) {
    Datum *datums = static_cast<Datum *>(palloc(sizeof(Datum) * (values.size() + 1)));
    for (size_t i = 0; i < values.size(); i++)
        datums[i] = PointerGetDatum(const_cast<ItemPointerData *>(&values[i]));
    return PointerGetDatum(construct_array(datums, int(values.size()), TIDOID,
                                           sizeof(ItemPointerData), false, TYPALIGN_SHORT));
}

Datum Int4Array(const std::vector<int> &values) {
    Datum *datums = static_cast<Datum *>(palloc(sizeof(Datum) * (values.size() + 1)));
    for (size_t i = 0; i < values.size(); i++)
        datums[i] = Int32GetDatum(values[i]);
    return PointerGetDatum(
        construct_array(datums, int(values.size()), INT4OID, 4, true, TYPALIGN_INT));
}

// A text[]; an empty string becomes NULL (no error to record).
Datum TextArray(const std::vector<const char *> &values) {
    size_t n = values.size();
    Datum *datums = static_cast<Datum *>(palloc(sizeof(Datum) * (n + 1)));
    bool *nulls = static_cast<bool *>(palloc(sizeof(bool) * (n + 1)));
    for (size_t i = 0; i < n; i++) {
        nulls[i] = values[i][0] == '\0';
        datums[i] = nulls[i] ? Datum(0) : CStringGetTextDatum(values[i]);
    }
    int dims[1] = {int(n)};
    int lbs[1] = {1};
    return PointerGetDatum(
        construct_md_array(datums, nulls, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT));
}

}  // namespace

bool ExtensionInstalled() {
    return PgTry([] { return OidIsValid(get_extension_oid("outbox", true)); });
}

std::vector<DestinationSpec> LoadDestinations() {
    struct Row {
        const char *name, *kind, *config;
        bool paused, by_superuser;
    };
    uint64 n = 0;
    Row *rows = PgTry([&n] {
        // Watch first: a change committed after this point bumps destinations_generation.
        WatchDestinations();
        SPIPlanPtr plan = Prepare(&load_plan, kLoadSql, 0, nullptr);
        int rc = SPI_execute_plan(plan, nullptr, nullptr, true, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: loading destinations failed");
        n = SPI_processed;
        Row *out = static_cast<Row *>(palloc0(sizeof(Row) * (n + 1)));
        for (uint64 i = 0; i < n; i++) {
            HeapTuple t = SPI_tuptable->vals[i];
            TupleDesc desc = SPI_tuptable->tupdesc;
            bool isnull;
            out[i].name = SPI_getvalue(t, desc, 1);
            out[i].kind = SPI_getvalue(t, desc, 2);
            out[i].config = SPI_getvalue(t, desc, 3);
            out[i].paused = DatumGetBool(heap_getattr(t, 4, desc, &isnull));
            out[i].by_superuser = DatumGetBool(heap_getattr(t, 5, desc, &isnull)) && !isnull;
        }
        return out;
    });
    std::vector<DestinationSpec> specs;
    for (uint64 i = 0; i < n; i++) {
        DestinationSpec spec;
        spec.name = rows[i].name;
        spec.config_json = rows[i].config;
        spec.paused = rows[i].paused;
        spec.config_by_superuser = rows[i].by_superuser;
        auto kind = ParseDestinationKind(rows[i].kind);
        if (!kind) {
            spec.config_error = std::string("unknown kind \"") + rows[i].kind + "\"";
        } else {
            ConfigCheck check = CheckDestinationConfig(*kind, spec.config_json);
            spec.config = std::move(check.config);
            for (const std::string &p : check.problems)
                spec.config_error += (spec.config_error.empty() ? "invalid config: " : "; ") + p;
        }
        specs.push_back(std::move(spec));
    }
    return specs;
}

namespace {

// Claimed rows as messages for the drivers; `locked`: held by this transaction (the fast path);
// `heads`: heads of their keys (ordering = key).
void AppendMessages(const RawRow *rows, uint64 n, bool locked, int64 lease_token,
                    std::vector<Message> *out, bool heads = false) {
    FastPathState &state = fast_path.Current();
    for (uint64 i = 0; i < n; i++) {
        const RawRow &r = rows[i];
        if (locked)
            state.tids[r.id] = r.tid;
        if (locked && heads)
            state.head_keys[r.id] = r.order_key;
        Message m;
        m.id = r.id;
        m.lease_token = lease_token;
        m.event_id = r.event_id;
        if (r.topic)
            m.topic.assign(r.topic, r.topic_len);
        if (r.key)
            m.key.emplace(r.key, r.key_len);
        if (r.payload)
            m.payload.assign(r.payload, r.payload_len);
        m.payload_is_json = r.payload_is_json;
        for (int h = 0; h < r.nheaders; h++)
            m.headers.emplace_back(std::string(r.header_names[h], r.header_name_lens[h]),
                                   std::string(r.header_values[h], r.header_value_lens[h]));
        m.created_at_ms = r.created_ms;
        m.expires_at_ms = r.expires_ms;
        m.attempts = r.attempts;
        out->push_back(std::move(m));
    }
}

// ordering = key: where each destination's walk over its keys goes on from. A claim walks at
// most once round the destination's order keys, from there to the end and then from the start:
// keys take turns, and a key whose head was just claimed is the last one looked at again.
//
// A claim takes heads only. Taking a few of each key's next messages with its head (sent one
// by one as each was delivered) cut the walk's cost per message from 3.4 to 1.2 us, but not the
// drain's time: a key's messages then went one round trip after another at the end of every
// fast-path transaction, and outcomes came back in smaller write-backs (measured in stop 14).
std::unordered_map<std::string, int64> key_cursors;

void ClaimHeads(const ClaimRequest &request, int64 lease_ms, int64 lease_token,
                std::vector<Message> *out) {
    OrderKeyRange range = OrderKeysOf(request.destination);
    auto found = key_cursors.find(request.destination);
    int64 start =
        found != key_cursors.end() && found->second >= range.lo && found->second <= range.hi
            ? found->second
            : range.lo;
    std::pair<int64, int64> passes[2] = {{start, range.hi}, {range.lo, start - 1}};
    size_t first = out->size();
    for (int p = 0; p < (start > range.lo ? 2 : 1); p++) {
        for (int64 from = passes[p].first; int(out->size()) < request.limit;) {
            int want = request.limit - int(out->size());
            uint64 n = 0, looked_at = 0;
            int64 last = 0;
            RawRow *rows = PgTry([&] {
                return HeadsRaw(&request, from, passes[p].second, want, &n, &looked_at, &last);
            });
            AppendMessages(rows, n, request.hold_locks, lease_token, out, true);
            if (looked_at > 0)
                key_cursors[request.destination] = last >= range.hi ? range.lo : last + 1;
            if (int(looked_at) < want || last >= passes[p].second)
                break;  // this pass is over
            from = last + 1;
        }
    }
    if (request.hold_locks || out->size() == first)
        return;
    // The leased path: the heads are locked; lease them before the commit.
    std::vector<int64_t> ids;
    for (size_t i = first; i < out->size(); i++)
        ids.push_back((*out)[i].id);
    LeaseLockedRows(ids, lease_ms, lease_token);
}

}  // namespace

std::vector<Message> ClaimRows(ClaimRequest &request, int64_t lease_ms, int64_t lease_token) {
    if (request.hold_locks)
        lease_token = 0;
    std::vector<Message> messages;
    messages.reserve(size_t(std::max(request.limit, 0)));
    if (request.ordered)
        ClaimHeads(request, lease_ms, lease_token, &messages);
    // Messages without an order key: all of an unordered destination's, NULL keys of others.
    int left = request.limit - int(messages.size());
    if (left > 0) {
        uint64 n = 0;
        RawRow *rows = PgTry([&] {
            return request.hold_locks ? LockRaw(&request, left, &n)
                                      : ClaimRaw(&request, left, lease_ms, lease_token, &n);
        });
        AppendMessages(rows, n, request.hold_locks, lease_token, &messages);
    }
    return messages;
}

WriteBackCounts WriteBack(const std::vector<Resolution> &resolutions) {
    std::vector<int64_t> del_ids, del_tokens, re_ids, re_tokens, re_delays, dead_ids, dead_tokens;
    std::vector<int> re_kinds;
    std::vector<const char *> re_errors, dead_reasons, dead_errors;
    std::vector<ItemPointerData> del_tids;
    bool archive = setting_retention_s > 0;
    FastPathState &state = fast_path.Current();
    auto &tids = state.tids;
    for (const Resolution &r : resolutions) {
        switch (r.action) {
            case Resolution::Action::Delete:
                if (r.lease_token == 0 && !archive) {
                    auto found = tids.find(r.id);
                    if (found != tids.end()) {
                        del_tids.push_back(found->second);
                        tids.erase(found);
                        break;
                    }
                }
                del_ids.push_back(r.id);
                del_tokens.push_back(r.lease_token);
                break;
            case Resolution::Action::Reschedule:
                re_ids.push_back(r.id);
                re_tokens.push_back(r.lease_token);
                re_delays.push_back(r.delay_ms);
                re_kinds.push_back(!r.refund_attempt ? 0 : r.error.empty() ? 2 : 1);
                re_errors.push_back(r.error.c_str());
                break;
            case Resolution::Action::Bury:
                dead_ids.push_back(r.id);
                dead_tokens.push_back(r.lease_token);
                dead_reasons.push_back(DeadReasonName(r.dead_reason));
                dead_errors.push_back(r.error.empty() ? "unknown error" : r.error.c_str());
                break;
        }
    }
    WriteBackCounts counts;
    PgTry([&] {
        if (!del_tids.empty()) {
            Oid types[1] = {TIDARRAYOID};
            Datum args[1] = {TidArray(del_tids)};
            int rc = SPI_execute_plan(Prepare(&delete_locked_plan, kDeleteLockedSql, 1, types),
                                      args, nullptr, false, 0);
            if (rc != SPI_OK_DELETE)
                elog(ERROR, "outbox: delete failed: %s", SPI_result_code_string(rc));
            counts.delivered += int64(SPI_processed);
        }
        if (!del_ids.empty()) {
            Oid types[2] = {INT8ARRAYOID, INT8ARRAYOID};
            Datum args[2] = {Int8Array(del_ids), Int8Array(del_tokens)};
            int rc = SPI_execute_plan(archive ? Prepare(&archive_plan, kArchiveSql, 2, types)
                                              : Prepare(&delete_plan, kDeleteSql, 2, types),
                                      args, nullptr, false, 0);
            if (rc != (archive ? SPI_OK_INSERT : SPI_OK_DELETE))
                elog(ERROR, "outbox: delete failed: %s", SPI_result_code_string(rc));
            counts.delivered += int64(SPI_processed);
        }
        if (!re_ids.empty()) {
            Oid types[5] = {INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, TEXTARRAYOID};
            Datum args[5] = {Int8Array(re_ids), Int8Array(re_tokens), Int8Array(re_delays),
                             Int4Array(re_kinds), TextArray(re_errors)};
            int rc = SPI_execute_plan(Prepare(&reschedule_plan, kRescheduleSql, 5, types), args,
                                      nullptr, false, 0);
            if (rc != SPI_OK_UPDATE_RETURNING)
                elog(ERROR, "outbox: reschedule failed: %s", SPI_result_code_string(rc));
            for (uint64 i = 0; i < SPI_processed; i++) {
                bool isnull;
                int kind = DatumGetInt32(
                    heap_getattr(SPI_tuptable->vals[i], 1, SPI_tuptable->tupdesc, &isnull));
                (kind == 0 ? counts.retried : kind == 1 ? counts.deferred : counts.released)++;
            }
        }
        if (!dead_ids.empty()) {
            Oid types[4] = {INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID};
            Datum args[4] = {Int8Array(dead_ids), Int8Array(dead_tokens), TextArray(dead_reasons),
                             TextArray(dead_errors)};
            int rc =
                SPI_execute_plan(Prepare(&bury_plan, kBurySql, 4, types), args, nullptr, false, 0);
            if (rc != SPI_OK_INSERT_RETURNING)
                elog(ERROR, "outbox: moving to dead letters failed: %s",
                     SPI_result_code_string(rc));
            for (uint64 i = 0; i < SPI_processed; i++) {
                bool isnull;
                bool expired = DatumGetBool(
                    heap_getattr(SPI_tuptable->vals[i], 1, SPI_tuptable->tupdesc, &isnull));
                (expired ? counts.expired : counts.dead)++;
            }
        }
    });
    // Heads this transaction held and removed: their keys' next messages are heads now.
    for (const Resolution &r : resolutions)
        if (r.lease_token == 0 && r.action != Resolution::Action::Reschedule)
            state.Removed(r.id);
    return counts;
}

void TransactionEnded() {
    // Not Current(): the transaction is over, MyProc->lxid no longer names it.
    fast_path.Forget();
}

void LeaseLockedRows(const std::vector<int64_t> &ids, int64_t lease_ms, int64_t lease_token) {
    if (ids.empty())
        return;
    PgTry([&] {
        Oid types[3] = {INT8ARRAYOID, INT8OID, INT8OID};
        Datum args[3] = {Int8Array(ids), Int64GetDatum(lease_token), Int64GetDatum(lease_ms)};
        int rc = SPI_execute_plan(Prepare(&lease_locked_plan, kLeaseLockedSql, 3, types), args,
                                  nullptr, false, 0);
        if (rc != SPI_OK_UPDATE)
            elog(ERROR, "outbox: leasing locked rows failed: %s", SPI_result_code_string(rc));
    });
}

int64_t SweepArchive(int64_t older_than_s, int limit) {
    return PgTry([&] {
        Oid types[2] = {INT8OID, INT4OID};
        Datum args[2] = {Int64GetDatum(older_than_s), Int32GetDatum(limit)};
        int rc =
            SPI_execute_plan(Prepare(&sweep_plan, kSweepSql, 2, types), args, nullptr, false, 0);
        if (rc != SPI_OK_DELETE)
            elog(ERROR, "outbox: sweeping the archive failed: %s", SPI_result_code_string(rc));
        return int64(SPI_processed);
    });
}

}  // namespace outbox::pg
