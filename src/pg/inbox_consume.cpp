// The inbox's consume step: see include/outbox/pg/inbox_consume.hpp.
#include "outbox/pg/inbox_consume.hpp"

#include <algorithm>
#include <climits>
#include <csignal>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/brokers/registry.hpp"
#include "outbox/duration.hpp"
#include "outbox/ipc/supervisor.hpp"
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
#include "access/htup_details.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/typcache.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

#include "outbox/pg/guard.hpp"
#include "outbox/pg/queue.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/spi.hpp"

namespace outbox::pg {

// The fields of outbox.inbox_message for one record (SPI-style nulls: 'n' or ' ').
struct MessageArgs {
    Datum values[10];
    char nulls[10];
};

namespace {

// The subscriptions as the workers read them, with the handler resolved (by oid: the stored
// text is schema-qualified) and the owner checked.
const char *const kLoadSql =
    "SELECT s.name, s.config::text, s.handler, s.owner::oid, s.paused, p.oid,"
    "       r.oid IS NOT NULL, s.last_error,"
    "       r.oid IS NOT NULL AND p.oid IS NOT NULL"
    "         AND pg_catalog.has_function_privilege(s.owner, p.oid, 'EXECUTE'),"
    "       'outbox.inbox_message'::pg_catalog.regtype::pg_catalog.oid, s.kind"
    "  FROM outbox.inbox_subscriptions AS s"
    "  LEFT JOIN pg_catalog.pg_proc AS p ON p.oid = pg_catalog.to_regprocedure(s.handler)"
    "  LEFT JOIN pg_catalog.pg_roles AS r ON r.oid = s.owner"
    " ORDER BY s.name";

const char *const kDedupSql =
    "INSERT INTO outbox.inbox (subscription, event_id, topic, \"partition\", \"offset\")"
    " VALUES ($1, $2, $3, $4, $5) ON CONFLICT ON CONSTRAINT inbox_pkey DO NOTHING";

// A batch's dedup rows in one statement: the ids that were new come back (a duplicate within
// the batch is inserted once, for its first record). unnest of several arrays is syntax, not
// a function: it cannot be schema-qualified (the transaction's search_path is pg_catalog).
const char *const kDedupBatchSql =
    "INSERT INTO outbox.inbox (subscription, event_id, topic, \"partition\", \"offset\")"
    " SELECT $1, u.e, u.t, u.p, u.o FROM unnest($2::uuid[], $3::text[], $4::int4[],"
    "                                            $5::int8[]) AS u(e, t, p, o)"
    " ON CONFLICT ON CONSTRAINT inbox_pkey DO NOTHING RETURNING event_id";

const char *const kDeadLetterSql =
    "INSERT INTO outbox.inbox_dead_letters AS d (subscription, topic, \"partition\", \"offset\","
    "    event_id, key, headers, payload, payload_bytes, record_timestamp, blocking, last_error,"
    "    last_sqlstate)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
    " ON CONFLICT ON CONSTRAINT inbox_dead_letters_record DO UPDATE"
    "   SET attempts = d.attempts + 1, last_error = excluded.last_error,"
    "       last_sqlstate = excluded.last_sqlstate, blocking = excluded.blocking,"
    "       failed_at = pg_catalog.now(), requeued_at = NULL";

const char *const kRequeuedSql =
    "SELECT id, topic, \"partition\", \"offset\", event_id, key, headers, payload, payload_bytes,"
    "       record_timestamp"
    "  FROM outbox.inbox_dead_letters"
    " WHERE subscription = $1 AND requeued_at IS NOT NULL"
    " ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED";

const char *const kRequeueDoneSql = "DELETE FROM outbox.inbox_dead_letters WHERE id = $1";

const char *const kRequeueFailedSql =
    "UPDATE outbox.inbox_dead_letters SET attempts = attempts + 1, last_error = $2,"
    "       last_sqlstate = $3, failed_at = pg_catalog.now(), requeued_at = NULL WHERE id = $1";

const char *const kShowErrorSql =
    "UPDATE outbox.inbox_subscriptions SET last_error = $2 WHERE name = $1"
    "   AND last_error IS DISTINCT FROM $2 AND NOT paused";

// The cursors open in this session (a handler's: the worker opens none).
const char *const kOpenCursorsSql = "SELECT name FROM pg_catalog.pg_cursors";

SPIPlanPtr cursors_plan, load_plan, dedup_plan, dedup_batch_plan, dead_letter_plan, requeued_plan,
    requeue_done_plan, requeue_failed_plan, show_error_plan;

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

std::string SqlState(int code) {
    return unpack_sql_state(code);
}

}  // namespace

InboxConsumer::InboxConsumer(DriverProcess *drivers, std::string database,
                             std::function<void(const char *)> pause)
    : drivers_(drivers), database_(std::move(database)), pause_(std::move(pause)) {}

InboxConsumer::~InboxConsumer() = default;

bool SubscriptionsExist() {
    return PgTry([] {
        int rc = SPI_execute("SELECT FROM outbox.inbox_subscriptions LIMIT 1", true, 1);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading outbox.inbox_subscriptions failed: %s",
                 SPI_result_code_string(rc));
        return SPI_processed > 0;
    });
}

