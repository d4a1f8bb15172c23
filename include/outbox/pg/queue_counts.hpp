// Exact queue sizes without counting rows: outbox.stats() must answer in milliseconds on a
// backlog of millions, so the size of each destination's queue (and how much of it waits behind
// its key) is kept in shared memory and changed at the commit of every transaction that changes
// it. Inserts are counted after each statement from what it inserted (_messages_inserted),
// everything else that writes outbox.messages through SQL in the _messages_changed trigger; the
// worker (whose session skips that trigger) counts what it removes and releases itself. A
// database's counts start from one exact count, taken the first time they are needed after a server
// start (or a TRUNCATE), under a lock that lets no writer of outbox.messages in between. The
// conservation counters (produced, removed, delivered, ...) count from server start, as
// outbox.stats() does; the count fixes what the queue held at the start (`initial`).
#pragma once

extern "C" {
#include "postgres.h"
}

namespace outbox::pg {

// Registers the transaction callbacks. Called once from _PG_init.
void RegisterQueueCountCallbacks();

// Records that this transaction adds `queued` rows to the queue of `destination` (negative:
// removes); applied at commit, forgotten on rollback (also of a subtransaction). `produced` and
// `removed` feed the conservation counters.
void CountQueueChange(const char *destination, int64 queued, int64 produced, int64 removed);

// The worker removed these rows of `destination` from the queue (its session skips the
// _messages_changed trigger): applied at commit to the queue size and to the delivered, dead
// and expired counters of outbox.stats() in the same step, while the transaction still holds its
// lock on outbox.messages (so a count of the queue never sees the rows gone and the counters not
// yet raised).
void CountOutcomes(const char *destination, int64 delivered, int64 dead, int64 expired);

// "compaction": "key": this transaction removed `superseded` rows of `destination` from the
// queue undelivered (applied at commit to the queue size and the superseded counter). Each
// such row also lets one later row of this (sub)transaction for the destination be queued
// without a max_pending reservation: it takes the superseded row's place.
void CountSuperseded(const char *destination, int64 superseded);

// Whether the _messages_changed trigger is to leave the rows it sees alone: set while the
// producer check supersedes (it counts those rows itself).
extern bool superseding;

// Back-pressure (max_pending): reserves room for one more row of `destination` (in `messages`,
// outbox.messages) under its cap and under the database's (outbox.max_pending); a cap of 0 is
// none. Raises SQLSTATE 53400 when the committed queue plus the rows reserved by transactions
// in progress (this one included) already reach a cap. A reservation lasts until its
// (sub)transaction ends: at commit the rows become queued in the same step, so the committed
// queue never exceeds a cap; a rollback gives the room back. While the counts are not valid
// (after a server start, TRUNCATE or PREPARE, until they are taken again) the committed rows
// are counted instead, still exactly; the counts are taken by the first capped insert that
// finds no other writer in the way.
void ReserveQueueRow(Oid messages, const char *destination, int64 destination_cap,
                     int64 database_cap);

}  // namespace outbox::pg
