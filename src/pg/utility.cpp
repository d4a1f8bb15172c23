// Statements that need a database to themselves (DROP DATABASE, ALTER DATABASE ... RENAME TO /
// SET TABLESPACE, CREATE DATABASE ... TEMPLATE) would fail with "database is being accessed by
// other users" while outbox workers are connected to it. The hook asks those workers to hand
// back their leases and leave, keeps the launcher from restarting them while the statement
// runs, and lets them return afterwards.
extern "C" {
#include "postgres.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
}

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

void UtilityHook(PlannedStmt *pstmt, const char *query_string, bool read_only_tree,
                 ProcessUtilityContext context, ParamListInfo params, QueryEnvironment *query_env,
                 DestReceiver *dest, QueryCompletion *qc) {
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
