// Per-key ordering: order keys, their locks and the walk over a destination's key heads (see
// include/outbox/pg/key_order.hpp).
#include <algorithm>
#include <string_view>
#include <vector>

extern "C" {
#include "postgres.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include "outbox/key_floors.hpp"
#include "outbox/pg/key_order.hpp"
#include "outbox/pg/shmem.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_order_key(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_key_heads(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_reordering_keys(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_order_key);
PG_FUNCTION_INFO_V1(outbox_key_heads);
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

KeyHeadsReturned &LastKeyHeads() {
    static KeyHeadsReturned last;
    return last;
}

// Key floors. Why a walk never passes a message put back below a floor: a reordering
// transaction R (1) counts itself reordering and bumps the generation, (2) writes its rows,
// (3) commits, (4) bumps the generation and stops counting. Floors are learnt from a walk W
// only if the generation read before W's snapshot (g0) equals the one read after W (g1) with
// nothing reordering then. If R's rows were not visible to W, R's step 1 came after that read
// (had it come before, R would be counted, or g1 != g0, or R's step 4 and so its commit came
// before g0 was read and W saw its rows), so the generation moved past g0 before R's rows
// become visible to any later walk, which then drops the floors learnt under g0. A floor is
// also raised past a head this worker removes (its own transaction no longer sees it, others
// once it commits), and all are dropped when a transaction of this process aborts (its walks
// passed rows it had removed, which come back).
static KeyFloors key_floors;
static bool walk_learns = false;      // the running statement is the worker's heads claim
static bool reordering_here = false;  // this transaction counts itself reordering

void ReorderingKeys() {
    if (reordering_here || shared == nullptr)
        return;
    pg_atomic_fetch_add_u32(&shared->keys_reordering, 1);
    pg_atomic_fetch_add_u64(&shared->key_order_generation, 1);
    reordering_here = true;
}

static void ReorderingEnded() {
    if (!reordering_here)
        return;
    pg_atomic_fetch_add_u64(&shared->key_order_generation, 1);
    pg_atomic_fetch_sub_u32(&shared->keys_reordering, 1);
    reordering_here = false;
}

uint64_t BeginKeyWalk() {
    walk_learns = shared != nullptr;
    pg_memory_barrier();
    return walk_learns ? pg_atomic_read_u64(&shared->key_order_generation) : 0;
}

static int64 NowMs() {
    return GetCurrentTimestamp() / 1000;
}

static uint32 IndexStorage(Relation index) {
    return index->rd_node.relNode;
}

// The generation and whether anything is reordering, read after the caller's snapshot.
static std::pair<uint64, bool> KeyOrderState() {
    pg_memory_barrier();
    bool reordering = pg_atomic_read_u32(&shared->keys_reordering) > 0;
    pg_read_barrier();
    return {pg_atomic_read_u64(&shared->key_order_generation), reordering};
}

static uint32 learnt_index = 0;  // the storage of the index the last walk read

void EndKeyWalk(uint64_t generation_before) {
    if (!walk_learns)
        return;
    walk_learns = false;
    auto [generation, reordering] = KeyOrderState();
    key_floors.Learn(generation_before, generation, reordering, learnt_index, NowMs());
}

void KeyHeadRemoved(int64_t order_key, int64_t id) {
    key_floors.Removed(order_key, id);
}

static void OnKeyOrderTransaction(XactEvent event, void *) {
    switch (event) {
        case XACT_EVENT_PRE_PREPARE:
            if (reordering_here)
                ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                                errmsg("cannot PREPARE a transaction that requeued messages of a "
                                       "destination with ordering = key or changed its ordering"),
                                errhint("Run outbox.requeue and outbox.alter_destination in a "
                                        "transaction that is committed directly.")));
            break;
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PARALLEL_ABORT:
            key_floors.Clear();
            walk_learns = false;
            ReorderingEnded();
            break;
        case XACT_EVENT_COMMIT:  // called once the commit is visible to other snapshots
        case XACT_EVENT_PARALLEL_COMMIT:
        case XACT_EVENT_PREPARE:
            ReorderingEnded();
            break;
        default:
            break;
    }
}

static void OnKeyOrderSubtransaction(SubXactEvent event, SubTransactionId, SubTransactionId,
                                     void *) {
    if (event == SUBXACT_EVENT_ABORT_SUB)
        key_floors.Clear();
}

