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

SPIPlanPtr leased_plan = nullptr;

}  // namespace

WriteBackCounts RecoverLeased(const std::string &destination, int worker_index,
                              int64_t marker_token, int64_t *batches) {
    std::vector<std::pair<int64_t, int64_t>> rows;  // id, lease token
    PgTry([&] {
        Oid types[2] = {TEXTOID, INT8OID};
        Datum args[2] = {CStringGetTextDatum(destination.c_str()),
                         Int64GetDatum(int64(worker_index) + 1)};
        int rc =
            SPI_execute_plan(KeptPlan(&leased_plan, kLeasedSql, 2, types), args, nullptr, true, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading leased rows failed: %s", SPI_result_code_string(rc));
    });
    for (uint64 i = 0; i < SPI_processed; i++) {
        bool isnull;
        int64_t id =
            DatumGetInt64(heap_getattr(SPI_tuptable->vals[i], 1, SPI_tuptable->tupdesc, &isnull));
        int64_t token =
            DatumGetInt64(heap_getattr(SPI_tuptable->vals[i], 2, SPI_tuptable->tupdesc, &isnull));
        rows.emplace_back(id, token);
    }
    std::vector<int64_t> tokens;
    for (const auto &[id, token] : rows)
        tokens.push_back(token);
    RecoveryPlan plan = PlanRecovery(marker_token, tokens);
    *batches = int64_t(plan.delivered.size());
    std::vector<Resolution> resolutions;
    size_t delivered = 0;
    for (const auto &[id, token] : rows) {
        Resolution r;
        r.id = id;
        r.lease_token = token;
        if (token == marker_token) {
            r.action = Resolution::Action::Delete;
            delivered++;
        } else {
            // Nothing of it was delivered; no attempt spent (the destination did not fail it).
            r.action = Resolution::Action::Reschedule;
            r.refund_attempt = true;
        }
        resolutions.push_back(std::move(r));
    }
    if (resolutions.empty())
        return {};
    ereport(LOG, (errmsg("outbox: %s: exactly-once recovery: %zu leased messages were in the "
                         "committed transaction of the last batch and are deleted without "
                         "being sent again, %zu were in transactions that did not commit and "
                         "are due again",
                         destination.c_str(), delivered, resolutions.size() - delivered)));
    return WriteBack(destination, resolutions);
}

}  // namespace outbox::pg
