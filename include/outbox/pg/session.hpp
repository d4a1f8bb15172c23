// The session of a background worker of ours (delivery or inbox): the settings it runs with,
// whatever the database's or role's defaults say, and kept so for every transaction.
#pragma once

extern "C" {
#include "postgres.h"
#include "storage/ipc.h"
}

namespace outbox::pg {

struct WorkerSlot;

enum class WorkerRole { Delivery, Inbox };

// The start of a worker process the launcher started with `main_arg` (its slot's index): the
// signal handlers (SIGHUP reloads, `on_sigterm`), the connection to its database, its slot
// filled in (`on_exit` registered for it), its name in pg_stat_activity and its session's
// settings (SetWorkerSessionSettings). Returns the slot; *database is the database's name, in
// TopMemoryContext.
WorkerSlot *StartWorkerSession(Datum main_arg, WorkerRole role, pqsigfunc on_sigterm,
                               pg_on_exit_callback on_exit, char **database);

// Sets the session's settings once, after BackgroundWorkerInitializeConnection: search_path
// pg_catalog, pg_temp (nothing a user creates is found on it), no statement or lock timeouts
// that an ALTER DATABASE/ROLE ... SET could impose, read-write, read committed, no JIT. The
// delivery worker also commits asynchronously and skips ordinary triggers (it counts what it
// removes itself); the inbox worker keeps both as the server has them, so that the handlers'
// effects fire their tables' triggers and commit as the server's other sessions do.
void SetWorkerSessionSettings(WorkerRole role);

// Before each transaction: puts back any of those settings that something changed since
// (nothing should: a handler's changes are rolled back after its call), so that a statement
// of ours never runs under a search_path or a read-only default it did not choose.
void PinWorkerSessionSettings();

}  // namespace outbox::pg
