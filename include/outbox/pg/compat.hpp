// Every difference between the PostgreSQL majors outbox builds against, behind names of ours.
//
// Supported and tested: 15 (Debian bookworm), 17 (trixie), 18 (forky), 19 (experimental). No
// file in src/ or include/ other than this one tests PG_VERSION_NUM; code that needs a
// version-specific call uses the name here. Each entry says from which major on the newer form
// applies, checked against that major's installed server headers (test/pg_root builds them).
// 16 has no Debian package to test against; it takes the same branches as 15, except where an
// entry says the change came in 16 (then from its release notes and 17's headers).
//
// What the majors change for us (major: change -> our name):
//   17: CreateWaitEventSet takes a ResourceOwner, not a MemoryContext -> CreateSessionWaitEventSet
//   17: PGPROC.pgprocno is gone (MyProcNumber) -> OwnProcNumber
//   17: PGPROC.lxid moved into PGPROC.vxid -> CurrentLocalTransactionId
//   17: custom wait events (WaitEventExtensionNew): pg_stat_activity shows outbox's own names
//       instead of the generic "Extension" -> NewWaitEvent
//   16: table_tuple_update says which indexes a new tuple version needs (all, summarizing
//       ones only, none) instead of a bool; 19: it takes an options argument
//       -> UpdateTableTuple, IndexTakesUpdate
//   19: table_tuple_delete takes an options argument (changingPart became one) -> DeleteTableTuple
//   18: index_beginscan takes an instrumentation argument; 19: and flags -> BeginIndexScan
//   19: table_beginscan and table_index_fetch_begin take a flags argument -> BeginTableScan,
//       BeginIndexFetch
//   19: shared memory is requested through RegisterShmemCallbacks, ShmemRequestStruct and
//       ShmemRequestHash (the hooks remain, as legacy), and ShmemInitHash lost its init_size
//       argument -> RegisterSharedMemory, RequestSharedStruct, RequestSharedHash
//   19: named LWLock tranches can be requested only from the legacy shmem_request_hook, not
//       from RegisterShmemCallbacks' request callback; LWLockNewTrancheId takes the tranche's
//       name -> RequestSharedLocks (19: LWLocks in an area of ours, a tranche made at init)
//   19: pushJsonbValue builds into a JsonbInState (the result in it) instead of a
//       JsonbParseState stack (the result returned) -> JsonbBuild, PushJsonb, JsonbBuilt
// Changes that need no entry: pg_attribute_noreturn became pg_noreturn in 18 (outbox uses
// C++'s [[noreturn]]); 18's TupleDesc layout (outbox reads attributes through heap_getattr and
// SPI, never TupleDesc->attrs); 19's SIGNAL_ARGS (outbox's handlers are declared with the
// macro); 19's Datum as uint64_t and
// PointerGetDatum as a macro (outbox writes PointerGetDatum(NULL), which every major accepts);
// 19 moved get_database_name to utils/lsyscache.h and get_database_oid to catalog/pg_database.h
// (both headers exist on every major; the files that call them include them).
#pragma once

extern "C" {
#include "postgres.h"
#include "access/genam.h"
#include "access/tableam.h"
#include "nodes/execnodes.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"
}

#if PG_VERSION_NUM < 150000
#error "outbox needs PostgreSQL 15 or newer"
#endif

