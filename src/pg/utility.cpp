// The utility hook.
// - Statements that need a database to themselves (DROP DATABASE, ALTER DATABASE ... RENAME TO /
//   SET TABLESPACE, CREATE DATABASE ... TEMPLATE) would fail with "database is being accessed by
//   other users" while outbox workers are connected to it. The hook asks those workers to hand
//   back their leases and leave, keeps the launcher from restarting them while the statement
//   runs, and lets them return afterwards.
// - DROP EXTENSION outbox (or DROP SCHEMA outbox CASCADE) would delete the queue and the dead
//   letters without a word: refused while they have rows, unless outbox.drop_nonempty is on.
extern "C" {
#include "postgres.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "nodes/value.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
}

#include "outbox/pg/settings.hpp"
#include "outbox/pg/shmem.hpp"
#include "outbox/pg/workers.hpp"

namespace outbox::pg {

namespace {

constexpr int kWaitForWorkersMs = 10000;

ProcessUtility_hook_type prev_utility_hook = nullptr;

// The database a statement needs alone, or nullptr.
const char *DatabaseNeededAlone(Node *stmt) {
    switch (nodeTag(stmt)) {
        case T_DropdbStmt:
            return reinterpret_cast<DropdbStmt *>(stmt)->dbname;
        case T_RenameStmt: {
            auto *rename = reinterpret_cast<RenameStmt *>(stmt);
            return rename->renameType == OBJECT_DATABASE ? rename->subname : nullptr;
        }
        case T_AlterDatabaseStmt: {
            auto *alter = reinterpret_cast<AlterDatabaseStmt *>(stmt);
            ListCell *lc;
            foreach (lc, alter->options) {
                auto *opt = static_cast<DefElem *>(lfirst(lc));
                if (strcmp(opt->defname, "tablespace") == 0)
                    return alter->dbname;
            }
            return nullptr;
        }
        case T_CreatedbStmt: {
            auto *create = reinterpret_cast<CreatedbStmt *>(stmt);
            ListCell *lc;
            foreach (lc, create->options) {
                auto *opt = static_cast<DefElem *>(lfirst(lc));
                if (strcmp(opt->defname, "template") == 0)
                    return defGetString(opt);
            }
            return nullptr;
        }
        default:
            return nullptr;
    }
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

void UtilityHook(PlannedStmt *pstmt, const char *query_string, bool read_only_tree,
                 ProcessUtilityContext context, ParamListInfo params, QueryEnvironment *query_env,
                 DestReceiver *dest, QueryCompletion *qc) {
    if (!setting_drop_nonempty && DropsExtension(pstmt->utilityStmt))
        CheckNothingQueued();
    const char *dbname = DatabaseNeededAlone(pstmt->utilityStmt);
    Oid database = dbname ? get_database_oid(dbname, true) : InvalidOid;
    if (OidIsValid(database))
        HoldDatabase(database, kWaitForWorkersMs);
    PG_TRY();
    {
        if (prev_utility_hook)
            prev_utility_hook(pstmt, query_string, read_only_tree, context, params, query_env, dest,
                              qc);
        else
            standard_ProcessUtility(pstmt, query_string, read_only_tree, context, params, query_env,
                                    dest, qc);
    }
    PG_FINALLY();
    {
        if (OidIsValid(database))
            ReleaseDatabase(database);
    }
    PG_END_TRY();
}

}  // namespace

void InstallUtilityHook() {
    prev_utility_hook = ProcessUtility_hook;
    ProcessUtility_hook = UtilityHook;
}

}  // namespace outbox::pg
