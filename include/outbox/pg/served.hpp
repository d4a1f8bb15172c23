// Whether this database's messages have workers to deliver them: a database not listed in
// outbox.databases gets none (CREATE EXTENSION outbox succeeds there all the same). Said where
// a newcomer looks: a WARNING at CREATE EXTENSION, outbox.stats().last_error of destinations
// with queued messages, and one line in the server log when messages are first queued.
#pragma once

extern "C" {
#include "postgres.h"
}

namespace outbox::pg {

// The reason no worker delivers this database's messages, as the last_error text of
// outbox.stats() ("database \"x\" is not in outbox.databases: no worker delivers its
// messages"), or nullptr when the database is in outbox.databases as this backend reads it.
// palloc'd. C-style code: may ereport (a catalog lookup, once per value of the setting).
const char *NotServedReason();

// The WARNING of CREATE EXTENSION outbox in a database that is not served. May ereport.
void WarnIfNotServed();

// A message is queued in this transaction: in a database that is not served, the server log
// says so once (per database and value of outbox.databases, across all sessions). May
// ereport.
void NoteQueuedWhileNotServed();

}  // namespace outbox::pg
