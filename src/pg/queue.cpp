// The claim / write-back SQL (see include/outbox/pg/queue.hpp).
//
// While a worker holds a row, the row's available_at is the end of its lease: a lapsed lease
// makes the row due again, so one index (destination, available_at) serves new messages,
// retries and lease recovery alike. Every write-back statement matches id AND lease_token, so a
// worker whose lease lapsed cannot overwrite the outcome of the row's new owner.
#include <algorithm>
#include <map>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "outbox/brokers/registry.hpp"
#include "outbox/claim_book.hpp"
#include "outbox/config.hpp"
#include "outbox/exactly_once.hpp"

extern "C" {
#include "postgres.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/itemptr.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/destination_cache.hpp"
#include "outbox/pg/guard.hpp"
#include "outbox/pg/key_order.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/spi.hpp"
#include "outbox/pg/queue.hpp"
#include "outbox/pg/claimed_rows.hpp"

namespace outbox::pg {

namespace {

// $6, $7: where to start (ClaimRequest::after_available_at). Column 11 is where the row was due
// before its lease moved it. $8: 0, or (exactly-once) this worker's tag: a lapsed lease of
// another worker index is not taken over (ClaimRequest::exactly_once).
const char *const kClaimSql =
    "WITH due AS ("
    "  SELECT c.id, c.available_at AS was_due FROM outbox.messages AS c"
    "   WHERE c.destination = $1 AND c.available_at <= pg_catalog.statement_timestamp()"
    "     AND c.order_key IS NULL"
    "     AND (c.available_at, c.id) > ($6, $7) AND " DESTINATION_AS_LOADED("$5")
    "     AND ($8 = 0 OR c.lease_token IS NULL OR (c.lease_token >> 52) = $8)"
    "   ORDER BY c.available_at, c.id LIMIT $4"
    "   FOR UPDATE SKIP LOCKED)"
    " UPDATE outbox.messages AS m"
    "    SET lease_token = $2,"
    "        available_at = pg_catalog.statement_timestamp() + $3 * interval '1 millisecond',"
    "        attempts = m.attempts + 1"
    "   FROM due WHERE m.id = due.id"
    " RETURNING m.id, m.event_id, m.topic, m.key, m.payload, m.payload_bytes, m.headers,"
    "           m.created_at, m.expires_at, m.attempts, due.was_due, m.first_failed_at";

// The fast path: lock due rows for the rest of the transaction without writing them; the
// worker records their outcomes before it commits. attempts + 1 is the attempt this is.
// $3, $4: the (available_at, id) of the last row this transaction locked, so that the next
// batch starts after it (rows locked by this transaction are not skipped by SKIP LOCKED).
const char *const kLockSql =
    "SELECT c.id, c.event_id, c.topic, c.key, c.payload, c.payload_bytes, c.headers,"
    "       c.created_at, c.expires_at, c.attempts + 1, c.available_at, c.ctid, c.first_failed_at"
    "  FROM outbox.messages AS c"
    " WHERE c.destination = $1 AND c.available_at <= pg_catalog.statement_timestamp()"
    "   AND c.order_key IS NULL"
    "   AND (c.available_at, c.id) > ($3, $4) AND " DESTINATION_AS_LOADED("$5")
    " ORDER BY c.available_at, c.id LIMIT $2"
    "   FOR UPDATE SKIP LOCKED";

// The fast path ran out of time: rows locked by this transaction become leased instead.
const char *const kLeaseLockedSql =
    "UPDATE outbox.messages"
    "   SET lease_token = $2,"
    "       available_at = pg_catalog.statement_timestamp() + $3 * interval '1 millisecond',"
    "       attempts = attempts + 1"
    " WHERE id = ANY ($1)";

// Delivered rows that this transaction holds locked (the fast path) are deleted where they
// are: nobody else can move a locked row, so its ctid from the claim still names it, and a
// TID scan costs no index descent per row.
const char *const kDeleteLockedSql = "DELETE FROM outbox.messages WHERE ctid = ANY ($1)";

// Every write-back matches the claim's lease token, or token 0 for rows this transaction holds
// locked (the fast path; their attempt was not counted when they were claimed).
const char *const kDeleteSql =
    "DELETE FROM outbox.messages AS m"
    " USING unnest($1::bigint[], $2::bigint[]) AS r(id, token)"
    " WHERE m.id = r.id AND (m.lease_token = r.token OR r.token = 0)"
    " RETURNING m.id";

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
    "   FROM moved"
    " RETURNING id";

// Archived rows older than the retention, a bounded batch at a time (never one huge DELETE).
const char *const kSweepSql =
    "DELETE FROM outbox.archive WHERE id IN ("
    "  SELECT id FROM outbox.archive"
    "   WHERE delivered_at < pg_catalog.now() - $1 * interval '1 second'"
    "   ORDER BY delivered_at LIMIT $2)";

// kind: 0 retry (attempt spent), 1 deferred by an outage, 2 released at shutdown.
const char *const kRescheduleSql =
    "UPDATE outbox.messages AS m"
    "   SET available_at = pg_catalog.now() + r.delay * interval '1 millisecond',"
    "       lease_token = NULL,"
    "       attempts = m.attempts + CASE WHEN r.token = 0 THEN 1 ELSE 0 END"
    "                             - CASE WHEN r.kind = 0 THEN 0 ELSE 1 END,"
    "       last_error = coalesce(r.err, m.last_error),"
    "       first_failed_at = CASE WHEN r.kind = 0"
    "                              THEN coalesce(m.first_failed_at, pg_catalog.now())"
    "                              ELSE m.first_failed_at END"
    "  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::int[], $5::text[])"
    "       AS r(id, token, delay, kind, err)"
    " WHERE m.id = r.id AND (m.lease_token = r.token OR r.token = 0)"
    " RETURNING r.kind";

// A destination whose endpoint answered 410 Gone (Resolution::pause_destination).
const char *const kPauseGoneSql =
    "UPDATE outbox.destinations SET paused = true, updated_at = pg_catalog.now()"
    " WHERE name = $1 AND NOT paused";

const char *const kBurySql =
    "WITH moved AS ("
    "  DELETE FROM outbox.messages AS m"
    "   USING unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[]) AS r(id, token, reason, "
    "err)"
    "   WHERE m.id = r.id AND (m.lease_token = r.token OR r.token = 0)"
    "  RETURNING m.*, r.token, r.reason, r.err)"
    " INSERT INTO outbox.dead_letters (id, event_id, destination, topic, key, payload,"
    "       payload_bytes, headers, expires_at, created_at, attempts, reason, last_error,"
    "       first_failed_at, failed_at)"
    " SELECT id, event_id, destination, topic, key, payload, payload_bytes, headers, expires_at,"
    "        created_at,"
    "        attempts + CASE WHEN token = 0 THEN 1 ELSE 0 END"
    "                 - CASE WHEN reason IN ('expired', 'poison') THEN 1 ELSE 0 END,"
    "        reason, err,"
    "        CASE WHEN reason = 'expired' THEN first_failed_at"
    "             ELSE coalesce(first_failed_at, pg_catalog.now()) END,"
    // The moment of the burial, not the transaction's start: a fast batch's transaction is
    // older than the outcomes it writes back, and failed_at - first_failed_at would fall short
    // of the retry budget that was spent.
    "        pg_catalog.clock_timestamp()"
    "   FROM moved"
    " RETURNING reason = 'expired', id";

const char *const kLoadSql =
    // created_by_superuser through to_jsonb: the column is new in 0.2.0, and a worker of this
    // library may meet a 0.1.0 schema until ALTER EXTENSION UPDATE (then: false).
    "SELECT d.name, d.kind, d.config::text, d.paused,"
    "       coalesce((to_jsonb(d) ->> 'created_by_superuser')::boolean, false)"
    "  FROM outbox.destinations AS d ORDER BY d.name";

SPIPlanPtr claim_plan, lock_plan, lease_locked_plan, delete_plan, delete_locked_plan, archive_plan,
    sweep_plan, reschedule_plan, bury_plan, load_plan;

// Unordered claims start where a destination's due messages are known to begin: its due hint.
// After a drain, the claim index holds an entry for every delivered row until VACUUM removes it,
// all of them before the rows still due; a claim from the beginning would step over every one.
// A hint is only ever a place to start: every poll's claims start at the beginning, so no row
// waits for a hint longer than outbox.poll_interval. Why a row that becomes claimable lies at or
// after the hint, but in the cases the poll catches:
//  - a row of a transaction open when the claim began (available_at defaults to its producer's
//    transaction start): the hint is never later than the start of the oldest transaction open
//    in the database then (pg_stat_activity), read before the claim's first statement;
//  - a row this worker claimed is removed, leased or rescheduled (moved later) when its
//    transaction commits; if it aborts, the rows are back where they were and the hints go;
//  - a row that lay between the hint and the last row claimed was claimed, or was held by
//    another worker — found by the poll if that worker gives it back by aborting; so is a row
//    committed by COMMIT PREPARED, one whose producer set an available_at earlier than its own
//    transaction's start, or one an UPDATE moved back (a destination change drops the hints).
// (The hints themselves: ClaimBook::due_hints, include/outbox/claim_book.hpp.)

// A transaction that started this long ago may not have shown in pg_stat_activity yet.
constexpr int64 kOpenTransactionMarginUs = 10 * 1000;
// How long the oldest open transaction's start is reused (an older value only makes claims
// start earlier).
constexpr int64 kOpenTransactionCacheUs = 100 * 1000;

// The start of the oldest transaction open in this database that may queue a message (client
// backends and background workers, not this one), or now when there is none; less a margin.
TimestampTz OldestOpenTransaction() {
    static TimestampTz cached = DT_NOBEGIN, read_at = 0;
    TimestampTz now = GetCurrentTimestamp();
    if (read_at != 0 && now - read_at < kOpenTransactionCacheUs && now >= read_at)
        return cached;
    TimestampTz oldest = PgTry([now] {
        // pg_stat_activity is read from a copy taken at its first use in a transaction: a copy
        // older than `now` would miss the transactions begun since, and the hint could pass
        // their rows. Always a fresh one.
        pgstat_clear_snapshot();
        static SPIPlanPtr plan = nullptr;
        const char *sql =
            "SELECT min(xact_start) FROM pg_catalog.pg_stat_activity"
            " WHERE datid = $1 AND pid <> pg_catalog.pg_backend_pid()"
            "   AND backend_type IN ('client backend', 'background worker')";
        Oid types[1] = {OIDOID};
        Datum args[1] = {ObjectIdGetDatum(MyDatabaseId)};
        int rc = SPI_execute_plan(KeptPlan(&plan, sql, 1, types), args, nullptr, true, 1);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading pg_stat_activity failed: %s", SPI_result_code_string(rc));
        bool isnull;
        Datum d = heap_getattr(SPI_tuptable->vals[0], 1, SPI_tuptable->tupdesc, &isnull);
        TimestampTz t = isnull ? now : DatumGetTimestampTz(d);
        return (t < now ? t : now) - kOpenTransactionMarginUs;
    });
    cached = oldest;
    read_at = now;
    return oldest;
}

// Where the first unordered claim of `request` in this transaction starts; later ones go on
// after the rows it took.
void PositionClaim(ClaimRequest *request) {
    ClaimBook &book = Book();
    if (book.DueScanStarted(request->destination))
        return;
    const DuePosition *hint = book.StartDueScan(request->destination, OldestOpenTransaction(),
                                                GetCurrentStatementStartTimestamp());
    if (!request->from_start && hint != nullptr && request->after_available_at == DT_NOBEGIN &&
        request->after_id == 0) {
        request->after_available_at = hint->at;
        request->after_id = hint->id;
    }
}

// After an unordered claim of `request` that took `n` rows.
void NoteClaimed(const ClaimRequest &request, uint64 n) {
    Book().NoteClaimed(request.destination, n, {request.after_available_at, request.after_id});
}

// Runs the lease claim; C-style code only (may ereport).
RawRow *ClaimRaw(ClaimRequest *request, int limit, int64 lease_ms, int64 token, uint64 *count) {
    Oid types[8] = {TEXTOID, INT8OID, INT8OID, INT4OID, TEXTOID, TIMESTAMPTZOID, INT8OID, INT8OID};
    SPIPlanPtr plan = KeptPlan(&claim_plan, kClaimSql, 8, types);
    Datum args[8] = {CStringGetTextDatum(request->destination.c_str()),
                     Int64GetDatum(token),
                     Int64GetDatum(lease_ms),
                     Int32GetDatum(limit),
                     CStringGetTextDatum(request->config_json.c_str()),
                     TimestampTzGetDatum(request->after_available_at),
                     Int64GetDatum(request->after_id),
                     Int64GetDatum(ClaimWorkerTag(request->exactly_once, token))};
    int rc = SPI_execute_plan(plan, args, nullptr, false, 0);
    if (rc != SPI_OK_UPDATE_RETURNING)
        elog(ERROR, "outbox: claim failed: %s", SPI_result_code_string(rc));
    RawRow *rows = ReadClaimedRows(count);
    // The rows come back in no particular order: the batch ended at the largest position.
    for (uint64 i = 0; i < *count; i++) {
        bool isnull;
        TimestampTz at = DatumGetTimestampTz(
            heap_getattr(SPI_tuptable->vals[i], 11, SPI_tuptable->tupdesc, &isnull));
        if (at > request->after_available_at ||
            (at == request->after_available_at && rows[i].id > request->after_id)) {
            request->after_available_at = at;
            request->after_id = rows[i].id;
        }
    }
    return rows;
}

// Runs the lock claim of the fast path; C-style code only (may ereport).
RawRow *LockRaw(ClaimRequest *request, int limit, uint64 *count) {
    Oid types[5] = {TEXTOID, INT4OID, TIMESTAMPTZOID, INT8OID, TEXTOID};
    SPIPlanPtr plan = KeptPlan(&lock_plan, kLockSql, 5, types);
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

}  // namespace

std::vector<DestinationSpec> LoadDestinations() {
    Book().DestinationsChanged();
    struct Row {
        const char *name, *kind, *config;
        bool paused, by_superuser;
    };
    uint64 n = 0;
    Row *rows = PgTry([&n] {
        // Watch first: a change committed after this point bumps destinations_generation.
        WatchDestinations();
        SPIPlanPtr plan = KeptPlan(&load_plan, kLoadSql, 0, nullptr);
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
        // The common settings only: the driver process checks the whole config before it
        // builds the destination's driver (an error there is the driver's build error).
        const BrokerKind *kind = FindBrokerKind(rows[i].kind);
        if (!kind)
            spec.config_error = std::string("unknown kind \"") + rows[i].kind + "\"";
        else
            spec.config = ReadDestinationSettings(*kind, spec.config_json);
        specs.push_back(std::move(spec));
    }
    return specs;
}

std::vector<Message> ClaimRows(ClaimRequest &request, int64_t lease_ms, int64_t lease_token) {
    if (request.hold_locks)
        lease_token = 0;
    // The claims' clock (statement_timestamp() in their SQL): what is due now, not at the start
    // of the transaction. A fast batch claims for up to FastBatchPlan::kClaimMs in one transaction;
    // with the transaction's now(), a message committed meanwhile was "not yet due" and waited for
    // the batch's acknowledgements and the next transaction.
    SetCurrentStatementStartTimestamp();
    std::vector<Message> messages;
    messages.reserve(size_t(std::max(request.limit, 0)));
    if (request.ordered)
        ClaimHeads(request, lease_ms, lease_token, &messages);
    // Messages without an order key: all of an unordered destination's, NULL keys of others.
    int left = request.limit - int(messages.size());
    if (left > 0) {
        uint64 n = 0;
        PositionClaim(&request);
        RawRow *rows = PgTry([&] {
            return request.hold_locks ? LockRaw(&request, left, &n)
                                      : ClaimRaw(&request, left, lease_ms, lease_token, &n);
        });
        NoteClaimed(request, n);
        AppendMessages(rows, n, request.hold_locks, lease_token, &messages);
    }
    return messages;
}

namespace {

// One write-back's resolutions, sorted into the arrays of its statements.
struct WriteBackArrays {
    std::vector<int64_t> del_ids, del_tokens, re_ids, re_tokens, re_delays, dead_ids, dead_tokens;
    std::vector<int64_t> locked_ids;  // del_tids' rows
    std::vector<int> re_kinds;
    std::vector<const char *> re_errors, dead_reasons, dead_errors;
    std::vector<ItemPointerData> del_tids;
    bool archive = false;
    bool pause = false;
};

WriteBackArrays SortResolutions(const std::vector<Resolution> &resolutions) {
    WriteBackArrays a;
    a.archive = setting_retention_s > 0;
    FastPathState &state = FastPath().Current();
    auto &tids = state.tids;
    for (const Resolution &r : resolutions) {
        switch (r.action) {
            case Resolution::Action::Delete:
                if (r.lease_token == 0 && !a.archive) {
                    auto found = tids.find(r.id);
                    if (found != tids.end()) {
                        a.del_tids.push_back(found->second);
                        a.locked_ids.push_back(r.id);
                        tids.erase(found);
                        break;
                    }
                }
                a.del_ids.push_back(r.id);
                a.del_tokens.push_back(r.lease_token);
                break;
            case Resolution::Action::Reschedule:
                Book().held_heads.erase(r.id);  // its next claim reads its key again
                a.re_ids.push_back(r.id);
                a.re_tokens.push_back(r.lease_token);
                a.re_delays.push_back(r.delay_ms);
                a.re_kinds.push_back(!r.refund_attempt ? 0 : r.error.empty() ? 2 : 1);
                a.re_errors.push_back(r.error.c_str());
                break;
            case Resolution::Action::Bury:
                a.dead_ids.push_back(r.id);
                a.dead_tokens.push_back(r.lease_token);
                a.dead_reasons.push_back(DeadReasonName(r.dead_reason));
                a.dead_errors.push_back(r.error.empty() ? "unknown error" : r.error.c_str());
                break;
            case Resolution::Action::Recover:
                break;  // not a row: the worker settles it first (exactly_once.hpp)
        }
    }
    a.pause = std::any_of(resolutions.begin(), resolutions.end(),
                          [](const Resolution &r) { return r.pause_destination; });
    return a;
}

// The rows the write-back's statements removed (with RETURNING id), for ordered heads. The
// functions below run inside PgTry: no objects with destructors.
struct RemovedRows {
    int64 *ids = nullptr;
    uint64 n = 0;
    size_t max = 0;
};

// Adds the ids in `column` of the last statement's RETURNING rows.
void CollectRemoved(RemovedRows *removed, int column) {
    for (uint64 i = 0; i < SPI_processed && removed->n < removed->max; i++) {
        bool isnull;
        removed->ids[removed->n++] = DatumGetInt64(
            heap_getattr(SPI_tuptable->vals[i], column, SPI_tuptable->tupdesc, &isnull));
    }
}

// The fast path's rows, locked by this transaction: deleted by their tids.
void DeleteLockedRows(const WriteBackArrays &a, WriteBackCounts *counts) {
    Oid types[1] = {TIDARRAYOID};
    Datum args[1] = {TidArray(a.del_tids)};
    int rc = SPI_execute_plan(KeptPlan(&delete_locked_plan, kDeleteLockedSql, 1, types), args,
                              nullptr, false, 0);
    if (rc != SPI_OK_DELETE)
        elog(ERROR, "outbox: delete failed: %s", SPI_result_code_string(rc));
    counts->delivered += int64(SPI_processed);
}

void DeleteOrArchive(const WriteBackArrays &a, WriteBackCounts *counts, RemovedRows *removed) {
    Oid types[2] = {INT8ARRAYOID, INT8ARRAYOID};
    Datum args[2] = {Int8Array(a.del_ids), Int8Array(a.del_tokens)};
    int rc = SPI_execute_plan(a.archive ? KeptPlan(&archive_plan, kArchiveSql, 2, types)
                                        : KeptPlan(&delete_plan, kDeleteSql, 2, types),
                              args, nullptr, false, 0);
    if (rc != (a.archive ? SPI_OK_INSERT_RETURNING : SPI_OK_DELETE_RETURNING))
        elog(ERROR, "outbox: delete failed: %s", SPI_result_code_string(rc));
    counts->delivered += int64(SPI_processed);
    CollectRemoved(removed, 1);
}

void Reschedule(const WriteBackArrays &a, WriteBackCounts *counts) {
    Oid types[5] = {INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, TEXTARRAYOID};
    Datum args[5] = {Int8Array(a.re_ids), Int8Array(a.re_tokens), Int8Array(a.re_delays),
                     Int4Array(a.re_kinds), TextArray(a.re_errors)};
    int rc = SPI_execute_plan(KeptPlan(&reschedule_plan, kRescheduleSql, 5, types), args, nullptr,
                              false, 0);
    if (rc != SPI_OK_UPDATE_RETURNING)
        elog(ERROR, "outbox: reschedule failed: %s", SPI_result_code_string(rc));
    for (uint64 i = 0; i < SPI_processed; i++) {
        bool isnull;
        int kind =
            DatumGetInt32(heap_getattr(SPI_tuptable->vals[i], 1, SPI_tuptable->tupdesc, &isnull));
        (kind == 0 ? counts->retried : kind == 1 ? counts->deferred : counts->released)++;
    }
}

void Bury(const WriteBackArrays &a, WriteBackCounts *counts, RemovedRows *removed) {
    Oid types[4] = {INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID};
    Datum args[4] = {Int8Array(a.dead_ids), Int8Array(a.dead_tokens), TextArray(a.dead_reasons),
                     TextArray(a.dead_errors)};
    int rc = SPI_execute_plan(KeptPlan(&bury_plan, kBurySql, 4, types), args, nullptr, false, 0);
    if (rc != SPI_OK_INSERT_RETURNING)
        elog(ERROR, "outbox: moving to dead letters failed: %s", SPI_result_code_string(rc));
    for (uint64 i = 0; i < SPI_processed; i++) {
        bool isnull;
        bool expired =
            DatumGetBool(heap_getattr(SPI_tuptable->vals[i], 1, SPI_tuptable->tupdesc, &isnull));
        (expired ? counts->expired : counts->dead)++;
    }
    CollectRemoved(removed, 2);
}

// 410 Gone: paused as outbox.pause would, in this write-back's transaction (its trigger wakes
// the workers at commit; outbox.resume undoes it).
void PauseGone(const std::string &destination) {
    Oid types[1] = {TEXTOID};
    Datum args[1] = {CStringGetTextDatum(destination.c_str())};
    int rc = SPI_execute_with_args(kPauseGoneSql, 1, types, args, nullptr, false, 0);
    if (rc != SPI_OK_UPDATE)
        elog(ERROR, "outbox: pausing the destination failed: %s", SPI_result_code_string(rc));
}

}  // namespace

WriteBackCounts WriteBack(const std::string &destination,
                          const std::vector<Resolution> &resolutions) {
    WriteBackArrays a = SortResolutions(resolutions);
    WriteBackCounts counts;
    RemovedRows removed;
    removed.max = a.del_ids.size() + a.dead_ids.size();
    PgTry([&] {
        removed.ids = static_cast<int64 *>(palloc(sizeof(int64) * (removed.max + 1)));
        if (!a.del_tids.empty())
            DeleteLockedRows(a, &counts);
        if (!a.del_ids.empty())
            DeleteOrArchive(a, &counts, &removed);
        if (!a.re_ids.empty())
            Reschedule(a, &counts);
        if (!a.dead_ids.empty())
            Bury(a, &counts, &removed);
        if (a.pause)
            PauseGone(destination);
    });
    // ordering = key: removed heads let their keys' next messages go.
    if (!Book().held_heads.empty()) {
        for (int64_t id : a.locked_ids)
            Book().HeadRemoved(destination, id);
        for (uint64 i = 0; i < removed.n; i++)
            Book().HeadRemoved(destination, removed.ids[i]);
    }
    return counts;
}

void TransactionEnded(bool committed) {
    // Not Current(): the transaction is over, its local transaction id no longer names it.
    FastPath().Forget();
    Book().TransactionEnded(committed);
}

void LeaseLockedRows(const std::vector<int64_t> &ids, int64_t lease_ms, int64_t lease_token) {
    if (ids.empty())
        return;
    SetCurrentStatementStartTimestamp();  // the lease runs from now, not from the batch's start
    PgTry([&] {
        Oid types[3] = {INT8ARRAYOID, INT8OID, INT8OID};
        Datum args[3] = {Int8Array(ids), Int64GetDatum(lease_token), Int64GetDatum(lease_ms)};
        int rc = SPI_execute_plan(KeptPlan(&lease_locked_plan, kLeaseLockedSql, 3, types), args,
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
            SPI_execute_plan(KeptPlan(&sweep_plan, kSweepSql, 2, types), args, nullptr, false, 0);
        if (rc != SPI_OK_DELETE)
            elog(ERROR, "outbox: sweeping the archive failed: %s", SPI_result_code_string(rc));
        return int64(SPI_processed);
    });
}

}  // namespace outbox::pg
