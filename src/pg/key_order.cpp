// Per-key ordering, the producer's side: order keys and a producer's turn on its key's row of
// outbox.ordered_keys (see include/outbox/pg/key_order.hpp); and the worker's notes on those
// rows, written the same way. The worker's side (finding each key's head) is the heads claim in
// src/pg/claim_ordered.cpp.
#include <algorithm>
#include <string_view>

extern "C" {
#include "postgres.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_index.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/fmgroids.h"
#include "utils/memutils.h"
#include "utils/relcache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/key_order.hpp"
#include "outbox/pg/queue.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_order_key(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_order_key);
}

namespace outbox::pg {

static uint32 DestinationHash(std::string_view destination) {
    return uint32(hash_bytes_extended(reinterpret_cast<const unsigned char *>(destination.data()),
                                      int(destination.size()), 0) >>
                  32);
}

int64_t OrderKey(std::string_view destination, std::string_view key) {
    uint32 high = DestinationHash(destination);
    uint32 low = uint32(hash_bytes_extended(reinterpret_cast<const unsigned char *>(key.data()),
                                            int(key.size()), high));
    return int64_t((uint64(high) << 32) | low);
}

// The producer's turn. ON CONFLICT DO UPDATE locks the existing row (or, for a new key, the
// speculative insertion makes a concurrent producer of the same key wait for this one), so the
// id drawn afterwards is higher than every id of the key committed before, and no producer of
// the key draws one until this transaction ends. Every write bumps version; one that may lower
// the floor ($6: the message keeps its own id) bumps floor_version, whatever the floor was: the
// message may lie below the key's head, which a worker could be about to raise the floor past.
// It runs in the producer's session, with the producer's search_path: its one operator is named
// with its schema (LEAST and the ON CONFLICT index need no lookup).
static const char *const kTurnSql =
    "INSERT INTO outbox.ordered_keys AS k (destination, order_key, key, floor, due_at)"
    " VALUES ($1, $2, $3, $4, $5)"
    " ON CONFLICT (destination, order_key) DO UPDATE"
    "    SET due_at = least(k.due_at, excluded.due_at),"
    "        floor = CASE WHEN $6 THEN least(k.floor, excluded.floor) ELSE k.floor END,"
    "        floor_version = k.floor_version OPERATOR(pg_catalog.+) CASE WHEN $6 THEN 1 ELSE 0 END,"
    "        version = k.version OPERATOR(pg_catalog.+) 1";

// A message that keeps its own id may lie below its key's head. Its transaction takes the key's
// row FOR UPDATE before it lowers the floor: that waits for the workers holding the row (FOR KEY
// SHARE: they claim from the key only while they do, src/pg/claim_ordered.cpp), and workers skip
// the key until this transaction ends. A key without a row gets one first (ON CONFLICT DO NOTHING:
// this transaction's own, or a concurrent producer's, which the lock then waits for); the lock
// is taken before the row is written, so a worker never meets this transaction's update of it.
// (TakeTurnOnKeyRow does the same with the access methods' calls; these statements and kTurnSql
// take the turn where it cannot: a key without a row, a row this transaction wrote, the table
// altered by hand.)
static const char *const kKeyRowSql =
    "INSERT INTO outbox.ordered_keys (destination, order_key, key, floor, due_at)"
    " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (destination, order_key) DO NOTHING";
static const char *const kLockKeyRowSql =
    "SELECT FROM outbox.ordered_keys AS k"
    " WHERE k.destination OPERATOR(pg_catalog.=) $1 AND k.order_key OPERATOR(pg_catalog.=) $2"
    "   FOR UPDATE";

static SPIPlanPtr turn_plan = nullptr, key_row_plan = nullptr, lock_key_row_plan = nullptr;

// The keys whose turn this transaction holds, and the due time it gave each row: a later message
// of the key in the same transaction needs no second write (which would also make every next
// upsert of the key walk a longer chain of the row's versions), unless it is due earlier or
// keeps its own id. Entries of a subtransaction that aborts go with it (its lock and write did).
struct TurnHeld {
    struct Key {
        int64 order_key;
        char destination[NAMEDATALEN];
    } key;
    TimestampTz due_at;
    int level;    // the subtransaction nesting level that took the turn
    bool locked;  // taken FOR UPDATE before its first write (a message that keeps its id)
};
// Kept for the session (making a table per transaction costs a one-row INSERT more than the
// lookups); emptied when a transaction ends, and dropped then if it grew past kTurnsKept.
static HTAB *turns_held = nullptr;
constexpr long kTurnsKept = 1024;

// What UpdateKeyRow needs to know of outbox.ordered_keys, looked up once per backend (again
// after the table or its indexes change).
struct KeyRowLayout {
    Oid relid = InvalidOid;
    Oid pk = InvalidOid;  // its primary key
    AttrNumber due_at = 0, version = 0, floor = 0, floor_version = 0, idle_since = 0;
    // Every index on plain columns, without a predicate, and the primary key on (destination,
    // order_key), the table's first two columns (FindKeyRow and IsKeyRow read them there).
    bool usable = false;
};
static KeyRowLayout key_row_layout;

// Where each key's row is, for UpdateKeyRow: the TID its primary-key entry points at (the root of
// the row's chain of HOT updates, which stays put while updates are HOT), as this session last
// found it. Only a hint: what is found there is used only if it is the key's visible row.
// Forgotten when the table changes (a TRUNCATE makes every TID meaningless) or grows past
// kRootsKept keys.
struct KeyRowRoot {
    TurnHeld::Key key;
    ItemPointerData root;
};
static HTAB *key_row_roots = nullptr;
static bool key_row_roots_stale = false;
constexpr long kRootsKept = 8192;

// A session-lived hash table keyed by (destination, order key), in TopMemoryContext.
static HTAB *NewKeyTable(const char *name, long size, Size entry_size) {
    HASHCTL ctl = {};
    ctl.keysize = sizeof(TurnHeld::Key);
    ctl.entrysize = entry_size;
    ctl.hcxt = TopMemoryContext;
    return hash_create(name, size, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

// The key of those tables (the caller checked destination is shorter than NAMEDATALEN).
static TurnHeld::Key KeyOf(std::string_view destination, int64_t order_key) {
    TurnHeld::Key key = {};
    key.order_key = order_key;
    memcpy(key.destination, destination.data(), destination.size());
    return key;
}

static TurnHeld *FindTurn(std::string_view destination, int64_t order_key, bool create) {
    if (destination.size() >= NAMEDATALEN)
        return nullptr;
    if (turns_held == nullptr) {
        if (!create)
            return nullptr;
        turns_held = NewKeyTable("outbox key turns", 64, sizeof(TurnHeld));
    }
    TurnHeld::Key key = KeyOf(destination, order_key);
    bool found;
    auto *entry = static_cast<TurnHeld *>(
        hash_search(turns_held, &key, create ? HASH_ENTER : HASH_FIND, &found));
    if (entry && create && !found)
        entry->level = -1;
    return entry;
}

// Notes the turn this transaction now holds (see TurnHeld).
static void NoteTurn(std::string_view destination, int64_t order_key, TimestampTz available_at,
                     bool locked) {
    if (TurnHeld *entry = FindTurn(destination, order_key, true)) {
        if (entry->level < 0 || available_at < entry->due_at)
            entry->due_at = available_at;
        if (entry->level < 0) {
            entry->level = GetCurrentTransactionNestLevel();
            entry->locked = locked;
        }
    }
}

static void OnTurnTransaction(XactEvent event, void *) {
    if (turns_held == nullptr ||
        !(event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE ||
          event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT))
        return;
    if (hash_get_num_entries(turns_held) > kTurnsKept) {
        hash_destroy(turns_held);
        turns_held = nullptr;
        return;
    }
    HASH_SEQ_STATUS status;
    hash_seq_init(&status, turns_held);
    while (auto *entry = static_cast<TurnHeld *>(hash_seq_search(&status)))
        hash_search(turns_held, &entry->key, HASH_REMOVE, nullptr);
}

static void OnTurnSubtransaction(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
    if (turns_held == nullptr)
        return;
    int level = GetCurrentTransactionNestLevel();
    HASH_SEQ_STATUS status;
    hash_seq_init(&status, turns_held);
    while (auto *entry = static_cast<TurnHeld *>(hash_seq_search(&status))) {
        if (entry->level < level)
            continue;
        if (event == SUBXACT_EVENT_ABORT_SUB)
            hash_search(turns_held, &entry->key, HASH_REMOVE, nullptr);
        else if (event == SUBXACT_EVENT_COMMIT_SUB)
            entry->level = level - 1;
    }
}

// What FindNextMessages needs to know of outbox.messages, looked up once per backend (again
// after the table or its indexes change).
struct MessagesLayout {
    Oid relid = InvalidOid;
    Oid key_order = InvalidOid;  // messages_key_order
    AttrNumber id = 0, destination = 0;
    // messages_key_order is a btree on (order_key, id), both int8 in ascending order, of every
    // row with an order key: its scan yields each key's messages in id order, all of them.
    bool usable = false;
};
static MessagesLayout messages_layout;

// outbox.ordered_keys, outbox.messages or their indexes changed (or every relation: InvalidOid):
// look again.
static void OnRelcacheInvalidation(Datum, Oid relid) {
    if (relid == InvalidOid || relid == key_row_layout.relid) {
        key_row_layout.relid = InvalidOid;
        key_row_roots_stale = true;  // dropped by the next UpdateKeyRow, not while in use
    }
    if (relid == InvalidOid || relid == messages_layout.relid)
        messages_layout.relid = InvalidOid;
}

void RegisterKeyTurnCallbacks() {
    RegisterXactCallback(OnTurnTransaction, nullptr);
    RegisterSubXactCallback(OnTurnSubtransaction, nullptr);
    CacheRegisterRelcacheCallback(OnRelcacheInvalidation, (Datum)0);
}

// 0.1.0's turn, for a database whose schema predates outbox.ordered_keys: a lock of outbox's own
// advisory tag space (field4 = 3, which the pg_advisory_* functions never use).
static void LegacyLockOrderKey(int64_t order_key) {
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, uint32(uint64(order_key) >> 32), uint32(order_key), 3);
    (void)LockAcquire(&tag, ExclusiveLock, false, false);
}

static Oid RelationOwner(Oid relid) {
    HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
    if (!HeapTupleIsValid(tuple))
        elog(ERROR, "outbox: cache lookup failed for relation %u", relid);
    Oid owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
    ReleaseSysCache(tuple);
    return owner;
}

static const KeyRowLayout &LayoutOf(Relation rel) {
    Oid relid = RelationGetRelid(rel);
    if (key_row_layout.relid != relid) {
        KeyRowLayout layout;
        layout.due_at = get_attnum(relid, "due_at");
        layout.version = get_attnum(relid, "version");
        layout.floor = get_attnum(relid, "floor");
        layout.floor_version = get_attnum(relid, "floor_version");
        layout.idle_since = get_attnum(relid, "idle_since");
        List *indexes = RelationGetIndexList(rel);
        layout.pk = rel->rd_pkindex;  // set by RelationGetIndexList
        layout.usable = OidIsValid(layout.pk) && layout.due_at > 0 && layout.version > 0 &&
                        layout.floor > 0 && layout.floor_version > 0 && layout.idle_since > 0 &&
                        get_attnum(relid, "destination") == 1 &&
                        get_attnum(relid, "order_key") == 2;
        ListCell *lc;
        foreach (lc, indexes) {
            Relation index = index_open(lfirst_oid(lc), AccessShareLock);
            if (!heap_attisnull(index->rd_indextuple, Anum_pg_index_indexprs, nullptr) ||
                !heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, nullptr))
                layout.usable = false;
            if (RelationGetRelid(index) == layout.pk &&
                (index->rd_index->indnkeyatts != 2 || index->rd_index->indkey.values[0] != 1 ||
                 index->rd_index->indkey.values[1] != 2))
                layout.usable = false;
            index_close(index, AccessShareLock);
        }
        list_free(indexes);
        layout.relid = relid;
        key_row_layout = layout;
    }
    return key_row_layout;
}

static std::string_view TextView(text *t) {
    return std::string_view(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

// Whether the row in `values` is the key's (a TID from key_row_roots may hold another row now).
static bool IsKeyRow(const Datum *values, const bool *nulls, std::string_view destination,
                     int64_t order_key) {
    if (nulls[0] || nulls[1] || DatumGetInt64(values[1]) != order_key)
        return false;
    return TextView(DatumGetTextPP(values[0])) == destination;
}

// The key's row in `snapshot`, deformed into values/nulls, and where it is: its TID and the
// root TID its primary-key entry points at. The root noted in key_row_roots is tried first (no
// index descent); the primary key is searched when there is none or it no longer leads to the
// key's visible row.
static bool FindKeyRow(Relation rel, Oid pk, Snapshot snapshot, std::string_view destination,
                       int64_t order_key, Datum *values, bool *nulls, ItemPointer tid,
                       ItemPointer root, TransactionId *xmin = nullptr) {
    TupleDesc desc = RelationGetDescr(rel);
    TupleTableSlot *slot = table_slot_create(rel, nullptr);
    // The row in `slot`, if it is the key's: copied out (the slot's tuple is in a buffer).
    auto take = [&] {
        slot_getallattrs(slot);
        if (!IsKeyRow(slot->tts_values, slot->tts_isnull, destination, order_key))
            return false;
        if (xmin != nullptr) {
            bool isnull;
            *xmin = DatumGetTransactionId(
                slot_getsysattr(slot, MinTransactionIdAttributeNumber, &isnull));
        }
        heap_deform_tuple(ExecCopySlotHeapTuple(slot), desc, values, nulls);
        *tid = slot->tts_tid;
        return true;
    };
    TurnHeld::Key key = KeyOf(destination, order_key);
    bool found = false;
    auto *known = static_cast<KeyRowRoot *>(
        key_row_roots ? hash_search(key_row_roots, &key, HASH_FIND, nullptr) : nullptr);
    // A root past the table's end is gone (VACUUM truncated the table since).
    if (known && ItemPointerGetBlockNumber(&known->root) < RelationGetNumberOfBlocks(rel)) {
        *root = known->root;
        ItemPointerData at = known->root;  // the fetch moves it to the version it finds
        IndexFetchTableData *fetch = BeginIndexFetch(rel);
        bool call_again = false, all_dead = false;
        found =
            table_index_fetch_tuple(fetch, &at, snapshot, slot, &call_again, &all_dead) && take();
        table_index_fetch_end(fetch);
    }
    if (!found) {
        Relation index = index_open(pk, AccessShareLock);
        IndexScanDesc scan = BeginIndexScan(rel, index, snapshot, 2);
        ScanKeyData keys[2];
        ScanKeyInit(
            &keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ,
            PointerGetDatum(cstring_to_text_with_len(destination.data(), int(destination.size()))));
        keys[0].sk_collation = index->rd_indcollation[0];  // the index's, not C
        ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(order_key));
        index_rescan(scan, keys, 2, nullptr, 0);
        while (ItemPointer entry = index_getnext_tid(scan, ForwardScanDirection)) {
            *root = *entry;  // index_fetch_heap moves the scan's copy to the version it finds
            if (index_fetch_heap(scan, slot)) {
                found = take();
                break;
            }
        }
        index_endscan(scan);
        index_close(index, AccessShareLock);
    }
    ExecDropSingleTupleTableSlot(slot);
    return found;
}

// Drops the noted roots if the table changed since they were noted, or if `all`.
static void ForgetKeyRowRoots(bool all) {
    if (key_row_roots != nullptr && (all || key_row_roots_stale)) {
        hash_destroy(key_row_roots);
        key_row_roots = nullptr;
    }
    key_row_roots_stale = false;
}

// Notes where the key's row is found from now on (see FindKeyRow).
static void NoteKeyRowRoot(std::string_view destination, int64_t order_key, ItemPointer root) {
    ForgetKeyRowRoots(key_row_roots && hash_get_num_entries(key_row_roots) >= kRootsKept);
    if (key_row_roots == nullptr)
        key_row_roots = NewKeyTable("outbox key rows", 1024, sizeof(KeyRowRoot));
    TurnHeld::Key key = KeyOf(destination, order_key);
    auto *known = static_cast<KeyRowRoot *>(hash_search(key_row_roots, &key, HASH_ENTER, nullptr));
    known->root = *root;
}

// Writes values/nulls as the new version of the key's row at `tid`, as UPDATE would: waiting for
// a transaction that holds the row FOR UPDATE or NO KEY UPDATE (none, if the caller holds it
// locked), with the new version's index entries when the update is not HOT; notes where the row
// is found from now on (`root`: where its primary-key entry points). Returns TM_Ok when written;
// otherwise nothing was written: TM_Updated or TM_Deleted when another transaction changed the
// row since it was read.
static TM_Result WriteKeyRow(Relation rel, ItemPointer tid, ItemPointer root, Datum *values,
                             bool *nulls, Snapshot snapshot, std::string_view destination,
                             int64_t order_key) {
    TupleDesc desc = RelationGetDescr(rel);
    TupleTableSlot *slot = MakeSingleTupleTableSlot(desc, &TTSOpsHeapTuple);
    ExecStoreHeapTuple(heap_form_tuple(desc, values, nulls), slot, true);
    TM_FailureData failure;
    IndexUpdate indexes;
    TM_Result result =
        UpdateTableTuple(rel, tid, slot, GetCurrentCommandId(true), snapshot, &failure, &indexes);
    bool written = result == TM_Ok;
    if (written && indexes != IndexUpdate::None) {
        // Not a HOT update: the new version needs its index entries, as ExecInsertIndexTuples
        // makes them, and is the root of its own chain.
        List *ids = RelationGetIndexList(rel);
        ListCell *lc;
        foreach (lc, ids) {
            Relation index = index_open(lfirst_oid(lc), RowExclusiveLock);
            IndexInfo *info = BuildIndexInfo(index);
            if (info->ii_ReadyForInserts && IndexTakesUpdate(info, indexes)) {
                Datum index_values[INDEX_MAX_KEYS];
                bool index_nulls[INDEX_MAX_KEYS];
                FormIndexDatum(info, slot, nullptr, index_values, index_nulls);
                index_insert(index, index_values, index_nulls, &slot->tts_tid, rel,
                             index->rd_index->indisunique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
                             false, info);
            }
            index_close(index, NoLock);
        }
        list_free(ids);
        if (indexes == IndexUpdate::All)
            *root = slot->tts_tid;
    }
    if (written)
        NoteKeyRowRoot(destination, order_key, root);
    ExecDropSingleTupleTableSlot(slot);
    return result;
}

// outbox.ordered_keys, opened to write rows of `destination` with the calls below, and its
// layout (a copy: an invalidation may reset the noted one); nullptr when it is gone since its oid
// was noted or is not laid out as this code expects (the callers then use a statement).
static Relation OpenKeyRows(Oid relid, std::string_view destination, KeyRowLayout *layout) {
    if (destination.size() >= NAMEDATALEN || !OidIsValid(relid))
        return nullptr;
    Relation rel = try_table_open(relid, RowExclusiveLock);
    if (rel == nullptr)
        return nullptr;
    ForgetKeyRowRoots(false);  // if the table changed: the open took the invalidations in
    *layout = LayoutOf(rel);
    if (!layout->usable) {
        table_close(rel, NoLock);
        return nullptr;
    }
    return rel;
}

// outbox.ordered_keys, or InvalidOid before 0.2.0's schema.
static Oid KeyRowsRelid() {
    Oid relid = key_row_layout.relid;  // known since the last change of the table
    return OidIsValid(relid)
               ? relid
               : get_relname_relid("ordered_keys", get_namespace_oid("outbox", false));
}

// A second write of a key's row by the transaction that already holds its turn (a later
// message of the key due earlier): kTurnSql's DO UPDATE arm (due_at lowered to the message's if
// later, version + 1), written with the table and index access methods' own calls. The row is
// found by its primary key (or where this session last found it) in the newest snapshot, whose
// command id hides a version this same statement wrote (TakeTurnOnKeyRow's snapshot would not).
// Returns false, having written nothing, when there is no row or it changed after that snapshot
// (by this same statement), or when the table is not laid out as this code expects: kTurnSql
// then writes it.
static bool UpdateKeyRow(Oid keys_relid, std::string_view destination, int64_t order_key,
                         TimestampTz available_at) {
    KeyRowLayout layout;
    Relation rel = OpenKeyRows(keys_relid, destination, &layout);
    if (rel == nullptr)
        return false;
    TupleDesc desc = RelationGetDescr(rel);
    Datum *values = static_cast<Datum *>(palloc(sizeof(Datum) * desc->natts));
    bool *nulls = static_cast<bool *>(palloc(sizeof(bool) * desc->natts));
    ItemPointerData tid, root;
    Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    bool written = false;
    int d = layout.due_at - 1, v = layout.version - 1;
    if (FindKeyRow(rel, layout.pk, snapshot, destination, order_key, values, nulls, &tid, &root) &&
        !nulls[d] && !nulls[v]) {
        if (available_at < DatumGetTimestampTz(values[d]))
            values[d] = TimestampTzGetDatum(available_at);
        values[v] = Int64GetDatum(DatumGetInt64(values[v]) + 1);
        written =
            WriteKeyRow(rel, &tid, &root, values, nulls, snapshot, destination, order_key) == TM_Ok;
    }
    UnregisterSnapshot(snapshot);
    table_close(rel, NoLock);  // locked until the transaction ends, as a statement's would be
    return written;
}

// How TakeTurnOnKeyRow ended.
enum class RowTurn {
    kTaken,      // the key's row is written: the turn is this transaction's until it ends
    kCreate,     // the key has no row: the caller inserts it (kTurnSql) and then releases the
                 // key's creation lock, which it holds
    kStatement,  // the caller takes the turn with kTurnSql (the table altered by hand, a row
                 // this transaction wrote, a row with NULLs)
};

// The lock a transaction holds while it inserts a key's row (outbox's advisory tag space, field4
// = 4; 3 is 0.1.0's turn): the producers of a new key make its row one at a time, so that a
// second one finds the first one's row before it would insert its own (see TakeTurnOnKeyRow).
static LOCKTAG KeyCreationLock(int64_t order_key) {
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, uint32(uint64(order_key) >> 32), uint32(order_key), 4);
    return tag;
}

// The producer's turn on the key's row as it is now, whatever the transaction's isolation level:
// kTurnSql's DO UPDATE arm (due_at lowered to the message's if later, version + 1; for a message
// that keeps its id, the floor lowered to `id` if higher, floor_version + 1) written with the
// table and index access methods' own calls (the statement took about an eighth of an ordered
// single-row INSERT's time, this about half as much). The row is found by its primary key (or
// where this session last found it) as SnapshotSelf sees it (the committed version now, or this
// transaction's) and updated as UPDATE would: waiting for a transaction that holds it FOR UPDATE
// or NO KEY UPDATE (a producer's turn, a worker's write), not for the workers' FOR KEY SHARE; the
// update is this transaction's turn until it ends, as the upsert's is. For a message that keeps
// its id the row is first locked FOR UPDATE (LockTupleExclusive), which waits for the workers
// holding the key, as kLockKeyRowSql does. A version that another transaction changed meanwhile
// is looked for again, as READ COMMITTED's UPDATE follows a row (EvalPlanQual). So a producer
// (or a requeue, a restore) at REPEATABLE READ or SERIALIZABLE never fails for a row its
// snapshot does not see, as the statements would (40001, "could not serialize access due to
// concurrent update"), and, the snapshot being no MVCC one, these reads take no SSI predicate
// locks: a SERIALIZABLE producer's turn adds no read/write dependency between producers of a
// key. What a turn needs is the lock and the newest due_at and floor, never a consistent view:
// the row is the relay's bookkeeping, which no producer reads. A key without a committed row:
// under the key's creation lock (KeyCreationLock), a row that another transaction is inserting
// (SnapshotDirty sees it) is waited for and then taken as above; with none, kCreate (the lock
// still held, the caller inserts the row). Without that lock a second producer's upsert would
// meet the first one's insertion and, at REPEATABLE READ, fail for it.
static RowTurn TakeTurnOnKeyRow(Oid keys_relid, std::string_view destination, int64_t order_key,
                                TimestampTz available_at, bool keeps_id, int64_t id,
                                const LOCKTAG *creation) {
    KeyRowLayout layout;
    Relation rel = OpenKeyRows(keys_relid, destination, &layout);
    if (rel == nullptr)
        return RowTurn::kStatement;
    TupleDesc desc = RelationGetDescr(rel);
    Datum *values = static_cast<Datum *>(palloc(sizeof(Datum) * desc->natts));
    bool *nulls = static_cast<bool *>(palloc(sizeof(bool) * desc->natts));
    int d = layout.due_at - 1, v = layout.version - 1, f = layout.floor - 1,
        fv = layout.floor_version - 1;
    RowTurn turn = RowTurn::kStatement;
    for (;;) {
        CHECK_FOR_INTERRUPTS();
        ItemPointerData tid, root;
        TransactionId xmin = InvalidTransactionId;
        if (FindKeyRow(rel, layout.pk, SnapshotSelf, destination, order_key, values, nulls, &tid,
                       &root, &xmin)) {
            // A version this transaction wrote (ordering turned on, a requeue, a restore) may be
            // this very statement's, which an update by this command id cannot see: kTurnSql.
            if (nulls[d] || nulls[v] || nulls[f] || nulls[fv] ||
                TransactionIdIsCurrentTransactionId(xmin))
                break;
            if (keeps_id) {
                TupleTableSlot *locked = table_slot_create(rel, nullptr);
                TM_FailureData failure;
                TM_Result result =
                    table_tuple_lock(rel, &tid, SnapshotSelf, locked, GetCurrentCommandId(false),
                                     LockTupleExclusive, LockWaitBlock, 0, &failure);
                ExecDropSingleTupleTableSlot(locked);
                if (result == TM_Updated || result == TM_Deleted)
                    continue;  // changed by the transaction waited for: its newest version
                if (result != TM_Ok)
                    break;
                // Locked: the version read, which nobody else can change until this transaction
                // ends.
                if (id < DatumGetInt64(values[f]))
                    values[f] = Int64GetDatum(id);
                values[fv] = Int64GetDatum(DatumGetInt64(values[fv]) + 1);
            }
            if (available_at < DatumGetTimestampTz(values[d]))
                values[d] = TimestampTzGetDatum(available_at);
            values[v] = Int64GetDatum(DatumGetInt64(values[v]) + 1);
            TM_Result result =
                WriteKeyRow(rel, &tid, &root, values, nulls, SnapshotSelf, destination, order_key);
            if (result == TM_Ok) {
                turn = RowTurn::kTaken;
                break;
            }
            if (result == TM_Updated || result == TM_Deleted)
                continue;  // changed by the transaction waited for: its newest version
            break;
        }
        (void)LockAcquire(creation, ExclusiveLock, false, false);
        SnapshotData dirty;
        InitDirtySnapshot(dirty);
        xmin = InvalidTransactionId;
        if (!FindKeyRow(rel, layout.pk, &dirty, destination, order_key, values, nulls, &tid, &root,
                        &xmin)) {
            turn = RowTurn::kCreate;
            break;
        }
        // A row committed since the look above, or one still being inserted: its transaction
        // held this lock while it inserted it.
        LockRelease(creation, ExclusiveLock, false);
        if (TransactionIdIsValid(xmin) && !TransactionIdIsCurrentTransactionId(xmin) &&
            TransactionIdIsInProgress(xmin))
            XactLockTableWait(xmin, rel, &tid, XLTW_InsertIndexUnique);
    }
    table_close(rel, NoLock);  // locked until the transaction ends, as a statement's would be
    return turn;
}

bool WriteKeyRowNotes(std::string_view destination, const std::vector<KeyRowNote> &notes) {
    KeyRowLayout layout;
    Relation rel = OpenKeyRows(KeyRowsRelid(), destination, &layout);
    if (rel == nullptr)
        return false;
    TupleDesc desc = RelationGetDescr(rel);
    Datum *values = static_cast<Datum *>(palloc(sizeof(Datum) * desc->natts));
    bool *nulls = static_cast<bool *>(palloc(sizeof(bool) * desc->natts));
    TupleTableSlot *locked = table_slot_create(rel, nullptr);
    Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    int f = layout.floor - 1, fv = layout.floor_version - 1, d = layout.due_at - 1,
        v = layout.version - 1, idle = layout.idle_since - 1;
    for (const KeyRowNote &note : notes) {
        ItemPointerData tid, root;
        if (!FindKeyRow(rel, layout.pk, snapshot, destination, note.order_key, values, nulls, &tid,
                        &root) ||
            nulls[f] || nulls[fv] || nulls[d] || nulls[v])
            continue;
        // No flags: the lock does not follow the row to a newer version (nor wait for whoever
        // holds one). TM_Ok only for the version just read, which nobody else holds FOR (NO KEY)
        // UPDATE until this transaction ends; the workers' FOR KEY SHARE does not conflict.
        TM_FailureData failure;
        if (table_tuple_lock(rel, &tid, snapshot, locked, GetCurrentCommandId(false),
                             LockTupleNoKeyExclusive, LockWaitSkip, 0, &failure) != TM_Ok)
            continue;
        ExecClearTuple(locked);  // its buffer pin: values are a copy of the same version
        bool same_version = DatumGetInt64(values[v]) == note.version;
        if (note.floor > DatumGetInt64(values[f]) &&
            DatumGetInt64(values[fv]) == note.floor_version)
            values[f] = Int64GetDatum(note.floor);
        if (note.head_removed) {
            values[d] = TimestampTzGetDatum(std::min(DatumGetTimestampTz(values[d]), now));
        } else if (note.has_due_at && same_version) {
            values[d] = TimestampTzGetDatum(note.due_at);
            if (note.due_at == DT_NOEND) {
                values[idle] = TimestampTzGetDatum(now);
                nulls[idle] = false;
            }
        }
        values[v] = Int64GetDatum(DatumGetInt64(values[v]) + 1);
        WriteKeyRow(rel, &tid, &root, values, nulls, snapshot, destination, note.order_key);
    }
    ExecDropSingleTupleTableSlot(locked);
    UnregisterSnapshot(snapshot);
    table_close(rel, NoLock);
    return true;
}

int64_t DeleteIdleKeyRows(std::string_view destination, const std::vector<ItemPointerData> &tids,
                          TimestampTz idle_before) {
    KeyRowLayout layout;
    Relation rel = OpenKeyRows(KeyRowsRelid(), destination, &layout);
    if (rel == nullptr)
        return 0;  // the table altered by hand: its rows stay
    TupleTableSlot *locked = table_slot_create(rel, nullptr);
    Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    int64_t deleted = 0;
    for (ItemPointerData tid : tids) {
        TM_FailureData failure;
        if (table_tuple_lock(rel, &tid, snapshot, locked, GetCurrentCommandId(false),
                             LockTupleExclusive, LockWaitSkip, 0, &failure) != TM_Ok)
            continue;
        // The version locked, which nobody can change now: a row of the destination, still idle?
        slot_getallattrs(locked);
        const Datum *values = locked->tts_values;
        const bool *nulls = locked->tts_isnull;
        int d = layout.due_at - 1, idle_since = layout.idle_since - 1;
        bool idle = !nulls[1] && IsKeyRow(values, nulls, destination, DatumGetInt64(values[1])) &&
                    !nulls[d] && DatumGetTimestampTz(values[d]) == DT_NOEND && !nulls[idle_since] &&
                    DatumGetTimestampTz(values[idle_since]) < idle_before;
        ExecClearTuple(locked);
        if (idle &&
            DeleteTableTuple(rel, &tid, GetCurrentCommandId(true), snapshot, &failure) == TM_Ok)
            deleted++;
    }
    ExecDropSingleTupleTableSlot(locked);
    UnregisterSnapshot(snapshot);
    table_close(rel, NoLock);
    return deleted;
}

// Whether `predicate` (an index's, as RelationGetIndexPredicate gives it) is `column IS NOT NULL`.
static bool IsNotNullOf(List *predicate, AttrNumber column) {
    if (list_length(predicate) != 1 || !IsA(linitial(predicate), NullTest))
        return false;
    auto *test = static_cast<NullTest *>(linitial(predicate));
    return test->nulltesttype == IS_NOT_NULL && !test->argisrow && IsA(test->arg, Var) &&
           reinterpret_cast<Var *>(test->arg)->varattno == column;
}

static const MessagesLayout &MessagesLayoutOf(Relation rel) {
    Oid relid = RelationGetRelid(rel);
    if (messages_layout.relid != relid) {
        MessagesLayout layout;
        layout.id = get_attnum(relid, "id");
        layout.destination = get_attnum(relid, "destination");
        AttrNumber order_key = get_attnum(relid, "order_key");
        layout.key_order = get_relname_relid("messages_key_order", RelationGetNamespace(rel));
        layout.usable =
            layout.id > 0 && layout.destination > 0 && order_key > 0 &&
            get_atttype(relid, layout.id) == INT8OID && get_atttype(relid, order_key) == INT8OID &&
            get_atttype(relid, layout.destination) == TEXTOID && OidIsValid(layout.key_order);
        if (layout.usable) {
            Relation index = index_open(layout.key_order, AccessShareLock);
            Form_pg_index form = index->rd_index;
            layout.usable = form->indrelid == relid && form->indisvalid &&
                            index->rd_rel->relam == BTREE_AM_OID && form->indnkeyatts == 2 &&
                            form->indkey.values[0] == order_key &&
                            form->indkey.values[1] == layout.id &&
                            index->rd_opfamily[0] == INTEGER_BTREE_FAM_OID &&
                            index->rd_opfamily[1] == INTEGER_BTREE_FAM_OID &&
                            (index->rd_indoption[0] & INDOPTION_DESC) == 0 &&
                            (index->rd_indoption[1] & INDOPTION_DESC) == 0 &&
                            RelationGetIndexExpressions(index) == NIL &&
                            IsNotNullOf(RelationGetIndexPredicate(index), order_key);
            index_close(index, AccessShareLock);
        }
        layout.relid = relid;
        messages_layout = layout;
    }
    return messages_layout;
}

bool FindNextMessages(std::string_view destination,
                      const std::vector<std::pair<int64_t, int64_t>> &keys, int limit,
                      std::vector<NextMessage> *out) {
    Oid relid = OidIsValid(messages_layout.relid)
                    ? messages_layout.relid
                    : get_relname_relid("messages", get_namespace_oid("outbox", false));
    Relation rel = OidIsValid(relid) ? try_table_open(relid, AccessShareLock) : nullptr;
    if (rel == nullptr)
        return false;
    MessagesLayout layout = MessagesLayoutOf(rel);  // a copy: an invalidation may reset it
    if (!layout.usable) {
        table_close(rel, AccessShareLock);
        return false;
    }
    Relation index = index_open(layout.key_order, AccessShareLock);
    Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    TupleTableSlot *slot = table_slot_create(rel, nullptr);
    IndexScanDesc scan = BeginIndexScan(rel, index, snapshot, 2);
    for (const auto &[order_key, after] : keys) {
        ScanKeyData bounds[2];
        ScanKeyInit(&bounds[0], 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(order_key));
        ScanKeyInit(&bounds[1], 2, BTGreaterStrategyNumber, F_INT8GT, Int64GetDatum(after));
        ExecClearTuple(slot);
        index_rescan(scan, bounds, 2, nullptr, 0);
        int found = 0;
        while (found < limit && index_getnext_slot(scan, ForwardScanDirection, slot)) {
            bool isnull;
            Datum d = slot_getattr(slot, layout.destination, &isnull);
            if (isnull || TextView(DatumGetTextPP(d)) != destination)
                continue;  // another destination's key with the same order key
            Datum id = slot_getattr(slot, layout.id, &isnull);
            if (isnull)
                continue;
            Datum xmin = slot_getsysattr(slot, MinTransactionIdAttributeNumber, &isnull);
            out->push_back({order_key, DatumGetInt64(id), ToRowTid(slot->tts_tid),
                            DatumGetTransactionId(xmin)});
            found++;
        }
    }
    index_endscan(scan);
    ExecDropSingleTupleTableSlot(slot);
    UnregisterSnapshot(snapshot);
    index_close(index, AccessShareLock);
    table_close(rel, AccessShareLock);
    return true;
}

bool TakeKeyTurn(std::string_view destination, int64_t order_key, std::string_view key,
                 TimestampTz available_at, bool keeps_id, int64_t id) {
    TurnHeld *held = FindTurn(destination, order_key, false);
    if (!keeps_id && held && held->due_at <= available_at)
        return true;
    // This transaction wrote the key's row without taking it FOR UPDATE first: a worker that
    // takes the row now follows that write to the newer version, and would wait for this
    // transaction's lock on it (FOR KEY SHARE SKIP LOCKED does not skip there).
    if (keeps_id && held && !held->locked)
        ereport(ERROR,
                (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                 errmsg("outbox message %lld keeps its id, but this transaction already queued a "
                        "new message of its key",
                        static_cast<long long>(id)),
                 errdetail("A message that keeps its id goes back in front of the messages of its "
                           "key, and its transaction must keep the workers off the key "
                           "(destination \"%.*s\") before it first writes the key's row.",
                           int(destination.size()), destination.data()),
                 errhint("Requeue or restore a key's messages before queueing new ones of the "
                         "key in the same transaction, or in a transaction of their own.")));
    Oid keys_relid = KeyRowsRelid();
    if (!OidIsValid(keys_relid)) {
        LegacyLockOrderKey(order_key);
        return false;
    }
    LOCKTAG creation = KeyCreationLock(order_key);
    RowTurn turn =
        !keeps_id && held
            ? (UpdateKeyRow(keys_relid, destination, order_key, available_at) ? RowTurn::kTaken
                                                                              : RowTurn::kStatement)
            : TakeTurnOnKeyRow(keys_relid, destination, order_key, available_at, keeps_id, id,
                               &creation);
    if (turn == RowTurn::kTaken) {
        NoteTurn(destination, order_key, available_at, keeps_id);
        return true;
    }
    bool creating = turn == RowTurn::kCreate;
    // A producer needs only INSERT on outbox.messages: the row is written with the rights of
    // its table's owner (as PostgreSQL's own foreign-key triggers do), restored on error by the
    // transaction's abort.
    Oid save_userid;
    int save_sec_context;
    GetUserIdAndSecContext(&save_userid, &save_sec_context);
    SetUserIdAndSecContext(RelationOwner(keys_relid),
                           save_sec_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_NOFORCE_RLS);
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "outbox: SPI_connect failed");
    Oid types[6] = {TEXTOID, INT8OID, TEXTOID, INT8OID, TIMESTAMPTZOID, BOOLOID};
    Datum args[6] = {
        PointerGetDatum(cstring_to_text_with_len(destination.data(), int(destination.size()))),
        Int64GetDatum(order_key),
        PointerGetDatum(cstring_to_text_with_len(key.data(), int(key.size()))),
        Int64GetDatum(keeps_id ? id : 0),
        TimestampTzGetDatum(available_at),
        BoolGetDatum(keeps_id)};
    int rc;
    while (keeps_id) {
        rc = SPI_execute_plan(KeptPlan(&lock_key_row_plan, kLockKeyRowSql, 2, types), args, nullptr,
                              false, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: locking the key's row failed: %s", SPI_result_code_string(rc));
        if (SPI_processed > 0)
            break;
        rc = SPI_execute_plan(KeptPlan(&key_row_plan, kKeyRowSql, 5, types), args, nullptr, false,
                              0);
        if (rc != SPI_OK_INSERT)
            elog(ERROR, "outbox: making the key's row failed: %s", SPI_result_code_string(rc));
        CHECK_FOR_INTERRUPTS();  // the row went again (swept, or ordering turned off) meanwhile
    }
    rc = SPI_execute_plan(KeptPlan(&turn_plan, kTurnSql, 6, types), args, nullptr, false, 0);
    if (rc != SPI_OK_INSERT)
        elog(ERROR, "outbox: taking the key's turn failed: %s", SPI_result_code_string(rc));
    if (creating)  // the row is in: the next producer of the key waits for this transaction
        LockRelease(&creation, ExclusiveLock, false);
    SPI_finish();
    SetUserIdAndSecContext(save_userid, save_sec_context);
    NoteTurn(destination, order_key, available_at, keeps_id);
    return true;
}

}  // namespace outbox::pg

using namespace outbox::pg;

// outbox._order_key(destination, key): the order key a message of (destination, key) gets.
Datum outbox_order_key(PG_FUNCTION_ARGS) {
    PG_RETURN_INT64(OrderKey(TextView(PG_GETARG_TEXT_PP(0)), TextView(PG_GETARG_TEXT_PP(1))));
}