void RegisterKeyOrderCallbacks() {
    RegisterXactCallback(OnKeyOrderTransaction, nullptr);
    RegisterSubXactCallback(OnKeyOrderSubtransaction, nullptr);
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

// outbox._reordering_keys(): this transaction gives queued messages order keys.
Datum outbox_reordering_keys(PG_FUNCTION_ARGS) {
    ReorderingKeys();
    PG_RETURN_VOID();
}

static Oid OutboxRelation(Oid nsp, const char *name) {
    Oid oid = get_relname_relid(name, nsp);
    if (!OidIsValid(oid))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("outbox relation \"%s\" does not exist", name),
                        errhint("Update the extension: ALTER EXTENSION outbox UPDATE;")));
    return oid;
}

namespace {

// A read of messages_key_order's leaf level from a given order key on, entry by entry (and
// heap TID by TID within a deduplicated entry), holding one leaf page read-locked at a time.
// Heap tuples are fetched with the page locked, as a unique check does (index, then heap).
struct LeafWalk {
    Relation index;
    Snapshot snapshot;
    BTScanInsert insert;  // (order_key, id) >= the entry being looked for
    // The worker's key floors when they hold: on reaching a key, the walk moves on to its floor.
    const outbox::KeyFloors *floors = nullptr;
    BlockNumber nblocks = 0;     // the index's size when the walk began (hints are below it)
    bool floor_checked = false;  // the floor of floor_key was looked up: key_floor
    int64 floor_key = 0;
    const outbox::KeyFloors::Floor *key_floor = nullptr;
    Buffer buf = InvalidBuffer;
    OffsetNumber off = InvalidOffsetNumber;
    int posting = 0;  // which TID of a deduplicated entry
    bool killed = false;
    // The walk reached this page from the one on its left, whose last entry is came_from.
    bool after_next_page = false;
    outbox::KeyFloors::Position came_from;
    outbox::KeyFloors::Position key_end;  // see KeyEnd()
    // On a standby, entries the primary marked dead may still be visible to this snapshot, and
    // this server's horizon may not mark any: LP_DEAD is neither trusted nor set (as index
    // scans do).
    bool in_recovery = RecoveryInProgress();

    Page CurrentPage() const { return BufferGetPage(buf); }

    int64 AttrAt(Page page, OffsetNumber o, int attr) const {
        bool isnull;
        auto *itup = reinterpret_cast<IndexTuple>(PageGetItem(page, PageGetItemId(page, o)));
        return DatumGetInt64(index_getattr(itup, attr, RelationGetDescr(index), &isnull));
    }
    int64 KeyAt(Page page, OffsetNumber o) const { return AttrAt(page, o, 1); }

    // Whether the entry at o comes before (key, id); id PG_INT64_MIN: before key's first one.
    bool Before(Page page, OffsetNumber o, int64 key, int64 id) const {
        int64 at = KeyAt(page, o);
        return at < key || (at == key && id != PG_INT64_MIN && AttrAt(page, o, 2) < id);
    }

    // The first offset in [low, maxoff + 1) of the page not before (key, id).
    OffsetNumber Search(Page page, OffsetNumber low, int64 key, int64 id) const {
        OffsetNumber high = OffsetNumberNext(PageGetMaxOffsetNumber(page));
        while (low < high) {
            OffsetNumber mid = low + (high - low) / 2;
            if (Before(page, mid, key, id))
                low = OffsetNumberNext(mid);
            else
                high = mid;
        }
        return low;
    }

    // Moves on to the first entry not before (key, id) (which is after the current one):
    // within this page or the next when it is there (no descent), else by a descent.
    bool SeekForward(int64 key, int64 id = PG_INT64_MIN) {
        for (int step = 0; step < 2; step++) {
            Page page = CurrentPage();
            OffsetNumber maxoff = PageGetMaxOffsetNumber(page);
            if (off <= maxoff && !Before(page, maxoff, key, id)) {
                off = Search(page, off, key, id);
                posting = 0;
                return true;
            }
            if (step == 1 || !NextPage())
                break;
        }
        return Seek(key, id);
    }

