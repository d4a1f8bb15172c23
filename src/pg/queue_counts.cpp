// Exact queue sizes kept at commit (see include/outbox/pg/queue_counts.hpp).
#include <cstring>

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include "outbox/pg/queue_counts.hpp"
#include "outbox/pg/replica.hpp"
#include "outbox/pg/shmem.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_messages_changed(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_messages_inserted(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_queue_counts(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_recount(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_recount);
PG_FUNCTION_INFO_V1(outbox_messages_changed);
PG_FUNCTION_INFO_V1(outbox_messages_inserted);
PG_FUNCTION_INFO_V1(outbox_queue_counts);
}

namespace outbox::pg {

namespace {

// This transaction's changes, per (subtransaction level, destination). Kept in TopMemoryContext
// as a plain array: a transaction touches a handful of destinations.
struct Delta {
    int level;
    char destination[NAMEDATALEN];
    int64 queued, produced, removed;
    // The worker's outcomes (CountOutcomes), added to the counters at commit.
    int64 delivered, dead, expired;
    // "compaction": "key": rows this (sub)transaction superseded (also in `queued`, negative),
    // and how many of them no row of this transaction used yet in place of a reservation.
    int64 superseded, superseded_credit;
    // Rows reserved against the destination's max_pending (in `counters`) and against
    // outbox.max_pending (in the database's entry); released at the end of the (sub)transaction.
    int64 reserved_destination, reserved_database;
    DestinationCounters *counters;  // nullptr until a reservation needs it
};
Delta *deltas = nullptr;
int ndeltas = 0, max_deltas = 0;
bool invalidate_at_commit = false;  // TRUNCATE: the counts must be taken again

CountedDatabase *CountsOf(Oid database, bool create) {
    for (CountedDatabase &c : shared->counted)
        if (c.database == database)
            return &c;
    if (!create)
        return nullptr;
    for (CountedDatabase &c : shared->counted)
        if (c.database == InvalidOid) {
            c.database = database;
            c.valid = false;
            SpinLockAcquire(&c.mutex);
            c.queued = c.reserved = 0;
            SpinLockRelease(&c.mutex);
            return &c;
        }
    return nullptr;
}

// Whether the kept counts of `database` are valid, for its outbox.messages `messages`
// (InvalidOid: whichever was counted).
bool CountsValid(Oid database, Oid messages = InvalidOid) {
    LWLockAcquire(shared->lock, LW_SHARED);
    CountedDatabase *c = CountsOf(database, false);
    bool valid = c && c->valid && (messages == InvalidOid || c->messages == messages);
    LWLockRelease(shared->lock);
    return valid;
}

void SetCountsValid(Oid database, bool valid, Oid messages = InvalidOid) {
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    CountedDatabase *c = CountsOf(database, valid);
    if (c) {
        c->valid = valid;
        if (valid)
            c->messages = messages;
    }
    LWLockRelease(shared->lock);
}

Oid MessagesRelid() {
    return get_relname_relid("messages", get_namespace_oid("outbox", false));
}

// Starts the conservation counters of an entry from their current values: for an
// outbox.messages made anew (DROP and CREATE EXTENSION) since server start, whose queue began
// empty. (After a server start they count from the start, as outbox.stats() does: base 0.)
void SetBase(DestinationCounters *c) {
    c->base_produced = pg_atomic_read_u64(&c->produced);
    c->base_removed = pg_atomic_read_u64(&c->removed);
    c->base_delivered = pg_atomic_read_u64(&c->delivered);
    c->base_dead = pg_atomic_read_u64(&c->dead);
    c->base_expired = pg_atomic_read_u64(&c->expired);
    c->base_superseded = pg_atomic_read_u64(&c->superseded);
}

// What the counters of an entry say went into its queue since their base, less what left it:
// with the queue counted now, the size it had then. Read while no writer of outbox.messages can
// commit (TakeCounts' lock): every writer changes these counters at its commit (ApplyDeltas),
// the worker's outcomes included. Under the entry's mutex (the base).
int64 NetSinceBase(DestinationCounters *c) {
    return int64((pg_atomic_read_u64(&c->produced) - c->base_produced) -
                 (pg_atomic_read_u64(&c->removed) - c->base_removed) -
                 (pg_atomic_read_u64(&c->delivered) - c->base_delivered) -
                 (pg_atomic_read_u64(&c->dead) - c->base_dead) -
                 (pg_atomic_read_u64(&c->expired) - c->base_expired) -
                 (pg_atomic_read_u64(&c->superseded) - c->base_superseded));
}

// The outbox.messages that the counts of this database were last taken for (InvalidOid: none
// since server start).
Oid CountedMessages() {
    LWLockAcquire(shared->lock, LW_SHARED);
    CountedDatabase *c = CountsOf(MyDatabaseId, false);
    Oid messages = c ? c->messages : InvalidOid;
    LWLockRelease(shared->lock);
    return messages;
}

// The entry of this database in shared->counted, created if need be (nullptr: table full).
CountedDatabase *DatabaseEntry() {
    LWLockAcquire(shared->lock, LW_SHARED);
    CountedDatabase *c = CountsOf(MyDatabaseId, false);
    LWLockRelease(shared->lock);
    if (c)
        return c;
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    c = CountsOf(MyDatabaseId, true);
    LWLockRelease(shared->lock);
    return c;
}

// Gives back the reservations of deltas[from..to) (their rows are committed, gone, or belong
// to a prepared transaction now), raising the kept sizes by what they queued when `apply`.
void Settle(int from, int to, bool apply) {
    int64 database_queued = 0, database_reserved = 0;
    for (int i = from; i < to; i++) {
        const Delta &d = deltas[i];
        database_reserved += d.reserved_database;
        if (apply)
            database_queued += d.queued;
        DestinationCounters *c = d.counters;
        if (c == nullptr && (apply && d.queued != 0))
            c = GetDestinationCounters(MyDatabaseId, d.destination);
        if (c == nullptr)
            continue;
        SpinLockAcquire(&c->mutex);
        if (apply)
            c->queued += d.queued;
        c->reserved -= d.reserved_destination;
        SpinLockRelease(&c->mutex);
    }
    if (database_queued == 0 && database_reserved == 0)
        return;
    CountedDatabase *db = DatabaseEntry();
    if (db == nullptr)
        return;
    SpinLockAcquire(&db->mutex);
    db->queued += database_queued;
    db->reserved -= database_reserved;
    SpinLockRelease(&db->mutex);
}

// Applies the committed deltas; runs while the transaction still holds its lock on
// outbox.messages, so it cannot interleave with taking the counts. A destination's size and
// its reservations change in one critical section: whoever checks max_pending sees this
// transaction's rows either as reserved or as queued, never as neither.
void ApplyDeltas() {
    if (invalidate_at_commit)
        SetCountsValid(MyDatabaseId, false);
    bool valid = CountsValid(MyDatabaseId);
    for (int i = 0; i < ndeltas; i++) {
        const Delta &d = deltas[i];
        DestinationCounters *c =
            d.counters ? d.counters : GetDestinationCounters(MyDatabaseId, d.destination);
        if (c == nullptr) {
            SetCountsValid(MyDatabaseId, false);  // table full: count again when asked
            continue;
        }
        if (d.produced)
            pg_atomic_fetch_add_u64(&c->produced, d.produced);
        if (d.removed)
            pg_atomic_fetch_add_u64(&c->removed, d.removed);
        if (d.superseded)
            pg_atomic_fetch_add_u64(&c->superseded, d.superseded);
        if (d.delivered)
            pg_atomic_fetch_add_u64(&c->delivered, d.delivered);
        if (d.dead)
            pg_atomic_fetch_add_u64(&c->dead, d.dead);
        if (d.expired)
            pg_atomic_fetch_add_u64(&c->expired, d.expired);
        deltas[i].counters = c;
    }
    Settle(0, ndeltas, valid);
}

void Forget() {
    ndeltas = 0;
    invalidate_at_commit = false;
}

void OnTransaction(XactEvent event, void *) {
    switch (event) {
        case XACT_EVENT_COMMIT:
            if (ndeltas > 0 || invalidate_at_commit)
                ApplyDeltas();
            Forget();
            break;
        case XACT_EVENT_PREPARE:
            // Its rows change the queue at COMMIT PREPARED, maybe in another session: the counts
            // are taken again once no transaction writes the table (until then stats() counts
            // rows).
            if (ndeltas > 0 || invalidate_at_commit)
                SetCountsValid(MyDatabaseId, false);
            Settle(0, ndeltas, false);
            Forget();
            break;
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PARALLEL_ABORT:
            Settle(0, ndeltas, false);
            Forget();
            break;
        default:
            break;
    }
}

void OnSubtransaction(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
    int level = GetCurrentTransactionNestLevel();
    if (event == SUBXACT_EVENT_ABORT_SUB) {
        int kept = 0;
        for (int i = 0; i < ndeltas; i++) {
            if (deltas[i].level < level)
                deltas[kept++] = deltas[i];
            else
                Settle(i, i + 1, false);
        }
        ndeltas = kept;
    } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
        for (int i = 0; i < ndeltas; i++)
            if (deltas[i].level >= level)
                deltas[i].level = level - 1;
    }
}

// Counts outbox.messages under a SHARE lock (no writer in between) and makes the counts of
// this database valid. Waits at most ~1 s for the lock: a transaction that keeps writing
// the table open longer makes stats() count rows this time instead. The rows are counted in
// a snapshot taken once the lock is held: the statement's own snapshot predates the wait, and
// a writer that committed meanwhile (its deltas already applied) would be counted twice.
bool TakeCounts(Oid relid, int tries = 100) {
    bool locked = false;
    for (int i = 0; i < tries && !locked; i++) {
        locked = ConditionalLockRelationOid(relid, ShareLock);
        if (!locked && i + 1 < tries) {
            CHECK_FOR_INTERRUPTS();
            pg_usleep(10 * 1000L);
        }
    }
    if (!locked)
        return false;
    PushActiveSnapshot(GetLatestSnapshot());
    int rc = SPI_execute("SELECT destination, count(*) FROM outbox.messages GROUP BY destination",
                         true, 0);
    PopActiveSnapshot();
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "outbox: counting the queue failed");
    // Every destination of this database starts from zero, then the counted ones. A table made
    // anew since the last count (the extension dropped and created again) starts the
    // conservation counters afresh; otherwise they go on from server start (or from that
    // CREATE EXTENSION), so that conservation() and stats() agree from the first call.
    Oid counted_before = CountedMessages();
    bool anew = OidIsValid(counted_before) && counted_before != relid;
    ForEachDestinationCounters(MyDatabaseId, [anew](DestinationCounters *entry) {
        SpinLockAcquire(&entry->mutex);
        if (anew)
            SetBase(entry);
        entry->queued = 0;
        entry->initial = -NetSinceBase(entry);
        SpinLockRelease(&entry->mutex);
    });
    int64 total = 0;
    for (uint64 i = 0; i < SPI_processed; i++) {
        HeapTuple t = SPI_tuptable->vals[i];
        TupleDesc desc = SPI_tuptable->tupdesc;
        bool isnull;
        char *name = SPI_getvalue(t, desc, 1);
        int64 queued = DatumGetInt64(heap_getattr(t, 2, desc, &isnull));
        DestinationCounters *c = GetDestinationCounters(MyDatabaseId, name);
        if (c == nullptr) {
            UnlockRelationOid(relid, ShareLock);
            return false;  // more destinations than tracked: count every time
        }
        SpinLockAcquire(&c->mutex);
        c->queued = queued;
        c->initial = queued - NetSinceBase(c);
        SpinLockRelease(&c->mutex);
        total += queued;
    }
    CountedDatabase *db = DatabaseEntry();
    if (db == nullptr) {
        UnlockRelationOid(relid, ShareLock);
        return false;
    }
    SpinLockAcquire(&db->mutex);
    db->queued = total;
    SpinLockRelease(&db->mutex);
    SetCountsValid(MyDatabaseId, true, relid);
    // Not kept to the end of the caller's transaction (an open transaction that called stats()
    // would hold every producer): from now on every writer's commit applies its own deltas.
    UnlockRelationOid(relid, ShareLock);
    return true;
}

}  // namespace

