// What the read-only functions say on a hot standby (include/outbox/pg/replica.hpp).
extern "C" {
#include "postgres.h"
#include "access/xlog.h"
#include "fmgr.h"
}

#include "outbox/pg/replica.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_note_replica(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_note_replica);
}

namespace outbox::pg {

bool NoteIfReplica() {
    if (!RecoveryInProgress())
        return false;
    ereport(NOTICE,
            (errmsg("outbox: this server is a replica (in recovery): no outbox worker runs here"),
             errdetail("The queues, dead letters and subscription offsets shown are those "
                       "replicated from the primary; the counters since server start count "
                       "this server's own workers, which start when it is promoted."),
             errhint("Query the primary for the delivery workers and their counters.")));
    return true;
}

}  // namespace outbox::pg

// outbox._note_replica(): the NOTICE of a hot standby, for the read-only functions written in
// SQL (outbox.subscriptions()). Returns whether this server is one.
Datum outbox_note_replica(PG_FUNCTION_ARGS) {
    PG_RETURN_BOOL(outbox::pg::NoteIfReplica());
}
