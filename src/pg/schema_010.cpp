// What this module keeps for a database whose schema is still outbox 0.1.0 (until ALTER
// EXTENSION outbox UPDATE): the C functions that schema declares.
extern "C" {
#include "postgres.h"
#include "fmgr.h"
}

extern "C" {
PGDLLEXPORT Datum outbox_key_heads(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_requeueing(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_reordering_keys(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_key_heads);
PG_FUNCTION_INFO_V1(outbox_requeueing);
PG_FUNCTION_INFO_V1(outbox_reordering_keys);
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
