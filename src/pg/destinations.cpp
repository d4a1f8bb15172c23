// Checks on outbox.destinations: every row is validated on its way in, however it is written
// (create/alter_destination or a superuser's INSERT), and every change tells all backends to
// drop their copy of the table (destination_cache.cpp).
//
// Who may choose settings that make the database server run code or read files is decided
// here, from the role that called create/alter_destination (config.cpp only reports them):
// the worker runs every stored setting as the server's OS user.
#include <string>
#include <vector>

#include "outbox/config.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
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

// What the role defining a destination may have the database server do.
struct CallerPrivileges {
    bool runs_code;    // a superuser
    bool reads_files;  // a superuser or a member of pg_read_server_files
};

// Lines joined with newlines, for an errdetail.
static std::string JoinLines(const std::vector<std::string> &lines) {
    std::string text;
    for (const std::string &line : lines) {
        if (!text.empty())
            text += '\n';
        text += line;
    }
    return text;
}

// Validates a destination's config with the same parser the worker uses, and checks that the
// caller may use the privileged settings it adds or changes; throws a PgError for the first
// of these that fails (privileges before validity), with every problem of that kind in it.
//
// On UPDATE only the privileged settings that this UPDATE adds or changes (OLD compared with
// NEW) need the caller's privileges: alter_destination merges the given keys into the stored
// config, so a destination a superuser configured for Kerberos or a client certificate still
// carries those settings when an operator changes its retry settings, and the operator did
// not choose them. Changing or adding such a setting, or respelling it, needs the privilege.
static void CheckConfigOrThrow(const char *name, DestinationKind kind, const char *json,
                               const char *old_json, CallerPrivileges caller) {
    const std::string destination =
        std::string(DestinationKindName(kind)) + " destination \"" + name + "\"";
    CheckOptions options;
    // A role that may not have the server read files must not learn which paths exist.
    options.check_files = caller.reads_files;
    ConfigCheck check = CheckDestinationConfig(kind, json, options);

    std::vector<PrivilegedSetting> chosen = check.privileged;
    if (old_json != nullptr) {
        CheckOptions no_files;
        no_files.check_files = false;
        chosen = AddedOrChangedSettings(CheckDestinationConfig(kind, old_json, no_files).privileged,
                                        check.privileged);
    }
    std::vector<std::string> denied;
    bool code_denied = false;
    for (const PrivilegedSetting &setting : chosen) {
        bool allowed =
            setting.access == ServerAccess::RunsCode ? caller.runs_code : caller.reads_files;
        if (!allowed) {
            denied.push_back(setting.problem);
            code_denied = code_denied || setting.access == ServerAccess::RunsCode;
        }
    }
    if (!denied.empty()) {
        const bool one = denied.size() == 1;
        std::string hint = one ? "Leave it out, or ask a superuser to set it"
                               : "Leave them out, or ask a superuser to set them";
        hint += code_denied ? "." : " or to grant you pg_read_server_files.";
        hint += " Such settings that a superuser chose stay in place when you alter others.";
        throw PgError(ERRCODE_INSUFFICIENT_PRIVILEGE,
                      "permission denied to configure " + destination, JoinLines(denied), hint);
    }

    if (check.ok())
        return;
    std::string hint = check.problems.size() == 1
                           ? "Fix the setting above; README.md lists every setting."
                           : "Fix the " + std::to_string(check.problems.size()) +
                                 " settings above; README.md lists every setting.";
    for (const std::string &extra : check.hints)
        hint += " " + extra;
    throw PgError(ERRCODE_INVALID_PARAMETER_VALUE, "invalid configuration for " + destination,
                  JoinLines(check.problems), hint);
}

