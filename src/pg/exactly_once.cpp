// Recovery of an exactly-once destination's leased rows (include/outbox/pg/exactly_once.hpp).
#include "outbox/pg/exactly_once.hpp"

#include <map>
#include <vector>

#include "outbox/exactly_once.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
}

#include "outbox/pg/guard.hpp"
#include "outbox/pg/spi.hpp"

namespace outbox::pg {

namespace {

// The worker's own leases only (LeaseTokenFor puts its index in the token's high bits): another
// worker's batches belong to its own transactional.id and its own marker.
const char *const kLeasedSql =
    "SELECT id, lease_token FROM outbox.messages"
    " WHERE destination = $1 AND lease_token IS NOT NULL AND lease_token > 0"
    "   AND (lease_token >> 52) = $2";

// Adopted batches: exactly the leases that were found lapsed before the fence.
const char *const kAdoptedSql =
    "SELECT id, lease_token FROM outbox.messages"
    " WHERE destination = $1 AND lease_token = ANY ($2)";

// Lapsed leases of other worker indexes (due again by available_at, which the claims skip for
// an exactly-once destination). Both claim orders' rows: unordered and ordered (order_key).
const char *const kLapsedForeignSql =
    "SELECT lease_token FROM outbox.messages"
    " WHERE destination = $1 AND lease_token > 0 AND (lease_token >> 52) <> $2"
    "   AND available_at <= pg_catalog.statement_timestamp()"
    " GROUP BY lease_token LIMIT 256";

SPIPlanPtr leased_plan = nullptr, adopted_plan = nullptr, lapsed_plan = nullptr;

// (id, lease token) of the rows the last SELECT returned.
std::vector<std::pair<int64_t, int64_t>> ReadRows() {
    std::vector<std::pair<int64_t, int64_t>> rows;
    for (uint64 i = 0; i < SPI_processed; i++) {
        bool isnull;
        int64_t id =
            DatumGetInt64(heap_getattr(SPI_tuptable->vals[i], 1, SPI_tuptable->tupdesc, &isnull));
        int64_t token =
            DatumGetInt64(heap_getattr(SPI_tuptable->vals[i], 2, SPI_tuptable->tupdesc, &isnull));
        rows.emplace_back(id, token);
    }
    return rows;
}

// The batch under the marker's lease is deleted as delivered, every other is due again at once
// with no attempt spent; returns what was written, with how many rows went which way.
WriteBackCounts Settle(const std::string &destination,
                       const std::vector<std::pair<int64_t, int64_t>> &rows, int64_t marker_token,
                       int64_t *batches, size_t *deleted) {
    std::vector<int64_t> tokens;
    for (const auto &[id, token] : rows)
        tokens.push_back(token);
    RecoveryPlan plan = PlanRecovery(marker_token, tokens);
    *batches = int64_t(plan.delivered.size());
    std::vector<Resolution> resolutions;
    *deleted = 0;
    for (const auto &[id, token] : rows) {
        Resolution r;
        r.id = id;
        r.lease_token = token;
        if (marker_token != 0 && token == marker_token) {
            r.action = Resolution::Action::Delete;
            ++*deleted;
        } else {
            // Nothing of it was delivered; no attempt spent (the destination did not fail it).
            r.action = Resolution::Action::Reschedule;
            r.refund_attempt = true;
        }
        resolutions.push_back(std::move(r));
    }
    if (resolutions.empty())
        return {};
    return WriteBack(destination, resolutions);
}

}  // namespace

WriteBackCounts RecoverLeased(const std::string &destination, int worker_index,
                              int64_t marker_token, int64_t *batches) {
    PgTry([&] {
        Oid types[2] = {TEXTOID, INT8OID};
        Datum args[2] = {CStringGetTextDatum(destination.c_str()),
                         Int64GetDatum(int64(worker_index) + 1)};
        int rc =
            SPI_execute_plan(KeptPlan(&leased_plan, kLeasedSql, 2, types), args, nullptr, true, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading leased rows failed: %s", SPI_result_code_string(rc));
    });
    std::vector<std::pair<int64_t, int64_t>> rows = ReadRows();
    size_t delivered = 0;
    *batches = 0;
    if (rows.empty())
        return {};
    WriteBackCounts written = Settle(destination, rows, marker_token, batches, &delivered);
    ereport(LOG, (errmsg("outbox: %s: exactly-once recovery: %zu leased messages were in the "
                         "committed transaction of the last batch and are deleted without "
                         "being sent again, %zu were in transactions that did not commit and "
                         "are due again",
                         destination.c_str(), delivered, rows.size() - delivered)));
    return written;
}

std::vector<int64_t> LapsedForeignLeases(const std::string &destination, int own_index) {
    PgTry([&] {
        Oid types[2] = {TEXTOID, INT8OID};
        Datum args[2] = {CStringGetTextDatum(destination.c_str()),
                         Int64GetDatum(LeaseTokenTag(own_index))};
        int rc = SPI_execute_plan(KeptPlan(&lapsed_plan, kLapsedForeignSql, 2, types), args,
                                  nullptr, true, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading lapsed leases failed: %s", SPI_result_code_string(rc));
    });
    std::vector<int64_t> tokens;
    for (uint64 i = 0; i < SPI_processed; i++) {
        bool isnull;
        tokens.push_back(
            DatumGetInt64(heap_getattr(SPI_tuptable->vals[i], 1, SPI_tuptable->tupdesc, &isnull)));
    }
    return tokens;
}

WriteBackCounts RecoverAdopted(const std::string &destination, int worker_index,
                               int64_t marker_token, const std::vector<int64_t> &tokens,
                               int64_t *batches) {
    PgTry([&] {
        Oid types[2] = {TEXTOID, INT8ARRAYOID};
        Datum args[2] = {CStringGetTextDatum(destination.c_str()), Int8Array(tokens)};
        int rc = SPI_execute_plan(KeptPlan(&adopted_plan, kAdoptedSql, 2, types), args, nullptr,
                                  true, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading adopted rows failed: %s", SPI_result_code_string(rc));
    });
    std::vector<std::pair<int64_t, int64_t>> rows = ReadRows();
    size_t delivered = 0;
    *batches = 0;
    WriteBackCounts written;
    if (!rows.empty())
        written = Settle(destination, rows, marker_token, batches, &delivered);
    ereport(LOG,
            (errmsg("outbox: %s: exactly-once: adopted worker %d's transactional.id (its "
                    "producer fenced, its open transaction aborted) for %zu lapsed batches: "
                    "%zu of their messages were in its last committed transaction and are "
                    "deleted without being sent again, %zu were in transactions that did not "
                    "commit and are due again",
                    destination.c_str(), worker_index, tokens.size(), delivered,
                    rows.size() - delivered),
             rows.empty() ? errdetail("Worker %d had settled them already.", worker_index) : 0));
    return written;
}

}  // namespace outbox::pg
