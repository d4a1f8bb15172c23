// The C++ <-> PostgreSQL error boundary (see include/outbox/pg/guard.hpp).
#include <new>
#include <string>

extern "C" {
#include "postgres.h"
#include "utils/elog.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
}

#include "outbox/pg/guard.hpp"

namespace outbox::pg {

bool debug_bad_alloc_in_pg_try = false;

void ThrowDebugFault() {
    debug_bad_alloc_in_pg_try = false;
    throw std::bad_alloc();
}

bool RestoreErrorStack(const ErrorStackState &at_entry, const char *where) noexcept {
    MemoryContextSwitchTo(at_entry.memory);
    if (PG_exception_stack == at_entry.exception_stack &&
        error_context_stack == at_entry.context_stack)
        return false;
    PG_exception_stack = at_entry.exception_stack;
    error_context_stack = at_entry.context_stack;
    // A WARNING never jumps: safe now that the stack is sound again.
    ereport(WARNING, (errmsg_internal("outbox: a C++ exception left PostgreSQL's error stack "
                                      "pointing into a finished frame in %s; it was restored",
                                      where)));
    return true;
}

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

void ExitAfterCaughtError(const char *process, const CaughtError *error) {
    ereport(LOG, (errcode(error->sqlerrcode), errmsg("%s stopped: %s", process, error->message),
                  error->detail[0] ? errdetail_internal("%s", error->detail) : 0));
    proc_exit(1);
}

void RaiseCaughtError(const CaughtError *error, bool hide_statement) {
    ereport(ERROR, (errcode(error->sqlerrcode), errmsg_internal("%s", error->message),
                    error->detail[0] ? errdetail_internal("%s", error->detail) : 0,
                    error->hint[0] ? errhint("%s", error->hint) : 0,
                    hide_statement ? errhidestmt(true) : 0));
    pg_unreachable();
}

}  // namespace outbox::pg
