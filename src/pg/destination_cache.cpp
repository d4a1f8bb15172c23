// A per-backend copy of outbox.destinations for the producer check (see the header).
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

extern "C" {
#include "postgres.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

#include "outbox/broker_kind.hpp"
#include "outbox/brokers/registry.hpp"
#include "outbox/duration.hpp"
#include "outbox/pg/compat.hpp"
#include "outbox/pg/destination_cache.hpp"

namespace outbox::pg {

uint64 destinations_generation = 0;

static HTAB *cache = nullptr;  // name -> CachedDestination; nullptr when not loaded
// outbox.destinations, whose invalidations this backend watches; InvalidOid until the table is
// looked up (and again after an invalidation, until it is looked up again).
static Oid watched_relid = InvalidOid;

static void InvalidateCache(Datum, Oid relid) {
    // InvalidOid means "all relations" (e.g. after a sinval queue overflow).
    if (relid != InvalidOid && relid != watched_relid)
        return;
    if (cache) {
        hash_destroy(cache);
        cache = nullptr;
    }
    watched_relid = InvalidOid;
    destinations_generation++;
}

void RegisterDestinationCacheCallback() {
    CacheRegisterRelcacheCallback(InvalidateCache, 0);
}

// The OID of outbox.destinations (in a transaction).
static Oid DestinationsRelid() {
    Oid nsp = get_namespace_oid("outbox", false);
    Oid relid = get_relname_relid("destinations", nsp);
    if (!OidIsValid(relid))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("relation \"outbox.destinations\" does not exist"),
                        errhint("The outbox extension may be only partly installed; run "
                                "DROP EXTENSION outbox; CREATE EXTENSION outbox;")));
    return relid;
}

void WatchDestinations() {
    watched_relid = DestinationsRelid();
}

// A duration setting as create_destination accepted it (config.cpp AsDurationMs): a JSON
// number of milliseconds or a string with a unit; 0 when absent (or, never stored, invalid).
static int64 DurationSettingMs(Jsonb *jb, const char *key) {
    JsonbValue *v = getKeyJsonValueFromContainer(&jb->root, key, strlen(key), nullptr);
    if (v == nullptr)
        return 0;
    if (v->type == jbvNumeric) {
        double ms =
            DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v->val.numeric)));
        return ms >= 0 && ms < 9.2e18 ? int64(std::floor(ms)) : 0;
    }
    if (v->type == jbvString) {
        std::optional<int64_t> ms =
            outbox::ParseDurationMs(std::string_view(v->val.string.val, v->val.string.len));
        return ms ? *ms : 0;
    }
    return 0;
}