bool InboxConsumer::HasWork(bool poll) {
    if (poll || !loaded_ || reset_)
        return true;
    for (auto &[name, s] : subscriptions_) {
        if (!s->consumer)
            continue;
        if (!s->pending.empty() || s->consumer->Buffered() > 0 || s->consumer->Epoch() != s->epoch)
            return true;
    }
    return false;
}

void InboxConsumer::Close(Subscription &s) {
    s.partitions.clear();
    s.pending.clear();
    s.consumer.reset();
    if (s.handler_fn) {
        void *fn = s.handler_fn, *desc = s.message_desc;
        s.handler_fn = s.message_desc = nullptr;
        PgTry([fn, desc] {
            pfree(fn);
            if (desc)
                FreeTupleDesc(static_cast<TupleDesc>(desc));
        });
    }
}

void InboxConsumer::ShowError(Subscription &s, const std::string &error) {
    if (error == s.shown_error)
        return;
    s.shown_error = error;
    PgTry([&] {
        Oid types[2] = {TEXTOID, TEXTOID};
        Datum args[2] = {TextDatum(s.name), error.empty() ? Datum(0) : TextDatum(error)};
        char nulls[2] = {' ', error.empty() ? 'n' : ' '};
        int rc = SPI_execute_plan(KeptPlan(&show_error_plan, kShowErrorSql, 2, types), args, nulls,
                                  false, 0);
        if (rc != SPI_OK_UPDATE)
            elog(ERROR, "outbox: recording a subscription's error failed: %s",
                 SPI_result_code_string(rc));
    });
}

namespace {

// A row of outbox.inbox_subscriptions as the worker reads it (kLoadSql).
struct SubscriptionRow {
    std::string name, config, handler, last_error, kind;
    Oid owner = InvalidOid, handler_oid = InvalidOid, message_type = InvalidOid;
    bool paused = false, owner_found = false, may_execute = false;
};

std::vector<SubscriptionRow> ReadSubscriptions() {
    std::vector<SubscriptionRow> rows;
    PgTry([&] {
        int rc =
            SPI_execute_plan(KeptPlan(&load_plan, kLoadSql, 0, nullptr), nullptr, nullptr, true, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading outbox.inbox_subscriptions failed: %s",
                 SPI_result_code_string(rc));
    });
    for (uint64 i = 0; i < SPI_processed; i++) {
        SubscriptionRow r;
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
            Datum handler = SPI_getbinval(t, d, 6, &isnull);
            r.handler_oid = isnull ? InvalidOid : DatumGetObjectId(handler);
            r.owner_found = DatumGetBool(SPI_getbinval(t, d, 7, &isnull)) && r.owner != InvalidOid;
            r.last_error = text(8);
            r.may_execute = DatumGetBool(SPI_getbinval(t, d, 9, &isnull));
            r.message_type = DatumGetObjectId(SPI_getbinval(t, d, 10, &isnull));
            r.kind = text(11);
        });
        rows.push_back(std::move(r));
    }
    return rows;
}

}  // namespace

