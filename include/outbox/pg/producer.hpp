// The producer path (see src/pg/producer.cpp; the INSERT check is src/pg/message_check.cpp).
#pragma once

extern "C" {
#include "postgres.h"
#include "utils/uuid.h"
}

namespace outbox::pg {

// Registers the transaction callback that wakes workers at commit. Called from _PG_init.
void RegisterProducerCallbacks();

// Asks for the workers of this database to be woken when the current transaction commits.
void WakeAtCommit();
// Also asks them to read outbox.destinations again (the destinations changed).
void ReloadAtCommit();
// At commit: the database has a subscription, so the launcher starts its inbox worker now
// (its delivery worker would otherwise say so at its next poll).
void WantInboxAtCommit();

// A fresh UUIDv7, strictly increasing within this process.
void GenerateEventId(pg_uuid_t *out);

// In this transaction the id sequence is known to be past IdsBelow() (the message check's
// KeepOwnRow moves it past a row that carries its own id once, not for every such row).
// PG_INT64_MIN at the start of every transaction.
int64 IdsBelow();
void SetIdsBelow(int64 id);

}  // namespace outbox::pg
