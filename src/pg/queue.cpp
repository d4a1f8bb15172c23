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

namespace outbox::pg {

namespace {

// Every claim takes rows only while the destination's config is the one the worker loaded
// (ClaimRequest::config_json) and the destination is not paused, checked in the claim's own
// snapshot: a change committed together with messages (alter_destination and requeue in one
// transaction) is then either not visible to the claim, or visible along with them, and the
// claim takes nothing; the change's wake-up (the reload flag) makes the worker load the new
// config first. A pause committed before a claim's snapshot stops it even inside a transaction
// that loaded the destination earlier (claims see what is due at their own time, so a message
// queued after the pause would otherwise be taken). (An InitPlan: read once per claim.)
#define DESTINATION_AS_LOADED(param)                                         \
    "(SELECT d.config::text FROM outbox.destinations AS d WHERE d.name = $1" \
    "   AND NOT d.paused) = " param "::text"

// $6, $7: where to start (ClaimRequest::after_available_at). Column 11 is where the row was due
// before its lease moved it.
const char *const kClaimSql =
    "WITH due AS ("
    "  SELECT c.id, c.available_at AS was_due FROM outbox.messages AS c"
    "   WHERE c.destination = $1 AND c.available_at <= pg_catalog.statement_timestamp()"
    "     AND c.order_key IS NULL"
    "     AND (c.available_at, c.id) > ($6, $7) AND " DESTINATION_AS_LOADED("$5")
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

// ordering = key (the rules of outbox.ordered_keys are written above it in
// sql/outbox--0.2.0.sql; README "Per-key ordering").
//
// A worker claims messages of a key only while its transaction holds the key's row FOR KEY
// SHARE, taken by one of the two statements below before the claim's own statement (whose
// snapshot therefore sees every transaction that committed before the lock). A transaction that
// puts a message back below a key's head (requeue, restore, ordering turned on) takes the key's
// row FOR UPDATE before it does (src/pg/key_order.cpp, outbox.alter_destination), and the two
// conflict: it waits for the workers that hold the key, and they skip the key while it runs. So
// from the lock to its commit, no message can appear below a key's head unseen by a worker that
// holds the key. The worker does not wait (SKIP LOCKED): a key it could not take is found again
// by a later scan over the keys. (Except that PostgreSQL locks the newer versions of a row
// updated since the statement's snapshot without SKIP LOCKED: that wait can close a deadlock
// with outbox.requeue, which is then the side aborted and starts again.)
//
// $2: keys this transaction needs and does not hold yet.
const char *const kLockKeysSql =
    "SELECT k.order_key, k.floor_version, k.version, k.due_at FROM outbox.ordered_keys AS k"
    " WHERE k.destination = $1 AND k.order_key = ANY ($2)"
    "   FOR KEY SHARE SKIP LOCKED";

// The next $4 due keys after ($2, $3) and up to ($5, $6), in due order: claims go round the keys
// from where the previous one stopped, so keys take turns.
const char *const kLockDueKeysSql =
    "SELECT k.order_key, k.floor_version, k.version, k.due_at FROM outbox.ordered_keys AS k"
    " WHERE k.destination = $1 AND k.due_at <= pg_catalog.statement_timestamp()"
    "   AND (k.due_at, k.order_key) > ($2, $3) AND (k.due_at, k.order_key) <= ($5, $6)"
    " ORDER BY k.due_at, k.order_key LIMIT $4"
    "   FOR KEY SHARE SKIP LOCKED";

// The heads claim, for keys ($3) this transaction holds: where a key's floor is, $4 (past a
// head this worker removed) if its floor_version is still $6, the row's own floor otherwise.
//
// h: each key's head, its first message from the floor on, in this statement's snapshot (one
// descent of messages_key_order), and whether a dead letter holds the key (HELD_BACK). c: the
// heads that are due and not held back, fetched by ctid all at once (one TID scan) and locked
// unless another worker holds them. Why a key never has two messages in flight: only its head
// is claimed, and only by locking that very row version — if the head's worker removed it since
// the snapshot, or leased it (it is no longer due), the lock or its recheck finds it gone and
// the key is skipped this time, never its next message; a head the fast path holds locked is
// skipped. Every key looked at comes back (c's columns NULL when its head was not claimed), so
// the worker can note on its row what it saw (KeyRowNote). (The messages after a head it
// claimed, which the claims that follow the head's removal take, are found by FindNextMessages.)
//
// A head held back by a dead letter of its key (BLOCK: on_dead = block; looked up per key only
// if the destination has any).
// clang-format off
#define HELD_BACK(BLOCK, KEY, ID)                                              \
    BLOCK " AND (SELECT EXISTS (SELECT FROM outbox.dead_letters AS d"          \
    "         WHERE d.destination = $1 AND d.skipped_at IS NULL"               \
    "           AND d.reason IN ('rejected', 'max_attempts', 'poison')))"      \
    " AND EXISTS (SELECT FROM outbox.dead_letters AS d"                        \
    "         WHERE d.destination = $1 AND d.key = " KEY                       \
    "           AND d.id < " ID " AND d.skipped_at IS NULL"                    \
    "           AND d.reason IN ('rejected', 'max_attempts', 'poison'))"
// clang-format on
const char *const kHeadsSql =
    "WITH k AS ("
    "  SELECT k.order_key,"
    "         CASE WHEN k.floor_version = f.floor_version THEN greatest(k.floor, f.floor)"
    "              ELSE k.floor END AS floor,"
    "         k.floor_version, k.version"
    "    FROM unnest($3::bigint[], $4::bigint[], $6::bigint[])"
    "         AS f(order_key, floor, floor_version)"
    "    JOIN outbox.ordered_keys AS k ON k.destination = $1 AND k.order_key = f.order_key),"
    " h AS MATERIALIZED ("
    "  SELECT k.order_key, k.floor, k.floor_version, k.version,"
    "         x.id, x.tid, x.available_at,"
    "         x.available_at <= pg_catalog.statement_timestamp() AS due, x.in_flight,"
    "         x.id IS NOT NULL AND " HELD_BACK("$5", "x.key", "x.id") " AS blocked"
    "    FROM k LEFT JOIN LATERAL ("
    "      SELECT m.id, m.ctid AS tid, m.available_at, m.lease_token IS NOT NULL AS in_flight,"
    "             m.key"
    "        FROM outbox.messages AS m"
    "       WHERE m.order_key = k.order_key AND m.id >= k.floor AND m.destination = $1"
    "       ORDER BY m.id LIMIT 1) AS x ON true),"
    " c AS ("
    "  SELECT m.id, m.event_id, m.topic, m.key, m.payload, m.payload_bytes, m.headers,"
    "         m.created_at, m.expires_at, m.attempts + 1 AS attempts, m.available_at, m.ctid,"
    "         m.first_failed_at"
    "    FROM outbox.messages AS m"
    "   WHERE m.ctid = ANY (ARRAY(SELECT h.tid FROM h WHERE h.due AND NOT h.blocked))"
    "     AND m.order_key IS NOT NULL AND m.destination = $1"
    "     AND m.available_at <= pg_catalog.statement_timestamp()"
    "     AND " DESTINATION_AS_LOADED("$2") "   FOR UPDATE OF m SKIP LOCKED)"
    " SELECT c.id, c.event_id, c.topic, c.key, c.payload, c.payload_bytes, c.headers,"
    "        c.created_at, c.expires_at, c.attempts, c.available_at, c.ctid,"
    "        h.order_key, h.floor_version, h.version, h.id, h.available_at, h.due,"
    "        h.in_flight, h.blocked, c.first_failed_at"
    "   FROM h LEFT JOIN c ON c.id = h.id";

// Keys this transaction holds, whose head this worker removed, where the worker had found the
// messages that followed that head when it claimed it (FindNextMessages, in a snapshot taken
// while its transaction held the key's row): each key's next one is claimed where that
// snapshot saw it ($3: their ctids; one TID scan for all, no index descent per key), and
// taken only if it is the very row version that snapshot saw: the worker checks
// its id and xmin (ClaimHeads; a row now at that place that is not is left alone, locked until
// the transaction ends). Why it is the key's head now, from MVCC and the locking rules
// above alone:
//  - the same version: a version never moves, and any change to the row (a lease by another
//    worker, ordering switched off and on again) makes a new one;
//  - the head before it is gone (removed by this transaction, or by this worker's previous one,
//    which committed), and the messages between the two that snapshot did not see cannot
//    exist: a producer numbers a message only in its key's turn, which it holds until it
//    commits, so a message numbered below a visible one was committed before that one was
//    numbered, hence visible too. The only way a message returns below (requeue, restore,
//    ordering turned on) bumps floor_version; the worker checked, when it took the key's row in
//    this transaction, that floor_version was still the one read with the followers, and none
//    can commit while it holds the row.
// Everything else is as for any head: due, not held back, not locked by another worker, the
// destination as loaded. A key whose next message is not claimed here goes to kHeadsSql.
const char *const kHeadsFollowSql =
    "SELECT m.id, m.event_id, m.topic, m.key, m.payload, m.payload_bytes, m.headers,"
    "       m.created_at, m.expires_at, m.attempts + 1, m.available_at, m.ctid,"
    "       m.first_failed_at, m.order_key, m.xmin"
    "  FROM outbox.messages AS m"
    " WHERE m.ctid = ANY ($3) AND m.order_key IS NOT NULL AND m.destination = $1"
    "   AND m.available_at <= pg_catalog.statement_timestamp()"
    "   AND NOT (" HELD_BACK("$4", "m.key", "m.id") ")"
    "   AND " DESTINATION_AS_LOADED("$2") " FOR UPDATE OF m SKIP LOCKED";

// What the worker saw of its keys, written on their rows at the end of its transaction, under
// the rules of outbox.ordered_keys: a floor raised only while floor_version is unchanged, a due
// time set only while version is unchanged — except that a key whose head was removed is due
// now at the latest ($7; that is never later than its next message can go). Rows a producer
// holds are skipped; what was not written is seen again. A key that stays due keeps its due_at,
// so the write changes no indexed column: a HOT update, pruned in place (the table's fillfactor
// leaves room for it). The worker writes them with WriteKeyRowNotes (src/pg/key_order.cpp),
// which never waits; this statement, the same rules, only where that cannot (the table altered
// by hand): its FOR NO KEY UPDATE SKIP LOCKED follows a row updated since its snapshot to the
// newest version and waits for a producer holding that one.
const char *const kKeyRowsSql =
    "WITH w AS ("
    "  SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],"
    "                       $6::timestamptz[], $7::boolean[])"
    "         AS w(order_key, floor, floor_version, version, due_at, head_removed)),"
    " l AS ("
    "  SELECT k.ctid AS tid, w.* FROM outbox.ordered_keys AS k"
    "    JOIN w ON k.destination = $1 AND k.order_key = w.order_key"
    "   FOR NO KEY UPDATE OF k SKIP LOCKED)"
    " UPDATE outbox.ordered_keys AS k"
    "    SET floor = CASE WHEN l.floor > k.floor AND k.floor_version = l.floor_version"
    "                     THEN l.floor ELSE k.floor END,"
    "        due_at = CASE WHEN l.head_removed THEN least(k.due_at, pg_catalog.now())"
    "                      WHEN l.due_at IS NOT NULL AND k.version = l.version THEN l.due_at"
    "                      ELSE k.due_at END,"
    "        idle_since = CASE WHEN NOT l.head_removed AND l.due_at = 'infinity'"
    "                               AND k.version = l.version THEN pg_catalog.now()"
    "                          ELSE k.idle_since END,"
    "        version = k.version + 1"
    "   FROM l WHERE k.ctid = l.tid";

// Keys without a queued message for a while go (a producer's next message of the key makes a
// new row, from floor 0: by then VACUUM has removed the entries a floor saved claims from). The
// rows are deleted by DeleteIdleKeyRows, which locks them without waiting (see WriteKeyRowNotes).
const char *const kIdleKeysSql =
    "SELECT k.ctid FROM outbox.ordered_keys AS k"
    " WHERE k.destination = $1 AND k.due_at = 'infinity'"
    "   AND k.idle_since < pg_catalog.now() - $2 * interval '1 second'"
    " LIMIT $3";

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

SPIPlanPtr claim_plan, lock_plan, lock_keys_plan, lock_due_keys_plan, heads_plan, heads_follow_plan,
    key_rows_plan, idle_keys_plan, lease_locked_plan, delete_plan, delete_locked_plan, archive_plan,
    sweep_plan, reschedule_plan, bury_plan, load_plan;

// The fast path: what the current transaction holds locked, valid only in that transaction
// (forgotten when the worker says it ended, or when another one is seen).
struct FastPathState {
    LocalTransactionId lxid = InvalidLocalTransactionId;
    // where its locked rows are, by id
    std::unordered_map<int64_t, ItemPointerData> tids;

