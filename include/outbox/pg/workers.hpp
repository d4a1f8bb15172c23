// The background processes: one launcher per cluster starts outbox.workers delivery workers for
// each database in outbox.databases, restarts them when they die (backing off when they keep
// dying), and stops the workers of databases removed from the list.
#pragma once

extern "C" {
#include "postgres.h"
}

namespace outbox::pg {

// What the launcher tells a worker it starts (BackgroundWorker.bgw_extra).
struct WorkerArgs {
    Oid database;
    int worker_index;
    int slot;
};

// Registers the launcher. Called from _PG_init.
void RegisterLauncher();

// Installs the ProcessUtility hook that keeps workers out of the way of DROP DATABASE and of
// the other statements that need a database to themselves. Called from _PG_init.
void InstallUtilityHook();

}  // namespace outbox::pg