bool superseding = false;

void RegisterQueueCountCallbacks() {
    RegisterXactCallback(OnTransaction, nullptr);
    RegisterSubXactCallback(OnSubtransaction, nullptr);
}

// This transaction's delta for `destination` at the current subtransaction level.
static Delta &DeltaFor(const char *destination) {
    int level = GetCurrentTransactionNestLevel();
    for (int i = 0; i < ndeltas; i++) {
        Delta &d = deltas[i];
        if (d.level == level && strcmp(d.destination, destination) == 0)
            return d;
    }
    if (ndeltas == max_deltas) {
        int grown = max_deltas ? max_deltas * 2 : 8;
        deltas = static_cast<Delta *>(
            deltas ? repalloc(deltas, sizeof(Delta) * grown)
                   : MemoryContextAlloc(TopMemoryContext, sizeof(Delta) * grown));
        max_deltas = grown;
    }
    Delta &d = deltas[ndeltas++];
    memset(&d, 0, sizeof d);
    d.level = level;
    strlcpy(d.destination, destination, sizeof d.destination);
    return d;
}

void CountQueueChange(const char *destination, int64 queued, int64 produced, int64 removed) {
    Delta &d = DeltaFor(destination);
    d.queued += queued;
    d.produced += produced;
    d.removed += removed;
}