// Reads outbox.inbox_subscriptions; opens, reopens (config, handler or owner changed) and
// closes consumers.
void InboxConsumer::Load() {
    std::vector<SubscriptionRow> rows = ReadSubscriptions();
    std::set<std::string> seen;
    std::string broker_networks =
        setting_broker_allowed_networks ? setting_broker_allowed_networks : "";
    for (SubscriptionRow &r : rows) {
        seen.insert(r.name);
        bool owner_is_superuser = r.owner_found && PgTry([&] { return superuser_arg(r.owner); });
        BrokerAddressRule rule{!owner_is_superuser, owner_is_superuser ? "" : broker_networks};
        auto it = subscriptions_.find(r.name);
        if (it != subscriptions_.end() &&
            (r.paused || it->second->config_text != r.config || it->second->handler != r.handler ||
             it->second->owner != r.owner || it->second->handler_oid != r.handler_oid ||
             it->second->may_execute != r.may_execute ||
             it->second->address_rule.guarded != rule.guarded ||
             it->second->address_rule.allowed_networks != rule.allowed_networks)) {
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
        s->handler_oid = r.handler_oid;
        s->may_execute = r.may_execute;
        s->shown_error = r.last_error;
        s->address_rule = rule;
        std::string error;
        // The settings the worker reads itself; the driver process checks the whole config
        // before it builds the consumer (an error there is the consumer's).
        SubscriptionCheck check;
        const BrokerKind *kind = FindBrokerKind(r.kind);
        if (kind != nullptr && kind->read_subscription != nullptr)
            kind->read_subscription(r.config, &check);
        else
            check.problems.push_back("unknown subscription kind \"" + r.kind + "\"");
        if (!check.ok()) {
            error = "the config is not valid: " + check.problems.front();
        } else if (r.handler_oid == InvalidOid) {
            error = "the handler " + r.handler + " does not exist";
        } else if (!r.owner_found) {
            error = "the subscription's owner role does not exist";
        } else if (!r.may_execute) {
            error = "the subscription's owner may not execute its handler " + r.handler;
        }
        if (error.empty()) {
            s->config = std::move(check.config);
            // The handler is called directly (fmgr), once per record, with the message as a
            // composite of outbox.inbox_message: its EXECUTE right was checked above, as the
            // owner, as the executor would check it.
            PgTry([&] {
                MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
                FmgrInfo *flinfo = static_cast<FmgrInfo *>(palloc0(sizeof(FmgrInfo)));
                fmgr_info_cxt(r.handler_oid, flinfo, TopMemoryContext);
                s->handler_fn = flinfo;
                s->message_desc = lookup_rowtype_tupdesc_copy(r.message_type, -1);
                MemoryContextSwitchTo(old);
            });
            ConsumerContext context;
            context.subscription = r.name;
            context.client_id = "outbox-inbox-" + database_ + "-" + r.name;
            context.window_records = std::max<size_t>(InFlightWindow(s->config.batch_size), 1000);
            context.address_rule = rule;
            s->consumer = drivers_->OpenConsumer(r.kind, r.name, r.config, context, &error);
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

namespace {

// The dedup row: true when the event is new.
bool Dedup(const std::string &subscription, const Uuid &event_id, const std::string &topic,
           int32_t partition, int64_t offset) {
    return PgTry([&] {
        Oid types[5] = {TEXTOID, UUIDOID, TEXTOID, INT4OID, INT8OID};
        Datum args[5] = {TextDatum(subscription), UuidDatum(event_id), TextDatum(topic),
                         Int32GetDatum(partition), Int64GetDatum(offset)};
        int rc =
            SPI_execute_plan(KeptPlan(&dedup_plan, kDedupSql, 5, types), args, nullptr, false, 0);
        if (rc != SPI_OK_INSERT)
            elog(ERROR, "outbox: inserting into outbox.inbox failed: %s",
                 SPI_result_code_string(rc));
        return SPI_processed == 1;
    });
}

// A handler call's time limit (outbox.inbox_handler_timeout, "handler_timeout"): a timer of
// this process's that cancels the running query, as statement_timeout would.
TimeoutId handler_timer = MAX_TIMEOUTS;
volatile sig_atomic_t handler_timed_out = false;

void HandlerTimeoutFired() {
    handler_timed_out = true;
    InterruptPending = true;
    QueryCancelPending = true;
    SetLatch(MyLatch);
}

// Closes the cursors a handler left open (cursors it opened in a call that raised are gone
// with its subtransaction).
void CloseHandlerCursors() {
    int rc = SPI_execute_plan(KeptPlan(&cursors_plan, kOpenCursorsSql, 0, nullptr), nullptr,
                              nullptr, true, 0);
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "outbox: reading pg_cursors failed: %s", SPI_result_code_string(rc));
    uint64 n = SPI_processed;
    SPITupleTable *table = SPI_tuptable;
    for (uint64 i = 0; i < n; i++) {
        char *name = SPI_getvalue(table->vals[i], table->tupdesc, 1);
        Portal portal = name ? SPI_cursor_find(name) : nullptr;
        if (portal)
            SPI_cursor_close(portal);
    }
    SPI_freetuptable(table);
}

// The handler, as the subscription's owner, in a sandbox: only this call runs with the
// owner's rights, as a security-restricted operation (as PostgreSQL runs index expressions
// during maintenance: it cannot SET ROLE, create temporary objects, PREPARE, LISTEN or DISCARD,
// nor open a cursor WITH HOLD), and nothing of the session it changed outlives the call:
// every setting it set at any level (set_config(..., false) and SET SESSION included) is
// rolled back, the session advisory locks it took are released and the cursors it left open
// closed, whether it returned or raised. A call longer than `timeout_ms` (0: no limit) is cancelled
// and raises 57014; the subtransaction it runs in rolls its work back.
void CallHandler(FmgrInfo *flinfo, Oid owner, Datum message, int64_t timeout_ms) {
    bool timed = timeout_ms > 0;
    try {
        PgTry([&] {
            if (timed && handler_timer == MAX_TIMEOUTS)
                handler_timer = RegisterTimeout(USER_TIMEOUT, HandlerTimeoutFired);
            Oid save_userid;
            int save_sec_context;
            GetUserIdAndSecContext(&save_userid, &save_sec_context);
            int nest = NewGUCNestLevel();
            SetUserIdAndSecContext(owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
                                              SECURITY_RESTRICTED_OPERATION);
            handler_timed_out = false;
            if (timed)
                enable_timeout_after(handler_timer, int(std::min<int64_t>(timeout_ms, INT_MAX)));
            LOCAL_FCINFO(fcinfo, 1);
            InitFunctionCallInfoData(*fcinfo, flinfo, 1, InvalidOid, nullptr, nullptr);
            fcinfo->args[0].value = message;
            fcinfo->args[0].isnull = false;
            (void)FunctionCallInvoke(fcinfo);
            if (timed)
                disable_timeout(handler_timer, false);
            if (handler_timed_out)
                QueryCancelPending = false;  // fired after the call: not for what comes next
            SetUserIdAndSecContext(save_userid, save_sec_context);
            AtEOXact_GUC(false, nest);
            LockReleaseSession(USER_LOCKMETHOD);
            CloseHandlerCursors();
            // A handler that caught the cancel (EXCEPTION WHEN query_canceled) and returned
            // still ran too long.
            if (handler_timed_out)
                ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED), errmsg("timed out")));
        });
    } catch (PgError &error) {
        // Raised: the user, the settings and the subtransaction are put back by its rollback;
        // the timer and the session locks are this code's to undo.
        PgTry([timed] {
            if (timed)
                disable_timeout(handler_timer, false);
            if (handler_timed_out)
                QueryCancelPending = false;
            LockReleaseSession(USER_LOCKMETHOD);
        });
        if (handler_timed_out && error.sqlerrcode == ERRCODE_QUERY_CANCELED)
            throw PgError(ERRCODE_QUERY_CANCELED,
                          "the handler ran longer than its handler_timeout (" +
                              FormatDurationMs(timeout_ms) + ") and was cancelled",
                          "", "Make it faster, or raise the subscription's handler_timeout.");
        throw;
    }
}

// Whether `error` is the cancel of the last handler call for its time limit.
bool HandlerTimedOut(const CaughtError &error) {
    return handler_timed_out && error.sqlerrcode == ERRCODE_QUERY_CANCELED;
}

// The subscription's handler_timeout, or outbox.inbox_handler_timeout.
int64_t HandlerTimeoutMs(const SubscriptionConfig &config) {
    return config.handler_timeout_ms >= 0 ? config.handler_timeout_ms
                                          : setting_inbox_handler_timeout_ms;
}

// The message as a composite of outbox.inbox_message.
Datum MessageDatum(void *desc, MessageArgs *args) {
    return PgTry([&] {
        bool isnull[10];
        for (int k = 0; k < 10; k++)
            isnull[k] = args->nulls[k] == 'n';
        HeapTuple t = heap_form_tuple(static_cast<TupleDesc>(desc), args->values, isnull);
        return HeapTupleGetDatum(t);
    });
}

// The dedup rows of a batch: which records are new (the first of each event id).
std::vector<bool> DedupBatch(const std::string &subscription, const std::vector<Uuid> &ids,
                             const std::vector<const ConsumedRecord *> &records) {
    std::set<Uuid> fresh;
    PgTry([&] {
        int n = int(ids.size());
        Datum *e = static_cast<Datum *>(palloc(sizeof(Datum) * n));
        Datum *t = static_cast<Datum *>(palloc(sizeof(Datum) * n));
        Datum *p = static_cast<Datum *>(palloc(sizeof(Datum) * n));
        Datum *o = static_cast<Datum *>(palloc(sizeof(Datum) * n));
        for (int k = 0; k < n; k++) {
            e[k] = UuidDatum(ids[k]);
            t[k] = TextDatum(records[k]->topic);
            p[k] = Int32GetDatum(records[k]->partition);
            o[k] = Int64GetDatum(records[k]->offset);
        }
        Datum args[5] = {
            TextDatum(subscription),
            PointerGetDatum(construct_array(e, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR)),
            PointerGetDatum(construct_array(t, n, TEXTOID, -1, false, TYPALIGN_INT)),
            PointerGetDatum(construct_array(p, n, INT4OID, 4, true, TYPALIGN_INT)),
            PointerGetDatum(construct_array(o, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE))};
        Oid types[5] = {TEXTOID, UUIDARRAYOID, TEXTARRAYOID, INT4ARRAYOID, INT8ARRAYOID};
        int rc = SPI_execute_plan(KeptPlan(&dedup_batch_plan, kDedupBatchSql, 5, types), args,
                                  nullptr, false, 0);
        if (rc != SPI_OK_INSERT_RETURNING)
            elog(ERROR, "outbox: inserting into outbox.inbox failed: %s",
                 SPI_result_code_string(rc));
        for (uint64 k = 0; k < SPI_processed; k++) {
            bool isnull;
            pg_uuid_t *u = DatumGetUUIDP(
                SPI_getbinval(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1, &isnull));
            Uuid id;
            memcpy(id.data(), u->data, UUID_LEN);
            fresh.insert(id);
        }
    });
    std::vector<bool> is_new(ids.size());
    for (size_t k = 0; k < ids.size(); k++)
        is_new[k] = fresh.erase(ids[k]) != 0;  // a second record of the id: a duplicate
    return is_new;
}

}  // namespace

