// A per-backend copy of outbox.destinations (name, kind, default topic) for the producer check,
// so validating a message's destination costs a hash lookup instead of a foreign key (whose
// KEY SHARE row lock makes concurrent producers contend on one parent row, design §2).
//
// Any change to outbox.destinations sends a relcache invalidation for that table at commit
// (see destinations.cpp); every backend drops its copy when it receives it and reloads on the
// next lookup, from the latest committed state.
#pragma once

extern "C" {
#include "postgres.h"
}

namespace outbox {
struct BrokerKind;
}

namespace outbox::pg {

struct CachedDestination {
    char name[NAMEDATALEN];
    const BrokerKind *kind;  // nullptr: a kind this module does not know
    bool has_topic;
    // Default topic, valid when has_topic: the config's BrokerKind::topic.default_key
    // ("topic", "routing_key", "subject").
    char topic[256];
    bool ordered;  // "ordering": "key"
    // "cloudevents": "structured" (kafka, webhook): the payload travels inside a JSON event,
    // payload_bytes as base64.
    bool structured;
    // The largest message it sends (BrokerKind::message_limit: Kafka's "message.max.bytes",
    // librdkafka's default 1,000,000 when not set); 0 for kinds without such a limit.
    int64 max_message_bytes;
    int64 max_pending;  // "max_pending": the cap on its queue; 0 = none
    // Policies (issue 26).
    int64 ttl_ms;  // "ttl": expires_at = available_at + ttl when the producer gives none; 0 = none
    bool compacting;  // "compaction": "key": a new message supersedes its key's older queued one
    bool paused;      // outbox.pause: a new message need not wake the workers (resume does)
};

// The destination called name[0..len), or nullptr when there is none. May ereport(ERROR).
const CachedDestination *LookupDestination(const char *name, int len);

// Increments whenever this backend learns that outbox.destinations changed; the worker compares
// it to know when to reload its destinations without querying every cycle.
extern uint64 destinations_generation;

// Makes this backend notice changes to outbox.destinations (bumping destinations_generation)
// even though it never looks a destination up. The worker calls it, inside a transaction,
// whenever it reads the table.
void WatchDestinations();

// Registers the relcache callback. Called once from _PG_init.
void RegisterDestinationCacheCallback();

}  // namespace outbox::pg
