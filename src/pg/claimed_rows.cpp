// The rows a claim returned, and what the claims share between transactions (see
// include/outbox/pg/claimed_rows.hpp).
#include "outbox/pg/claimed_rows.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "outbox/brokers/registry.hpp"
#include "outbox/claim_book.hpp"
#include "outbox/config.hpp"

extern "C" {
#include "postgres.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/itemptr.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/destination_cache.hpp"
#include "outbox/pg/guard.hpp"
#include "outbox/pg/key_order.hpp"
#include "outbox/pg/settings.hpp"
#include "outbox/pg/spi.hpp"
#include "outbox/pg/queue.hpp"
#include "outbox/pg/claimed_rows.hpp"

namespace outbox::pg {

namespace {

FastPathState fast_path;

// What the claims know between transactions: the worker's (UseClaimBook); a process that claims
// without a worker (none does today) gets one of its own, never freed, like the process.
ClaimBook *claim_book = nullptr;

}  // namespace

ClaimBook &Book() {
    if (claim_book == nullptr)
        claim_book = new ClaimBook;
    return *claim_book;
}
static_assert(kTimestampNoBegin == DT_NOBEGIN && kTimestampNoEnd == DT_NOEND,
              "ClaimBook's timestamps are PostgreSQL's");
static_assert(std::is_same_v<Timestamp, TimestampTz>, "ClaimBook's timestamps are PostgreSQL's");

FastPathState &FastPath() {
    return fast_path;
}

void UseClaimBook(ClaimBook *book) {
    claim_book = book;
}

namespace {

int64 TimestampToUnixMs(TimestampTz ts) {
    return ts / 1000 + int64(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
}

void FormatUuid(const pg_uuid_t *uuid, char out[37]) {
    static const char hex[] = "0123456789abcdef";
    int o = 0;
    for (int i = 0; i < UUID_LEN; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[uuid->data[i] >> 4];
        out[o++] = hex[uuid->data[i] & 0xF];
    }
    out[o] = '\0';
}

void ReadHeaders(Datum datum, RawRow *row) {
    Jsonb *jb = DatumGetJsonbP(datum);
    int n = JB_ROOT_COUNT(jb);
    row->header_names = static_cast<const char **>(palloc(sizeof(char *) * (n + 1)));
    row->header_name_lens = static_cast<int *>(palloc(sizeof(int) * (n + 1)));
    row->header_values = static_cast<const char **>(palloc(sizeof(char *) * (n + 1)));
    row->header_value_lens = static_cast<int *>(palloc(sizeof(int) * (n + 1)));
    JsonbIterator *it = JsonbIteratorInit(&jb->root);
    JsonbValue v;
    JsonbIteratorToken token;
    int i = 0;
    while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE && i < n) {
        // The producer check guarantees an object of strings.
        if (token == WJB_KEY) {
            row->header_names[i] = v.val.string.val;
            row->header_name_lens[i] = v.val.string.len;
        } else if (token == WJB_VALUE && v.type == jbvString) {
            row->header_values[i] = v.val.string.val;
            row->header_value_lens[i] = v.val.string.len;
            i++;
        }
    }
    row->nheaders = i;
}

}  // namespace

// One claimed row of an SPI result (columns 1-11 as in kClaimSql; kLockSql and the heads claim
// have the ctid as column 12), pointing into SPI memory. `first_failed_col`: the column of
// first_failed_at (FirstFailedColumn), after each claim's own columns.
void ReadRow(HeapTuple tuple, TupleDesc desc, int first_failed_col, RawRow *row) {
    {
        bool isnull;
        row->id = DatumGetInt64(heap_getattr(tuple, 1, desc, &isnull));
        FormatUuid(DatumGetUUIDP(heap_getattr(tuple, 2, desc, &isnull)), row->event_id);
        Datum d = heap_getattr(tuple, 3, desc, &isnull);
        if (!isnull) {
            text *t = DatumGetTextPP(d);
            row->topic = VARDATA_ANY(t);
            row->topic_len = VARSIZE_ANY_EXHDR(t);
        }
        d = heap_getattr(tuple, 4, desc, &isnull);
        if (!isnull) {
            text *t = DatumGetTextPP(d);
            row->key = VARDATA_ANY(t);
            row->key_len = VARSIZE_ANY_EXHDR(t);
        }
        d = heap_getattr(tuple, 5, desc, &isnull);
        if (!isnull) {
            Jsonb *jb = DatumGetJsonbP(d);
            StringInfoData buf;
            initStringInfo(&buf);
            JsonbToCString(&buf, &jb->root, VARSIZE(jb));
            row->payload = buf.data;
            row->payload_len = buf.len;
            row->payload_is_json = true;
        } else {
            d = heap_getattr(tuple, 6, desc, &isnull);
            if (!isnull) {
                bytea *b = DatumGetByteaPP(d);
                row->payload = VARDATA_ANY(b);
                row->payload_len = VARSIZE_ANY_EXHDR(b);
            }
        }
        d = heap_getattr(tuple, 7, desc, &isnull);
        if (!isnull)
            ReadHeaders(d, row);
        row->created_ms =
            TimestampToUnixMs(DatumGetTimestampTz(heap_getattr(tuple, 8, desc, &isnull)));
        d = heap_getattr(tuple, 9, desc, &isnull);
        row->expires_ms = isnull ? 0 : TimestampToUnixMs(DatumGetTimestampTz(d));
        row->attempts = DatumGetInt32(heap_getattr(tuple, 10, desc, &isnull));
        d = heap_getattr(tuple, first_failed_col, desc, &isnull);
        // Rounded up: the retry budget is never found spent a fraction of a millisecond early.
        row->first_failed_ms = isnull ? 0 : TimestampToUnixMs(DatumGetTimestampTz(d) + 999);
        if (desc->natts >= 13)
            row->tid = *reinterpret_cast<ItemPointer>(
                DatumGetPointer(heap_getattr(tuple, 12, desc, &isnull)));
    }
}

// The column of first_failed_at in a claim's result.
int FirstFailedColumn(TupleDesc desc) {
    int col = SPI_fnumber(desc, "first_failed_at");
    if (col <= 0)
        elog(ERROR, "outbox: a claim returned no first_failed_at");
    return col;
}

// The claimed rows of the last SPI statement (ReadRow), pointing into SPI memory.
RawRow *ReadClaimedRows(uint64 *count) {
    uint64 n = SPI_processed;
    *count = n;
    auto *rows = static_cast<RawRow *>(palloc0(sizeof(RawRow) * (n + 1)));
    int first_failed_col = FirstFailedColumn(SPI_tuptable->tupdesc);
    for (uint64 i = 0; i < n; i++)
        ReadRow(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, first_failed_col, &rows[i]);
    return rows;
}

// Claimed rows as messages for the drivers; `locked`: held by this transaction (the fast path).
void AppendMessages(const RawRow *rows, uint64 n, bool locked, int64 lease_token,
                    std::vector<Message> *out) {
    FastPathState &state = fast_path.Current();
    for (uint64 i = 0; i < n; i++) {
        const RawRow &r = rows[i];
        if (locked)
            state.tids[r.id] = r.tid;
        Message m;
        m.id = r.id;
        m.lease_token = lease_token;
        m.event_id = r.event_id;
        if (r.topic)
            m.topic.assign(r.topic, r.topic_len);
        if (r.key)
            m.key.emplace(r.key, r.key_len);
        if (r.payload)
            m.payload.assign(r.payload, r.payload_len);
        m.payload_is_json = r.payload_is_json;
        m.tombstone = r.payload == nullptr;  // neither payload column: a Kafka tombstone
        for (int h = 0; h < r.nheaders; h++)
            m.headers.emplace_back(std::string(r.header_names[h], r.header_name_lens[h]),
                                   std::string(r.header_values[h], r.header_value_lens[h]));
        m.created_at_ms = r.created_ms;
        m.expires_at_ms = r.expires_ms;
        m.attempts = r.attempts;
        m.first_failed_at_ms = r.first_failed_ms;
        out->push_back(std::move(m));
    }
}

}  // namespace outbox::pg
