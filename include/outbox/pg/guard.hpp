// The C++ <-> PostgreSQL error boundary.
//
// PostgreSQL reports errors with longjmp; C++ with exceptions. Neither may cross the other:
// a longjmp through a C++ frame skips destructors, an exception through a PostgreSQL frame
// skips its cleanup. So:
//  - C++ calling PostgreSQL code that can ereport(ERROR) goes through PgTry(), which catches
//    the error, restores the memory context, copies the error into a PgError and throws it.
//    The lambda given to PgTry must not own objects with destructors.
//  - Every entry point PostgreSQL calls runs its C++ part inside CxxTry(), which catches every
//    exception, leaves the catch block, and only then raises an ereport(ERROR) that keeps the
//    SQLSTATE, detail and hint of a PgError.
//
// Like every header under outbox/pg/, include it after the standard and pure outbox headers:
// PostgreSQL's headers #define names (snprintf, Max...) that the C++ library uses.
#pragma once

#include <exception>
#include <string>
#include <type_traits>

extern "C" {
#include "postgres.h"
#include "utils/elog.h"
#include "utils/palloc.h"
}

namespace outbox::pg {

// A PostgreSQL ERROR carried through C++ code.
class PgError : public std::exception {
  public:
    PgError(int sqlerrcode, std::string message, std::string detail = {}, std::string hint = {})
        : sqlerrcode(sqlerrcode),
          message(std::move(message)),
          detail(std::move(detail)),
          hint(std::move(hint)) {}
    const char *what() const noexcept override { return message.c_str(); }

    int sqlerrcode;
    std::string message;
    std::string detail;
    std::string hint;
};

// Copies the current PostgreSQL error (already caught with PG_CATCH) into a PgError, flushes
// the error state and throws. Switches back to `context` first.
[[noreturn]] void ThrowCaughtPgError(MemoryContext context);

// Runs `fn`, which calls PostgreSQL functions that may ereport(ERROR), and turns such an error
// into a thrown PgError. The caller must still abort the transaction the error happened in.
// Not inlined, so that the setjmp frame holds no variable of the caller's.
template <typename F>
[[gnu::noinline]] void PgTryVoid(F &fn) {
    MemoryContext context = CurrentMemoryContext;
    volatile bool failed = false;
    PG_TRY();
    { fn(); }
    PG_CATCH();
    { failed = true; }
    PG_END_TRY();
    if (failed)
        ThrowCaughtPgError(context);
}

template <typename F>
auto PgTry(F &&fn) -> decltype(fn()) {
    using R = decltype(fn());
    if constexpr (std::is_void_v<R>) {
        PgTryVoid(fn);
    } else {
        static_assert(std::is_trivially_copyable_v<R>, "PgTry returns plain values only");
        R result{};
        auto store = [&result, &fn] { result = fn(); };
        PgTryVoid(store);
        return result;
    }
}

// An exception caught at the boundary, held in fixed storage (no destructor, no allocation) so
// it can be carried past the end of the catch block to ereport.
struct CaughtError {
    int sqlerrcode;
    char message[1024];
    char detail[4096];
    char hint[1024];
};

// Records the exception being handled (call only inside a catch block).
void CaptureCurrentException(CaughtError *out) noexcept;

// ereport(ERROR) with what CaptureCurrentException recorded.
[[noreturn]] void RaiseCaughtError(const CaughtError *error);

// Runs C++ code `fn` from a function PostgreSQL called. Any exception becomes an
// ereport(ERROR) raised after the catch block has been left.
template <typename F>
auto CxxTry(F &&fn) -> decltype(fn()) {
    using R = decltype(fn());
    CaughtError error;
    if constexpr (std::is_void_v<R>) {
        try {
            fn();
            return;
        } catch (...) {
            CaptureCurrentException(&error);
        }
        RaiseCaughtError(&error);
    } else {
        static_assert(std::is_trivially_copyable_v<R>, "CxxTry returns plain values only");
        try {
            return fn();
        } catch (...) {
            CaptureCurrentException(&error);
        }
        RaiseCaughtError(&error);
    }
}

}  // namespace outbox::pg
