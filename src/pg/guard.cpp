// The C++ <-> PostgreSQL error boundary (see include/outbox/pg/guard.hpp).
#include <new>
#include <string>

extern "C" {
#include "postgres.h"
#include "utils/elog.h"
#include "utils/memutils.h"
}

#include "outbox/pg/guard.hpp"

namespace outbox::pg {

void ThrowCaughtPgError(MemoryContext context) {
    MemoryContextSwitchTo(context);
    ErrorData *edata = CopyErrorData();
    FlushErrorState();
    int code = edata->sqlerrcode;
    std::string message = edata->message ? edata->message : "unknown error";
    std::string detail = edata->detail ? edata->detail : "";
    std::string hint = edata->hint ? edata->hint : "";
    FreeErrorData(edata);
    throw PgError(code, std::move(message), std::move(detail), std::move(hint));
}

static void CopyText(char *dst, size_t size, const char *src) noexcept {
    strlcpy(dst, src ? src : "", size);
}

void CaptureCurrentException(CaughtError *out) noexcept {
    out->sqlerrcode = ERRCODE_INTERNAL_ERROR;
    out->detail[0] = '\0';
    out->hint[0] = '\0';
    try {
        throw;
    } catch (const PgError &e) {
        out->sqlerrcode = e.sqlerrcode;
        CopyText(out->message, sizeof out->message, e.message.c_str());
        CopyText(out->detail, sizeof out->detail, e.detail.c_str());
        CopyText(out->hint, sizeof out->hint, e.hint.c_str());
    } catch (const std::bad_alloc &) {
        out->sqlerrcode = ERRCODE_OUT_OF_MEMORY;
        CopyText(out->message, sizeof out->message, "out of memory in outbox");
    } catch (const std::exception &e) {
        CopyText(out->message, sizeof out->message, e.what());
    } catch (...) {
        CopyText(out->message, sizeof out->message, "unknown C++ exception in outbox");
    }
}

void RaiseCaughtError(const CaughtError *error) {
    ereport(ERROR, (errcode(error->sqlerrcode), errmsg_internal("%s", error->message),
                    error->detail[0] ? errdetail_internal("%s", error->detail) : 0,
                    error->hint[0] ? errhint("%s", error->hint) : 0));
    pg_unreachable();
}

}  // namespace outbox::pg