void CountOutcomes(const char *destination, int64 delivered, int64 dead, int64 expired) {
    Delta &d = DeltaFor(destination);
    d.queued -= delivered + dead + expired;
    d.delivered += delivered;
    d.dead += dead;
    d.expired += expired;
}

void CountSuperseded(const char *destination, int64 superseded) {
    Delta &d = DeltaFor(destination);
    d.queued -= superseded;
    d.superseded += superseded;
    d.superseded_credit += superseded;
}

// The committed rows of `destination` (nullptr: of every destination) in a fresh snapshot: the
// size when the kept counts are not valid.
static int64 CountRows(const char *destination) {
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "outbox: SPI_connect failed");
    PushActiveSnapshot(GetLatestSnapshot());
    int rc;
    if (destination) {
        Oid types[1] = {TEXTOID};
        Datum values[1] = {CStringGetTextDatum(destination)};
        rc = SPI_execute_with_args("SELECT count(*) FROM outbox.messages WHERE destination = $1", 1,
                                   types, values, nullptr, true, 0);
    } else {
        rc = SPI_execute("SELECT count(*) FROM outbox.messages", true, 0);
    }
    PopActiveSnapshot();
    if (rc != SPI_OK_SELECT || SPI_processed != 1)
        elog(ERROR, "outbox: counting the queue failed");
    bool isnull;
    int64 n = DatumGetInt64(heap_getattr(SPI_tuptable->vals[0], 1, SPI_tuptable->tupdesc, &isnull));
    SPI_finish();
    return n;
}

