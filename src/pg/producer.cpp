// The producer path: the wake-up of the workers when a producing transaction commits (and the
// other at-commit notes of this backend), and the UUIDv7 default for event_id. The check every
// INSERT into outbox.messages passes is src/pg/message_check.cpp.
#include <cstring>
#include <ctime>

#include "outbox/uuid7.hpp"

extern "C" {
#include "postgres.h"
#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port.h"
#include "utils/uuid.h"
}

#include "outbox/pg/producer.hpp"
#include "outbox/pg/served.hpp"
#include "outbox/pg/shmem.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_uuid_generate_v7(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum outbox_wake(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_uuid_generate_v7);
PG_FUNCTION_INFO_V1(outbox_wake);
}

namespace outbox::pg {

// Set by the producer check (and by changes to outbox.destinations), consumed at the end of
// the transaction.
static bool wake_at_commit = false;
static bool reload_at_commit = false;
static bool inbox_at_commit = false;    // a subscription was created or changed
static int64 ids_below = PG_INT64_MIN;  // IdsBelow()

static void OnTransactionEvent(XactEvent event, void *) {
    switch (event) {
        case XACT_EVENT_COMMIT:
            // Called after the commit is visible to other snapshots, so a woken worker sees
            // the rows.
            if (wake_at_commit || reload_at_commit)
                WakeWorkers(MyDatabaseId, reload_at_commit);
            if (inbox_at_commit)
                SetInboxWanted(MyDatabaseId, true);
            wake_at_commit = reload_at_commit = inbox_at_commit = false;
            ids_below = PG_INT64_MIN;
            break;
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PREPARE:  // COMMIT PREPARED elsewhere is found by the poll
        case XACT_EVENT_PARALLEL_ABORT:
            wake_at_commit = reload_at_commit = inbox_at_commit = false;
            ids_below = PG_INT64_MIN;
            break;
        default:
            break;
    }
}

void RegisterProducerCallbacks() {
    RegisterXactCallback(OnTransactionEvent, nullptr);
}

void WakeAtCommit() {
    if (!wake_at_commit)
        NoteQueuedWhileNotServed();  // once per transaction at most: its check is a strcmp
    wake_at_commit = true;
}

int64 IdsBelow() {
    return ids_below;
}

void SetIdsBelow(int64 id) {
    ids_below = id;
}

void ReloadAtCommit() {
    reload_at_commit = true;
}

void WantInboxAtCommit() {
    inbox_at_commit = true;
}

// UUIDv7 generation state of this process; the generator keeps values strictly increasing.
static Uuid7Generator uuid_generator;

void GenerateEventId(pg_uuid_t *out) {
    uint8 random[10];
    if (!pg_strong_random(random, sizeof random))
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                        errmsg("could not generate random bytes for a UUIDv7")));
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64 unix_ms = int64(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
    Uuid uuid = uuid_generator.Next(unix_ms, random);
    memcpy(out->data, uuid.data(), UUID_LEN);
}

}  // namespace outbox::pg

using namespace outbox::pg;

// outbox.uuid_generate_v7(): the default of outbox.messages.event_id.
Datum outbox_uuid_generate_v7(PG_FUNCTION_ARGS) {
    auto *uuid = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    GenerateEventId(uuid);
    PG_RETURN_UUID_P(uuid);
}

// outbox.wake(): nudge the workers of this database.
Datum outbox_wake(PG_FUNCTION_ARGS) {
    WakeWorkers(MyDatabaseId, true);
    ReloadAtCommit();
    PG_RETURN_VOID();
}