// Fills *args with the fields of outbox.inbox_message for record r, in the current memory
// context.
void InboxConsumer::RecordArgs(const Subscription &s, const ConsumedRecord &r, const Uuid &id,
                               MessageArgs *args) {
    PayloadKind kind = ClassifyPayload(r.value, r.headers);
    std::string headers = HeadersJson(r.headers);
    PgTry([&] {
        args->values[0] = TextDatum(s.name);
        args->values[1] = TextDatum(r.topic);
        args->values[2] = Int32GetDatum(r.partition);
        args->values[3] = Int64GetDatum(r.offset);
        args->values[4] = r.key ? TextDatum(*r.key) : Datum(0);
        args->values[5] = Jsonb(headers);
        args->values[6] = kind == PayloadKind::Json ? Jsonb(*r.value) : Datum(0);
        args->values[7] = kind == PayloadKind::Bytes ? Bytea(*r.value) : Datum(0);
        args->values[8] = UuidDatum(id);
        args->values[9] = r.timestamp_ms >= 0 ? TimestampFromUnixMs(r.timestamp_ms) : Datum(0);
        memset(args->nulls, ' ', sizeof args->nulls);
        if (!r.key)
            args->nulls[4] = 'n';
        if (kind != PayloadKind::Json)
            args->nulls[6] = 'n';
        if (kind != PayloadKind::Bytes)
            args->nulls[7] = 'n';
        if (r.timestamp_ms < 0)
            args->nulls[9] = 'n';
    });
}

