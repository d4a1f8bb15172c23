// What the read-only functions say on a hot standby. A standby runs no outbox process (the
// launcher starts when recovery ends, i.e. on promotion), so what outbox.stats(),
// outbox.conservation(), outbox.workers() and outbox.subscriptions() show there is the queue as
// replicated from the primary, and this server's own counters, which count nothing until it is
// promoted. Each says so with a NOTICE rather than a column: their signatures are what
// monitoring already reads.
#pragma once

extern "C" {
#include "postgres.h"
}

namespace outbox::pg {

// Whether this server is in recovery (a hot standby); if so, sends the NOTICE that says what the
// figures there are. C-style code: ereport(NOTICE) only.
bool NoteIfReplica();

}  // namespace outbox::pg
