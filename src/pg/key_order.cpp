// Per-key ordering: order keys, their locks and the walk over a destination's key heads (see
// include/outbox/pg/key_order.hpp).
extern "C" {
#include "postgres.h"
#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include "outbox/pg/key_order.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_order_key(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_key_heads(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_order_key);
PG_FUNCTION_INFO_V1(outbox_key_heads);
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

OrderKeyRange OrderKeysOf(std::string_view destination) {
    int64_t lo = int64_t(uint64(DestinationHash(destination)) << 32);
    return {lo, lo + int64_t(PG_UINT32_MAX)};
}

// An advisory lock tag of outbox's own: field4 = 3, which the pg_advisory_* functions (1 and
// 2) never use, so users' advisory locks cannot collide with it.
void LockOrderKey(int64_t order_key) {
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, uint32(uint64(order_key) >> 32), uint32(order_key), 3);
    (void)LockAcquire(&tag, ExclusiveLock, false, false);
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

static Oid OutboxRelation(Oid nsp, const char *name) {
    Oid oid = get_relname_relid(name, nsp);
    if (!OidIsValid(oid))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("outbox relation \"%s\" does not exist", name),
                        errhint("Update the extension: ALTER EXTENSION outbox UPDATE;")));
    return oid;
}

// outbox._key_heads(destination, from_key, to_key, n, due_only): the head message (lowest
// visible id) of each order key of `destination` in [from_key, to_key] (NULL: the
// destination's whole range), in order key order, at most n (NULL: all) — with due_only, only
// heads that are due now (available_at <= now(): not leased, not waiting for a retry).
//
// One index descent per key instead of reading every message: PostgreSQL 15 has no skip scan,
// and a recursive query doing the same costs three times as much per key. Rows are returned by
// ctid, to be locked (FOR UPDATE SKIP LOCKED) by the calling statement, whose snapshot this is.
Datum outbox_key_heads(PG_FUNCTION_ARGS) {
    InitMaterializedSRF(fcinfo, 0);
    auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
    if (PG_ARGISNULL(0))
        PG_RETURN_VOID();
    text *destination = PG_GETARG_TEXT_PP(0);
    std::string_view name = TextView(destination);
    OrderKeyRange range = OrderKeysOf(name);
    int64 from = PG_ARGISNULL(1) ? range.lo : std::max<int64>(PG_GETARG_INT64(1), range.lo);
    int64 to = PG_ARGISNULL(2) ? range.hi : std::min<int64>(PG_GETARG_INT64(2), range.hi);
    int64 limit = PG_ARGISNULL(3) ? PG_INT64_MAX : PG_GETARG_INT32(3);
    bool due_only = !PG_ARGISNULL(4) && PG_GETARG_BOOL(4);

    Oid nsp = get_namespace_oid("outbox", false);
    Relation heap = table_open(OutboxRelation(nsp, "messages"), AccessShareLock);
    Relation index = index_open(OutboxRelation(nsp, "messages_key_order"), AccessShareLock);
    TupleDesc desc = RelationGetDescr(heap);
    AttrNumber att_order_key = get_attnum(RelationGetRelid(heap), "order_key");
    AttrNumber att_id = get_attnum(RelationGetRelid(heap), "id");
    AttrNumber att_destination = get_attnum(RelationGetRelid(heap), "destination");
    AttrNumber att_available_at = get_attnum(RelationGetRelid(heap), "available_at");
    if (att_order_key <= 0 || att_id <= 0 || att_destination <= 0 || att_available_at <= 0 ||
        TupleDescAttr(desc, att_order_key - 1)->atttypid != INT8OID)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                        errmsg("outbox.messages is not the table this library expects"),
                        errhint("Update the extension: ALTER EXTENSION outbox UPDATE;")));
    TimestampTz now = GetCurrentTransactionStartTimestamp();

    IndexScanDesc scan = index_beginscan(heap, index, GetActiveSnapshot(), 1, 0);
    TupleTableSlot *slot = table_slot_create(heap, nullptr);
    int64 emitted = 0;
    while (emitted < limit && from <= to) {
        CHECK_FOR_INTERRUPTS();
        ScanKeyData key;
        ScanKeyInit(&key, 1, BTGreaterEqualStrategyNumber, F_INT8GE, Int64GetDatum(from));
        index_rescan(scan, &key, 1, nullptr, 0);
        // The first visible entry at or after `from`: entries of a key are in id order, so
        // this is the head of the next key that has one.
        if (!index_getnext_slot(scan, ForwardScanDirection, slot))
            break;
        bool isnull;
        int64 order_key = DatumGetInt64(slot_getattr(slot, att_order_key, &isnull));
        if (order_key > to)
            break;
        text *dest = DatumGetTextPP(slot_getattr(slot, att_destination, &isnull));
        bool wanted = TextView(dest) == name;
        if (wanted && due_only)
            wanted = DatumGetTimestampTz(slot_getattr(slot, att_available_at, &isnull)) <= now;
        if (wanted) {
            Datum values[3];
            bool nulls[3] = {false, false, false};
            values[0] = Int64GetDatum(order_key);
            values[1] = slot_getattr(slot, att_id, &isnull);
            auto *tid = static_cast<ItemPointer>(palloc(sizeof(ItemPointerData)));
            ItemPointerCopy(&slot->tts_tid, tid);
            values[2] = PointerGetDatum(tid);
            tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
            emitted++;
        }
        if (order_key == PG_INT64_MAX)
            break;
        from = order_key + 1;
    }
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    index_close(index, AccessShareLock);
    table_close(heap, AccessShareLock);
    PG_RETURN_VOID();
}