namespace outbox::pg {

// ---- processes and transactions ------------------------------------------------------------

// This backend's index in ProcGlobal->allProcs: what another process needs to set its latch.
inline int OwnProcNumber() {
#if PG_VERSION_NUM >= 170000
    return MyProcNumber;
#else
    return MyProc->pgprocno;
#endif
}

// The local id of this backend's current top-level transaction: tells one transaction from the
// next without assigning an xid.
inline LocalTransactionId CurrentLocalTransactionId() {
#if PG_VERSION_NUM >= 170000
    return MyProc->vxid.lxid;
#else
    return MyProc->lxid;
#endif
}

// ---- waiting -------------------------------------------------------------------------------

// A WaitEventSet that lives until FreeWaitEventSet, across transactions (in TopMemoryContext,
// owned by no resource owner).
inline WaitEventSet *CreateSessionWaitEventSet(int nevents) {
#if PG_VERSION_NUM >= 170000
    return CreateWaitEventSet(nullptr, nevents);
#else
    return CreateWaitEventSet(TopMemoryContext, nevents);
#endif
}

// The wait_event_info to pass to WaitLatch/WaitEventSetWait for a wait of ours called `name`
// (CamelCase, as PostgreSQL's own). From 17 on it is a custom wait event, shown by that name in
// pg_stat_activity.wait_event (type "Extension"); before, every extension wait shows as
// "Extension". Call once per process, after it attached to shared memory, and keep the value:
// it takes a lock and may raise ERROR (too many custom wait events).
inline uint32 NewWaitEvent(const char *name) {
#if PG_VERSION_NUM >= 170000
    return WaitEventExtensionNew(name);
#else
    (void)name;
    return PG_WAIT_EXTENSION;
#endif
}

// ---- tables --------------------------------------------------------------------------------

// A sequential scan of every tuple of `rel` visible to `snapshot`.
inline TableScanDesc BeginTableScan(Relation rel, Snapshot snapshot) {
#if PG_VERSION_NUM >= 190000
    return table_beginscan(rel, snapshot, 0, nullptr, SO_NONE);
#else
    return table_beginscan(rel, snapshot, 0, nullptr);
#endif
}

// Which indexes a tuple version written by UpdateTableTuple needs entries in.
enum class IndexUpdate { None, All, Summarizing };

// table_tuple_update, waiting for a concurrent writer, with no crosscheck snapshot.
inline TM_Result UpdateTableTuple(Relation rel, ItemPointer otid, TupleTableSlot *slot,
                                  CommandId cid, Snapshot snapshot, TM_FailureData *tmfd,
                                  IndexUpdate *indexes) {
    LockTupleMode lockmode;
#if PG_VERSION_NUM >= 160000
    TU_UpdateIndexes update = TU_None;
#if PG_VERSION_NUM >= 190000
    TM_Result result = table_tuple_update(rel, otid, slot, cid, 0, snapshot, InvalidSnapshot, true,
                                          tmfd, &lockmode, &update);
#else
    TM_Result result = table_tuple_update(rel, otid, slot, cid, snapshot, InvalidSnapshot, true,
                                          tmfd, &lockmode, &update);
#endif
    *indexes = update == TU_All           ? IndexUpdate::All
               : update == TU_Summarizing ? IndexUpdate::Summarizing
                                          : IndexUpdate::None;
#else
    bool update = false;
    TM_Result result = table_tuple_update(rel, otid, slot, cid, snapshot, InvalidSnapshot, true,
                                          tmfd, &lockmode, &update);
    *indexes = update ? IndexUpdate::All : IndexUpdate::None;
#endif
    return result;
}

// table_tuple_delete, waiting for a concurrent writer, with no crosscheck snapshot.
inline TM_Result DeleteTableTuple(Relation rel, ItemPointer tid, CommandId cid, Snapshot snapshot,
                                  TM_FailureData *tmfd) {
#if PG_VERSION_NUM >= 190000
    return table_tuple_delete(rel, tid, cid, 0, snapshot, InvalidSnapshot, true, tmfd);
#else
    return table_tuple_delete(rel, tid, cid, snapshot, InvalidSnapshot, true, tmfd, false);
#endif
}

// Whether an index needs an entry for a tuple version UpdateTableTuple wrote.
inline bool IndexTakesUpdate(const IndexInfo *index, IndexUpdate indexes) {
#if PG_VERSION_NUM >= 160000
    return indexes == IndexUpdate::All ||
           (indexes == IndexUpdate::Summarizing && index->ii_Summarizing);
#else
    (void)index;
    return indexes == IndexUpdate::All;
#endif
}

// A scan of `index` (on `heap`) with `nkeys` keys (index_rescan sets them), not instrumented.
inline IndexScanDesc BeginIndexScan(Relation heap, Relation index, Snapshot snapshot, int nkeys) {
#if PG_VERSION_NUM >= 190000
    return index_beginscan(heap, index, snapshot, nullptr, nkeys, 0, SO_NONE);
#elif PG_VERSION_NUM >= 180000
    return index_beginscan(heap, index, snapshot, nullptr, nkeys, 0);
#else
    return index_beginscan(heap, index, snapshot, nkeys, 0);
#endif
}

// Fetches of a table's rows by the TIDs an index holds (table_index_fetch_tuple).
inline IndexFetchTableData *BeginIndexFetch(Relation rel) {
#if PG_VERSION_NUM >= 190000
    return table_index_fetch_begin(rel, SO_NONE);
#else
    return table_index_fetch_begin(rel);
#endif
}

// ---- jsonb ---------------------------------------------------------------------------------

// A jsonb value being built token by token (PushJsonb), complete after its outermost END token
// (JsonbBuilt). Plain data: it may live in a frame a PostgreSQL error skips.
struct JsonbBuild {
#if PG_VERSION_NUM >= 190000
    JsonbInState state{};  // zeroed, as pushJsonbValue requires
#else
    JsonbParseState *state = nullptr;
    JsonbValue *result = nullptr;
#endif
};

inline void PushJsonb(JsonbBuild *build, JsonbIteratorToken token, JsonbValue *value) {
#if PG_VERSION_NUM >= 190000
    pushJsonbValue(&build->state, token, value);
#else
    build->result = pushJsonbValue(&build->state, token, value);
#endif
}

// The value built, once complete.
inline JsonbValue *JsonbBuilt(const JsonbBuild *build) {
#if PG_VERSION_NUM >= 190000
    return build->state.result;
#else
    return build->result;
#endif
}

// ---- shared memory -------------------------------------------------------------------------
//
// The module registers two functions with RegisterSharedMemory from _PG_init:
//   request()  names every area it needs with RequestSharedStruct / RequestSharedHash /
//              RequestSharedLocks;
//   init()     fills the areas in, once, when they were just created (at postmaster start and
//              after a crash restart); the pointers given to the requests are set by then.
// Before 19 this runs on shmem_request_hook and shmem_startup_hook: request() runs in both, the
// first time to reserve the space, the second time (under AddinShmemInitLock) to attach the
// pointers, then init() if the areas did not exist yet. From 19 on, RegisterShmemCallbacks does
// all of it.

using SharedMemoryFn = void (*)();

namespace compat_detail {
inline SharedMemoryFn shmem_request = nullptr;
inline SharedMemoryFn shmem_init = nullptr;
#if PG_VERSION_NUM >= 190000
// LWLocks requested by RequestSharedLocks, initialised before init() runs.
struct SharedLocks {
    const char *tranche;
    int count;
    LWLockPadded **locks;
};
inline SharedLocks shared_locks[4];
inline int num_shared_locks = 0;

inline void ShmemRequestCallback(void *) {
    num_shared_locks = 0;  // requested anew at every (re)initialisation
    shmem_request();
}
inline void ShmemInitCallback(void *) {
    for (int i = 0; i < num_shared_locks; i++) {
        int tranche_id = LWLockNewTrancheId(shared_locks[i].tranche);
        for (int j = 0; j < shared_locks[i].count; j++)
            LWLockInitialize(&(*shared_locks[i].locks)[j].lock, tranche_id);
    }
    shmem_init();
}
#else
inline shmem_request_hook_type prev_shmem_request_hook = nullptr;
inline shmem_startup_hook_type prev_shmem_startup_hook = nullptr;
inline bool shmem_attaching = false;  // request() is attaching, not reserving
inline bool shmem_created = false;    // an area was created by this attach

inline void ShmemRequestHook() {
    if (prev_shmem_request_hook)
        prev_shmem_request_hook();
    shmem_attaching = false;
    shmem_request();
}

inline void ShmemStartupHook() {
    if (prev_shmem_startup_hook)
        prev_shmem_startup_hook();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    shmem_attaching = true;
    shmem_created = false;
    shmem_request();
    shmem_attaching = false;
    if (shmem_created)
        shmem_init();
    LWLockRelease(AddinShmemInitLock);
}
#endif
}  // namespace compat_detail

// Registers the module's request and init functions (see above). Call from _PG_init while
// shared_preload_libraries is being processed.
inline void RegisterSharedMemory(SharedMemoryFn request, SharedMemoryFn init) {
    compat_detail::shmem_request = request;
    compat_detail::shmem_init = init;
#if PG_VERSION_NUM >= 190000
    static ShmemCallbacks callbacks;
    memset(&callbacks, 0, sizeof callbacks);
    callbacks.request_fn = compat_detail::ShmemRequestCallback;
    callbacks.init_fn = compat_detail::ShmemInitCallback;
    RegisterShmemCallbacks(&callbacks);
#else
    compat_detail::prev_shmem_request_hook = shmem_request_hook;
    shmem_request_hook = compat_detail::ShmemRequestHook;
    compat_detail::prev_shmem_startup_hook = shmem_startup_hook;
    shmem_startup_hook = compat_detail::ShmemStartupHook;
#endif
}

// A shared struct `name` of `size` bytes; *ptr points at it from init() on. From request() only.
inline void RequestSharedStruct(const char *name, Size size, void **ptr) {
#if PG_VERSION_NUM >= 190000
    ShmemStructOpts opts;
    memset(&opts, 0, sizeof opts);
    opts.name = name;
    opts.size = size;
    opts.ptr = ptr;
    ShmemRequestStructWithOpts(&opts);
#else
    if (!compat_detail::shmem_attaching) {
        RequestAddinShmemSpace(size);
        return;
    }
    bool found = false;
    *ptr = ShmemInitStruct(name, size, &found);
    if (!found)
        compat_detail::shmem_created = true;
#endif
}

// A shared hash table `name` of at most `nelems` entries, created empty; *ptr is this process's
// handle from init() on. From request() only.
inline void RequestSharedHash(const char *name, int64 nelems, const HASHCTL &info, int flags,
                              HTAB **ptr) {
#if PG_VERSION_NUM >= 190000
    ShmemHashOpts opts;
    memset(&opts, 0, sizeof opts);
    opts.name = name;
    opts.nelems = nelems;
    opts.hash_info = info;
    opts.hash_flags = flags;
    opts.ptr = ptr;
    ShmemRequestHashWithOpts(&opts);
#else
    if (!compat_detail::shmem_attaching) {
        RequestAddinShmemSpace(hash_estimate_size(nelems, info.entrysize));
        return;
    }
    HASHCTL copy = info;
    *ptr = ShmemInitHash(name, long(nelems), long(nelems), &copy, flags);
#endif
}

// `count` LWLocks of a tranche named `tranche` (the name pg_stat_activity shows for waits on
// them); *locks points at the first from init() on. Before 19 a named tranche; from 19 on the
// locks live in a shared area `area` of ours, their tranche made when it is created. From
// request() only.
inline void RequestSharedLocks(const char *area, const char *tranche, int count,
                               LWLockPadded **locks) {
#if PG_VERSION_NUM >= 190000
    if (compat_detail::num_shared_locks >= int(lengthof(compat_detail::shared_locks)))
        elog(FATAL, "outbox: too many LWLock tranches requested");
    RequestSharedStruct(area, mul_size(count, sizeof(LWLockPadded)),
                        reinterpret_cast<void **>(locks));
    compat_detail::shared_locks[compat_detail::num_shared_locks++] = {tranche, count, locks};
#else
    (void)area;
    if (compat_detail::shmem_attaching)
        *locks = GetNamedLWLockTranche(tranche);
    else
        RequestNamedLWLockTranche(tranche, count);
#endif
}

}  // namespace outbox::pg