// Reserves one row under a cap: succeeds (and counts the row in `*reserved`) when the committed
// size plus every reservation, this one included, is within `cap`; otherwise sets `*depth` to
// what was found besides this row. While `valid`, the kept size and the reservations are read in
// one critical section. Otherwise the row is reserved first, the reservations read in the same
// step, and the committed rows counted after (`count_rows`): a transaction gives its reservation
// back only after its commit is visible, so every producer is seen either as reserved or as
// committed, and of two that check at once the later one sees the other. Producers never wait
// for each other's transactions, only for the spinlock.
template <typename CountFn>
static bool Reserve(slock_t *mutex, int64 *queued, int64 *reserved, bool valid, int64 cap,
                    CountFn count_rows, int64 *depth) {
    SpinLockAcquire(mutex);
    int64 held = ++(*reserved);
    int64 total = valid ? *queued + held : 0;
    if (valid && total > cap)
        (*reserved)--;
    SpinLockRelease(mutex);
    if (!valid) {
        total = count_rows() + held;
        if (total > cap) {
            SpinLockAcquire(mutex);
            (*reserved)--;
            SpinLockRelease(mutex);
        }
    }
    *depth = total - 1;
    return total <= cap;
}

void ReserveQueueRow(Oid messages, const char *destination, int64 destination_cap,
                     int64 database_cap) {
    if (destination_cap <= 0 && database_cap <= 0)
        return;
    // A row that takes the place of one this (sub)transaction superseded adds nothing to the
    // queue: it needs no room. The credit is this transaction's own (the superseded row stays
    // queued, and counted, should it roll back), so no other producer can take it.
    {
        Delta &own = DeltaFor(destination);
        if (own.superseded_credit > 0) {
            own.superseded_credit--;
            return;
        }
    }
    bool valid = CountsValid(MyDatabaseId, messages);
    // The first capped insert after the counts were lost takes them, if no writer is in the
    // way right now (and this transaction wrote nothing yet: its rows would be counted twice).
    if (!valid && ndeltas == 0) {
        if (SPI_connect() != SPI_OK_CONNECT)
            elog(ERROR, "outbox: SPI_connect failed");
        valid = TakeCounts(messages, 1);
        SPI_finish();
    }
    Delta &d = DeltaFor(destination);
    if (destination_cap > 0 && d.counters == nullptr)
        d.counters = GetDestinationCounters(MyDatabaseId, destination);
    int64 depth = 0;
    if (destination_cap > 0 && d.counters != nullptr) {
        DestinationCounters *c = d.counters;
        if (!Reserve(
                &c->mutex, &c->queued, &c->reserved, valid, destination_cap,
                [destination] { return CountRows(destination); }, &depth)) {
            pg_atomic_fetch_add_u64(&c->refused, 1);
            ereport(ERROR,
                    (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
                     errmsg("outbox destination \"%s\" is full: %lld messages pending, "
                            "max_pending is %lld",
                            destination, (long long)depth, (long long)destination_cap),
                     errdetail("Pending counts the messages not yet delivered or dead-lettered, "
                               "those of transactions in progress included; this row was not "
                               "queued."),
                     errhint("Retry when the destination has caught up (outbox.stats() shows "
                             "it), or raise its cap: SELECT outbox.alter_destination('%s', "
                             "'{\"max_pending\": ...}');",
                             destination)));
        }
        d.reserved_destination++;
    }
    if (database_cap > 0) {
        CountedDatabase *db = DatabaseEntry();
        if (db != nullptr && !Reserve(
                                 &db->mutex, &db->queued, &db->reserved, valid, database_cap,
                                 [] { return CountRows(nullptr); }, &depth)) {
            if (d.counters == nullptr)
                d.counters = GetDestinationCounters(MyDatabaseId, destination);
            if (d.counters)
                pg_atomic_fetch_add_u64(&d.counters->refused, 1);
            ereport(
                ERROR,
                (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
                 errmsg("outbox queue of database \"%s\" is full: %lld messages pending, "
                        "outbox.max_pending is %lld",
                        get_database_name(MyDatabaseId), (long long)depth, (long long)database_cap),
                 errdetail("The cap is for all destinations together, messages of "
                           "transactions in progress included; this row (for destination "
                           "\"%s\") was not queued.",
                           destination),
                 errhint("Retry when the destinations have caught up (outbox.stats() shows "
                         "them), or have a superuser raise outbox.max_pending.")));
        }
        if (db != nullptr)
            d.reserved_database++;
    }
}

}  // namespace outbox::pg

