// The ProcessUtility hook.
//
// Statements that need a database to themselves (DROP DATABASE, ALTER DATABASE ... RENAME TO /
// SET TABLESPACE, CREATE DATABASE ... TEMPLATE) would fail with "database is being accessed by
// other users" while outbox workers are connected to it. The hook asks those workers to hand
// back their leases and leave, keeps the launcher from restarting them while the statement
// runs, and lets them return afterwards.
//
// Only for a statement PostgreSQL is going to let through: before touching the workers the hook
// makes the checks PostgreSQL makes first (ownership, CREATEDB, the right to copy a template,
// the tablespace privilege, not in a transaction block, the names involved). A role that may not
// run the statement gets PostgreSQL's own error and the workers never notice; otherwise any
// login role could stop a served database's workers over and over with a DROP DATABASE that
// fails anyway.
//
// CREATE EXTENSION outbox wakes the launcher and the database's workers at commit, and warns
// when the database is not in outbox.databases (no worker would deliver its messages). CREATE
// DATABASE and ALTER DATABASE ... RENAME TO wake the launcher at commit too: a database copied
// from a template that has the extension, or renamed to a listed name, is served at once.
//
// DROP EXTENSION outbox (or DROP SCHEMA outbox CASCADE) would delete the queue and the dead
// letters without a word: refused while they have rows, unless outbox.drop_nonempty is on.
extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "commands/tablespace.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "nodes/value.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/syscache.h"
}

#include "outbox/pg/inbox.hpp"
#include "outbox/pg/guard.hpp"
#include "outbox/pg/producer.hpp"
#include "outbox/pg/served.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/shmem.hpp"
#include "outbox/pg/workers.hpp"

namespace outbox::pg {

namespace {

constexpr int kWaitForWorkersMs = 10000;

ProcessUtility_hook_type prev_utility_hook = nullptr;

// What pg_database says of a database; false when there is none of that name.
struct DatabaseFacts {
    Oid oid;
    Oid owner;
    Oid tablespace;
    bool is_template;
};
bool LookUpDatabase(const char *name, DatabaseFacts *facts) {
    Oid oid = get_database_oid(name, true);
    if (!OidIsValid(oid))
        return false;
    HeapTuple tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(oid));
    if (!HeapTupleIsValid(tuple))
        return false;
    auto *db = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple));
    facts->oid = oid;
    facts->owner = db->datdba;
    facts->tablespace = db->dattablespace;
    facts->is_template = db->datistemplate;
    ReleaseSysCache(tuple);
    return true;
}

// The current role owns the database (as pg_database_ownercheck decides: a superuser, or a
// member with the owner's privileges).
bool OwnsDatabase(const DatabaseFacts &db) {
    return has_privs_of_role(GetUserId(), db.owner);
}

// CREATEDB, as dbcommands.c's have_createdb_privilege decides.
bool MayCreateDatabases() {
    if (superuser())
        return true;
    bool result = false;
    HeapTuple tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
    if (HeapTupleIsValid(tuple)) {
        result = reinterpret_cast<Form_pg_authid>(GETSTRUCT(tuple))->rolcreatedb;
        ReleaseSysCache(tuple);
    }
    return result;
}

// PreventInTransactionBlock would refuse the statement.
bool RefusedInThisContext(ProcessUtilityContext context) {
    return context != PROCESS_UTILITY_TOPLEVEL || IsTransactionBlock() || IsSubTransaction();
}

// The option `name` of a CREATE/ALTER DATABASE statement, or nullptr.
DefElem *FindOption(List *options, const char *name) {
    ListCell *lc;
    foreach (lc, options) {
        auto *opt = static_cast<DefElem *>(lfirst(lc));
        if (strcmp(opt->defname, name) == 0)
            return opt;
    }
    return nullptr;
}

