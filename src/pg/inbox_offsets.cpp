// The inbox's offsets bookkeeping (see include/outbox/pg/inbox_consume.hpp): which partitions a
// subscription owns, where each stands in outbox.inbox_offsets, and the offsets written back in
// the transaction that applied the records.
#include "outbox/pg/inbox_consume.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "outbox/consumer.hpp"
#include "outbox/ipc/supervisor.hpp"

extern "C" {
#include "postgres.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
}

#include "outbox/pg/guard.hpp"
#include "outbox/pg/spi.hpp"

namespace outbox::pg {

namespace {

const char *const kReadOffsetSql =
    "SELECT \"offset\","
    "       EXISTS (SELECT FROM outbox.inbox_dead_letters AS d WHERE d.subscription = $1"
    "               AND d.topic = $2 AND d.\"partition\" = $3 AND d.blocking)"
    "  FROM outbox.inbox_offsets WHERE subscription = $1 AND topic = $2 AND \"partition\" = $3";

const char *const kBlockedSql =
    "SELECT EXISTS (SELECT FROM outbox.inbox_dead_letters AS d WHERE d.subscription = $1"
    "               AND d.topic = $2 AND d.\"partition\" = $3 AND d.blocking)";

// Compare-and-set on the offset this worker read: a second writer (there should be none: the
// partition's advisory lock) makes the transaction fail instead of moving the position twice.
const char *const kUpdateOffsetSql =
    "UPDATE outbox.inbox_offsets SET \"offset\" = $4, consumed = consumed + $5,"
    "       duplicates = duplicates + $6, dead_lettered = dead_lettered + $7,"
    "       high_watermark = $8, last_error = coalesce($9, last_error),"
    "       last_record_at = coalesce($10, last_record_at), updated_at = pg_catalog.now()"
    " WHERE subscription = $1 AND topic = $2 AND \"partition\" = $3 AND \"offset\" = $11";

const char *const kInsertOffsetSql =
    "INSERT INTO outbox.inbox_offsets (subscription, topic, \"partition\", \"offset\", consumed,"
    "       duplicates, dead_lettered, high_watermark, last_error, last_record_at)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

// The cluster cannot be reached: the stored high watermarks are stale, and a lag from them would
// say nothing (subscriptions() shows NULL, unknown, for a NULL high watermark). Neither this nor
// the error shown changes a subscription paused since this worker last read them (a pause is
// picked up at the next poll; until then the consumer is still open): a paused subscription's
// status stays what it was when it was paused.
const char *const kForgetWatermarksSql =
    "UPDATE outbox.inbox_offsets AS o SET high_watermark = NULL"
    " WHERE o.subscription = $1 AND o.high_watermark IS NOT NULL"
    "   AND NOT EXISTS (SELECT FROM outbox.inbox_subscriptions AS s"
    "                    WHERE s.name = $1 AND s.paused)";

SPIPlanPtr read_offset_plan, blocked_plan, update_offset_plan, insert_offset_plan,
    forget_watermarks_plan;

constexpr const char *kUnreachable = "the cluster cannot be reached: ";

// What to show of a consumer's state: its error, or a topic missing. Sets *unreachable when the
// cluster gave no answer (never, or not now): said so, and the lag is unknown.
std::string StateError(RemoteConsumer &consumer, const ConsumerState &state, bool *unreachable) {
    std::string error = consumer.Error();
    if (error.empty())
        error = state.error;
    if (error.empty() && !state.missing_topics.empty()) {
        error = "topic \"" + state.missing_topics.front() + "\" does not exist";
        if (state.missing_topics.size() > 1)
            error += " (and " + std::to_string(state.missing_topics.size() - 1) + " more)";
    }
    *unreachable = !error.empty() && !state.reachable;
    if (*unreachable && error.rfind(kUnreachable, 0) != 0)
        error = kUnreachable + error;
    return error;
}

void ForgetWatermarks(const std::string &subscription) {
    PgTry([&] {
        Oid types[1] = {TEXTOID};
        Datum args[1] = {TextDatum(subscription)};
        int rc = SPI_execute_plan(KeptPlan(&forget_watermarks_plan, kForgetWatermarksSql, 1, types),
                                  args, nullptr, false, 0);
        if (rc != SPI_OK_UPDATE)
            elog(ERROR, "outbox: updating outbox.inbox_offsets failed: %s",
                 SPI_result_code_string(rc));
    });
}

// The stored offset of a partition and whether a blocking dead letter holds it; false when it
// has no offsets row.
bool ReadStoredOffset(const std::string &subscription, const std::string &topic, int32_t partition,
                      int64_t *committed, bool *blocked) {
    bool found = false;
    PgTry([&] {
        Oid types[3] = {TEXTOID, TEXTOID, INT4OID};
        Datum args[3] = {TextDatum(subscription), TextDatum(topic), Int32GetDatum(partition)};
        int rc = SPI_execute_plan(KeptPlan(&read_offset_plan, kReadOffsetSql, 3, types), args,
                                  nullptr, true, 1);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading outbox.inbox_offsets failed: %s",
                 SPI_result_code_string(rc));
        if (SPI_processed == 1) {
            bool isnull;
            found = true;
            *committed = DatumGetInt64(
                SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
            *blocked = DatumGetBool(
                SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
        }
    });
    return found;
}

// Whether a blocking dead letter still holds the partition.
bool StillBlocked(const std::string &subscription, const std::string &topic, int32_t partition) {
    bool still = true;
    PgTry([&] {
        Oid types[3] = {TEXTOID, TEXTOID, INT4OID};
        Datum args[3] = {TextDatum(subscription), TextDatum(topic), Int32GetDatum(partition)};
        int rc = SPI_execute_plan(KeptPlan(&blocked_plan, kBlockedSql, 3, types), args, nullptr,
                                  true, 1);
        if (rc != SPI_OK_SELECT || SPI_processed != 1)
            elog(ERROR, "outbox: reading outbox.inbox_dead_letters failed: %s",
                 SPI_result_code_string(rc));
        bool isnull;
        still =
            DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    });
    return still;
}

}  // namespace

// Takes the partitions of the subscription's topics (the inbox worker is the database's only
// consumer; the offsets' compare-and-set would stop a second one), gives up those gone from
// the cluster, reads the offsets of new ones, and checks whether blocked ones may go on.
void InboxConsumer::Own(Subscription &s) {
    const ConsumerState &state = s.consumer->State();
    bool unreachable = false;
    std::string error = StateError(*s.consumer, state, &unreachable);
    // Before the cluster first answered, no error is no news: the assignment clears the
    // consumer's last error (Assign) until the next metadata round reports it again, and the
    // error shown would come and go.
    if (state.known || !error.empty())
        ShowError(s, error);
    if (unreachable) {
        for (auto &[tp, p] : s.partitions)
            if (p.high >= 0) {
                p.high = -1;
                p.touched = true;
            }
        ForgetWatermarks(s.name);
        return;  // what the state says of partitions and watermarks is from before
    }
    if (!state.known)
        return;

    std::map<std::pair<std::string, int32_t>, const PartitionInfo *> exists;
    for (const PartitionInfo &info : state.partitions)
        exists[{info.topic, info.partition}] = &info;

    // Gone from the cluster: dropped. Nothing of them is applied in this transaction yet.
    for (auto it = s.partitions.begin(); it != s.partitions.end();) {
        if (exists.count(it->first) == 0) {
            it = s.partitions.erase(it);
            s.assign_due = true;
        } else {
            ++it;
        }
    }
    if (s.assign_due) {
        // Records of partitions dropped are not applied.
        std::vector<ConsumedRecord> kept;
        for (ConsumedRecord &r : s.pending)
            if (s.partitions.count({r.topic, r.partition}) != 0)
                kept.push_back(std::move(r));
        s.pending = std::move(kept);
    }

    for (const PartitionInfo &info : state.partitions) {
        auto tp = std::make_pair(info.topic, info.partition);
        if (s.partitions.count(tp) != 0)
            continue;
        Partition p;
        p.topic = info.topic;
        p.partition = info.partition;
        p.high = info.high;
        bool found = ReadStoredOffset(s.name, info.topic, info.partition, &p.committed, &p.blocked);
        if (found) {
            p.stored = true;
        } else {
            // Where a partition with no stored offset begins ("start").
            int64_t start = s.config.start_at_latest ? info.high : std::max<int64_t>(info.low, 0);
            if (start < 0)
                continue;  // its watermarks are not known yet
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
        bool still = StillBlocked(s.name, p.topic, p.partition);
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

void InboxConsumer::WriteOffsets(Subscription &s) {
    for (auto &[tp, p] : s.partitions) {
        if (!p.touched)
            continue;
        PgTry([&] {
            Datum args[11];
            char nulls[11];
            memset(nulls, ' ', sizeof nulls);
            args[0] = TextDatum(s.name);
            args[1] = TextDatum(p.topic);
            args[2] = Int32GetDatum(p.partition);
            args[3] = Int64GetDatum(p.applied);
            args[4] = Int64GetDatum(p.consumed);
            args[5] = Int64GetDatum(p.duplicates);
            args[6] = Int64GetDatum(p.dead);
            args[7] = Int64GetDatum(p.high);
            nulls[7] = p.high < 0 ? 'n' : ' ';
            args[8] = p.last_error.empty() ? Datum(0) : TextDatum(p.last_error);
            nulls[8] = p.last_error.empty() ? 'n' : ' ';
            args[9] = p.last_record_ms > 0 ? TimestampFromUnixMs(p.last_record_ms) : Datum(0);
            nulls[9] = p.last_record_ms > 0 ? ' ' : 'n';
            args[10] = Int64GetDatum(p.committed);
            Oid types[11] = {TEXTOID, TEXTOID, INT4OID, INT8OID,        INT8OID, INT8OID,
                             INT8OID, INT8OID, TEXTOID, TIMESTAMPTZOID, INT8OID};
            if (p.stored) {
                int rc =
                    SPI_execute_plan(KeptPlan(&update_offset_plan, kUpdateOffsetSql, 11, types),
                                     args, nulls, false, 0);
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
                int rc =
                    SPI_execute_plan(KeptPlan(&insert_offset_plan, kInsertOffsetSql, 10, types),
                                     args, nulls, false, 0);
                if (rc != SPI_OK_INSERT)
                    elog(ERROR, "outbox: inserting into outbox.inbox_offsets failed: %s",
                         SPI_result_code_string(rc));
            }
        });
    }
}

}  // namespace outbox::pg