    // Like SeekForward, starting from where a hint says the entry is (KeyFloors::Position): read
    // there directly, and taken only if the entries there show it is the place — an entry
    // before (key, id) at or just before it, and none before it after — else searched for.
    bool SeekHinted(int64 key, int64 id, outbox::KeyFloors::Position hint) {
        if (hint.block >= nblocks)
            return SeekForward(key, id);
        bool moved = JumpTo(hint.block, hint.buffer);
        Page page = CurrentPage();
        BTPageOpaque opaque = BTPageGetOpaque(page);
        OffsetNumber first = P_FIRSTDATAKEY(opaque), maxoff = PageGetMaxOffsetNumber(page);
        OffsetNumber o = hint.offset;
        if (HoldsEntry(o)) {
            posting = 0;
            if (!Before(page, o, key, id)) {
                if (o > first && Before(page, OffsetNumberPrev(o), key, id)) {
                    off = o;
                    return true;
                }
                // The page's first entry (pages often begin with a key: splits prefer to cut
                // between keys): the last one of the page on its left must come before.
                if (o == first)
                    return P_LEFTMOST(opaque) ? (off = o, true) : FromLeftOf(hint.block, key, id);
            } else {
                // Entries added since (a producer appending to the key) push it on a little.
                for (int step = 0; step < kHintSteps && o <= maxoff; step++, o++)
                    if (!Before(page, o, key, id)) {
                        off = o;
                        return true;
                    }
                off = o;  // still before it
                return SeekForward(key, id);
            }
        }
        return moved ? Seek(key, id) : SeekForward(key, id);
    }
    static constexpr int kHintSteps = 8;

    // Reads page `block` in place of the current one, not coming from its left; whether the
    // walk moved (it was not already there). `recent`: the buffer that held it when a hint was
    // taken, tried first (ReadRecentBuffer checks that it still holds the block).
    bool JumpTo(BlockNumber block, Buffer recent = InvalidBuffer) {
        if (block == BufferGetBlockNumber(buf))
            return false;
        MarkKilled();
        _bt_relbuf(index, buf);
        if (recent > 0 && recent <= NBuffers &&
            ReadRecentBuffer(index->rd_node, MAIN_FORKNUM, block, recent)) {
            buf = recent;
            _bt_lockbuf(index, buf, BT_READ);
            _bt_checkpage(index, buf);
        } else {
            buf = _bt_getbuf(index, block, BT_READ);
        }
        after_next_page = false;
        return true;
    }

    // Whether the current page is a live leaf page with an entry at `o`.
    bool HoldsEntry(OffsetNumber o) const {
        BTPageOpaque opaque = BTPageGetOpaque(CurrentPage());
        return !P_IGNORE(opaque) && P_ISLEAF(opaque) && o >= P_FIRSTDATAKEY(opaque) &&
               o <= PageGetMaxOffsetNumber(CurrentPage());
    }

    // Whether the first entry not before (key, id) is the first of page `block`: the page on
    // its left (read after this one is let go, as a walk to the left must) still links to it and
    // ends before (key, id). If so the walk moves right from there onto the entry; else it
    // descends.
    bool FromLeftOf(BlockNumber block, int64 key, int64 id) {
        JumpTo(BTPageGetOpaque(CurrentPage())->btpo_prev);
        Page page = CurrentPage();
        OffsetNumber maxoff = PageGetMaxOffsetNumber(page);
        if (!HoldsEntry(maxoff) || BTPageGetOpaque(page)->btpo_next != block ||
            !Before(page, maxoff, key, id))
            return Seek(key, id);
        return NextPage() || Seek(key, id);
    }

    // On to the key after `key` (whose floor is `floor`, if any): as SeekForward(key + 1), from
    // where its last entry was when the floor knows. KeyEnd() then tells where `key` ended.
    bool NextKey(int64 key, const outbox::KeyFloors::Floor *floor) {
        key_end = {};
        if (!floor || !floor->last.known())
            return SeekForward(key + 1);
        return NextKeyHinted(key, floor->last);
    }

    // The position of the last entry of the key the walk just left (NextKey), if known.
    outbox::KeyFloors::Position KeyEnd() const { return key_end.known() ? key_end : JustBefore(); }