// The served-or-not database a statement needs alone, when PostgreSQL will let the current role
// run the statement that far; InvalidOid otherwise (PostgreSQL then raises its own error, or
// the statement needs no database alone).
Oid DatabaseNeededAlone(Node *stmt, ProcessUtilityContext context) {
    DatabaseFacts db;
    switch (nodeTag(stmt)) {
        case T_DropdbStmt: {
            // dropdb(): a transaction block, then the owner, a template, the current database.
            auto *drop = reinterpret_cast<DropdbStmt *>(stmt);
            if (RefusedInThisContext(context) || !LookUpDatabase(drop->dbname, &db) ||
                !OwnsDatabase(db) || db.is_template || db.oid == MyDatabaseId)
                return InvalidOid;
            return db.oid;
        }
        case T_RenameStmt: {
            // RenameDatabase(): the owner, CREATEDB, a free new name, not the current database.
            auto *rename = reinterpret_cast<RenameStmt *>(stmt);
            if (rename->renameType != OBJECT_DATABASE || !LookUpDatabase(rename->subname, &db) ||
                !OwnsDatabase(db) || !MayCreateDatabases() ||
                OidIsValid(get_database_oid(rename->newname, true)) || db.oid == MyDatabaseId)
                return InvalidOid;
            return db.oid;
        }
        case T_AlterDatabaseStmt: {
            // movedb(): a transaction block, the owner, not the current database, CREATE on the
            // new tablespace; moving to where it is already is a no-op.
            auto *alter = reinterpret_cast<AlterDatabaseStmt *>(stmt);
            DefElem *opt = FindOption(alter->options, "tablespace");
            if (opt == nullptr || RefusedInThisContext(context) ||
                !LookUpDatabase(alter->dbname, &db) || !OwnsDatabase(db) || db.oid == MyDatabaseId)
                return InvalidOid;
            Oid tablespace = get_tablespace_oid(defGetString(opt), true);
            if (!OidIsValid(tablespace) || tablespace == db.tablespace ||
                !DatumGetBool(DirectFunctionCall2(has_tablespace_privilege_id,
                                                  ObjectIdGetDatum(tablespace),
                                                  CStringGetTextDatum("CREATE"))))
                return InvalidOid;
            return db.oid;
        }
        case T_CreatedbStmt: {
            // createdb(): a transaction block, CREATEDB, the template (a template database, or
            // one the role owns), a free new name.
            auto *create = reinterpret_cast<CreatedbStmt *>(stmt);
            DefElem *opt = FindOption(create->options, "template");
            if (opt == nullptr || RefusedInThisContext(context) || !MayCreateDatabases() ||
                !LookUpDatabase(defGetString(opt), &db) || (!db.is_template && !OwnsDatabase(db)) ||
                OidIsValid(get_database_oid(create->dbname, true)))
                return InvalidOid;
            return db.oid;
        }
        default:
            return InvalidOid;
    }
}

// CREATE EXTENSION outbox, CREATE DATABASE or a database's RENAME ran in this transaction: at
// commit the launcher looks at once for the database (created since the server started, it
// would otherwise wait for the launcher's 10 s recheck) and, after CREATE EXTENSION, the
// database's workers load the new extension.
bool wake_launcher_at_commit = false;

void OnTransactionEvent(XactEvent event, void *) {
    switch (event) {
        case XACT_EVENT_COMMIT:  // visible to other snapshots by now
            if (wake_launcher_at_commit)
                WakeLauncher();
            wake_launcher_at_commit = false;
            break;
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PREPARE:  // COMMIT PREPARED runs elsewhere: the recheck finds it
            wake_launcher_at_commit = false;
            break;
        default:
            break;
    }
}

// Whether `stmt` may make a database of some name exist: CREATE DATABASE (its template may have
// the extension) or ALTER DATABASE ... RENAME TO. The launcher then looks at commit instead of
// at its next recheck. (The hook's ReleaseDatabase wakes it too, but before the commit: that
// look finds nothing new.)
bool NamesADatabase(Node *stmt) {
    return IsA(stmt, CreatedbStmt) ||
           (IsA(stmt, RenameStmt) &&
            reinterpret_cast<RenameStmt *>(stmt)->renameType == OBJECT_DATABASE);
}