// A record whose handler raised: to outbox.inbox_dead_letters (blocking with on_error =
// block), with the error and SQLSTATE.
void InboxConsumer::DeadLetter(MessageArgs *args, bool blocking, const CaughtError &error) {
    PgTry([&] {
        Oid types[13] = {TEXTOID,  TEXTOID,  INT4OID,        INT8OID, UUIDOID, TEXTOID, JSONBOID,
                         JSONBOID, BYTEAOID, TIMESTAMPTZOID, BOOLOID, TEXTOID, TEXTOID};
        // The message's fields in the dead letter's column order.
        const int from[10] = {0, 1, 2, 3, 8, 4, 5, 6, 7, 9};
        Datum values[13];
        char nulls[13];
        for (int k = 0; k < 10; k++) {
            values[k] = args->values[from[k]];
            nulls[k] = args->nulls[from[k]];
        }
        values[10] = BoolGetDatum(blocking);
        values[11] = TextDatum(error.message);
        values[12] = TextDatum(SqlState(error.sqlerrcode));
        nulls[10] = nulls[11] = nulls[12] = ' ';
        int rc = SPI_execute_plan(KeptPlan(&dead_letter_plan, kDeadLetterSql, 13, types), values,
                                  nulls, false, 0);
        if (rc != SPI_OK_INSERT)
            elog(ERROR, "outbox: inserting into outbox.inbox_dead_letters failed: %s",
                 SPI_result_code_string(rc));
    });
}

