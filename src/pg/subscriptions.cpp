// Checks on outbox.inbox_subscriptions (the inbox, issue 23): every row is validated on its
// way in, however it is written (create/alter_subscription or a superuser's INSERT), with the
// parser the workers use; the handler must be f(outbox.inbox_message) RETURNS void and
// executable by the subscription's owner, the role it runs as; only the owner (or a
// superuser) may change or drop a subscription.
//
// The owner is the role that called create_subscription: the handler runs with its rights, so
// a role cannot make the workers run code with anyone else's.
#include <string>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/brokers/registry.hpp"
#include "outbox/config.hpp"
#include "outbox/config_query.hpp"
#include "outbox/subscription_config.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

#include "outbox/pg/config_errors.hpp"
#include "outbox/pg/guard.hpp"
#include "outbox/pg/producer.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_subscriptions_check(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_subscriptions_check);
}

namespace outbox::pg {

namespace {

const char *const kSubscriptionNameRule =
    "A subscription name is 1 to 63 characters of letters, digits, '_', '.' and '-', starting "
    "with a letter or digit.";
const char *const kHandlerShape =
    "Declare it as CREATE FUNCTION name(m outbox.inbox_message) RETURNS void ... and pass "
    "'name(outbox.inbox_message)'::regprocedure.";

// A text column of `tuple`, palloc'd (nullptr when NULL).
char *TextColumn(HeapTuple tuple, TupleDesc desc, const char *column) {
    return PgTry([&]() -> char * {
        bool isnull;
        Datum d = heap_getattr(tuple, SPI_fnumber(desc, column), desc, &isnull);
        return isnull ? nullptr : TextDatumGetCString(d);
    });
}

// The jsonb column `config` of `tuple` as text, palloc'd (nullptr when NULL).
char *ConfigText(HeapTuple tuple, TupleDesc desc) {
    return PgTry([&]() -> char * {
        bool isnull;
        Datum d = heap_getattr(tuple, SPI_fnumber(desc, "config"), desc, &isnull);
        if (isnull)
            return nullptr;
        Jsonb *jb = DatumGetJsonbP(d);
        return JsonbToCString(nullptr, &jb->root, VARSIZE(jb));
    });
}

// The owner column (regrole) of `tuple`; InvalidOid when NULL.
Oid OwnerColumn(HeapTuple tuple, TupleDesc desc) {
    return PgTry([&] {
        bool isnull;
        Datum d = heap_getattr(tuple, SPI_fnumber(desc, "owner"), desc, &isnull);
        return isnull ? InvalidOid : DatumGetObjectId(d);
    });
}

// A role's name for a message ("role 12345" once it was dropped).
std::string RoleName(Oid role) {
    char *name = PgTry([&] { return GetUserNameFromId(role, true); });
    return name != nullptr ? std::string(name) : "role " + std::to_string(role);
}

// Validates the config with the workers' parser; the caller's privileges decide the settings
// that make the server run code or read files, as for destinations (destinations.cpp). The
// brokers of a subscription whose owner is not a superuser are held to
// outbox.broker_allowed_networks (its consumer is guarded the same way: inbox_consume.cpp).
void CheckConfigOrThrow(const char *name, const BrokerKind &kind, const char *json,
                        const char *old_json, bool runs_code, bool reads_files,
                        bool owner_is_superuser) {
    const std::string subscription = std::string(kind.name) + " subscription \"" + name + "\"";
    ConfigQuery query;
    query.subscription = true;
    query.kind = kind.name;
    query.config = json;
    query.has_old = old_json != nullptr;
    query.old_config = old_json ? old_json : "";
    query.check_files = reads_files;
    ConfigAnswer answer = CheckConfig(query);
    std::vector<PrivilegedSetting> chosen = answer.config.privileged;
    if (old_json != nullptr)
        chosen = AddedOrChangedSettings(answer.old.privileged, answer.config.privileged);
    ThrowIfSettingsDenied(subscription, chosen, runs_code, reads_files);
    // The brokers of a subscription its owner could not have configured as a superuser.
    if (answer.config.ok() && !owner_is_superuser)
        ThrowIfBrokerHostRefused(subscription, answer.config.hosts,
                                 old_json ? answer.old.hosts : std::vector<std::string>());
    ThrowIfConfigProblems(subscription, answer.config.problems, answer.config.hints,
                          "docs/inbox.md#subscription-settings");
}

// What the handler's catalog row says, read in one PgTry.
struct HandlerFacts {
    Oid oid;
    bool is_function;  // prokind 'f' (not a procedure, aggregate or window function)
    bool one_message_arg;
    bool returns_void;  // void, not SETOF
    bool temporary;     // in a temporary schema: gone with its session
    bool owner_may_execute;
    char *qualified;  // schema-qualified signature, palloc'd
    char *given;      // as the row gave it
};

// The handler named by `handler_text` (a regprocedure's text), checked for the signature and
// for `owner`'s right to execute it; returns its schema-qualified signature, palloc'd.
char *CheckHandlerOrThrow(const char *name, const char *handler_text, Oid owner) {
    HandlerFacts facts = PgTry([&] {
        HandlerFacts f{};
        f.oid =
            DatumGetObjectId(DirectFunctionCall1(regprocedurein, CStringGetDatum(handler_text)));
        Oid message_type =
            GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid, CStringGetDatum("inbox_message"),
                            ObjectIdGetDatum(get_namespace_oid("outbox", false)));
        HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(f.oid));
        if (!HeapTupleIsValid(tuple))
            elog(ERROR, "cache lookup failed for function %u", f.oid);
        auto *proc = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple));
        f.is_function = proc->prokind == PROKIND_FUNCTION;
        f.one_message_arg = proc->pronargs == 1 && OidIsValid(message_type) &&
                            proc->proargtypes.values[0] == message_type;
        f.returns_void = proc->prorettype == VOIDOID && !proc->proretset;
        f.temporary = isAnyTempNamespace(proc->pronamespace);
        ReleaseSysCache(tuple);
        f.owner_may_execute = DatumGetBool(
            DirectFunctionCall3(has_function_privilege_id_id, ObjectIdGetDatum(owner),
                                ObjectIdGetDatum(f.oid), CStringGetTextDatum("EXECUTE")));
        f.qualified = format_procedure_qualified(f.oid);
        f.given = format_procedure(f.oid);
        return f;
    });
    const std::string subscription = std::string("subscription \"") + name + "\"";
    if (!facts.is_function || !facts.one_message_arg || !facts.returns_void) {
        std::string why = !facts.is_function ? "it is not a plain function"
                          : !facts.one_message_arg
                              ? "it must take exactly one argument, of type outbox.inbox_message"
                              : "it must return void";
        throw PgError(ERRCODE_INVALID_FUNCTION_DEFINITION,
                      "the handler of " + subscription + ", " + facts.given +
                          ", is not f(outbox.inbox_message) RETURNS void",
                      "The workers call it once per record; " + why + ".", kHandlerShape);
    }
    if (facts.temporary)
        throw PgError(
            ERRCODE_INVALID_FUNCTION_DEFINITION,
            "the handler of " + subscription + ", " + facts.given + ", is a temporary function",
            "It would be dropped at the end of this session.",
            "Create the handler in a permanent schema.");
    if (!facts.owner_may_execute)
        throw PgError(ERRCODE_INSUFFICIENT_PRIVILEGE,
                      "permission denied for the handler of " + subscription,
                      "The handler runs as the subscription's owner, " + RoleName(owner) +
                          ", who may not execute " + facts.given + ".",
                      "GRANT EXECUTE ON FUNCTION " + std::string(facts.given) + " TO " +
                          RoleName(owner) + ", or use a function that role may execute.");
    return facts.qualified;
}