// CheckConfigOrThrow at the C++ boundary. Its errors leave the statement out of the server
// log (errhidestmt): the statement is a create/alter_destination call whose config holds
// secrets, and log_min_error_statement would otherwise log it whole.
static void CheckConfig(const char *name, DestinationKind kind, const char *json,
                        const char *old_json, CallerPrivileges caller) {
    CaughtError error;
    bool failed = false;
    try {
        CheckConfigOrThrow(name, kind, json, old_json, caller);
    } catch (...) {
        CaptureCurrentException(&error);
        failed = true;
    }
    if (failed)
        ereport(ERROR, (errcode(error.sqlerrcode), errmsg_internal("%s", error.message),
                        error.detail[0] ? errdetail_internal("%s", error.detail) : 0,
                        error.hint[0] ? errhint("%s", error.hint) : 0, errhidestmt(true)));
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
                               "row trigger"),
                        errhidestmt(true)));
    bool is_update = TRIGGER_FIRED_BY_UPDATE(td->tg_event);
    HeapTuple tuple = is_update ? td->tg_newtuple : td->tg_trigtuple;
    TupleDesc desc = RelationGetDescr(td->tg_relation);

    char *name = TextColumn(tuple, desc, "name");
    // Every error below leaves the statement out of the server log (errhidestmt): it is a
    // create/alter_destination call or an INSERT whose config may hold secrets.
    if (name == nullptr)
        ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION), errmsg("a destination needs a name"),
                        errdetail("A destination name is 1 to 63 characters of letters, digits, "
                                  "'_', '.' and '-', starting with a letter or digit."),
                        errhidestmt(true)));
    if (!outbox::IsValidDestinationName(name))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("invalid destination name \"%s\"", name),
                        errdetail("A destination name is 1 to 63 characters of letters, digits, "
                                  "'_', '.' and '-', starting with a letter or digit."),
                        errhidestmt(true)));
    char *kind_text = TextColumn(tuple, desc, "kind");
    if (kind_text == nullptr)
        ereport(
            ERROR,
            (errcode(ERRCODE_NOT_NULL_VIOLATION), errmsg("destination \"%s\" needs a kind", name),
             errhint("Use \"kafka\", \"webhook\", \"amqp\" or \"nats\"."), errhidestmt(true)));
    auto kind = outbox::ParseDestinationKind(kind_text);
    if (!kind)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("unknown destination kind \"%s\"", kind_text),
                 errhint("Use \"kafka\", \"webhook\", \"amqp\" or \"nats\"."), errhidestmt(true)));
    char *old_json = nullptr;
    if (is_update) {
        char *old_name = TextColumn(td->tg_trigtuple, desc, "name");
        char *old_kind = TextColumn(td->tg_trigtuple, desc, "kind");
        if (strcmp(old_name, name) != 0)
            ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                            errmsg("destination \"%s\" cannot be renamed", old_name),
                            errdetail("Messages refer to their destination by name."),
                            errhint("Create a destination with the new name instead."),
                            errhidestmt(true)));
        if (strcmp(old_kind, kind_text) != 0)
            ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                            errmsg("the kind of destination \"%s\" cannot be changed", name),
                            errhint("Create a new destination of kind \"%s\".", kind_text),
                            errhidestmt(true)));
        bool old_isnull;
        Datum old_config =
            heap_getattr(td->tg_trigtuple, SPI_fnumber(desc, "config"), desc, &old_isnull);
        if (!old_isnull) {
            Jsonb *old_jb = DatumGetJsonbP(old_config);
            old_json = JsonbToCString(nullptr, &old_jb->root, VARSIZE(old_jb));
        }
    }
    bool isnull;
    Datum config = heap_getattr(tuple, SPI_fnumber(desc, "config"), desc, &isnull);
    if (isnull)
        ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION),
                        errmsg("destination \"%s\" has no configuration", name),
                        errhint("Pass a JSON object, for example '{\"url\": \"https://...\"}'."),
                        errhidestmt(true)));
    Jsonb *jb = DatumGetJsonbP(config);
    char *json = JsonbToCString(nullptr, &jb->root, VARSIZE(jb));
    // The role that called create/alter_destination: those are SECURITY DEFINER functions
    // owned by a superuser, so GetUserId() is their owner here; GetOuterUserId() is the
    // session's role (SET ROLE included), which security-definer calls do not change.
    Oid caller = GetOuterUserId();
    CallerPrivileges privileges;
    privileges.runs_code = superuser_arg(caller);
    privileges.reads_files =
        privileges.runs_code || has_privs_of_role(caller, ROLE_PG_READ_SERVER_FILES);
    CheckConfig(name, *kind, json, old_json, privileges);
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
    return PointerGetDatum(NULL);
}
