// ordering = key: the heads claim (see the comments on kHeadsSql below, README "Per-key
// ordering" and docs/architecture.md), what it notes on the keys' rows, and the sweep of idle
// keys. The plain claim and the write-back are in queue.cpp.
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
    "     AND ($7 = 0 OR m.lease_token IS NULL OR (m.lease_token >> 52) = $7)"
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
    "   AND ($5 = 0 OR m.lease_token IS NULL OR (m.lease_token >> 52) = $5)"
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

SPIPlanPtr lock_keys_plan, lock_due_keys_plan, heads_plan, heads_follow_plan, key_rows_plan,
    idle_keys_plan;

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

// Claims the heads of held keys, each from its floor (kHeadsSql), and finds their followers.
void ProbeHeads(const ClaimRequest &request, int64 lease_ms, int64 lease_token,
                const std::vector<NextOfKey> &keys, std::vector<Message> *out) {
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
        Oid types[7] = {TEXTOID, TEXTOID,      INT8ARRAYOID, INT8ARRAYOID,
                        BOOLOID, INT8ARRAYOID, INT8OID};
        Datum args[7] = {CStringGetTextDatum(request.destination.c_str()),
                         CStringGetTextDatum(request.config_json.c_str()),
                         Int8Array(order_keys),
                         Int8Array(floors),
                         BoolGetDatum(request.block_on_dead),
                         Int8Array(versions),
                         Int64GetDatum(ClaimWorkerTag(request.exactly_once, lease_token))};
        return HeadsRaw(KeptPlan(&heads_plan, kHeadsSql, 7, types), args, &nclaimed, &seen, &nseen);
    });
    uint64 kept = 0;
    for (uint64 i = 0; i < nclaimed; i++)
        if (Book().heads_claimed.insert(rows[i].id).second)
            rows[kept++] = rows[i];
    AppendMessages(rows, kept, request.hold_locks, lease_token, out);
    NoteKeysSeen(request.destination, seen, nseen, !request.hold_locks, lease_ms);
    FindFollowers(request.destination, seen, nseen);
}

// Claims the known next messages of `followed` (KeyFollowers) by their tids: taken are the rows
// that are the very versions the followers' snapshot saw. The keys whose next message was not
// taken go to `looked_for`.
void ClaimFollowed(const ClaimRequest &request, int64 lease_ms, int64 lease_token,
                   const std::vector<NextOfKey> &followed, std::vector<NextOfKey> *looked_for,
                   std::vector<Message> *out) {
    auto &held = Book().keys_held[request.destination];
    auto &followers = Book().key_followers[request.destination];
    std::vector<ItemPointerData> tids;
    for (const NextOfKey &n : followed) {
        const KeyFollowers &f = followers[n.order_key];
        tids.push_back(ToItemPointer(f.next[f.taken].tid));
    }
    uint64 n = 0;
    FollowedRow *found = nullptr;
    RawRow *rows = PgTry([&] {
        Oid types[5] = {TEXTOID, TEXTOID, TIDARRAYOID, BOOLOID, INT8OID};
        Datum args[5] = {CStringGetTextDatum(request.destination.c_str()),
                         CStringGetTextDatum(request.config_json.c_str()), TidArray(tids),
                         BoolGetDatum(request.block_on_dead),
                         Int64GetDatum(ClaimWorkerTag(request.exactly_once, lease_token))};
        return FollowRaw(KeptPlan(&heads_follow_plan, kHeadsFollowSql, 5, types), args, &n, &found);
    });
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
    NoteKeysSeen(request.destination, seen.data(), seen.size(), !request.hold_locks, lease_ms);
    for (const NextOfKey &next : followed) {
        if (claimed.count(next.order_key) == 0) {
            followers.erase(next.order_key);
            looked_for->push_back(next);
        }
    }
}

// The next messages of keys whose head this transaction removed (scan.next), at most
// request.limit: their keys' rows taken, then each claimed from what is known of its followers
// or probed.
void ClaimNextOfKeys(const ClaimRequest &request, int64 lease_ms, int64 lease_token,
                     HeadsScan &scan, std::vector<Message> *out) {
    auto &held = Book().keys_held[request.destination];
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
    if (!followed.empty())
        ClaimFollowed(request, lease_ms, lease_token, followed, &looked_for, out);
    ProbeHeads(request, lease_ms, lease_token, looked_for, out);
}

// The due keys in due order from where this transaction's scan got to, until `out` holds
// request.limit messages after `first` or the scan is done.
void ScanDueKeys(const ClaimRequest &request, int64 lease_ms, int64 lease_token, HeadsScan &scan,
                 size_t first, std::vector<Message> *out) {
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
        ProbeHeads(request, lease_ms, lease_token, keys, out);
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
}

}  // namespace

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
    size_t first = out->size();
    if (!scan.next.empty())
        ClaimNextOfKeys(request, lease_ms, lease_token, scan, out);
    ScanDueKeys(request, lease_ms, lease_token, scan, first, out);
    if (request.hold_locks || out->size() == first)
        return;
    // The leased path: the heads are locked; lease them before the commit.
    std::vector<int64_t> ids;
    for (size_t i = first; i < out->size(); i++)
        ids.push_back((*out)[i].id);
    LeaseLockedRows(ids, lease_ms, lease_token);
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

}  // namespace outbox::pg