// Applies up to batch_size taken records, in one subtransaction for the batch: the dedup rows
// in one statement, then the handler for each new record. When any of it raises, the batch is
// rolled back and applied again record by record, each in a subtransaction of its own, so that
// the one that raises is dead-lettered alone. Returns how many records were taken off.
size_t InboxConsumer::ApplyPending(Subscription &s) {
    size_t limit = std::min(s.pending.size(), size_t(s.config.batch_size));
    std::vector<const ConsumedRecord *> batch;
    std::vector<Uuid> ids;
    for (size_t k = 0; k < limit; k++) {
        const ConsumedRecord &r = s.pending[k];
        auto it = s.partitions.find({r.topic, r.partition});
        if (it == s.partitions.end() || it->second.blocked || r.offset < it->second.applied)
            continue;  // given back, blocked meanwhile, or already applied
        batch.push_back(&r);
        ids.push_back(
            RecordEventId(r.headers, s.config.event_id_header, r.topic, r.partition, r.offset).id);
    }
    FmgrInfo *fn = static_cast<FmgrInfo *>(s.handler_fn);
    MemoryContext outer = CurrentMemoryContext;
    MemoryContext record_context = PgTry([outer] {
        return AllocSetContextCreate(outer, "outbox inbox record", ALLOCSET_DEFAULT_SIZES);
    });
    auto in_record_context = [&](auto &&body) {
        PgTry([&] {
            MemoryContextReset(record_context);
            MemoryContextSwitchTo(record_context);
        });
        body();
        MemoryContextSwitchTo(outer);
    };
    auto done = [&](const ConsumedRecord &r, bool duplicate) {
        Partition &p = s.partitions.at({r.topic, r.partition});
        if (duplicate)
            p.duplicates++;
        else
            p.consumed++;
        p.applied = r.offset + 1;
        p.last_record_ms = r.timestamp_ms >= 0 ? r.timestamp_ms : 0;
        p.touched = true;
    };

    CaughtError error;
    std::vector<bool> is_new;
    size_t calling = batch.size();  // the record whose handler runs (or raised)
    bool ok = batch.empty() ||
              InSubtransaction(
                  [&] {
                      is_new = DedupBatch(s.name, ids, batch);
                      pause_("inbox_before_handler");
                      for (size_t k = 0; k < batch.size(); k++) {
                          if (!is_new[k])
                              continue;
                          calling = k;
                          in_record_context([&] {
                              MessageArgs args;
                              RecordArgs(s, *batch[k], ids[k], &args);
                              CallHandler(fn, s.owner, MessageDatum(s.message_desc, &args),
                                          HandlerTimeoutMs(s.config));
                          });
                      }
                      calling = batch.size();
                      pause_("inbox_after_handler");
                  },
                  &error);
    // A handler cancelled for its time limit is not called once more for the same record: it
    // would only spend that time again.
    size_t timed_out = HandlerTimedOut(error) ? calling : batch.size();
    if (ok) {
        for (size_t k = 0; k < batch.size(); k++)
            done(*batch[k], !is_new[k]);
    } else {
        // Record by record.
        ereport(LOG, (errmsg("outbox worker: subscription \"%s\": a batch of %zu records "
                             "failed (%s: %s); applying them one by one",
                             s.name.c_str(), batch.size(), SqlState(error.sqlerrcode).c_str(),
                             error.message)));
        for (size_t k = 0; k < batch.size(); k++) {
            const ConsumedRecord &r = *batch[k];
            Partition &p = s.partitions.at({r.topic, r.partition});
            if (p.blocked)
                continue;  // stopped at an earlier record of this batch
            in_record_context([&] {
                MessageArgs args;
                RecordArgs(s, r, ids[k], &args);
                bool duplicate = false;
                CaughtError failure = k == timed_out ? error : CaughtError();
                bool applied = k != timed_out &&
                               InSubtransaction(
                                   [&] {
                                       if (!Dedup(s.name, ids[k], r.topic, r.partition, r.offset)) {
                                           duplicate = true;
                                           return;
                                       }
                                       CallHandler(fn, s.owner, MessageDatum(s.message_desc, &args),
                                                   HandlerTimeoutMs(s.config));
                                   },
                                   &failure);
                if (applied) {
                    done(r, duplicate);
                    return;
                }
                bool block = s.config.on_error == OnError::Block;
                DeadLetter(&args, block, failure);
                p.dead++;
                p.last_error = std::string("offset ") + std::to_string(r.offset) + ": " +
                               SqlState(failure.sqlerrcode) + ": " + failure.message;
                p.applied = r.offset + 1;
                p.touched = true;
                if (block)
                    p.blocked = true;  // nothing after it is applied
            });
        }
    }
    PgTry([&] { MemoryContextDelete(record_context); });
    s.pending.erase(s.pending.begin(), s.pending.begin() + long(limit));
    return batch.size();
}

