// SPI and catalog helpers the claims (queue.cpp), the write-backs and the inbox share: kept
// plans, arrays of Datums for statement arguments, and whether this database has the extension
// at this module's version. Plain PostgreSQL code: call them inside PgTry unless said otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
#include "postgres.h"
#include "executor/spi.h"
#include "storage/itemptr.h"
}

namespace outbox::pg {

// The plan of `sql` kept in *slot (prepared and SPI_keepplan'ed on first use; ERROR when that
// fails). Plain PostgreSQL code: call it inside PgTry.
SPIPlanPtr KeptPlan(SPIPlanPtr *slot, const char *sql, int nargs, Oid *types);

// Whether the outbox extension exists in this database at the version of this module (the worker
// serves nothing else: an older schema waits for ALTER EXTENSION outbox UPDATE). Cheap: one
// catalog index lookup. Called from C++: throws PgError.
enum class ExtensionState { Missing, OtherVersion, Ready };
ExtensionState InstalledExtension(std::string *version);

// Scalars for statement arguments, palloc'd in the current memory context: text, and a
// timestamptz from Unix epoch milliseconds.
Datum TextDatum(const std::string &s);
Datum TimestampFromUnixMs(int64_t ms);

// Arrays for statement arguments, palloc'd in the current memory context.
Datum Int8Array(const std::vector<int64_t> &values);
Datum TidArray(const std::vector<ItemPointerData> &values);
Datum Int4Array(const std::vector<int> &values);
// A text[]; an empty string becomes NULL (no error to record).
Datum TextArray(const std::vector<const char *> &values);

}  // namespace outbox::pg
