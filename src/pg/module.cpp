// The module's entry point: settings, shared memory, callbacks and the launcher are installed
// here, once, in the postmaster (the module must be in shared_preload_libraries).
extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "miscadmin.h"
}

#include "outbox/pg/destination_cache.hpp"
#include "outbox/pg/guard.hpp"
#include "outbox/pg/key_order.hpp"
#include "outbox/pg/producer.hpp"
#include "outbox/pg/queue_counts.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/shmem.hpp"
#include "outbox/pg/workers.hpp"

extern "C" {
PG_MODULE_MAGIC;
PGDLLEXPORT void _PG_init(void);
}

void _PG_init(void) {
    if (IsBinaryUpgrade)
        return;
    if (!process_shared_preload_libraries_in_progress)
        ereport(ERROR,
                (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                 errmsg("outbox must be loaded via shared_preload_libraries"),
                 errdetail("Its background workers and shared memory are set up at server "
                           "start."),
                 errhint("Add outbox to shared_preload_libraries in postgresql.conf and restart "
                         "the server.")));
    outbox::pg::CxxTry([] {
        outbox::pg::DefineSettings();
        outbox::pg::InstallSharedMemoryHooks();
        outbox::pg::RegisterDestinationCacheCallback();
        outbox::pg::RegisterProducerCallbacks();
        outbox::pg::RegisterQueueCountCallbacks();
        outbox::pg::RegisterKeyTurnCallbacks();
        outbox::pg::InstallUtilityHook();
        outbox::pg::RegisterLauncher();
    });
}
