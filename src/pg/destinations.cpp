// Checks on outbox.destinations: every row is validated on its way in, however it is written
// (create/alter_destination or a superuser's INSERT), and every change tells all backends to
// drop their copy of the table (destination_cache.cpp).
//
// Who may choose settings that make the database server run code or read files is decided
// here, from the role that called create/alter_destination (config.cpp only reports them):
// the worker runs every stored setting as the server's OS user.
#include <string>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/brokers/registry.hpp"
#include "outbox/config.hpp"
#include "outbox/config_query.hpp"

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

#include "outbox/pg/config_errors.hpp"
#include "outbox/pg/guard.hpp"
#include "outbox/pg/producer.hpp"
#include "outbox/pg/settings.hpp"

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

// Validates a destination's config with the same parser the worker uses, and checks that the
// caller may use the privileged settings it adds or changes; throws a PgError for the first
// of these that fails (privileges before validity), with every problem of that kind in it.
//
// On UPDATE only the privileged settings that this UPDATE adds or changes (OLD compared with
// NEW) need the caller's privileges: alter_destination merges the given keys into the stored
// config, so a destination a superuser configured for Kerberos or a client certificate still
// carries those settings when an operator changes its retry settings, and the operator did
// not choose them. Changing or adding such a setting, or respelling it, needs the privilege.
//
// A kind may also check a config against the settings of the server (DriverSide::check_server:
// a webhook's URL against outbox.webhook_allowed_networks and its timeout against
// outbox.lease_timeout): a refusal is raised after the privileges, its problems with the
// config's.
//
// The check runs in outbox-driver (the kinds' checks need their client libraries, which the
// module does not link).
static void CheckConfigOrThrow(const char *name, const BrokerKind &kind, const char *json,
                               const char *old_json, CallerPrivileges caller) {
    const std::string destination = std::string(kind.name) + " destination \"" + name + "\"";
    ConfigQuery query;
    query.kind = kind.name;
    query.config = json;
    query.has_old = old_json != nullptr;
    query.old_config = old_json ? old_json : "";
    // A role that may not have the server read files must not learn which paths exist.
    query.check_files = caller.reads_files;
    query.server.lease_timeout_ms = setting_lease_timeout_ms;
    query.server.webhook_allowed_networks =
        setting_webhook_allowed_networks ? setting_webhook_allowed_networks : "";
    ConfigAnswer answer = CheckConfig(query);

    std::vector<PrivilegedSetting> chosen = answer.config.privileged;
    if (old_json != nullptr)
        chosen = AddedOrChangedSettings(answer.old.privileged, answer.config.privileged);
    ThrowIfSettingsDenied(
        destination, chosen, caller.runs_code, caller.reads_files,
        "Such settings that a superuser chose stay in place when you alter others.");
    if (answer.config.ok() && !caller.runs_code)
        ThrowIfBrokerHostRefused(destination, answer.config.hosts,
                                 old_json ? answer.old.hosts : std::vector<std::string>());
    if (answer.server.refused)
        throw PgError(ERRCODE_INSUFFICIENT_PRIVILEGE,
                      "permission denied to configure " + destination + ": " + answer.server.reason,
                      answer.server.detail, answer.server.hint);
    std::vector<std::string> problems = answer.config.problems;
    std::vector<std::string> hints = answer.config.hints;
    problems.insert(problems.end(), answer.server.problems.begin(), answer.server.problems.end());
    hints.insert(hints.end(), answer.server.hints.begin(), answer.server.hints.end());
    ThrowIfConfigProblems(destination, problems, hints, kind.docs);
}

// A text column of `tuple`, palloc'd (nullptr when NULL).
static char *TextColumn(HeapTuple tuple, TupleDesc desc, const char *column) {
    return PgTry([&]() -> char * {
        bool isnull;
        Datum d = heap_getattr(tuple, SPI_fnumber(desc, column), desc, &isnull);
        return isnull ? nullptr : TextDatumGetCString(d);
    });
}

// The jsonb column `config` of `tuple` as text, palloc'd (nullptr when NULL).
static char *ConfigText(HeapTuple tuple, TupleDesc desc) {
    return PgTry([&]() -> char * {
        bool isnull;
        Datum d = heap_getattr(tuple, SPI_fnumber(desc, "config"), desc, &isnull);
        if (isnull)
            return nullptr;
        Jsonb *jb = DatumGetJsonbP(d);
        return JsonbToCString(nullptr, &jb->root, VARSIZE(jb));
    });
}

static const char *const kNameRule =
    "A destination name is 1 to 63 characters of letters, digits, '_', '.' and '-', starting "
    "with a letter or digit.";