    // After a key whose last entry is at `hint`, on to the next key: its first entry, or its
    // floor when the page that ends this key names it (its high key) and it has one — keys
    // between would have been on that page. Positions as SeekForward(key + 1) would otherwise.
    bool NextKeyHinted(int64 key, outbox::KeyFloors::Position hint) {
        int64 next = key + 1;
        if (hint.block >= nblocks)
            return SeekForward(next);
        bool moved = JumpTo(hint.block, hint.buffer);
        Page page = CurrentPage();
        BTPageOpaque opaque = BTPageGetOpaque(page);
        OffsetNumber maxoff = PageGetMaxOffsetNumber(page);
        OffsetNumber o = hint.offset;
        if (!HoldsEntry(o) || !Before(page, o, next, PG_INT64_MIN))
            return moved ? Seek(next) : SeekForward(next);
        posting = 0;
        off = Search(page, OffsetNumberNext(o), next, PG_INT64_MIN);
        if (off <= maxoff)
            return true;  // the next key begins on this page
        if (!P_RIGHTMOST(opaque)) {
            int64 high = KeyAt(page, P_HIKEY);
            const outbox::KeyFloors::Floor *floor = floors->Find(high);
            if (high >= next && floor && floor->head.known()) {
                key_end = At(maxoff);  // not just before the floor
                return SeekHinted(high, floor->id, floor->head);
            }
        }
        return SeekForward(next);
    }

    // The floor of `key` (nullptr: none, or the walk has no floors); the one Current() looked up
    // when it reached the key, if that is the key.
    const outbox::KeyFloors::Floor *FloorOf(int64 key) const {
        if (floor_checked && key == floor_key)
            return key_floor;
        return floors ? floors->Find(key) : nullptr;
    }

    // Entry `o` of the current page as a position (hint).
    outbox::KeyFloors::Position At(OffsetNumber o) const {
        return {BufferGetBlockNumber(buf), o, buf};
    }

    outbox::KeyFloors::Position Here() const {
        return off > PageGetMaxOffsetNumber(CurrentPage()) ? outbox::KeyFloors::Position{}
                                                           : At(off);
    }

    // The entry just before the position, if the walk knows where it is: on this page, or the
    // last of the page it came from.
    outbox::KeyFloors::Position JustBefore() const {
        BTPageOpaque opaque = BTPageGetOpaque(CurrentPage());
        if (off > P_FIRSTDATAKEY(opaque) && off <= PageGetMaxOffsetNumber(CurrentPage()))
            return At(OffsetNumberPrev(off));
        if (off == P_FIRSTDATAKEY(opaque) && after_next_page)
            return came_from;
        return {};
    }

    // Positions on the first entry not before (key, id); false when the index is empty.
    bool Seek(int64 key, int64 id = PG_INT64_MIN) {
        Release();
        after_next_page = false;
        insert->scankeys[0].sk_argument = Int64GetDatum(key);
        insert->scankeys[0].sk_flags &= ~SK_ISNULL;
        insert->keysz = 1;
        if (id != PG_INT64_MIN) {
            insert->scankeys[1].sk_argument = Int64GetDatum(id);
            insert->scankeys[1].sk_flags &= ~SK_ISNULL;
            insert->keysz = 2;
        }
        insert->nextkey = false;
        _bt_freestack(_bt_search(index, insert, &buf, BT_READ, snapshot));
        if (!BufferIsValid(buf))
            return false;
        Page page = CurrentPage();
        off = Search(page, P_FIRSTDATAKEY(BTPageGetOpaque(page)), key, id);
        posting = 0;
        // A descent for a key that begins a page lands on the page before (its high key is the
        // key, truncated): the entry is the first of the next page. (At the end of the index
        // the walk stays past the last entry.)
        if (off > PageGetMaxOffsetNumber(page))
            NextPage();
        return true;
    }

    // Moves to the first entry of the next page (pages deleted meanwhile are passed); false
    // at the end of the index.
    bool NextPage() {
        BTPageOpaque opaque = BTPageGetOpaque(CurrentPage());
        if (P_RIGHTMOST(opaque))
            return false;
        BlockNumber next = opaque->btpo_next;
        OffsetNumber maxoff = PageGetMaxOffsetNumber(CurrentPage());
        after_next_page = maxoff >= P_FIRSTDATAKEY(opaque);
        came_from = At(maxoff);
        MarkKilled();
        for (;;) {
            buf = _bt_relandgetbuf(index, buf, next, BT_READ);
            opaque = BTPageGetOpaque(CurrentPage());
            if (!P_IGNORE(opaque))
                break;
            if (P_RIGHTMOST(opaque))
                return false;
            next = opaque->btpo_next;
        }
        off = P_FIRSTDATAKEY(opaque);
        posting = 0;
        return true;
    }