// Dead letters requeued by outbox.requeue_inbox, of partitions this worker owns.
void InboxConsumer::ApplyRequeued(Subscription &s) {
    SPITupleTable *table = nullptr;
    uint64 n = 0;
    PgTry([&] {
        Oid types[2] = {TEXTOID, INT4OID};
        Datum args[2] = {TextDatum(s.name), Int32GetDatum(s.config.batch_size)};
        int rc = SPI_execute_plan(KeptPlan(&requeued_plan, kRequeuedSql, 2, types), args, nullptr,
                                  false, 0);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "outbox: reading requeued inbox dead letters failed: %s",
                 SPI_result_code_string(rc));
        table = SPI_tuptable;
        n = SPI_processed;
    });
    FmgrInfo *fn = static_cast<FmgrInfo *>(s.handler_fn);
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
            args.values[0] = TextDatum(s.name);
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
                CallHandler(fn, s.owner, MessageDatum(s.message_desc, &args),
                            HandlerTimeoutMs(s.config));
            },
            &error);
        PgTry([&] {
            Datum a[3] = {Int64GetDatum(id), ok ? Datum(0) : TextDatum(error.message),
                          ok ? Datum(0) : TextDatum(SqlState(error.sqlerrcode))};
            int rc;
            if (ok) {
                Oid types[1] = {INT8OID};
                rc = SPI_execute_plan(KeptPlan(&requeue_done_plan, kRequeueDoneSql, 1, types), a,
                                      nullptr, false, 0);
            } else {
                Oid types[3] = {INT8OID, TEXTOID, TEXTOID};
                rc = SPI_execute_plan(KeptPlan(&requeue_failed_plan, kRequeueFailedSql, 3, types),
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
            p.last_error = std::string("offset ") + std::to_string(offset) +
                           " (requeued): " + SqlState(error.sqlerrcode) + ": " + error.message;
        }
        p.touched = true;
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
    // The handlers and this code's own statements run with the inbox worker's search_path,
    // pg_catalog, pg_temp (inbox_worker.cpp pins it; CallHandler rolls back a handler's).
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
        size_t room = InFlightWindow(s.config.batch_size);
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

void InboxConsumer::Aborted() {
    reset_ = true;
}

}  // namespace outbox::pg
