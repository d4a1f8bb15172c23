// SQL functions that read shared memory: per-destination counters (behind outbox.stats()) and
// the live state of every worker (outbox.workers()).
#include <string>
#include <vector>

extern "C" {
#include "postgres.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "commands/dbcommands.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include "outbox/pg/destination_cache.hpp"
#include "outbox/pg/guard.hpp"
#include "outbox/pg/queue.hpp"
#include "outbox/pg/replica.hpp"
#include "outbox/pg/shmem.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_destination_counters(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_workers(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_destination_counters);
PG_FUNCTION_INFO_V1(outbox_workers);
}

using namespace outbox::pg;

// outbox._destination_counters(): the counters of this database's destinations since start.
static void ListDestinationCounters(FunctionCallInfo fcinfo) {
    InitMaterializedSRF(fcinfo, 0);
    auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
    if (shared == nullptr)
        return;

    // Two more columns since 0.3.0's issue 41 (recovered, transactions_open); a schema whose
    // upgrade has not run yet asks for the first 11 only.
    int natts = rsinfo->setDesc->natts;
    if (natts != 11 && natts != 13)
        throw PgError(ERRCODE_DATATYPE_MISMATCH,
                      "outbox._destination_counters() is declared with " + std::to_string(natts) +
                          " columns; this module fills 11 or 13",
                      {}, "Install the outbox module of the extension's version and restart.");
    ForEachDestinationCounters(MyDatabaseId, [rsinfo](DestinationCounters *entry) {
        Datum values[13];
        bool nulls[13] = {false};
        values[0] = CStringGetTextDatum(entry->key.name);
        values[1] = Int64GetDatum(pg_atomic_read_u64(&entry->delivered));
        values[2] = Int64GetDatum(pg_atomic_read_u64(&entry->failed));
        values[3] = Int64GetDatum(pg_atomic_read_u64(&entry->dead));
        values[4] = Int64GetDatum(pg_atomic_read_u64(&entry->expired));
        values[5] = Int64GetDatum(pg_atomic_read_u64(&entry->deferred));
        char last_error[sizeof entry->last_error];
        SpinLockAcquire(&entry->mutex);
        TimestampTz last_success = entry->last_success_at;
        memcpy(last_error, entry->last_error, sizeof last_error);
        SpinLockRelease(&entry->mutex);
        values[6] = TimestampTzGetDatum(last_success);
        nulls[6] = last_success == 0;
        values[7] = CStringGetTextDatum(last_error);
        nulls[7] = last_error[0] == '\0';
        values[8] = TimestampTzGetDatum(shared->stats_reset);
        values[9] = Int64GetDatum(pg_atomic_read_u64(&entry->refused));
        values[10] = Int64GetDatum(pg_atomic_read_u64(&entry->superseded));  // compaction
        values[11] = Int64GetDatum(pg_atomic_read_u64(&entry->recovered));   // exactly-once
        values[12] = Int64GetDatum(pg_atomic_read_u64(&entry->transactions_open));
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    });
}

Datum outbox_destination_counters(PG_FUNCTION_ARGS) {
    CxxTry([fcinfo] { ListDestinationCounters(fcinfo); });
    return (Datum)0;
}

// outbox.workers(): one row per running worker, in every database.
static void ListWorkers(FunctionCallInfo fcinfo) {
    InitMaterializedSRF(fcinfo, 0);
    auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
    if (shared == nullptr)
        return;
    if (rsinfo->setDesc->natts > 17)
        throw PgError(ERRCODE_DATATYPE_MISMATCH,
                      "outbox.workers() is declared with " +
                          std::to_string(rsinfo->setDesc->natts) + " columns; this module fills 17",
                      {}, "Install the outbox module of the extension's version and restart.");
    for (int i = 0; i < shared->num_slots; i++) {
        WorkerSlot *slot = &shared->slots[i];
        pid_t pid = slot->pid;
        // The inbox workers deliver nothing: outbox.subscriptions() and pg_stat_activity
        // (backend_type "outbox inbox worker") show them.
        if (!slot->in_use || pid == 0 || slot->inbox)
            continue;
        char destination[NAMEDATALEN];
        SpinLockAcquire(&slot->mutex);
        memcpy(destination, slot->destination, sizeof destination);
        Oid database = slot->database;
        int worker_index = slot->worker_index;
        TimestampTz started_at = slot->started_at, last_cycle_at = slot->last_cycle_at;
        SpinLockRelease(&slot->mutex);

        // Two more columns since 0.2.0 (driver_pid, driver_restarts); a 0.1.0 schema whose
        // upgrade has not run yet asks for the first 15 only.
        Datum values[17];
        bool nulls[17] = {false};
        char *dbname = get_database_name(database);
        values[0] = Int32GetDatum(pid);
        values[1] = dbname ? CStringGetTextDatum(dbname) : (Datum)0;
        nulls[1] = dbname == nullptr;
        values[2] = Int32GetDatum(worker_index);
        values[3] = CStringGetTextDatum(WorkerStateName(pg_atomic_read_u32(&slot->state)));
        values[4] = CStringGetTextDatum(destination);
        nulls[4] = destination[0] == '\0';
        values[5] = Int64GetDatum(pg_atomic_read_u32(&slot->batch_in_flight));
        values[6] = TimestampTzGetDatum(started_at);
        values[7] = TimestampTzGetDatum(last_cycle_at);
        nulls[7] = last_cycle_at == 0;
        pg_atomic_uint64 *counters[] = {&slot->cycles,  &slot->claimed,  &slot->delivered,
                                        &slot->retried, &slot->deferred, &slot->dead,
                                        &slot->expired};
        for (int c = 0; c < 7; c++)
            values[8 + c] = Int64GetDatum(pg_atomic_read_u64(counters[c]));
        uint32 driver_pid = pg_atomic_read_u32(&slot->driver_pid);
        values[15] = Int32GetDatum(int32(driver_pid));
        nulls[15] = driver_pid == 0;
        values[16] = Int64GetDatum(pg_atomic_read_u64(&slot->driver_restarts));
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    }
}

Datum outbox_workers(PG_FUNCTION_ARGS) {
    NoteIfReplica();  // none runs on a hot standby: say why the list is empty
    CxxTry([fcinfo] { ListWorkers(fcinfo); });
    return (Datum)0;
}
