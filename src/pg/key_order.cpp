// Per-key ordering, the producer's side: order keys and a producer's turn on its key's row of
// outbox.ordered_keys (see include/outbox/pg/key_order.hpp). The worker's side (finding each
// key's head) is the heads claim in src/pg/queue.cpp.
#include <string_view>

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
}

#include "outbox/pg/key_order.hpp"
#include "outbox/pg/queue.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_order_key(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_key_heads(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_requeueing(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_reordering_keys(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_order_key);
PG_FUNCTION_INFO_V1(outbox_key_heads);
PG_FUNCTION_INFO_V1(outbox_requeueing);
PG_FUNCTION_INFO_V1(outbox_reordering_keys);
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
// SHARE: they claim from the key only while they do, src/pg/queue.cpp), and workers skip the
// key until this transaction ends. A key without a row gets one first (ON CONFLICT DO NOTHING:
// this transaction's own, or a concurrent producer's, which the lock then waits for); the lock
// is taken before the row is written, so a worker never meets this transaction's update of it.
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
static HTAB *turns_held = nullptr;  // in TopTransactionContext: gone with the transaction

static TurnHeld *FindTurn(std::string_view destination, int64_t order_key, bool create) {
    if (destination.size() >= NAMEDATALEN)
        return nullptr;
    if (turns_held == nullptr) {
        if (!create)
            return nullptr;
        HASHCTL ctl = {};
        ctl.keysize = sizeof(TurnHeld::Key);
        ctl.entrysize = sizeof(TurnHeld);
        ctl.hcxt = TopTransactionContext;
        turns_held =
            hash_create("outbox key turns", 256, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    }
    TurnHeld::Key key = {};
    key.order_key = order_key;
    memcpy(key.destination, destination.data(), destination.size());
    bool found;
    auto *entry = static_cast<TurnHeld *>(
        hash_search(turns_held, &key, create ? HASH_ENTER : HASH_FIND, &found));
    if (entry && create && !found)
        entry->level = -1;
    return entry;
}

static void OnTurnTransaction(XactEvent event, void *) {
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE ||
        event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
        turns_held = nullptr;  // its memory goes with TopTransactionContext
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

void RegisterKeyTurnCallbacks() {
    RegisterXactCallback(OnTurnTransaction, nullptr);
    RegisterSubXactCallback(OnTurnSubtransaction, nullptr);
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
    Oid nsp = get_namespace_oid("outbox", false);
    Oid keys_relid = get_relname_relid("ordered_keys", nsp);
    if (!OidIsValid(keys_relid)) {
        LegacyLockOrderKey(order_key);
        return false;
    }
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
    SPI_finish();
    SetUserIdAndSecContext(save_userid, save_sec_context);
    if (TurnHeld *entry = FindTurn(destination, order_key, true)) {
        if (entry->level < 0 || available_at < entry->due_at)
            entry->due_at = available_at;
        if (entry->level < 0) {
            entry->level = GetCurrentTransactionNestLevel();
            entry->locked = keeps_id;
        }
    }
    return true;
}

}  // namespace outbox::pg

using namespace outbox::pg;

static std::string_view TextView(text *t) {
    return std::string_view(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

// outbox._order_key(destination, key): the order key a message of (destination, key) gets.
Datum outbox_order_key(PG_FUNCTION_ARGS) {
    PG_RETURN_INT64(OrderKey(TextView(PG_GETARG_TEXT_PP(0)), TextView(PG_GETARG_TEXT_PP(1))));
}

// Functions of the 0.1.0 schema that 0.2.0 no longer has. They stay callable (CREATE EXTENSION
// outbox VERSION '0.1.0' needs their symbols) and say what to do.
static void RemovedIn020(const char *function) {
    ereport(ERROR,
            (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
             errmsg("%s belongs to outbox 0.1.0, which this module no longer serves", function),
             errhint("Update the extension: ALTER EXTENSION outbox UPDATE;")));
}

Datum outbox_key_heads(PG_FUNCTION_ARGS) {
    RemovedIn020("outbox._key_heads(text, bigint, bigint, integer, boolean)");
    PG_RETURN_NULL();
}

Datum outbox_requeueing(PG_FUNCTION_ARGS) {
    RemovedIn020("outbox._requeueing()");
    PG_RETURN_VOID();
}

Datum outbox_reordering_keys(PG_FUNCTION_ARGS) {
    RemovedIn020("outbox._reordering_keys()");
    PG_RETURN_VOID();
}