    FastPathState &Current() {
        if (lxid != CurrentLocalTransactionId()) {
            Forget();
            lxid = CurrentLocalTransactionId();
        }
        return *this;
    }
    void Forget() { tids.clear(); }
};
FastPathState fast_path;

// What the claims know between transactions: the worker's (UseClaimBook); a process that claims
// without a worker (none does today) gets one of its own, never freed, like the process.
ClaimBook *claim_book = nullptr;
ClaimBook &Book() {
    if (claim_book == nullptr)
        claim_book = new ClaimBook;
    return *claim_book;
}
static_assert(kTimestampNoBegin == DT_NOBEGIN && kTimestampNoEnd == DT_NOEND,
              "ClaimBook's timestamps are PostgreSQL's");
static_assert(std::is_same_v<Timestamp, TimestampTz>, "ClaimBook's timestamps are PostgreSQL's");

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

// ordering = key: the heads held, their followers, the keys' cursors and notes are the
// ClaimBook's (include/outbox/claim_book.hpp).

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
    int64 first_failed_ms;  // 0: no failed attempt yet
    int attempts;
    ItemPointerData tid;  // the fast path's locked rows, heads
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

// One claimed row of an SPI result (columns 1-11 as in kClaimSql; kLockSql and the heads claim
// have the ctid as column 12), pointing into SPI memory. `first_failed_col`: the column of
// first_failed_at (FirstFailedColumn), after each claim's own columns.
void ReadRow(HeapTuple tuple, TupleDesc desc, int first_failed_col, RawRow *row) {
    {
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
        d = heap_getattr(tuple, first_failed_col, desc, &isnull);
        // Rounded up: the retry budget is never found spent a fraction of a millisecond early.
        row->first_failed_ms = isnull ? 0 : TimestampToUnixMs(DatumGetTimestampTz(d) + 999);
        if (desc->natts >= 13)
            row->tid = *reinterpret_cast<ItemPointer>(
                DatumGetPointer(heap_getattr(tuple, 12, desc, &isnull)));
    }
}

// The column of first_failed_at in a claim's result.
int FirstFailedColumn(TupleDesc desc) {
    int col = SPI_fnumber(desc, "first_failed_at");
    if (col <= 0)
        elog(ERROR, "outbox: a claim returned no first_failed_at");
    return col;
}

// The claimed rows of the last SPI statement (ReadRow), pointing into SPI memory.
RawRow *ReadClaimedRows(uint64 *count) {
    uint64 n = SPI_processed;
    *count = n;
    auto *rows = static_cast<RawRow *>(palloc0(sizeof(RawRow) * (n + 1)));
    int first_failed_col = FirstFailedColumn(SPI_tuptable->tupdesc);
    for (uint64 i = 0; i < n; i++)
        ReadRow(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, first_failed_col, &rows[i]);
    return rows;
}

// Runs the lease claim; C-style code only (may ereport).
RawRow *ClaimRaw(ClaimRequest *request, int limit, int64 lease_ms, int64 token, uint64 *count) {
    Oid types[7] = {TEXTOID, INT8OID, INT8OID, INT4OID, TEXTOID, TIMESTAMPTZOID, INT8OID};
    SPIPlanPtr plan = KeptPlan(&claim_plan, kClaimSql, 7, types);
    Datum args[7] = {CStringGetTextDatum(request->destination.c_str()),
                     Int64GetDatum(token),
                     Int64GetDatum(lease_ms),
                     Int32GetDatum(limit),
                     CStringGetTextDatum(request->config_json.c_str()),
                     TimestampTzGetDatum(request->after_available_at),
                     Int64GetDatum(request->after_id)};
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

// One key a heads claim looked at (kHeadsSql's columns 13-20), or a follower ClaimHeads took.
struct KeySeen {
    int64 order_key, floor_version, version;
    bool has_head, head_due, in_flight, blocked, claimed;
    int64 head_id;
    TimestampTz head_available_at;
    bool probed;  // found by an index descent (kHeadsSql), not taken as a follower
};

// Runs a heads claim (`plan` with `args`); C-style code only (may ereport). Returns the claimed
// heads, and in *seen every key it looked at.
RawRow *HeadsRaw(SPIPlanPtr plan, Datum *args, uint64 *nclaimed, KeySeen **seen, uint64 *nseen) {
    int rc = SPI_execute_plan(plan, args, nullptr, false, 0);
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "outbox: claiming key heads failed: %s", SPI_result_code_string(rc));
    uint64 n = SPI_processed;
    auto *rows = static_cast<RawRow *>(palloc0(sizeof(RawRow) * (n + 1)));
    auto *keys = static_cast<KeySeen *>(palloc0(sizeof(KeySeen) * (n + 1)));
    TupleDesc desc = SPI_tuptable->tupdesc;
    int first_failed_col = FirstFailedColumn(desc);
    uint64 claimed = 0;
    for (uint64 i = 0; i < n; i++) {
        HeapTuple tuple = SPI_tuptable->vals[i];
        KeySeen &k = keys[i];
        bool isnull;
        heap_getattr(tuple, 1, desc, &isnull);
        k.claimed = !isnull;
        if (k.claimed)
            ReadRow(tuple, desc, first_failed_col, &rows[claimed++]);
        k.order_key = DatumGetInt64(heap_getattr(tuple, 13, desc, &isnull));
        k.floor_version = DatumGetInt64(heap_getattr(tuple, 14, desc, &isnull));
        k.version = DatumGetInt64(heap_getattr(tuple, 15, desc, &isnull));
        Datum head = heap_getattr(tuple, 16, desc, &isnull);
        k.has_head = !isnull;
        if (!k.has_head)
            continue;
        k.head_id = DatumGetInt64(head);
        k.head_available_at = DatumGetTimestampTz(heap_getattr(tuple, 17, desc, &isnull));
        k.head_due = DatumGetBool(heap_getattr(tuple, 18, desc, &isnull));
        k.in_flight = DatumGetBool(heap_getattr(tuple, 19, desc, &isnull));
        k.blocked = DatumGetBool(heap_getattr(tuple, 20, desc, &isnull));
        k.probed = true;
    }
    *nclaimed = claimed;
    *seen = keys;
    *nseen = n;
    return rows;
}

// A row kHeadsFollowSql claimed: its key and row version (columns 14 and 15).
struct FollowedRow {
    int64 order_key;
    TransactionId xmin;
};

// Runs the follow claim (`plan` with `args`); C-style code only (may ereport).
RawRow *FollowRaw(SPIPlanPtr plan, Datum *args, uint64 *count, FollowedRow **found) {
    int rc = SPI_execute_plan(plan, args, nullptr, false, 0);
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "outbox: claiming the next messages of keys failed: %s",
             SPI_result_code_string(rc));
    RawRow *rows = ReadClaimedRows(count);
    auto *out = static_cast<FollowedRow *>(palloc0(sizeof(FollowedRow) * (*count + 1)));
    for (uint64 i = 0; i < *count; i++) {
        bool isnull;
        HeapTuple tuple = SPI_tuptable->vals[i];
        out[i].order_key = DatumGetInt64(heap_getattr(tuple, 14, SPI_tuptable->tupdesc, &isnull));
        out[i].xmin =
            DatumGetTransactionId(heap_getattr(tuple, 15, SPI_tuptable->tupdesc, &isnull));
    }
    *found = out;
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

namespace {

// Claimed rows as messages for the drivers; `locked`: held by this transaction (the fast path).
void AppendMessages(const RawRow *rows, uint64 n, bool locked, int64 lease_token,
                    std::vector<Message> *out) {
    FastPathState &state = fast_path.Current();
    for (uint64 i = 0; i < n; i++) {
        const RawRow &r = rows[i];
        if (locked)
            state.tids[r.id] = r.tid;
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
        m.tombstone = r.payload == nullptr;  // neither payload column: a Kafka tombstone
        for (int h = 0; h < r.nheaders; h++)
            m.headers.emplace_back(std::string(r.header_names[h], r.header_name_lens[h]),
                                   std::string(r.header_values[h], r.header_value_lens[h]));
        m.created_at_ms = r.created_ms;
        m.expires_at_ms = r.expires_ms;
        m.attempts = r.attempts;
        m.first_failed_at_ms = r.first_failed_ms;
        out->push_back(std::move(m));
    }
}

// ordering = key: how long the worker lets a key's row say its head is not due, for a head in
// flight (its lease may lapse, or its outcome be written back without this row being updated:
// the key is looked at again after this at the latest) and for a head a dead letter holds
// (outbox.skip, requeue and purge_dead_letters make the key due at once; a dead letter deleted
// by hand takes this long to be noticed).
constexpr int64 kInFlightRecheckUs = 1000 * 1000;
constexpr int64 kBlockedRecheckUs = 30 * 1000 * 1000;

// What the worker saw of each key (KeySeen) becomes a note on its row, written at the end of
// the transaction (WriteKeyRows): a due time from the head's state, each valid only while the
// row's version is the one the claim read. A claimed head is held (HeldHead).
void NoteKeysSeen(const std::string &destination, const KeySeen *seen, uint64 n, bool leased,
                  int64 lease_ms) {
    TimestampTz now = GetCurrentTimestamp();
    auto &writes = Book().key_row_writes[destination];
    Book().TrimHeldHeads();  // only floors raised later are lost
    for (uint64 i = 0; i < n; i++) {
        const KeySeen &s = seen[i];
        TimestampTz due;
        if (s.claimed) {
            Book().held_heads[s.head_id] = {s.order_key, s.floor_version};
            if (!leased)
                continue;  // the fast path holds it locked: other workers skip it
            due = std::min(now + lease_ms * 1000, now + kInFlightRecheckUs);
        } else if (!s.has_head) {
            due = DT_NOEND;  // nothing queued
        } else if (s.blocked) {
            due = now + kBlockedRecheckUs;
        } else if (!s.head_due) {
            due = s.in_flight ? std::min(s.head_available_at, now + kInFlightRecheckUs)
                              : s.head_available_at;  // a retry or a scheduled message
        } else {
            continue;  // due, but another worker holds it
        }
        KeyRowNote &w = writes[s.order_key];
        w.version = s.version;
        w.due_at = due;
        w.has_due_at = true;
        w.head_removed = false;
    }
}

// How many messages after a claimed head the worker finds at once: the claims of the next ones
// follow without an index descent each.
constexpr int kFollowers = 32;

// The messages after each head a heads claim took (`seen`), as KeyFollowers: found while this
// transaction holds the keys' rows, in a snapshot taken after the claim.
void FindFollowers(const std::string &destination, const KeySeen *seen, uint64 n) {
    // their next messages are looked for again when there were too many
    auto &followers = Book().TrimmedFollowers(destination);
    std::vector<std::pair<int64_t, int64_t>> heads;
    for (uint64 i = 0; i < n; i++) {
        if (seen[i].claimed && seen[i].probed) {
            heads.push_back({seen[i].order_key, seen[i].head_id});
            followers.erase(seen[i].order_key);
        }
    }
    std::vector<NextMessage> found;
    if (heads.empty() ||
        !PgTry([&] { return FindNextMessages(destination, heads, kFollowers, &found); }))
        return;
    size_t at = 0;  // found holds each key's messages together, in the order of `heads`
    for (uint64 i = 0; i < n; i++) {
        const KeySeen &s = seen[i];
        if (!s.claimed || !s.probed)
            continue;
        size_t first = at;
        while (at < found.size() && found[at].order_key == s.order_key)
            at++;
        if (at == first)
            continue;
        KeyFollowers &f = followers[s.order_key];
        f.after = s.head_id;
        f.floor_version = s.floor_version;
        f.taken = 0;
        f.next.assign(found.begin() + ptrdiff_t(first), found.begin() + ptrdiff_t(at));
    }
}

// One key row a key lock took (kLockKeysSql, kLockDueKeysSql).
struct KeyTaken {
    int64 order_key, floor_version, version;
    TimestampTz due_at;
};

// Runs a key lock (`sql` with `args`, $1 the destination) and notes the rows it took in
// the ClaimBook's keys_held. Returns them in the statement's order.
std::vector<KeyTaken> TakeKeys(const std::string &destination, SPIPlanPtr *slot, const char *sql,
                               int nargs, Oid *types, Datum *args) {
    uint64 n = 0;
    KeyTaken *rows = PgTry([&] {
        args[0] = CStringGetTextDatum(destination.c_str());
        int rc = SPI_execute_plan(KeptPlan(slot, sql, nargs, types), args, nullptr, false, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: taking the rows of ordered keys failed: %s",
                 SPI_result_code_string(rc));
        n = SPI_processed;
        auto *out = static_cast<KeyTaken *>(palloc0(sizeof(KeyTaken) * (n + 1)));
        TupleDesc desc = SPI_tuptable->tupdesc;
        for (uint64 i = 0; i < n; i++) {
            HeapTuple tuple = SPI_tuptable->vals[i];
            bool isnull;
            out[i].order_key = DatumGetInt64(heap_getattr(tuple, 1, desc, &isnull));
            out[i].floor_version = DatumGetInt64(heap_getattr(tuple, 2, desc, &isnull));
            out[i].version = DatumGetInt64(heap_getattr(tuple, 3, desc, &isnull));
            out[i].due_at = DatumGetTimestampTz(heap_getattr(tuple, 4, desc, &isnull));
        }
        return out;
    });
    auto &held = Book().keys_held[destination];
    std::vector<KeyTaken> taken(rows, rows + n);
    for (const KeyTaken &k : taken)
        held[k.order_key] = {k.floor_version, k.version};
    return taken;
}

// The heads of a destination's keys: first the next messages of keys whose head this
// transaction removed, then the due keys in due order from where this transaction's scan got
// to. At most request.limit. Only keys whose row this transaction holds (kLockKeysSql).
void ClaimHeads(const ClaimRequest &request, int64 lease_ms, int64 lease_token,
                std::vector<Message> *out) {
    Book().NoteOrdered(request.destination);
    HeadsScan &scan = Book().heads_scans[request.destination];
    if (!scan.started) {
        scan.started = true;
        auto cursor = Book().key_cursors.find(request.destination);
        if (cursor != Book().key_cursors.end())
            scan.start = scan.after = cursor->second;
    }
    auto &held = Book().keys_held[request.destination];
    size_t first = out->size();
    // The heads of held keys, each from its floor (kHeadsSql).
    auto probe = [&](const std::vector<NextOfKey> &keys) {
        if (keys.empty())
            return;
        std::vector<int64_t> order_keys, floors, versions;
        for (const NextOfKey &next : keys) {
            order_keys.push_back(next.order_key);
            floors.push_back(next.floor);
            versions.push_back(next.floor_version);
        }
        uint64 nclaimed = 0, nseen = 0;
        KeySeen *seen = nullptr;
        RawRow *rows = PgTry([&] {
            Oid types[6] = {TEXTOID, TEXTOID, INT8ARRAYOID, INT8ARRAYOID, BOOLOID, INT8ARRAYOID};
            Datum args[6] = {CStringGetTextDatum(request.destination.c_str()),
                             CStringGetTextDatum(request.config_json.c_str()),
                             Int8Array(order_keys),
                             Int8Array(floors),
                             BoolGetDatum(request.block_on_dead),
                             Int8Array(versions)};
            return HeadsRaw(KeptPlan(&heads_plan, kHeadsSql, 6, types), args, &nclaimed, &seen,
                            &nseen);
        });
        uint64 kept = 0;
        for (uint64 i = 0; i < nclaimed; i++)
            if (Book().heads_claimed.insert(rows[i].id).second)
                rows[kept++] = rows[i];
        AppendMessages(rows, kept, request.hold_locks, lease_token, out);
        NoteKeysSeen(request.destination, seen, nseen, !request.hold_locks, lease_ms);
        FindFollowers(request.destination, seen, nseen);
    };
    if (!scan.next.empty()) {
        size_t take = std::min(scan.next.size(), size_t(std::max(request.limit, 0)));
        std::vector<NextOfKey> next(scan.next.end() - ptrdiff_t(take), scan.next.end());
        scan.next.resize(scan.next.size() - take);
        std::vector<int64_t> not_held;
        for (const NextOfKey &n : next)
            if (held.count(n.order_key) == 0)
                not_held.push_back(n.order_key);
        if (!not_held.empty()) {
            Oid types[2] = {TEXTOID, INT8ARRAYOID};
            Datum args[2] = {0, 0};
            PgTry([&] { args[1] = Int8Array(not_held); });
            TakeKeys(request.destination, &lock_keys_plan, kLockKeysSql, 2, types, args);
        }
        std::vector<NextOfKey> looked_for;  // keys whose next message is looked for
        std::vector<NextOfKey> followed;    // keys whose next message is known
        auto &followers = Book().key_followers[request.destination];
        for (const NextOfKey &n : next) {
            auto h = held.find(n.order_key);
            if (h == held.end())
                continue;  // a transaction that lowers its floor holds it: a later scan finds it
            auto f = followers.find(n.order_key);
            bool known = f != followers.end() && f->second.after == n.floor - 1 &&
                         f->second.floor_version == n.floor_version &&
                         f->second.floor_version == h->second.floor_version &&
                         f->second.taken < f->second.next.size();
            (known ? followed : looked_for).push_back(n);
        }
        if (!followed.empty()) {
            std::vector<ItemPointerData> tids;
            for (const NextOfKey &n : followed) {
                const KeyFollowers &f = followers[n.order_key];
                tids.push_back(ToItemPointer(f.next[f.taken].tid));
            }
            uint64 n = 0;
            FollowedRow *found = nullptr;
            RawRow *rows = PgTry([&] {
                Oid types[4] = {TEXTOID, TEXTOID, TIDARRAYOID, BOOLOID};
                Datum args[4] = {CStringGetTextDatum(request.destination.c_str()),
                                 CStringGetTextDatum(request.config_json.c_str()), TidArray(tids),
                                 BoolGetDatum(request.block_on_dead)};
                return FollowRaw(KeptPlan(&heads_follow_plan, kHeadsFollowSql, 4, types), args, &n,
                                 &found);
            });
            // Taken: the rows that are the very versions the followers' snapshot saw.
            std::vector<KeySeen> seen;
            std::unordered_set<int64> claimed;
            uint64 kept = 0;
            for (uint64 i = 0; i < n; i++) {
                auto f = followers.find(found[i].order_key);
                if (f == followers.end() || f->second.taken >= f->second.next.size())
                    continue;
                const NextMessage &expected = f->second.next[f->second.taken];
                if (expected.id != rows[i].id || expected.xmin != found[i].xmin ||
                    !Book().heads_claimed.insert(rows[i].id).second)
                    continue;
                KeySeen k = {};
                k.order_key = found[i].order_key;
                k.floor_version = f->second.floor_version;
                k.version = held[k.order_key].version;
                k.has_head = k.head_due = k.claimed = true;
                k.head_id = rows[i].id;
                seen.push_back(k);
                claimed.insert(k.order_key);
                f->second.after = rows[i].id;
                f->second.taken++;
                rows[kept++] = rows[i];
            }
            AppendMessages(rows, kept, request.hold_locks, lease_token, out);
            NoteKeysSeen(request.destination, seen.data(), seen.size(), !request.hold_locks,
                         lease_ms);
            for (const NextOfKey &next : followed) {
                if (claimed.count(next.order_key) == 0) {
                    followers.erase(next.order_key);
                    looked_for.push_back(next);
                }
            }
        }
        probe(looked_for);
    }
    while (!scan.done && int(out->size() - first) < request.limit) {
        int want = request.limit - int(out->size() - first);
        // First from where the last scan stopped to the end, then from the beginning to there.
        KeyPosition until = scan.wrapped ? scan.start : KeyPosition{DT_NOEND, PG_INT64_MAX};
        Oid types[6] = {TEXTOID, TIMESTAMPTZOID, INT8OID, INT4OID, TIMESTAMPTZOID, INT8OID};
        Datum args[6] = {0,
                         TimestampTzGetDatum(scan.after.due),
                         Int64GetDatum(scan.after.key),
                         Int32GetDatum(want),
                         TimestampTzGetDatum(until.due),
                         Int64GetDatum(until.key)};
        std::vector<KeyTaken> taken =
            TakeKeys(request.destination, &lock_due_keys_plan, kLockDueKeysSql, 6, types, args);
        if (!taken.empty()) {
            scan.after = {taken.back().due_at, taken.back().order_key};
            Book().key_cursors[request.destination] = scan.after;
        }
        std::vector<NextOfKey> keys;
        for (const KeyTaken &k : taken)
            keys.push_back({k.order_key, PG_INT64_MIN, k.floor_version});  // from the row's floor
        probe(keys);
        if (int(taken.size()) < want) {  // this pass is over
            bool from_beginning = scan.start.due == DT_NOBEGIN && scan.start.key == PG_INT64_MIN;
            if (scan.wrapped || from_beginning) {
                scan.done = true;
                Book().key_cursors.erase(
                    request.destination);  // the next scan starts at the beginning
            } else {
                scan.wrapped = true;
                scan.after = KeyPosition{};
            }
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

WriteBackCounts WriteBack(const std::string &destination,
                          const std::vector<Resolution> &resolutions) {
    std::vector<int64_t> del_ids, del_tokens, re_ids, re_tokens, re_delays, dead_ids, dead_tokens;
    std::vector<int64_t> locked_ids;  // del_tids' rows
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
                        locked_ids.push_back(r.id);
                        tids.erase(found);
                        break;
                    }
                }
                del_ids.push_back(r.id);
                del_tokens.push_back(r.lease_token);
                break;
            case Resolution::Action::Reschedule:
                Book().held_heads.erase(r.id);  // its next claim reads its key again
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
    bool pause = std::any_of(resolutions.begin(), resolutions.end(),
                             [](const Resolution &r) { return r.pause_destination; });
    WriteBackCounts counts;
    // The rows the statements below removed (with RETURNING id), for ordered heads.
    size_t max_removed = del_ids.size() + dead_ids.size();
    int64 *removed = nullptr;
    uint64 nremoved = 0;
    auto collect = [&](int column) {
        for (uint64 i = 0; i < SPI_processed && nremoved < max_removed; i++) {
            bool isnull;
            removed[nremoved++] = DatumGetInt64(
                heap_getattr(SPI_tuptable->vals[i], column, SPI_tuptable->tupdesc, &isnull));
        }
    };
    PgTry([&] {
        removed = static_cast<int64 *>(palloc(sizeof(int64) * (max_removed + 1)));
        if (!del_tids.empty()) {
            Oid types[1] = {TIDARRAYOID};
            Datum args[1] = {TidArray(del_tids)};
            int rc = SPI_execute_plan(KeptPlan(&delete_locked_plan, kDeleteLockedSql, 1, types),
                                      args, nullptr, false, 0);
            if (rc != SPI_OK_DELETE)
                elog(ERROR, "outbox: delete failed: %s", SPI_result_code_string(rc));
            counts.delivered += int64(SPI_processed);
        }
        if (!del_ids.empty()) {
            Oid types[2] = {INT8ARRAYOID, INT8ARRAYOID};
            Datum args[2] = {Int8Array(del_ids), Int8Array(del_tokens)};
            int rc = SPI_execute_plan(archive ? KeptPlan(&archive_plan, kArchiveSql, 2, types)
                                              : KeptPlan(&delete_plan, kDeleteSql, 2, types),
                                      args, nullptr, false, 0);
            if (rc != (archive ? SPI_OK_INSERT_RETURNING : SPI_OK_DELETE_RETURNING))
                elog(ERROR, "outbox: delete failed: %s", SPI_result_code_string(rc));
            counts.delivered += int64(SPI_processed);
            collect(1);
        }
        if (!re_ids.empty()) {
            Oid types[5] = {INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, TEXTARRAYOID};
            Datum args[5] = {Int8Array(re_ids), Int8Array(re_tokens), Int8Array(re_delays),
                             Int4Array(re_kinds), TextArray(re_errors)};
            int rc = SPI_execute_plan(KeptPlan(&reschedule_plan, kRescheduleSql, 5, types), args,
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
                SPI_execute_plan(KeptPlan(&bury_plan, kBurySql, 4, types), args, nullptr, false, 0);
            if (rc != SPI_OK_INSERT_RETURNING)
                elog(ERROR, "outbox: moving to dead letters failed: %s",
                     SPI_result_code_string(rc));
            for (uint64 i = 0; i < SPI_processed; i++) {
                bool isnull;
                bool expired = DatumGetBool(
                    heap_getattr(SPI_tuptable->vals[i], 1, SPI_tuptable->tupdesc, &isnull));
                (expired ? counts.expired : counts.dead)++;
            }
            collect(2);
        }
        if (pause) {
            // 410 Gone: paused as outbox.pause would, in this write-back's transaction (its
            // trigger wakes the workers at commit; outbox.resume undoes it).
            Oid types[1] = {TEXTOID};
            Datum args[1] = {CStringGetTextDatum(destination.c_str())};
            int rc = SPI_execute_with_args(kPauseGoneSql, 1, types, args, nullptr, false, 0);
            if (rc != SPI_OK_UPDATE)
                elog(ERROR, "outbox: pausing the destination failed: %s",
                     SPI_result_code_string(rc));
        }
    });
    // ordering = key: removed heads let their keys' next messages go.
    if (!Book().held_heads.empty()) {
        for (int64_t id : locked_ids)
            Book().HeadRemoved(destination, id);
        for (uint64 i = 0; i < nremoved; i++)
            Book().HeadRemoved(destination, removed[i]);
    }
    return counts;
}

void WriteKeyRows() {
    for (auto &[destination, keys] : Book().key_row_writes) {
        std::vector<KeyRowNote> notes;
        for (auto &[order_key, w] : keys) {
            if (w.floor == 0 && !w.has_due_at && !w.head_removed)
                continue;
            w.order_key = order_key;
            notes.push_back(w);
        }
        if (notes.empty() || PgTry([&] { return WriteKeyRowNotes(destination, notes); }))
            continue;
        // The table altered by hand (an index on an expression or with a predicate): the
        // statement, which may wait for a producer (see WriteKeyRowNotes).
        std::vector<int64_t> order_keys, floors, floor_versions, versions;
        for (const KeyRowNote &note : notes) {
            order_keys.push_back(note.order_key);
            floors.push_back(note.floor);
            floor_versions.push_back(note.floor_version);
            versions.push_back(note.version);
        }
        PgTry([&] {
            size_t n = notes.size();
            Datum *due_datums = static_cast<Datum *>(palloc(sizeof(Datum) * n));
            bool *nulls = static_cast<bool *>(palloc(sizeof(bool) * n));
            Datum *removed_datums = static_cast<Datum *>(palloc(sizeof(Datum) * n));
            for (size_t i = 0; i < n; i++) {
                due_datums[i] = TimestampTzGetDatum(notes[i].due_at);
                nulls[i] = !notes[i].has_due_at;
                removed_datums[i] = BoolGetDatum(notes[i].head_removed);
            }
            int dims[1] = {int(n)};
            int lbs[1] = {1};
            Oid types[7] = {TEXTOID,      INT8ARRAYOID,        INT8ARRAYOID, INT8ARRAYOID,
                            INT8ARRAYOID, TIMESTAMPTZARRAYOID, BOOLARRAYOID};
            Datum args[7] = {
                CStringGetTextDatum(destination.c_str()),
                Int8Array(order_keys),
                Int8Array(floors),
                Int8Array(floor_versions),
                Int8Array(versions),
                PointerGetDatum(construct_md_array(due_datums, nulls, 1, dims, lbs, TIMESTAMPTZOID,
                                                   8, true, TYPALIGN_DOUBLE)),
                PointerGetDatum(
                    construct_array(removed_datums, int(n), BOOLOID, 1, true, TYPALIGN_CHAR))};
            int rc = SPI_execute_plan(KeptPlan(&key_rows_plan, kKeyRowsSql, 7, types), args,
                                      nullptr, false, 0);
            if (rc != SPI_OK_UPDATE)
                elog(ERROR, "outbox: noting the keys' heads failed: %s",
                     SPI_result_code_string(rc));
        });
    }
    Book().key_row_writes.clear();
}

int64_t SweepIdleKeys(int64_t older_than_s, int limit) {
    int64_t swept = 0;
    TimestampTz idle_before = GetCurrentTransactionStartTimestamp() - older_than_s * USECS_PER_SEC;
    for (const std::string &destination : Book().OrderedDestinations())
        swept += PgTry([&] {
            Oid types[3] = {TEXTOID, INT8OID, INT4OID};
            Datum args[3] = {CStringGetTextDatum(destination.c_str()), Int64GetDatum(older_than_s),
                             Int32GetDatum(limit)};
            int rc = SPI_execute_plan(KeptPlan(&idle_keys_plan, kIdleKeysSql, 3, types), args,
                                      nullptr, true, 0);
            if (rc != SPI_OK_SELECT)
                elog(ERROR, "outbox: looking for idle keys failed: %s", SPI_result_code_string(rc));
            std::vector<ItemPointerData> tids;
            for (uint64 i = 0; i < SPI_processed; i++) {
                bool isnull;
                Datum tid = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);
                tids.push_back(*reinterpret_cast<ItemPointer>(DatumGetPointer(tid)));
            }
            return DeleteIdleKeyRows(destination, tids, idle_before);
        });
    return swept;
}

void UseClaimBook(ClaimBook *book) {
    claim_book = book;
}

void TransactionEnded(bool committed) {
    // Not Current(): the transaction is over, its local transaction id no longer names it.
    fast_path.Forget();
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
