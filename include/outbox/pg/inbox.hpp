// The inbox's SQL on the worker's side (issue 23; README "The inbox"). Every function runs
// inside the worker's transaction with SPI connected (see worker.cpp), uses kept plans, and
// throws PgError when PostgreSQL reports an error.
#pragma once

#include <cstdint>

namespace outbox::pg {

// Deletes up to `limit` dedup rows of outbox.inbox received more than `older_than_s` seconds
// ago, oldest first; returns how many.
int64_t SweepInbox(int64_t older_than_s, int limit);

// DROP EXTENSION outbox would delete the subscriptions, their offsets and the dedup rows
// without a word (and the next consumer would apply every event again): refused while any
// exist, unless outbox.drop_nonempty is on (checked by the caller). Plain PostgreSQL code,
// called from the utility hook: raises ERROR itself.
void CheckInboxEmpty();

}  // namespace outbox::pg
