// Checks on outbox.destinations: every row is validated on its way in, however it is written
// (create/alter_destination or a superuser's INSERT), and every change tells all backends to
// drop their copy of the table (destination_cache.cpp).
#include <string>

#include "outbox/config.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/rel.h"
}

#include "outbox/pg/guard.hpp"
#include "outbox/pg/producer.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_destinations_check(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_destinations_changed(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_destinations_check);
PG_FUNCTION_INFO_V1(outbox_destinations_changed);
}

namespace outbox::pg {

// Validates a destination's config with the same parser the worker uses; all problems in one
// error.
static void CheckConfig(const char *name, DestinationKind kind, const char *json) {
    CxxTry([&] {
        ConfigCheck check = CheckDestinationConfig(kind, json);
        if (check.ok())
            return;
        std::string detail;
        for (const std::string &problem : check.problems) {
            if (!detail.empty())
                detail += '\n';
            detail += problem;
        }
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      std::string("invalid configuration for ") + DestinationKindName(kind) +
                          " destination \"" + name + "\"",
                      detail,
                      check.problems.size() == 1
                          ? "Fix the setting above; README.md lists every setting."
                          : "Fix the " + std::to_string(check.problems.size()) +
                                " settings above; README.md lists every setting.");
    });
}

static char *TextColumn(HeapTuple tuple, TupleDesc desc, const char *column) {
    bool isnull;
    Datum d = heap_getattr(tuple, SPI_fnumber(desc, column), desc, &isnull);
    return isnull ? nullptr : TextDatumGetCString(d);
}

}  // namespace outbox::pg

using namespace outbox::pg;

// BEFORE INSERT OR UPDATE FOR EACH ROW on outbox.destinations.
Datum outbox_destinations_check(PG_FUNCTION_ARGS) {
    auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
    if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
        !TRIGGER_FIRED_FOR_ROW(td->tg_event) || TRIGGER_FIRED_BY_DELETE(td->tg_event))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._destinations_check() must be a BEFORE INSERT OR UPDATE "
                               "row trigger")));
    bool is_update = TRIGGER_FIRED_BY_UPDATE(td->tg_event);
    HeapTuple tuple = is_update ? td->tg_newtuple : td->tg_trigtuple;
    TupleDesc desc = RelationGetDescr(td->tg_relation);

    char *name = TextColumn(tuple, desc, "name");
    if (name == nullptr)
        ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION), errmsg("a destination needs a name"),
                        errdetail("A destination name is 1 to 63 characters of letters, digits, "
                                  "'_', '.' and '-', starting with a letter or digit.")));
    if (!outbox::IsValidDestinationName(name))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("invalid destination name \"%s\"", name),
                        errdetail("A destination name is 1 to 63 characters of letters, digits, "
                                  "'_', '.' and '-', starting with a letter or digit.")));
    char *kind_text = TextColumn(tuple, desc, "kind");
    if (kind_text == nullptr)
        ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION),
                        errmsg("destination \"%s\" needs a kind", name),
                        errhint("Use \"kafka\" or \"webhook\".")));
    auto kind = outbox::ParseDestinationKind(kind_text);
    if (!kind)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("unknown destination kind \"%s\"", kind_text),
                        errhint("Use \"kafka\" or \"webhook\".")));
    if (is_update) {
        char *old_name = TextColumn(td->tg_trigtuple, desc, "name");
        char *old_kind = TextColumn(td->tg_trigtuple, desc, "kind");
        if (strcmp(old_name, name) != 0)
            ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                            errmsg("destination \"%s\" cannot be renamed", old_name),
                            errdetail("Messages refer to their destination by name."),
                            errhint("Create a destination with the new name instead.")));
        if (strcmp(old_kind, kind_text) != 0)
            ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                            errmsg("the kind of destination \"%s\" cannot be changed", name),
                            errhint("Create a new destination of kind \"%s\".", kind_text)));
    }
    bool isnull;
    Datum config = heap_getattr(tuple, SPI_fnumber(desc, "config"), desc, &isnull);
    if (isnull)
        ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION),
                        errmsg("destination \"%s\" has no configuration", name),
                        errhint("Pass a JSON object, for example '{\"url\": \"https://...\"}'.")));
    Jsonb *jb = DatumGetJsonbP(config);
    char *json = JsonbToCString(nullptr, &jb->root, VARSIZE(jb));
    CheckConfig(name, *kind, json);
    return PointerGetDatum(tuple);
}

// AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE FOR EACH STATEMENT on outbox.destinations:
// at commit every backend (producers and workers) drops its cached copy of the table, and the
// workers are woken so that a pause, resume or new setting takes effect at once.
Datum outbox_destinations_changed(PG_FUNCTION_ARGS) {
    auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
    if (!CALLED_AS_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._destinations_changed() must be a trigger")));
    CacheInvalidateRelcacheByRelid(RelationGetRelid(td->tg_relation));
    ReloadAtCommit();
    return PointerGetDatum(nullptr);
}