// The check trigger's work, in C++: every PostgreSQL call goes through PgTry and every error
// is a PgError, raised by the caller's CxxTry.
HeapTuple CheckSubscriptionRow(TriggerData *td) {
    const bool is_insert = TRIGGER_FIRED_BY_INSERT(td->tg_event);
    const bool is_update = TRIGGER_FIRED_BY_UPDATE(td->tg_event);
    TupleDesc desc = RelationGetDescr(td->tg_relation);
    const Oid caller = PgTry([] { return GetOuterUserId(); });
    const bool runs_code = PgTry([&] { return superuser_arg(caller); });
    const bool reads_files =
        runs_code || PgTry([&] { return has_privs_of_role(caller, ROLE_PG_READ_SERVER_FILES); });

    // Changing or dropping a subscription is for its owner: the handler runs with its rights.
    if (!is_insert) {
        char *old_name = TextColumn(td->tg_trigtuple, desc, "name");
        Oid old_owner = OwnerColumn(td->tg_trigtuple, desc);
        bool member = runs_code || (OidIsValid(old_owner) &&
                                    PgTry([&] { return has_privs_of_role(caller, old_owner); }));
        if (!member)
            throw PgError(ERRCODE_INSUFFICIENT_PRIVILEGE,
                          std::string("must be the owner of subscription \"") + old_name +
                              "\" to " + (is_update ? "alter" : "drop") + " it",
                          "Its owner is " + RoleName(old_owner) +
                              ": the handler runs with that role's rights.",
                          "Ask its owner or a superuser.");
        if (!is_update)
            return td->tg_trigtuple;
    }

    HeapTuple tuple = is_update ? td->tg_newtuple : td->tg_trigtuple;
    char *name = TextColumn(tuple, desc, "name");
    if (name == nullptr)
        throw PgError(ERRCODE_NOT_NULL_VIOLATION, "a subscription needs a name",
                      kSubscriptionNameRule);
    if (!IsValidSubscriptionName(name))
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      std::string("invalid subscription name \"") + name + "\"",
                      kSubscriptionNameRule);
    char *kind = TextColumn(tuple, desc, "kind");
    const BrokerKind *row = kind ? FindBrokerKind(kind) : nullptr;
    if (row == nullptr || row->read_subscription == nullptr)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      kind == nullptr ? std::string("subscription \"") + name + "\" needs a kind"
                                      : std::string("unknown subscription kind \"") + kind + "\"",
                      "", "Use " + BrokerKindList(/*subscriptions=*/true) + ".");
    char *old_json = nullptr;
    Oid owner = OwnerColumn(tuple, desc);
    if (is_update) {
        char *old_name = TextColumn(td->tg_trigtuple, desc, "name");
        char *old_kind = TextColumn(td->tg_trigtuple, desc, "kind");
        if (strcmp(old_name, name) != 0)
            throw PgError(ERRCODE_FEATURE_NOT_SUPPORTED,
                          std::string("subscription \"") + old_name + "\" cannot be renamed",
                          "Its offsets and dedup rows are kept under its name.",
                          "Create a subscription with the new name instead.");
        if (strcmp(old_kind, kind) != 0)
            throw PgError(
                ERRCODE_FEATURE_NOT_SUPPORTED,
                std::string("the kind of subscription \"") + name + "\" cannot be changed");
        Oid old_owner = OwnerColumn(td->tg_trigtuple, desc);
        if (owner != old_owner && !runs_code)
            throw PgError(ERRCODE_INSUFFICIENT_PRIVILEGE,
                          std::string("permission denied to change the owner of subscription \"") +
                              name + "\"",
                          "", "Only a superuser may.");
        old_json = ConfigText(td->tg_trigtuple, desc);
    } else if (!runs_code || !OidIsValid(owner)) {
        // The calling role owns what it creates; a superuser's INSERT (a restored dump) keeps
        // the owner it gives.
        owner = caller;
    }
    char *json = ConfigText(tuple, desc);
    if (json == nullptr)
        throw PgError(ERRCODE_NOT_NULL_VIOLATION,
                      std::string("subscription \"") + name + "\" has no configuration", "",
                      "Pass a JSON object, for example '{\"bootstrap.servers\": \"host:9092\", "
                      "\"topics\": [\"orders\"]}'.");
    bool owner_is_superuser = PgTry([owner] { return superuser_arg(owner); });
    CheckConfigOrThrow(name, *row, json, old_json, runs_code, reads_files, owner_is_superuser);
    char *handler = TextColumn(tuple, desc, "handler");
    if (handler == nullptr)
        throw PgError(ERRCODE_NOT_NULL_VIOLATION,
                      std::string("subscription \"") + name + "\" needs a handler", "",
                      kHandlerShape);
    char *qualified = CheckHandlerOrThrow(name, handler, owner);
    return PgTry([&] {
        int cols[2] = {SPI_fnumber(desc, "handler"), SPI_fnumber(desc, "owner")};
        Datum values[2] = {CStringGetTextDatum(qualified), ObjectIdGetDatum(owner)};
        bool nulls[2] = {false, false};
        return heap_modify_tuple_by_cols(tuple, desc, 2, cols, values, nulls);
    });
}

}  // namespace

}  // namespace outbox::pg

using namespace outbox::pg;

// BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW on outbox.inbox_subscriptions. Errors leave
// the statement out of the server log (its config may hold secrets) and carry no CONTEXT, which
// would show create/alter/drop_subscription's internal statement (see outbox_destinations_check).
Datum outbox_subscriptions_check(PG_FUNCTION_ARGS) {
    auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
    if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
        !TRIGGER_FIRED_FOR_ROW(td->tg_event))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._subscriptions_check() must be a BEFORE row trigger"),
                        errhidestmt(true)));
    ErrorContextCallback *context = error_context_stack;
    error_context_stack = nullptr;
    HeapTuple tuple = CxxTry([td] { return CheckSubscriptionRow(td); }, /*hide_statement=*/true);
    error_context_stack = context;
    if (TRIGGER_FIRED_BY_INSERT(td->tg_event) || TRIGGER_FIRED_BY_UPDATE(td->tg_event))
        WantInboxAtCommit();  // its inbox worker starts (or reloads) at once
    return PointerGetDatum(tuple);
}