    // The entry (order key, id, heap TID) at the position, moving right past the page's end
    // and, on reaching a key with a floor, to its floor; false at the end of the index.
    bool Current(int64 *key, int64 *id, ItemPointerData *tid) {
        for (;;) {
            Page page = CurrentPage();
            if (off > PageGetMaxOffsetNumber(page)) {
                if (!NextPage())
                    return false;
                continue;
            }
            if (floors) {
                int64 at = KeyAt(page, off);
                if (!floor_checked || at != floor_key) {
                    floor_checked = true;
                    floor_key = at;
                    key_floor = floors->Find(at);
                    const outbox::KeyFloors::Floor *floor = key_floor;
                    if (floor && AttrAt(page, off, 2) < floor->id) {
                        if (!(floor->head.known() ? SeekHinted(at, floor->id, floor->head)
                                                  : SeekForward(at, floor->id)))
                            return false;
                        continue;
                    }
                }
            }
            ItemId iid = PageGetItemId(page, off);
            if (ItemIdIsDead(iid) && !in_recovery) {  // removed (only the line pointer is read)
                off = OffsetNumberNext(off);
                posting = 0;
                continue;
            }
            auto *itup = reinterpret_cast<IndexTuple>(PageGetItem(page, iid));
            bool isnull;
            *key = DatumGetInt64(index_getattr(itup, 1, RelationGetDescr(index), &isnull));
            *id = DatumGetInt64(index_getattr(itup, 2, RelationGetDescr(index), &isnull));
            *tid = BTreeTupleIsPosting(itup) ? *BTreeTupleGetPostingN(itup, posting) : itup->t_tid;
            return true;
        }
    }

    void Advance() {
        auto *itup = reinterpret_cast<IndexTuple>(
            PageGetItem(CurrentPage(), PageGetItemId(CurrentPage(), off)));
        if (BTreeTupleIsPosting(itup) && posting + 1 < BTreeTupleGetNPosting(itup)) {
            posting++;
            return;
        }
        off = OffsetNumberNext(off);
        posting = 0;
    }

    // The current entry's heap tuple is dead to every transaction: mark the entry LP_DEAD so
    // that no walk fetches it again (a hint, as index scans set it; vacuum removes it).
    void KillCurrent() {
        if (in_recovery)
            return;
        Page page = CurrentPage();
        ItemId iid = PageGetItemId(page, off);
        auto *itup = reinterpret_cast<IndexTuple>(PageGetItem(page, iid));
        if (BTreeTupleIsPosting(itup))
            return;  // other TIDs of it may be alive
        ItemIdMarkDead(iid);
        killed = true;
    }

    void MarkKilled() {
        if (!killed)
            return;
        BTPageGetOpaque(CurrentPage())->btpo_flags |= BTP_HAS_GARBAGE;
        MarkBufferDirtyHint(buf, true);
        killed = false;
    }

    void Release() {
        if (!BufferIsValid(buf))
            return;
        MarkKilled();
        _bt_relbuf(index, buf);
        buf = InvalidBuffer;
    }
};

bool LockedByThisTransaction(TupleTableSlot *slot) {
    HeapTupleHeader tuple = ExecFetchSlotHeapTuple(slot, false, nullptr)->t_data;
    uint16 infomask = tuple->t_infomask;
    return !(infomask & HEAP_XMAX_INVALID) && !(infomask & HEAP_XMAX_IS_MULTI) &&
           HEAP_XMAX_IS_LOCKED_ONLY(infomask) &&
           TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmax(tuple));
}

// After a key's head the walk reads at most this many more of the key's entries (by their order
// key alone) before it searches for the next key (within the leaf page, the next one, or by a
// descent): reading on costs a cache miss per entry. (When the key's floor knows where the key
// ends, the walk goes there at once.)
constexpr int kPassBeforeSeek = 1;

}  // namespace