using namespace outbox::pg;

// AFTER DELETE OR UPDATE OF destination FOR EACH ROW, and AFTER TRUNCATE FOR EACH
// STATEMENT, on outbox.messages: what SQL (not the worker, whose session skips this trigger)
// does to the queue sizes.
Datum outbox_messages_changed(PG_FUNCTION_ARGS) {
    auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
    if (!CALLED_AS_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._messages_changed() must be a trigger")));
    if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event)) {
        invalidate_at_commit = true;
        return PointerGetDatum(NULL);
    }
    // Rows the producer check supersedes ("compaction": "key") are counted by it, as superseded.
    if (superseding)
        return PointerGetDatum(NULL);
    TupleDesc desc = RelationGetDescr(td->tg_relation);
    int att_dest = SPI_fnumber(desc, "destination");
    auto count = [&](HeapTuple tuple, int sign) {
        bool isnull;
        char *dest = TextDatumGetCString(heap_getattr(tuple, att_dest, desc, &isnull));
        CountQueueChange(dest, sign, 0, sign < 0 && TRIGGER_FIRED_BY_DELETE(td->tg_event) ? 1 : 0);
    };
    count(td->tg_trigtuple, -1);
    if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
        count(td->tg_newtuple, +1);
    return PointerGetDatum(NULL);
}