// The check trigger's work, in C++: every PostgreSQL call goes through PgTry and every error
// is a PgError, raised by the caller's CxxTry.
static HeapTuple CheckDestinationRow(TriggerData *td) {
    bool is_update = TRIGGER_FIRED_BY_UPDATE(td->tg_event);
    HeapTuple tuple = is_update ? td->tg_newtuple : td->tg_trigtuple;
    TupleDesc desc = RelationGetDescr(td->tg_relation);

    char *name = TextColumn(tuple, desc, "name");
    if (name == nullptr)
        throw PgError(ERRCODE_NOT_NULL_VIOLATION, "a destination needs a name", kNameRule);
    if (!outbox::IsValidDestinationName(name))
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      std::string("invalid destination name \"") + name + "\"", kNameRule);
    char *kind_text = TextColumn(tuple, desc, "kind");
    if (kind_text == nullptr)
        throw PgError(ERRCODE_NOT_NULL_VIOLATION,
                      std::string("destination \"") + name + "\" needs a kind", "",
                      "Use " + BrokerKindList() + ".");
    const BrokerKind *kind = FindBrokerKind(kind_text);
    if (!kind)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      std::string("unknown destination kind \"") + kind_text + "\"", "",
                      "Use " + BrokerKindList() + ".");
    char *old_json = nullptr;
    if (is_update) {
        char *old_name = TextColumn(td->tg_trigtuple, desc, "name");
        char *old_kind = TextColumn(td->tg_trigtuple, desc, "kind");
        if (strcmp(old_name, name) != 0)
            throw PgError(ERRCODE_FEATURE_NOT_SUPPORTED,
                          std::string("destination \"") + old_name + "\" cannot be renamed",
                          "Messages refer to their destination by name.",
                          "Create a destination with the new name instead.");
        if (strcmp(old_kind, kind_text) != 0)
            throw PgError(ERRCODE_FEATURE_NOT_SUPPORTED,
                          std::string("the kind of destination \"") + name + "\" cannot be changed",
                          "",
                          std::string("Create a new destination of kind \"") + kind_text + "\".");
        old_json = ConfigText(td->tg_trigtuple, desc);
    }
    char *json = ConfigText(tuple, desc);
    if (json == nullptr)
        throw PgError(ERRCODE_NOT_NULL_VIOLATION,
                      std::string("destination \"") + name + "\" has no configuration", "",
                      "Pass a JSON object, for example '{\"url\": \"https://...\"}'.");
    // The role that called create/alter_destination: those are SECURITY DEFINER functions
    // owned by a superuser, so GetUserId() is their owner here; GetOuterUserId() is the
    // session's role (SET ROLE included), which security-definer calls do not change.
    CallerPrivileges privileges = PgTry([] {
        Oid caller = GetOuterUserId();
        CallerPrivileges p;
        p.runs_code = superuser_arg(caller);
        p.reads_files = p.runs_code || has_privs_of_role(caller, ROLE_PG_READ_SERVER_FILES);
        return p;
    });
    CheckConfigOrThrow(name, *kind, json, old_json, privileges);

    // created_by_superuser: whether a superuser wrote the config as it stands. An INSERT gets
    // what it asks for (create_destination asks for true; a restored dump brings each row's own
    // value) only when a superuser makes it, so a restore keeps the dumped values instead of
    // vouching for every destination. An UPDATE by anyone else clears it; a superuser's UPDATE
    // keeps what it was (changing the retries of a destination does not vouch for the URL
    // someone else chose). Not in a 0.1.0 schema.
    return PgTry([&] {
        int att = SPI_fnumber(desc, "created_by_superuser");
        if (att <= 0)
            return tuple;
        bool isnull;
        Datum asked = heap_getattr(is_update ? td->tg_trigtuple : tuple, att, desc, &isnull);
        bool value = privileges.runs_code && !isnull && DatumGetBool(asked);
        int cols[1] = {att};
        Datum values[1] = {BoolGetDatum(value)};
        bool nulls[1] = {false};
        return heap_modify_tuple_by_cols(tuple, desc, 1, cols, values, nulls);
    });
}

}  // namespace outbox::pg

using namespace outbox::pg;

// BEFORE INSERT OR UPDATE FOR EACH ROW on outbox.destinations. Every error leaves the
// statement out of the server log (errhidestmt): it is a create/alter_destination call or an
// INSERT whose config may hold secrets, and log_min_error_statement would log it whole. Nor does
// it carry a CONTEXT: that would be create/alter_destination's internal INSERT or UPDATE, not
// anything the caller wrote (a restore's INSERT has none to lose). On an error, the PG_TRY (or
// the top level) that catches it puts error_context_stack back.
Datum outbox_destinations_check(PG_FUNCTION_ARGS) {
    auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
    if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
        !TRIGGER_FIRED_FOR_ROW(td->tg_event) || TRIGGER_FIRED_BY_DELETE(td->tg_event))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._destinations_check() must be a BEFORE INSERT OR UPDATE "
                               "row trigger"),
                        errhidestmt(true)));
    ErrorContextCallback *context = error_context_stack;
    error_context_stack = nullptr;
    HeapTuple tuple = CxxTry([td] { return CheckDestinationRow(td); }, /*hide_statement=*/true);
    error_context_stack = context;
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