// Reads every row of outbox.destinations with the latest snapshot: a message may name a
// destination committed after the producer's transaction began, as with a foreign key check.
static void LoadCache() {
    Oid relid = DestinationsRelid();

    HASHCTL info;
    memset(&info, 0, sizeof info);
    info.keysize = NAMEDATALEN;
    info.entrysize = sizeof(CachedDestination);
    info.hcxt = CacheMemoryContext;
    HTAB *table =
        hash_create("outbox destinations", 16, &info, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);

    Relation rel = table_open(relid, AccessShareLock);
    TupleDesc desc = RelationGetDescr(rel);
    AttrNumber att_name = get_attnum(relid, "name");
    AttrNumber att_kind = get_attnum(relid, "kind");
    AttrNumber att_config = get_attnum(relid, "config");
    AttrNumber att_paused = get_attnum(relid, "paused");
    Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    TableScanDesc scan = BeginTableScan(rel, snapshot);
    HeapTuple tuple;
    while ((tuple = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
        bool isnull;
        Datum name = heap_getattr(tuple, att_name, desc, &isnull);
        if (isnull)
            continue;
        char *name_str = TextDatumGetCString(name);
        if (strlen(name_str) >= NAMEDATALEN)
            continue;  // the name check forbids it
        auto *entry =
            static_cast<CachedDestination *>(hash_search(table, name_str, HASH_ENTER, nullptr));
        Datum kind = heap_getattr(tuple, att_kind, desc, &isnull);
        const char *kind_text = isnull ? "" : TextDatumGetCString(kind);
        entry->kind = FindBrokerKind(kind_text);
        const char *topic_key = entry->kind ? entry->kind->topic.default_key : "topic";
        const char *limit_key = entry->kind ? entry->kind->message_limit.config_key : nullptr;
        entry->has_topic = false;
        entry->ordered = false;
        entry->structured = false;
        entry->max_message_bytes = limit_key ? entry->kind->message_limit.default_bytes : 0;
        entry->max_pending = 0;
        entry->ttl_ms = 0;
        entry->compacting = false;
        Datum paused = heap_getattr(tuple, att_paused, desc, &isnull);
        entry->paused = !isnull && DatumGetBool(paused);
        Datum config = heap_getattr(tuple, att_config, desc, &isnull);
        if (!isnull) {
            Jsonb *jb = DatumGetJsonbP(config);
            JsonbValue *ordering = getKeyJsonValueFromContainer(&jb->root, "ordering", 8, nullptr);
            entry->ordered = ordering && ordering->type == jbvString &&
                             ordering->val.string.len == 3 &&
                             memcmp(ordering->val.string.val, "key", 3) == 0;
            JsonbValue *mode = getKeyJsonValueFromContainer(&jb->root, "cloudevents", 11, nullptr);
            entry->structured = mode && mode->type == jbvString && mode->val.string.len == 10 &&
                                memcmp(mode->val.string.val, "structured", 10) == 0;
            JsonbValue *max = limit_key ? getKeyJsonValueFromContainer(&jb->root, limit_key,
                                                                       strlen(limit_key), nullptr)
                                        : nullptr;
            if (max && max->type == jbvString) {
                char buf[32] = "";
                memcpy(buf, max->val.string.val, Min(max->val.string.len, int(sizeof buf) - 1));
                entry->max_message_bytes = strtoll(buf, nullptr, 10);
            } else if (max && max->type == jbvNumeric) {
                entry->max_message_bytes = DatumGetInt64(
                    DirectFunctionCall1(numeric_int8, NumericGetDatum(max->val.numeric)));
            }
            // Validated (an integer 1..kMaxPendingLimit) by the destinations check.
            JsonbValue *cap = getKeyJsonValueFromContainer(&jb->root, "max_pending", 11, nullptr);
            if (cap && cap->type == jbvNumeric)
                entry->max_pending = DatumGetInt64(
                    DirectFunctionCall1(numeric_int8, NumericGetDatum(cap->val.numeric)));
            entry->ttl_ms = DurationSettingMs(jb, "ttl");
            JsonbValue *compaction =
                getKeyJsonValueFromContainer(&jb->root, "compaction", 10, nullptr);
            entry->compacting = compaction && compaction->type == jbvString &&
                                compaction->val.string.len == 3 &&
                                memcmp(compaction->val.string.val, "key", 3) == 0;
            JsonbValue *topic =
                getKeyJsonValueFromContainer(&jb->root, topic_key, strlen(topic_key), nullptr);
            if (topic && topic->type == jbvString &&
                topic->val.string.len < static_cast<int>(sizeof entry->topic)) {
                memcpy(entry->topic, topic->val.string.val, topic->val.string.len);
                entry->topic[topic->val.string.len] = '\0';
                entry->has_topic = true;
            }
        }
    }
    table_endscan(scan);
    UnregisterSnapshot(snapshot);
    table_close(rel, AccessShareLock);

    cache = table;
    watched_relid = relid;
}

const CachedDestination *LookupDestination(const char *name, int len) {
    if (len <= 0 || len >= NAMEDATALEN)
        return nullptr;
    if (cache == nullptr)
        LoadCache();
    char key[NAMEDATALEN];
    memcpy(key, name, len);
    key[len] = '\0';
    return static_cast<const CachedDestination *>(hash_search(cache, key, HASH_FIND, nullptr));
}

}  // namespace outbox::pg
