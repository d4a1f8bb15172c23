// The inbox's consume step: see include/outbox/pg/inbox_consume.hpp.
#include "outbox/pg/inbox_consume.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "outbox/driver_supervisor.hpp"
#include "outbox/inbox_event_id.hpp"
#include "outbox/inbox_record.hpp"
#include "outbox/uuid7.hpp"

extern "C" {
#include "postgres.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

#include "outbox/pg/guard.hpp"
#include "outbox/pg/settings.hpp"

namespace outbox::pg {

namespace {

// The subscriptions as the workers read them, with the handler resolved (by oid: the stored
// text is schema-qualified) and the owner checked.
const char *const kLoadSql =
    "SELECT s.name, s.config::text, s.handler, s.owner::oid, s.paused,"
    "       pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(p.proname),"
    "       r.oid IS NOT NULL, s.last_error"
    "  FROM outbox.inbox_subscriptions AS s"
    "  LEFT JOIN pg_catalog.pg_proc AS p ON p.oid = pg_catalog.to_regprocedure(s.handler)"
    "  LEFT JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace"
    "  LEFT JOIN pg_catalog.pg_roles AS r ON r.oid = s.owner"
    " ORDER BY s.name";

const char *const kReadOffsetSql =
    "SELECT \"offset\","
    "       EXISTS (SELECT FROM outbox.inbox_dead_letters AS d WHERE d.subscription = $1"
    "               AND d.topic = $2 AND d.\"partition\" = $3 AND d.blocking)"
    "  FROM outbox.inbox_offsets WHERE subscription = $1 AND topic = $2 AND \"partition\" = $3";

const char *const kBlockedSql =
    "SELECT EXISTS (SELECT FROM outbox.inbox_dead_letters AS d WHERE d.subscription = $1"
    "               AND d.topic = $2 AND d.\"partition\" = $3 AND d.blocking)";

const char *const kDedupSql =
    "INSERT INTO outbox.inbox (subscription, event_id, topic, \"partition\", \"offset\")"
    " VALUES ($1, $2, $3, $4, $5) ON CONFLICT ON CONSTRAINT inbox_pkey DO NOTHING";

const char *const kDeadLetterSql =
    "INSERT INTO outbox.inbox_dead_letters AS d (subscription, topic, \"partition\", \"offset\","
    "    event_id, key, headers, payload, payload_bytes, record_timestamp, blocking, last_error,"
    "    last_sqlstate)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
    " ON CONFLICT ON CONSTRAINT inbox_dead_letters_record DO UPDATE"
    "   SET attempts = d.attempts + 1, last_error = excluded.last_error,"
    "       last_sqlstate = excluded.last_sqlstate, blocking = excluded.blocking,"
    "       failed_at = now(), requeued_at = NULL";

const char *const kRequeuedSql =
    "SELECT id, topic, \"partition\", \"offset\", event_id, key, headers, payload, payload_bytes,"
    "       record_timestamp"
    "  FROM outbox.inbox_dead_letters"
    " WHERE subscription = $1 AND requeued_at IS NOT NULL"
    " ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED";

const char *const kRequeueDoneSql = "DELETE FROM outbox.inbox_dead_letters WHERE id = $1";

const char *const kRequeueFailedSql =
    "UPDATE outbox.inbox_dead_letters SET attempts = attempts + 1, last_error = $2,"
    "       last_sqlstate = $3, failed_at = now(), requeued_at = NULL WHERE id = $1";

// Compare-and-set on the offset this worker read: a second writer (there should be none: the
// partition's advisory lock) makes the transaction fail instead of moving the position twice.
const char *const kUpdateOffsetSql =
    "UPDATE outbox.inbox_offsets SET \"offset\" = $4, consumed = consumed + $5,"
    "       duplicates = duplicates + $6, dead_lettered = dead_lettered + $7,"
    "       high_watermark = $8, last_error = coalesce($9, last_error),"
    "       last_record_at = coalesce($10, last_record_at), updated_at = now()"
    " WHERE subscription = $1 AND topic = $2 AND \"partition\" = $3 AND \"offset\" = $11";

const char *const kInsertOffsetSql =
    "INSERT INTO outbox.inbox_offsets (subscription, topic, \"partition\", \"offset\", consumed,"
    "       duplicates, dead_lettered, high_watermark, last_error, last_record_at)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

const char *const kShowErrorSql =
    "UPDATE outbox.inbox_subscriptions SET last_error = $2 WHERE name = $1"
    "   AND last_error IS DISTINCT FROM $2";

SPIPlanPtr load_plan, read_offset_plan, blocked_plan, dedup_plan, dead_letter_plan,
    requeued_plan, requeue_done_plan, requeue_failed_plan, update_offset_plan, insert_offset_plan,
    show_error_plan;

SPIPlanPtr Prepare(SPIPlanPtr *slot, const char *sql, int nargs, Oid *types) {
    if (*slot == nullptr) {
        SPIPlanPtr plan = SPI_prepare(sql, nargs, types);
        if (plan == nullptr)
            elog(ERROR, "outbox: SPI_prepare failed (%s) for: %s",
                 SPI_result_code_string(SPI_result), sql);
        if (SPI_keepplan(plan) != 0)
            elog(ERROR, "outbox: SPI_keepplan failed");
        *slot = plan;
    }
    return *slot;
}

Datum Text(const std::string &s) {
    return PointerGetDatum(cstring_to_text_with_len(s.data(), int(s.size())));
}

Datum Bytea(const std::string &s) {
    bytea *b = static_cast<bytea *>(palloc(VARHDRSZ + s.size()));
    SET_VARSIZE(b, VARHDRSZ + s.size());
    memcpy(VARDATA(b), s.data(), s.size());
    return PointerGetDatum(b);
}

Datum Jsonb(const std::string &json) {
    return DirectFunctionCall1(jsonb_in, CStringGetDatum(pstrdup(json.c_str())));
}

Datum UuidDatum(const Uuid &u) {
    pg_uuid_t *v = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    memcpy(v->data, u.data(), UUID_LEN);
    return UUIDPGetDatum(v);
}

Datum TimestampFromMs(int64_t ms) {
    // Unix epoch milliseconds -> PostgreSQL's microseconds since 2000-01-01.
    return TimestampTzGetDatum(TimestampTz(ms) * 1000 -
                               TimestampTz(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
                                   USECS_PER_DAY);
}

// The session advisory lock of one subscription partition. Advisory locks are per database;
// the key is a 64-bit hash (a collision only makes two partitions share one owner).
int64_t LockKey(const std::string &subscription, const std::string &topic, int32_t partition) {
    std::string k = "outbox.inbox";
    k.push_back('\0');
    k += subscription;
    k.push_back('\0');
    k += topic;
    k.push_back('\0');
    k += std::to_string(partition);
    return int64_t(hash_bytes_extended(reinterpret_cast<const unsigned char *>(k.data()),
                                       int(k.size()), 0x6f7574626f78ULL));
}

bool TryLock(int64_t key) {
    return PgTry([key] {
        return DatumGetBool(DirectFunctionCall1(pg_try_advisory_lock_int8, Int64GetDatum(key)));
    });
}

void Unlock(int64_t key) {
    PgTry([key] { (void)DirectFunctionCall1(pg_advisory_unlock_int8, Int64GetDatum(key)); });
}

// The ten arguments of the handler call, as outbox.inbox_message's fields.
struct MessageArgs {
    Datum values[10];
    char nulls[10];
};
constexpr Oid kMessageTypes[10] = {TEXTOID,  TEXTOID,  INT4OID,  INT8OID, TEXTOID,
                                   JSONBOID, JSONBOID, BYTEAOID, UUIDOID, TIMESTAMPTZOID};

std::string SqlState(int code) { return unpack_sql_state(code); }

}  // namespace

InboxConsumer::InboxConsumer(DriverProcess *drivers, std::string database,
                             std::function<void(const char *)> pause)
    : drivers_(drivers), database_(std::move(database)), pause_(std::move(pause)) {}

InboxConsumer::~InboxConsumer() = default;

size_t InboxConsumer::OwnedPartitions() const {
    size_t n = 0;
    for (const auto &[name, s] : subscriptions_)
        n += s->partitions.size();
    return n;
}

bool InboxConsumer::HasWork(bool poll) {
    if (poll || !loaded_ || reset_)
        return true;
    for (auto &[name, s] : subscriptions_) {
        if (!s->consumer)
            continue;
        if (!s->pending.empty() || s->consumer->Buffered() > 0 ||
            s->consumer->Epoch() != s->epoch)
            return true;
    }
    return false;
}

void InboxConsumer::Close(Subscription &s) {
    for (auto &[tp, p] : s.partitions)
        Unlock(p.lock_key);
    s.partitions.clear();
    s.pending.clear();
    s.consumer.reset();
    if (s.handler_plan) {
        SPIPlanPtr plan = static_cast<SPIPlanPtr>(s.handler_plan);
        s.handler_plan = nullptr;
        PgTry([plan] { SPI_freeplan(plan); });
    }
}

void InboxConsumer::ShowError(Subscription &s, const std::string &error) {
    if (error == s.shown_error)
        return;
    s.shown_error = error;
    PgTry([&] {
        Oid types[2] = {TEXTOID, TEXTOID};
        Datum args[2] = {Text(s.name), error.empty() ? Datum(0) : Text(error)};
        char nulls[2] = {' ', error.empty() ? 'n' : ' '};
        int rc = SPI_execute_plan(Prepare(&show_error_plan, kShowErrorSql, 2, types), args, nulls,
                                  false, 0);
        if (rc != SPI_OK_UPDATE)
            elog(ERROR, "outbox: recording a subscription's error failed: %s",
                 SPI_result_code_string(rc));
    });
}

// Reads outbox.inbox_subscriptions; opens, reopens (config, handler or owner changed) and
// closes consumers.
void InboxConsumer::Load() {
    struct Row {
        std::string name, config, handler, call, last_error;
        Oid owner = InvalidOid;
        bool paused = false, handler_found = false, owner_found = false;
    };
    std::vector<Row> rows;
    PgTry([&] {
        int rc = SPI_execute_plan(Prepare(&load_plan, kLoadSql, 0, nullptr), nullptr, nullptr,
                                  true, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading outbox.inbox_subscriptions failed: %s",
                 SPI_result_code_string(rc));
    });
    for (uint64 i = 0; i < SPI_processed; i++) {
        Row r;
        PgTry([&] {
            HeapTuple t = SPI_tuptable->vals[i];
            TupleDesc d = SPI_tuptable->tupdesc;
            bool isnull;
            auto text = [&](int col) -> std::string {
                char *v = SPI_getvalue(t, d, col);
                return v ? std::string(v) : std::string();
            };
            r.name = text(1);
            r.config = text(2);
            r.handler = text(3);
            Datum owner = SPI_getbinval(t, d, 4, &isnull);
            r.owner = isnull ? InvalidOid : DatumGetObjectId(owner);
            r.paused = DatumGetBool(SPI_getbinval(t, d, 5, &isnull));
            (void)SPI_getbinval(t, d, 6, &isnull);
            r.handler_found = !isnull;
            r.call = text(6);
            r.owner_found = DatumGetBool(SPI_getbinval(t, d, 7, &isnull)) && r.owner != InvalidOid;
            r.last_error = text(8);
        });
        rows.push_back(std::move(r));
    }

    std::set<std::string> seen;
    for (Row &r : rows) {
        seen.insert(r.name);
        auto it = subscriptions_.find(r.name);
        if (it != subscriptions_.end() &&
            (r.paused || it->second->config_text != r.config || it->second->handler != r.handler ||
             it->second->owner != r.owner)) {
            Close(*it->second);
            subscriptions_.erase(it);
            it = subscriptions_.end();
        }
        if (r.paused || it != subscriptions_.end())
            continue;
        auto s = std::make_unique<Subscription>();
        s->name = r.name;
        s->config_text = r.config;
        s->handler = r.handler;
        s->owner = r.owner;
        s->shown_error = r.last_error;
        std::string error;
        SubscriptionCheck check = CheckSubscriptionConfig(SubscriptionKind::Kafka, r.config);
        if (!check.ok()) {
            error = "the config is not valid: " + check.problems.front();
        } else if (!r.handler_found) {
            error = "the handler " + r.handler + " does not exist";
        } else if (!r.owner_found) {
            error = "the subscription's owner role does not exist";
        }
        if (error.empty()) {
            s->config = std::move(check.config);
            std::string call = "SELECT " + r.call + "(ROW($1, $2, $3, $4, $5, $6, $7, $8, $9, "
                                                     "$10)::outbox.inbox_message)";
            PgTry([&] {
                Oid types[10];
                memcpy(types, kMessageTypes, sizeof types);
                SPIPlanPtr plan = SPI_prepare(call.c_str(), 10, types);
                if (plan == nullptr)
                    elog(ERROR, "outbox: SPI_prepare failed (%s) for: %s",
                         SPI_result_code_string(SPI_result), call.c_str());
                if (SPI_keepplan(plan) != 0)
                    elog(ERROR, "outbox: SPI_keepplan failed");
                s->handler_plan = plan;
            });
            KafkaConsumerOptions options;
            options.name = r.name;
            options.topics = s->config.topics;
            options.properties = s->config.properties;
            options.client_id = "outbox-inbox-" + database_ + "-" + r.name;
            options.window_records = size_t(std::max(2 * s->config.batch_size, 1000));
            s->consumer = drivers_->OpenConsumer(r.name, options, &error);
            if (s->consumer)
                s->epoch = s->consumer->Epoch();
        }
        if (!s->consumer)
            ereport(LOG, (errmsg("outbox worker: subscription \"%s\" is not consumed: %s",
                                 r.name.c_str(), error.c_str())));
        ShowError(*s, error);
        subscriptions_.emplace(r.name, std::move(s));
    }
    for (auto it = subscriptions_.begin(); it != subscriptions_.end();) {
        if (seen.count(it->first) == 0) {
            Close(*it->second);
            it = subscriptions_.erase(it);
        } else {
            ++it;
        }
    }
    loaded_ = true;
}

// Takes and gives back partitions (this worker's share), reads the offsets of new ones, and
// checks whether blocked ones may go on.
void InboxConsumer::Own(Subscription &s) {
    const ConsumerState &state = s.consumer->State();
    std::string error = s.consumer->Error();
    if (error.empty())
        error = state.error;
    if (error.empty() && !state.missing_topics.empty()) {
        error = "topic \"" + state.missing_topics.front() + "\" does not exist";
        if (state.missing_topics.size() > 1)
            error += " (and " + std::to_string(state.missing_topics.size() - 1) + " more)";
    }
    ShowError(s, error);
    if (!state.known)
        return;

    std::map<std::pair<std::string, int32_t>, const PartitionInfo *> exists;
    for (const PartitionInfo &info : state.partitions)
        exists[{info.topic, info.partition}] = &info;
    int workers = std::max(setting_workers, 1);
    size_t share = (state.partitions.size() + size_t(workers) - 1) / size_t(workers);

    // Gone from the cluster, or more than the share (another worker came): given back, from
    // the end. Nothing of them is applied in this transaction yet.
    for (auto it = s.partitions.begin(); it != s.partitions.end();) {
        if (exists.count(it->first) == 0) {
            Unlock(it->second.lock_key);
            it = s.partitions.erase(it);
            s.assign_due = true;
        } else {
            ++it;
        }
    }
    while (s.partitions.size() > share) {
        auto last = std::prev(s.partitions.end());
        Unlock(last->second.lock_key);
        s.partitions.erase(last);
        s.assign_due = true;
    }
    if (s.assign_due) {
        // Records of partitions given back are not applied here: their next owner reads them.
        std::vector<ConsumedRecord> kept;
        for (ConsumedRecord &r : s.pending)
            if (s.partitions.count({r.topic, r.partition}) != 0)
                kept.push_back(std::move(r));
        s.pending = std::move(kept);
    }

    for (const PartitionInfo &info : state.partitions) {
        if (s.partitions.size() >= share)
            break;
        auto tp = std::make_pair(info.topic, info.partition);
        if (s.partitions.count(tp) != 0)
            continue;
        int64_t key = LockKey(s.name, info.topic, info.partition);
        if (!TryLock(key))
            continue;  // another worker's
        Partition p;
        p.topic = info.topic;
        p.partition = info.partition;
        p.lock_key = key;
        p.high = info.high;
        bool found = false;
        PgTry([&] {
            Oid types[3] = {TEXTOID, TEXTOID, INT4OID};
            Datum args[3] = {Text(s.name), Text(info.topic), Int32GetDatum(info.partition)};
            int rc = SPI_execute_plan(Prepare(&read_offset_plan, kReadOffsetSql, 3, types), args,
                                      nullptr, true, 1);
            if (rc != SPI_OK_SELECT)
                elog(ERROR, "outbox: reading outbox.inbox_offsets failed: %s",
                     SPI_result_code_string(rc));
            if (SPI_processed == 1) {
                bool isnull;
                found = true;
                p.committed = DatumGetInt64(
                    SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
                p.blocked = DatumGetBool(
                    SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
            }
        });
        if (found) {
            p.stored = true;
        } else {
            // Where a partition with no stored offset begins ("start").
            int64_t start = s.config.start_at_latest ? info.high : std::max<int64_t>(info.low, 0);
            if (start < 0) {
                Unlock(key);  // its watermarks are not known yet
                continue;
            }
            p.committed = start;
            p.touched = true;  // its row is written in this transaction
        }
        p.next = p.committed;
        p.applied = p.committed;
        s.partitions.emplace(tp, std::move(p));
        s.assign_due = true;
    }

    for (auto &[tp, p] : s.partitions) {
        auto e = exists.find(tp);
        if (e != exists.end() && e->second->high != p.high && e->second->high >= 0) {
            p.high = e->second->high;
            p.touched = true;
        }
        if (!p.blocked)
            continue;
        bool still = true;
        PgTry([&] {
            Oid types[3] = {TEXTOID, TEXTOID, INT4OID};
            Datum args[3] = {Text(s.name), Text(p.topic), Int32GetDatum(p.partition)};
            int rc = SPI_execute_plan(Prepare(&blocked_plan, kBlockedSql, 3, types), args,
                                      nullptr, true, 1);
            if (rc != SPI_OK_SELECT || SPI_processed != 1)
                elog(ERROR, "outbox: reading outbox.inbox_dead_letters failed: %s",
                     SPI_result_code_string(rc));
            bool isnull;
            still = DatumGetBool(
                SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
        });
        if (!still) {
            // Its blocking record was applied (requeue) or deleted: on from the stored offset.
            p.blocked = false;
            p.next = p.applied;
            s.assign_due = true;
        }
    }
}

void InboxConsumer::Assign(Subscription &s) {
    std::vector<ConsumerAssignment> assignment;
    for (auto &[tp, p] : s.partitions)
        if (!p.blocked)
            assignment.push_back(ConsumerAssignment{p.topic, p.partition, p.next});
    s.consumer->Assign(std::move(assignment));
    s.assign_due = false;
}

namespace {

// Runs `body` in a subtransaction; false (and *error) when it raised, the subtransaction then
// rolled back.
template <typename F>
bool InSubtransaction(F &&body, CaughtError *error) {
    MemoryContext context = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;
    PgTry([] { BeginInternalSubTransaction(nullptr); });
    bool failed = false;
    try {
        body();
    } catch (...) {
        CaptureCurrentException(error);
        failed = true;
    }
    PgTry([&] {
        if (failed)
            RollbackAndReleaseCurrentSubTransaction();
        else
            ReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(context);
        CurrentResourceOwner = owner;
    });
    return !failed;
}

// The dedup row: true when the event is new.
bool Dedup(const std::string &subscription, const Uuid &event_id, const std::string &topic,
           int32_t partition, int64_t offset) {
    return PgTry([&] {
        Oid types[5] = {TEXTOID, UUIDOID, TEXTOID, INT4OID, INT8OID};
        Datum args[5] = {Text(subscription), UuidDatum(event_id), Text(topic),
                         Int32GetDatum(partition), Int64GetDatum(offset)};
        int rc = SPI_execute_plan(Prepare(&dedup_plan, kDedupSql, 5, types), args, nullptr, false,
                                  0);
        if (rc != SPI_OK_INSERT)
            elog(ERROR, "outbox: inserting into outbox.inbox failed: %s",
                 SPI_result_code_string(rc));
        return SPI_processed == 1;
    });
}

// The handler, as the subscription's owner: only this call runs with the owner's rights
// (SECURITY_RESTRICTED_OPERATION, as PostgreSQL runs index expressions during maintenance:
// it cannot SET ROLE its way out or leave session state behind).
void CallHandler(SPIPlanPtr plan, Oid owner, MessageArgs *args) {
    PgTry([&] {
        Oid save_userid;
        int save_sec_context;
        GetUserIdAndSecContext(&save_userid, &save_sec_context);
        SetUserIdAndSecContext(owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
                                          SECURITY_RESTRICTED_OPERATION);
        int rc = SPI_execute_plan(plan, args->values, args->nulls, false, 0);
        SetUserIdAndSecContext(save_userid, save_sec_context);
        if (rc < 0)
            elog(ERROR, "outbox: the handler call failed: %s", SPI_result_code_string(rc));
    });
}

}  // namespace

// Applies up to batch_size taken records. Returns how many.
size_t InboxConsumer::ApplyPending(Subscription &s) {
    size_t limit = std::min(s.pending.size(), size_t(s.config.batch_size));
    SPIPlanPtr plan = static_cast<SPIPlanPtr>(s.handler_plan);
    MemoryContext record_context = nullptr;
    PgTry([&] {
        record_context = AllocSetContextCreate(CurrentMemoryContext, "outbox inbox record",
                                               ALLOCSET_DEFAULT_SIZES);
    });
    MemoryContext outer = CurrentMemoryContext;
    size_t done = 0;
    for (; done < limit; done++) {
        const ConsumedRecord &r = s.pending[done];
        auto it = s.partitions.find({r.topic, r.partition});
        if (it == s.partitions.end() || it->second.blocked || r.offset < it->second.applied)
            continue;  // given back, blocked meanwhile, or already applied
        Partition &p = it->second;
        InboxEventId id =
            RecordEventId(r.headers, s.config.event_id_header, r.topic, r.partition, r.offset);
        PayloadKind kind = ClassifyPayload(r.value, r.headers);
        MessageArgs args;
        PgTry([&] {
            MemoryContextReset(record_context);
            MemoryContextSwitchTo(record_context);
            args.values[0] = Text(s.name);
            args.values[1] = Text(r.topic);
            args.values[2] = Int32GetDatum(r.partition);
            args.values[3] = Int64GetDatum(r.offset);
            args.values[4] = r.key ? Text(*r.key) : Datum(0);
            args.values[5] = Jsonb(HeadersJson(r.headers));
            args.values[6] = kind == PayloadKind::Json ? Jsonb(*r.value) : Datum(0);
            args.values[7] = kind == PayloadKind::Bytes ? Bytea(*r.value) : Datum(0);
            args.values[8] = UuidDatum(id.id);
            args.values[9] = r.timestamp_ms >= 0 ? TimestampFromMs(r.timestamp_ms) : Datum(0);
            memset(args.nulls, ' ', sizeof args.nulls);
            if (!r.key)
                args.nulls[4] = 'n';
            if (kind != PayloadKind::Json)
                args.nulls[6] = 'n';
            if (kind != PayloadKind::Bytes)
                args.nulls[7] = 'n';
            if (r.timestamp_ms < 0)
                args.nulls[9] = 'n';
            MemoryContextSwitchTo(outer);
        });
        bool duplicate = false;
        CaughtError error;
        bool ok = InSubtransaction(
            [&] {
                if (!Dedup(s.name, id.id, r.topic, r.partition, r.offset)) {
                    duplicate = true;
                    return;
                }
                pause_("inbox_before_handler");
                CallHandler(plan, s.owner, &args);
                pause_("inbox_after_handler");
            },
            &error);
        if (ok) {
            if (duplicate)
                p.duplicates++;
            else
                p.consumed++;
        } else {
            bool block = s.config.on_error == OnError::Block;
            PgTry([&] {
                Oid types[13] = {TEXTOID,  TEXTOID, INT4OID,        INT8OID, UUIDOID,
                                 TEXTOID,  JSONBOID, JSONBOID,      BYTEAOID, TIMESTAMPTZOID,
                                 BOOLOID,  TEXTOID, TEXTOID};
                Datum values[13];
                char nulls[13];
                memcpy(values, args.values, sizeof(Datum) * 2);  // subscription, topic
                values[2] = args.values[2];
                values[3] = args.values[3];
                values[4] = args.values[8];
                values[5] = args.values[4];
                values[6] = args.values[5];
                values[7] = args.values[6];
                values[8] = args.values[7];
                values[9] = args.values[9];
                memset(nulls, ' ', sizeof nulls);
                nulls[5] = args.nulls[4];
                nulls[7] = args.nulls[6];
                nulls[8] = args.nulls[7];
                nulls[9] = args.nulls[9];
                values[10] = BoolGetDatum(block);
                values[11] = Text(error.message);
                values[12] = Text(SqlState(error.sqlerrcode));
                int rc = SPI_execute_plan(
                    Prepare(&dead_letter_plan, kDeadLetterSql, 13, types), values, nulls, false, 0);
                if (rc != SPI_OK_INSERT)
                    elog(ERROR, "outbox: inserting into outbox.inbox_dead_letters failed: %s",
                         SPI_result_code_string(rc));
            });
            p.dead++;
            p.last_error = std::string("offset ") + std::to_string(r.offset) + ": " +
                           SqlState(error.sqlerrcode) + ": " + error.message;
            if (block)
                p.blocked = true;  // nothing after it is applied
        }
        p.applied = r.offset + 1;
        p.last_record_ms = r.timestamp_ms >= 0 ? r.timestamp_ms : 0;
        p.touched = true;
    }
    PgTry([&] {
        MemoryContextSwitchTo(outer);
        MemoryContextDelete(record_context);
    });
    s.pending.erase(s.pending.begin(), s.pending.begin() + long(done));
    return done;
}

// Dead letters requeued by outbox.requeue_inbox, of partitions this worker owns.
void InboxConsumer::ApplyRequeued(Subscription &s) {
    SPITupleTable *table = nullptr;
    uint64 n = 0;
    PgTry([&] {
        Oid types[2] = {TEXTOID, INT4OID};
        Datum args[2] = {Text(s.name), Int32GetDatum(s.config.batch_size)};
        int rc = SPI_execute_plan(Prepare(&requeued_plan, kRequeuedSql, 2, types), args, nullptr,
                                  false, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading requeued inbox dead letters failed: %s",
                 SPI_result_code_string(rc));
        table = SPI_tuptable;
        n = SPI_processed;
    });
    SPIPlanPtr plan = static_cast<SPIPlanPtr>(s.handler_plan);
    for (uint64 i = 0; i < n; i++) {
        int64_t id = 0;
        std::string topic;
        int32_t partition = 0;
        int64_t offset = 0;
        Uuid event{};
        MessageArgs args;
        PgTry([&] {
            HeapTuple t = table->vals[i];
            TupleDesc d = table->tupdesc;
            bool isnull;
            id = DatumGetInt64(SPI_getbinval(t, d, 1, &isnull));
            char *tp = SPI_getvalue(t, d, 2);
            topic = tp ? tp : "";
            partition = DatumGetInt32(SPI_getbinval(t, d, 3, &isnull));
            offset = DatumGetInt64(SPI_getbinval(t, d, 4, &isnull));
            pg_uuid_t *u = DatumGetUUIDP(SPI_getbinval(t, d, 5, &isnull));
            memcpy(event.data(), u->data, UUID_LEN);
            args.values[0] = Text(s.name);
            args.values[1] = SPI_getbinval(t, d, 2, &isnull);
            args.values[2] = Int32GetDatum(partition);
            args.values[3] = Int64GetDatum(offset);
            args.values[8] = UuidDatum(event);
            memset(args.nulls, ' ', sizeof args.nulls);
            // key, headers, payload, payload_bytes, record_timestamp: columns 6..10.
            const int fields[5] = {4, 5, 6, 7, 9};
            for (int k = 0; k < 5; k++) {
                args.values[fields[k]] = SPI_getbinval(t, d, 6 + k, &isnull);
                args.nulls[fields[k]] = isnull ? 'n' : ' ';
            }
        });
        auto it = s.partitions.find({topic, partition});
        if (it == s.partitions.end())
            continue;  // another worker's partition: it applies it
        Partition &p = it->second;
        bool duplicate = false;
        CaughtError error;
        bool ok = InSubtransaction(
            [&] {
                if (!Dedup(s.name, event, topic, partition, offset)) {
                    duplicate = true;
                    return;
                }
                CallHandler(plan, s.owner, &args);
            },
            &error);
        PgTry([&] {
            Datum a[3] = {Int64GetDatum(id), ok ? Datum(0) : Text(error.message),
                          ok ? Datum(0) : Text(SqlState(error.sqlerrcode))};
            int rc;
            if (ok) {
                Oid types[1] = {INT8OID};
                rc = SPI_execute_plan(Prepare(&requeue_done_plan, kRequeueDoneSql, 1, types), a,
                                      nullptr, false, 0);
            } else {
                Oid types[3] = {INT8OID, TEXTOID, TEXTOID};
                rc = SPI_execute_plan(Prepare(&requeue_failed_plan, kRequeueFailedSql, 3, types),
                                      a, nullptr, false, 0);
            }
            if (rc < 0)
                elog(ERROR, "outbox: writing back a requeued inbox dead letter failed: %s",
                     SPI_result_code_string(rc));
        });
        if (ok) {
            if (duplicate)
                p.duplicates++;
            else
                p.consumed++;
            p.dead--;  // no longer a dead letter
        } else {
            p.last_error = std::string("offset ") + std::to_string(offset) + " (requeued): " +
                           SqlState(error.sqlerrcode) + ": " + error.message;
        }
        p.touched = true;
    }
}

void InboxConsumer::WriteOffsets(Subscription &s) {
    for (auto &[tp, p] : s.partitions) {
        if (!p.touched)
            continue;
        PgTry([&] {
            Datum args[11];
            char nulls[11];
            memset(nulls, ' ', sizeof nulls);
            args[0] = Text(s.name);
            args[1] = Text(p.topic);
            args[2] = Int32GetDatum(p.partition);
            args[3] = Int64GetDatum(p.applied);
            args[4] = Int64GetDatum(p.consumed);
            args[5] = Int64GetDatum(p.duplicates);
            args[6] = Int64GetDatum(p.dead);
            args[7] = Int64GetDatum(p.high);
            nulls[7] = p.high < 0 ? 'n' : ' ';
            args[8] = p.last_error.empty() ? Datum(0) : Text(p.last_error);
            nulls[8] = p.last_error.empty() ? 'n' : ' ';
            args[9] = p.last_record_ms > 0 ? TimestampFromMs(p.last_record_ms) : Datum(0);
            nulls[9] = p.last_record_ms > 0 ? ' ' : 'n';
            args[10] = Int64GetDatum(p.committed);
            Oid types[11] = {TEXTOID, TEXTOID, INT4OID, INT8OID,        INT8OID, INT8OID,
                             INT8OID, INT8OID, TEXTOID, TIMESTAMPTZOID, INT8OID};
            if (p.stored) {
                int rc = SPI_execute_plan(
                    Prepare(&update_offset_plan, kUpdateOffsetSql, 11, types), args, nulls, false,
                    0);
                if (rc != SPI_OK_UPDATE)
                    elog(ERROR, "outbox: updating outbox.inbox_offsets failed: %s",
                         SPI_result_code_string(rc));
                if (SPI_processed != 1)
                    ereport(ERROR,
                            (errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
                             errmsg("outbox: the stored offset of subscription \"%s\", %s/%d is "
                                    "no longer %lld",
                                    s.name.c_str(), p.topic.c_str(), p.partition,
                                    (long long)p.committed),
                             errdetail("Another session moved it; this transaction's records "
                                       "are rolled back and read again.")));
            } else {
                int rc = SPI_execute_plan(
                    Prepare(&insert_offset_plan, kInsertOffsetSql, 10, types), args, nulls, false,
                    0);
                if (rc != SPI_OK_INSERT)
                    elog(ERROR, "outbox: inserting into outbox.inbox_offsets failed: %s",
                         SPI_result_code_string(rc));
            }
        });
    }
}

bool InboxConsumer::Consume(bool poll) {
    if (reset_) {
        // After a rolled-back transaction: start over from the stored offsets.
        for (auto &[name, s] : subscriptions_)
            Close(*s);
        subscriptions_.clear();
        reset_ = false;
        loaded_ = false;
    }
    // The handlers and this code's own statements run with this search_path (a fixed one, set
    // for this transaction only: its plans are made and used under it).
    int nest = PgTry([] {
        int level = NewGUCNestLevel();
        (void)set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
                                GUC_ACTION_SAVE, true, 0, false);
        return level;
    });
    if (poll || !loaded_)
        Load();
    bool more = false;
    for (auto &[name, sp] : subscriptions_) {
        Subscription &s = *sp;
        if (!s.consumer)
            continue;
        if (s.consumer->Epoch() != s.epoch) {
            // The driver process started again: what it had buffered is gone; read on from
            // what this worker holds.
            s.epoch = s.consumer->Epoch();
            s.assign_due = true;
        }
        if (poll || s.assign_due)
            Own(s);
        if (s.assign_due)
            Assign(s);
        // Take what arrived, keeping only records of the current assignment, in order.
        std::vector<ConsumedRecord> taken;
        size_t room = size_t(s.config.batch_size) * 2;
        if (s.pending.size() < room)
            s.consumer->Take(&taken, room - s.pending.size());
        for (ConsumedRecord &r : taken) {
            auto it = s.partitions.find({r.topic, r.partition});
            if (it == s.partitions.end() || it->second.blocked || r.offset < it->second.next)
                continue;
            it->second.next = r.offset + 1;
            s.pending.push_back(std::move(r));
        }
        if (poll)
            ApplyRequeued(s);
        size_t applied = ApplyPending(s);
        // A partition blocked in this batch: its later records are read again once it goes on.
        for (auto &[tp, p] : s.partitions)
            if (p.blocked && p.next != p.applied) {
                p.next = p.applied;
                s.assign_due = true;
            }
        if (applied > 0)
            pause_("inbox_before_commit");
        WriteOffsets(s);
        more = more || !s.pending.empty() || s.consumer->Buffered() > 0;
    }
    PgTry([nest] { AtEOXact_GUC(true, nest); });
    return more;
}

void InboxConsumer::Committed() {
    for (auto &[name, s] : subscriptions_)
        for (auto &[tp, p] : s->partitions) {
            if (!p.touched)
                continue;
            p.committed = p.applied;
            p.stored = true;
            p.touched = false;
            p.consumed = p.duplicates = p.dead = 0;
            p.last_error.clear();
            p.last_record_ms = 0;
        }
}

void InboxConsumer::Aborted() { reset_ = true; }

}  // namespace outbox::pg
