// SPI and catalog helpers the claims, the write-backs and the inbox share (see
// include/outbox/pg/spi.hpp).
#include "outbox/pg/spi.hpp"

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "postgres.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/guard.hpp"

namespace outbox::pg {

// Plans survive across transactions (SPI_keepplan); a plan whose tables were dropped and
// created again is re-analysed by the plan cache on its next use.
SPIPlanPtr KeptPlan(SPIPlanPtr *slot, const char *sql, int nargs, Oid *types) {
    if (*slot == nullptr) {
        SPIPlanPtr plan = SPI_prepare(sql, nargs, types);
        if (plan == nullptr)
            elog(ERROR, "outbox: SPI_prepare failed (%s) for: %s",
                 SPI_result_code_string(SPI_result), sql);
        if (SPI_keepplan(plan) != 0)
            elog(ERROR, "outbox: SPI_keepplan failed");
        *slot = plan;
    }
    return *slot;
}

ExtensionState InstalledExtension(std::string *version) {
    char found[64] = "";
    bool exists = PgTry([&found] {
        Relation rel = table_open(ExtensionRelationId, AccessShareLock);
        ScanKeyData key;
        ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
                    CStringGetDatum("outbox"));
        SysScanDesc scan = systable_beginscan(rel, ExtensionNameIndexId, true, nullptr, 1, &key);
        HeapTuple tuple = systable_getnext(scan);
        bool any = HeapTupleIsValid(tuple);
        if (any) {
            bool isnull;
            Datum v =
                heap_getattr(tuple, Anum_pg_extension_extversion, RelationGetDescr(rel), &isnull);
            if (!isnull)
                text_to_cstring_buffer(DatumGetTextPP(v), found, sizeof found);
        }
        systable_endscan(scan);
        table_close(rel, AccessShareLock);
        return any;
    });
    *version = found;
    if (!exists)
        return ExtensionState::Missing;
    return strcmp(found, OUTBOX_EXTVERSION) == 0 ? ExtensionState::Ready
                                                 : ExtensionState::OtherVersion;
}

Datum Int8Array(const std::vector<int64_t> &values) {
    Datum *datums = static_cast<Datum *>(palloc(sizeof(Datum) * (values.size() + 1)));
    for (size_t i = 0; i < values.size(); i++)
        datums[i] = Int64GetDatum(values[i]);
    return PointerGetDatum(
        construct_array(datums, int(values.size()), INT8OID, 8, true, TYPALIGN_DOUBLE));
}

Datum TidArray(const std::vector<ItemPointerData> &values) {
    Datum *datums = static_cast<Datum *>(palloc(sizeof(Datum) * (values.size() + 1)));
    for (size_t i = 0; i < values.size(); i++)
        datums[i] = PointerGetDatum(const_cast<ItemPointerData *>(&values[i]));
    return PointerGetDatum(construct_array(datums, int(values.size()), TIDOID,
                                           sizeof(ItemPointerData), false, TYPALIGN_SHORT));
}

Datum TextDatum(const std::string &s) {
    return PointerGetDatum(cstring_to_text_with_len(s.data(), int(s.size())));
}

Datum TimestampFromUnixMs(int64_t ms) {
    // Unix epoch milliseconds -> PostgreSQL's microseconds since 2000-01-01.
    return TimestampTzGetDatum(TimestampTz(ms) * 1000 -
                               TimestampTz(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
                                   USECS_PER_DAY);
}

Datum Int4Array(const std::vector<int> &values) {
    Datum *datums = static_cast<Datum *>(palloc(sizeof(Datum) * (values.size() + 1)));
    for (size_t i = 0; i < values.size(); i++)
        datums[i] = Int32GetDatum(values[i]);
    return PointerGetDatum(
        construct_array(datums, int(values.size()), INT4OID, 4, true, TYPALIGN_INT));
}

// A text[]; an empty string becomes NULL (no error to record).
Datum TextArray(const std::vector<const char *> &values) {
    size_t n = values.size();
    Datum *datums = static_cast<Datum *>(palloc(sizeof(Datum) * (n + 1)));
    bool *nulls = static_cast<bool *>(palloc(sizeof(bool) * (n + 1)));
    for (size_t i = 0; i < n; i++) {
        nulls[i] = values[i][0] == '\0';
        datums[i] = nulls[i] ? Datum(0) : CStringGetTextDatum(values[i]);
    }
    int dims[1] = {int(n)};
    int lbs[1] = {1};
    return PointerGetDatum(
        construct_md_array(datums, nulls, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT));
}

}  // namespace outbox::pg