bool CreatesThisExtension(Node *stmt) {
    return IsA(stmt, CreateExtensionStmt) &&
           strcmp(reinterpret_cast<CreateExtensionStmt *>(stmt)->extname, "outbox") == 0;
}

// Whether `stmt` drops the outbox extension of this database: DROP EXTENSION outbox, or DROP
// SCHEMA outbox CASCADE (the extension lives in it).
bool DropsExtension(Node *stmt) {
    if (!IsA(stmt, DropStmt))
        return false;
    auto *drop = reinterpret_cast<DropStmt *>(stmt);
    if (drop->removeType != OBJECT_EXTENSION &&
        !(drop->removeType == OBJECT_SCHEMA && drop->behavior == DROP_CASCADE))
        return false;
    ListCell *lc;
    foreach (lc, drop->objects) {
        Node *object = static_cast<Node *>(lfirst(lc));
        if (IsA(object, String) && strcmp(strVal(object), "outbox") == 0)
            return OidIsValid(get_extension_oid("outbox", true));
    }
    return false;
}

// Refuses to drop the extension while the queue or the dead letters have rows.
void CheckNothingQueued() {
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "outbox: SPI_connect failed");
    int rc = SPI_execute(
        "SELECT (SELECT count(*) FROM outbox.messages),"
        "       (SELECT count(*) FROM outbox.dead_letters)",
        true, 1);
    if (rc != SPI_OK_SELECT || SPI_processed != 1)
        elog(ERROR, "outbox: counting the queue failed");
    bool isnull;
    int64 queued =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    int64 dead =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
    SPI_finish();
    if (queued > 0 || dead > 0)
        ereport(ERROR,
                (errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
                 errmsg("extension \"outbox\" has %lld queued messages and %lld dead letters",
                        (long long)queued, (long long)dead),
                 errdetail("Dropping the extension would delete them; CASCADE does not say "
                           "they may go."),
                 errhint("Let them be delivered, or remove them first (outbox.drop_destination"
                         "(name, force => true), outbox.purge_dead_letters('0')), or SET "
                         "outbox.drop_nonempty = on to drop them with the extension.")));
}

// Only plain C data lives in this frame: PostgreSQL errors longjmp through it.
void UtilityHook(PlannedStmt *pstmt, const char *query_string, bool read_only_tree,
                 ProcessUtilityContext context, ParamListInfo params, QueryEnvironment *query_env,
                 DestReceiver *dest, QueryCompletion *qc) {
    if (!setting_drop_nonempty && DropsExtension(pstmt->utilityStmt)) {
        CheckNothingQueued();
        CheckInboxEmpty();  // the inbox (issue 23): src/pg/inbox.cpp
    }
    Oid database = DatabaseNeededAlone(pstmt->utilityStmt, context);
    if (OidIsValid(database))
        HoldDatabase(database, kWaitForWorkersMs);
    // CREATE EXTENSION IF NOT EXISTS of an installed extension creates nothing: no warning.
    bool creates =
        CreatesThisExtension(pstmt->utilityStmt) && !OidIsValid(get_extension_oid("outbox", true));
    PgFinally(
        [&] {
            if (prev_utility_hook)
                prev_utility_hook(pstmt, query_string, read_only_tree, context, params, query_env,
                                  dest, qc);
            else
                standard_ProcessUtility(pstmt, query_string, read_only_tree, context, params,
                                        query_env, dest, qc);
        },
        [database] {
            if (OidIsValid(database))
                ReleaseDatabase(database);
        });
    if (NamesADatabase(pstmt->utilityStmt))
        wake_launcher_at_commit = true;
    if (CreatesThisExtension(pstmt->utilityStmt)) {
        wake_launcher_at_commit = true;
        ReloadAtCommit();
        if (creates)
            WarnIfNotServed();
    }
}

}  // namespace

void InstallUtilityHook() {
    prev_utility_hook = ProcessUtility_hook;
    ProcessUtility_hook = UtilityHook;
    RegisterXactCallback(OnTransactionEvent, nullptr);
}

}  // namespace outbox::pg