// outbox._key_heads(destination, from_key, to_key, n, due_only): the head message (lowest
// visible id) of each order key of `destination` in [from_key, to_key] (NULL: the
// destination's whole range), in order key order, at most n (NULL: all) — with due_only, only
// heads that are due now (available_at <= now(): not leased, not waiting for a retry) and not
// locked by this transaction.
//
// It reads the index's leaf level itself: an index scan evaluates every entry to the end of
// the page at each descent, which made a walk over 1,000 keys cost ~9 us per key; reading the
// leaf entries costs a few ns each, with one heap fetch per key for its head's visibility. In the
// worker's claim (BeginKeyWalk) it starts each key at its floor, when the floors hold. Rows are
// returned by ctid, to be locked (FOR UPDATE SKIP LOCKED) by the calling statement, whose snapshot
// this is.
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

    LastKeyHeads() = {};
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

    Snapshot snapshot = GetActiveSnapshot();
    LeafWalk walk;
    walk.index = index;
    walk.snapshot = snapshot;
    walk.insert = _bt_mkscankey(index, nullptr);
    // The worker's heads claim starts each key at its floor when the floors hold, and learns
    // the heads it finds.
    bool learn = walk_learns && !walk.in_recovery;
    if (learn) {
        learnt_index = IndexStorage(index);
        auto [generation, reordering] = KeyOrderState();
        if (key_floors.Usable(generation, reordering, learnt_index, NowMs())) {
            walk.floors = &key_floors;
            walk.nblocks = RelationGetNumberOfBlocks(index);
        }
    }
    IndexFetchTableData *fetch = table_index_fetch_begin(heap);
    TupleTableSlot *slot = table_slot_create(heap, nullptr);
    int64 emitted = 0;
    bool have_head = false;  // the head of order key `head_key` was found
    int64 head_key = 0;
    int passed = 0;  // entries of head_key passed since
    int64 order_key, id;
    ItemPointerData tid;
    bool positioned = from <= to && walk.Seek(from);
    // On to the key after head_key, from where its last entry was if the floor knows.
    auto next_key = [&](const outbox::KeyFloors::Floor *floor) {
        positioned = head_key < to && walk.NextKey(head_key, floor);
        if (positioned && learn)
            key_floors.LastEntryAt(walk.KeyEnd());
        passed = 0;
    };
    while (positioned && emitted < limit && walk.Current(&order_key, &id, &tid) &&
           order_key <= to) {
        if (have_head && order_key == head_key) {
            if (++passed > kPassBeforeSeek)
                next_key(walk.FloorOf(head_key));
            else
                walk.Advance();
            continue;
        }
        // The first visible entry of an order key (they are in id order) is its head.
        bool call_again = false, all_dead = false;
        if (!table_index_fetch_tuple(fetch, &tid, snapshot, slot, &call_again, &all_dead)) {
            if (all_dead)
                walk.KillCurrent();
            walk.Advance();
            continue;
        }
        have_head = true;
        head_key = order_key;
        passed = 0;
        if (learn)
            key_floors.Found(order_key, id, walk.Here());
        bool isnull;
        text *dest = DatumGetTextPP(slot_getattr(slot, att_destination, &isnull));
        bool wanted = TextView(dest) == name;
        // A head this transaction holds locked (the worker's fast path: being delivered) is no
        // candidate: locking it again would succeed and deliver it twice.
        if (wanted && due_only && LockedByThisTransaction(slot))
            wanted = false;
        if (wanted && due_only)
            wanted = DatumGetTimestampTz(slot_getattr(slot, att_available_at, &isnull)) <= now;
        if (wanted) {
            Datum values[3];
            bool nulls[3] = {false, false, false};
            values[0] = Int64GetDatum(order_key);
            values[1] = slot_getattr(slot, att_id, &isnull);
            auto *head_tid = static_cast<ItemPointer>(palloc(sizeof(ItemPointerData)));
            ItemPointerCopy(&slot->tts_tid, head_tid);
            values[2] = PointerGetDatum(head_tid);
            tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
            emitted++;
            LastKeyHeads() = {emitted, order_key};
        }
        // The rest of the key is passed at once when its floor knows where the key ends.
        const outbox::KeyFloors::Floor *floor = walk.FloorOf(head_key);
        if (floor && floor->last.known() && emitted < limit)
            next_key(floor);
        else
            walk.Advance();
    }
    walk.Release();
    ExecDropSingleTupleTableSlot(slot);
    table_index_fetch_end(fetch);
    index_close(index, AccessShareLock);
    table_close(heap, AccessShareLock);
    PG_RETURN_VOID();
}