// AFTER INSERT FOR EACH STATEMENT on outbox.messages, with the inserted rows as its transition
// table: what was actually queued (a row that an ON CONFLICT clause or a later BEFORE trigger
// left out is not), per destination. Rows of one destination usually come together: counted a
// run at a time.
Datum outbox_messages_inserted(PG_FUNCTION_ARGS) {
    auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
    if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
        !TRIGGER_FIRED_FOR_STATEMENT(td->tg_event) || !TRIGGER_FIRED_BY_INSERT(td->tg_event) ||
        td->tg_newtable == nullptr)
        ereport(ERROR,
                (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                 errmsg("outbox._messages_inserted() must be an AFTER INSERT statement trigger "
                        "with a NEW TABLE")));
    TupleDesc desc = RelationGetDescr(td->tg_relation);
    int att_dest = SPI_fnumber(desc, "destination");
    TupleTableSlot *slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
    char run[NAMEDATALEN] = "";
    int64 n = 0;
    tuplestore_rescan(td->tg_newtable);
    while (tuplestore_gettupleslot(td->tg_newtable, true, false, slot)) {
        bool isnull;
        Datum d = slot_getattr(slot, att_dest, &isnull);
        if (isnull)
            continue;
        text *t = DatumGetTextPP(d);
        int len = Min(int(VARSIZE_ANY_EXHDR(t)), NAMEDATALEN - 1);
        if (n > 0 && (strncmp(run, VARDATA_ANY(t), len) != 0 || run[len] != '\0')) {
            CountQueueChange(run, n, n, 0);
            n = 0;
        }
        if (n == 0) {
            memcpy(run, VARDATA_ANY(t), len);
            run[len] = '\0';
        }
        n++;
    }
    if (n > 0)
        CountQueueChange(run, n, n, 0);
    ExecDropSingleTupleTableSlot(slot);
    return PointerGetDatum(NULL);
}

// outbox._queue_counts(): queued, produced, removed and the starting size of each
// destination of this database; exact (counted now if the kept counts are not valid).
Datum outbox_queue_counts(PG_FUNCTION_ARGS) {
    InitMaterializedSRF(fcinfo, 0);
    auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "outbox: SPI_connect failed");
    Oid relid = MessagesRelid();
    // A hot standby cannot take the counts' SHARE lock (recovery allows nothing above ROW
    // EXCLUSIVE), and no commit there would keep them: it counts the rows as replicated each
    // time. Its counters count this server's workers, none so far: the counts start now
    // (initial = queued, nothing produced or removed here), which is what its stats() shows.
    bool replica = NoteIfReplica();
    bool valid = !replica && (CountsValid(MyDatabaseId, relid) || TakeCounts(relid));
    if (!valid) {
        // Could not take the counts (a writer kept the table locked): count rows this time. A
        // standby lists every destination, as the kept counts do.
        int rc = SPI_execute(
            replica ? "SELECT d.name, count(m.destination) FROM outbox.destinations AS d"
                      " LEFT JOIN outbox.messages AS m ON m.destination = d.name GROUP BY d.name"
                    : "SELECT destination, count(*) FROM outbox.messages GROUP BY destination",
            true, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: counting the queue failed");
        for (uint64 i = 0; i < SPI_processed; i++) {
            Datum values[9];
            bool nulls[9] = {false, false, true, true, true, true, true, true, true};
            bool isnull;
            HeapTuple t = SPI_tuptable->vals[i];
            values[0] = heap_getattr(t, 1, SPI_tuptable->tupdesc, &isnull);
            values[1] = heap_getattr(t, 2, SPI_tuptable->tupdesc, &isnull);
            if (replica) {
                values[2] = values[1];
                for (int k = 3; k < 9; k++)
                    values[k] = Int64GetDatum(0);
                for (bool &n : nulls)
                    n = false;
            }
            tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
        }
    } else {
        ForEachDestinationCounters(MyDatabaseId, [rsinfo](DestinationCounters *entry) {
            Datum values[9];
            bool nulls[9] = {false};
            SpinLockAcquire(&entry->mutex);
            int64 queued = entry->queued, initial = entry->initial;
            uint64 base[6] = {entry->base_produced, entry->base_removed, entry->base_delivered,
                              entry->base_dead,     entry->base_expired, entry->base_superseded};
            SpinLockRelease(&entry->mutex);
            pg_atomic_uint64 *now[6] = {&entry->produced, &entry->removed, &entry->delivered,
                                        &entry->dead,     &entry->expired, &entry->superseded};
            values[0] = CStringGetTextDatum(entry->key.name);
            values[1] = Int64GetDatum(queued);
            values[2] = Int64GetDatum(initial);
            for (int k = 0; k < 6; k++)
                values[3 + k] = Int64GetDatum(int64(pg_atomic_read_u64(now[k]) - base[k]));
            tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
        });
    }
    SPI_finish();
    return (Datum)0;
}

// outbox.recount(): the next outbox.stats() counts the queues of this database again.
Datum outbox_recount(PG_FUNCTION_ARGS) {
    invalidate_at_commit = true;
    PG_RETURN_VOID();
}
