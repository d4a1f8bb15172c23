// The inbox's SQL on the worker's side (see include/outbox/pg/inbox.hpp).
#include "outbox/pg/inbox.hpp"

extern "C" {
#include "postgres.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
}

#include "outbox/pg/guard.hpp"
#include "outbox/pg/queue.hpp"

namespace outbox::pg {

namespace {

// The oldest dedup rows past the retention, a bounded batch at a time (never one huge
// DELETE); by TID, so each row costs no second index descent.
const char *const kSweepInboxSql =
    "DELETE FROM outbox.inbox WHERE ctid = ANY (ARRAY("
    "  SELECT ctid FROM outbox.inbox"
    "   WHERE received_at < pg_catalog.now() - $1 * interval '1 second'"
    "   ORDER BY received_at LIMIT $2))";

SPIPlanPtr sweep_inbox_plan;

}  // namespace

int64_t SweepInbox(int64_t older_than_s, int limit) {
    return PgTry([&] {
        Oid types[2] = {INT8OID, INT4OID};
        Datum args[2] = {Int64GetDatum(older_than_s), Int32GetDatum(limit)};
        int rc = SPI_execute_plan(KeptPlan(&sweep_inbox_plan, kSweepInboxSql, 2, types), args,
                                  nullptr, false, 0);
        if (rc != SPI_OK_DELETE)
            elog(ERROR, "outbox: sweeping outbox.inbox failed: %s", SPI_result_code_string(rc));
        return int64(SPI_processed);
    });
}

// Only plain C data lives in this frame: PostgreSQL errors longjmp through it.
void CheckInboxEmpty() {
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "outbox: SPI_connect failed");
    // A 0.1.0 schema has no inbox.
    int rc = SPI_execute(
        "SELECT CASE WHEN to_regclass('outbox.inbox_subscriptions') IS NOT NULL THEN"
        "         (SELECT count(*) FROM outbox.inbox_subscriptions) ELSE 0 END,"
        "       CASE WHEN to_regclass('outbox.inbox') IS NOT NULL THEN"
        "         (SELECT count(*) FROM outbox.inbox) ELSE 0 END",
        true, 1);
    if (rc != SPI_OK_SELECT || SPI_processed != 1)
        elog(ERROR, "outbox: counting the inbox failed");
    bool isnull;
    int64 subscriptions =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    int64 dedup_rows =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
    SPI_finish();
    if (subscriptions > 0 || dedup_rows > 0)
        ereport(ERROR,
                (errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
                 errmsg("extension \"outbox\" has %lld subscriptions and %lld inbox dedup rows",
                        (long long)subscriptions, (long long)dedup_rows),
                 errdetail("Dropping the extension would delete them, and events already "
                           "applied would be applied again; CASCADE does not say they may go."),
                 errhint("Drop the subscriptions (outbox.drop_subscription) and delete the "
                         "dedup rows you no longer need, or SET outbox.drop_nonempty = on to "
                         "drop them with the extension.")));
}

}  // namespace outbox::pg
