// Whether this database is served by workers (include/outbox/pg/served.hpp).
extern "C" {
#include "postgres.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "commands/dbcommands.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"  // get_database_name, from 19 on (compat.hpp)
#include "utils/memutils.h"
#include "utils/varlena.h"
}

#include "outbox/pg/served.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/shmem.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_not_served_reason(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_not_served_reason);
}

namespace outbox::pg {

// What this backend found for the value of outbox.databases it last looked at (the setting
// changes only at a reload): looked up again when the value differs.
static char *looked_at = nullptr;  // in TopMemoryContext
static bool served = true;
static char database_name[NAMEDATALEN];
static bool logged = false;  // this backend already noted the current value (see below)

// Whether this database is in outbox.databases. Names compare as the launcher compares them:
// exactly, the list's unquoted names folded to lower case as in SQL.
static bool Served() {
    const char *setting = setting_databases ? setting_databases : "";
    if (looked_at != nullptr && strcmp(looked_at, setting) == 0)
        return served;
    char *name = get_database_name(MyDatabaseId);
    bool found = false;
    List *names = NIL;
    if (name != nullptr && SplitIdentifierString(pstrdup(setting), ',', &names)) {
        ListCell *lc;
        foreach (lc, names)
            found = found || strcmp(static_cast<const char *>(lfirst(lc)), name) == 0;
    }
    strlcpy(database_name, name ? name : "", sizeof database_name);
    char *copy = MemoryContextStrdup(TopMemoryContext, setting);
    if (looked_at != nullptr)
        pfree(looked_at);
    looked_at = copy;
    served = found || name == nullptr;  // a database dropped under us: nothing to say
    logged = false;
    return served;
}

const char *NotServedReason() {
    if (Served())
        return nullptr;
    return psprintf("database \"%s\" is not in outbox.databases: no worker delivers its messages",
                    database_name);
}

void WarnIfNotServed() {
    if (Served())
        return;
    ereport(WARNING,
            (errmsg("database \"%s\" is not in outbox.databases: no worker delivers its messages",
                    database_name),
             errdetail("outbox.databases is \"%s\". Messages queued here wait until a worker "
                       "serves the database.",
                       looked_at),
             errhint("Add it to outbox.databases in postgresql.conf and reload the "
                     "configuration (SELECT pg_reload_conf()).")));
}

void NoteQueuedWhileNotServed() {
    if (Served() || logged || shared == nullptr)
        return;
    logged = true;
    uint32 setting_hash =
        hash_bytes(reinterpret_cast<const unsigned char *>(looked_at), int(strlen(looked_at)));
    if (!NoteNotServed(MyDatabaseId, setting_hash))
        return;  // another session said it for this value of the setting
    ereport(LOG, (errmsg("outbox: messages are queued in database \"%s\", which is not in "
                         "outbox.databases: no worker delivers them",
                         database_name),
                  errdetail("outbox.databases is \"%s\".", looked_at),
                  errhint("Add it to outbox.databases in postgresql.conf and reload the "
                          "configuration. outbox.stats() shows this in last_error meanwhile.")));
}

}  // namespace outbox::pg

using namespace outbox::pg;

// outbox._not_served_reason(): why no worker delivers this database's messages, or NULL.
Datum outbox_not_served_reason(PG_FUNCTION_ARGS) {
    const char *reason = NotServedReason();
    if (reason == nullptr)
        PG_RETURN_NULL();
    PG_RETURN_TEXT_P(cstring_to_text(reason));
}
