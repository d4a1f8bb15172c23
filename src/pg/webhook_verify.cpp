// outbox.verify_webhook: Standard Webhooks verification for applications that receive our
// webhooks. The SQL wrapper (sql/outbox--0.2.0.sql) picks the three headers out of the jsonb,
// case-insensitively; this reads the arguments and hands them to webhook_verify.cpp.
#include <string>
#include <vector>

extern "C" {
#include "postgres.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "datatype/timestamp.h"
#include "utils/timestamp.h"
}

#include "outbox/pg/guard.hpp"
#include "outbox/webhook_verify.hpp"

extern "C" {
PGDLLEXPORT Datum outbox_verify_webhook(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(outbox_verify_webhook);
}

namespace {

using outbox::pg::CxxTry;
using outbox::pg::PgError;
using outbox::pg::PgTry;

// A text or bytea argument (detoasted by PostgreSQL) copied into *out; false when NULL.
bool BytesArg(FunctionCallInfo fcinfo, int n, std::string *out) {
    if (PG_ARGISNULL(n))
        return false;
    struct varlena *v = PgTry([&] { return PG_DETOAST_DATUM_PACKED(PG_GETARG_DATUM(n)); });
    out->assign(VARDATA_ANY(v), VARSIZE_ANY_EXHDR(v));
    return true;
}

// The secrets of the text[] argument; a NULL element is an error.
std::vector<std::string> Secrets(FunctionCallInfo fcinfo) {
    Datum *elems = nullptr;
    bool *nulls = nullptr;
    int n = 0;
    PgTry([&] {
        ArrayType *array = PG_GETARG_ARRAYTYPE_P(0);
        deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
    });
    std::vector<std::string> secrets;
    for (int i = 0; i < n; i++) {
        if (nulls[i])
            throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED,
                          "secret " + std::to_string(i + 1) + " of outbox.verify_webhook is NULL",
                          {}, "Pass the \"whsec_\" secrets and \"whpk_\" public keys to accept.");
        text *t = PgTry([&] { return DatumGetTextPP(elems[i]); });
        secrets.emplace_back(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
    }
    return secrets;
}

// Returns 1 valid, 0 not valid, -1 SQL NULL (a NULL secrets, body or tolerance).
int Verify(FunctionCallInfo fcinfo) {
    if (PG_ARGISNULL(0) || PG_ARGISNULL(4) || PG_ARGISNULL(5))
        return -1;
    std::vector<std::string> secrets = Secrets(fcinfo);
    std::vector<outbox::VerifyKey> keys;
    if (auto problem = outbox::ParseVerifyKeys(secrets, &keys))
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE, "invalid secret for outbox.verify_webhook",
                      *problem,
                      "Pass the receiver's \"whsec_\" secrets (v1) and the sender's \"whpk_\" "
                      "public keys (v1a), as Standard Webhooks serializes them.");
    double tolerance = PG_GETARG_FLOAT8(5);
    if (!(tolerance >= 0) || tolerance > 1e12)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      "the tolerance of outbox.verify_webhook must not be negative", {},
                      "Pass an interval such as '5 minutes' (the Standard Webhooks default).");
    std::string id, timestamp, signature, body;
    if (!BytesArg(fcinfo, 1, &id) || !BytesArg(fcinfo, 2, &timestamp) ||
        !BytesArg(fcinfo, 3, &signature))
        return 0;  // a header missing: not a verifiable webhook
    BytesArg(fcinfo, 4, &body);
    TimestampTz now = PgTry([] { return GetCurrentTimestamp(); });
    int64_t now_s = int64_t(now / USECS_PER_SEC) +
                    int64_t(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY;
    return outbox::VerifyWebhook(keys, id, timestamp, signature, body, now_s,
                                 static_cast<int64_t>(tolerance))
               ? 1
               : 0;
}

}  // namespace

// outbox._verify_webhook(secrets text[], id text, timestamp text, signature text, body bytea,
// tolerance_s float8) RETURNS boolean
Datum outbox_verify_webhook(PG_FUNCTION_ARGS) {
    int result = CxxTry([fcinfo] { return Verify(fcinfo); });
    if (result < 0)
        PG_RETURN_NULL();
    PG_RETURN_BOOL(result == 1);
}
