// The C++ <-> PostgreSQL error boundary.
//
// PostgreSQL reports errors with longjmp; C++ with exceptions. Neither may cross the other:
// a longjmp through a C++ frame skips destructors, an exception through a PostgreSQL frame
// skips its cleanup, and an exception that leaves a PG_TRY body leaves PG_exception_stack
// pointing into a finished frame, so that the next ERROR jumps there and crashes the server
// (pg_duckdb documents the same trap). So:
//  - C++ calling PostgreSQL code that can ereport(ERROR) goes through PgTry(), which catches
//    the error, restores the memory context, copies the error into a PgError and throws it.
//    PgTry runs its function inside a C++ try that is itself inside the PG_TRY body: a C++
//    exception thrown by the function (std::bad_alloc from a container, say) is caught there,
//    and rethrown only after PG_END_TRY has put the error stack back. The function given to
//    PgTry must not own objects with destructors (a PostgreSQL error skips them).
//  - PostgreSQL's cleanup that must run whatever happens (PG_FINALLY) goes through
//    PgFinally(), from code PostgreSQL called.
//  - Every entry point PostgreSQL calls runs its C++ part inside CxxTry() (or catches every
//    exception itself, as the worker and launcher loops do, then calls RestoreErrorStack),
//    which catches every exception, leaves the catch block, checks that the error stack is the
//    one it had on entry, and only then raises an ereport(ERROR) that keeps the SQLSTATE,
//    detail and hint of a PgError.
//  - PG_TRY, PG_CATCH, PG_FINALLY and PG_END_TRY appear in this file only
//    (test/t/094_guard_cxx_exceptions.pl checks).
//
// Like every header under outbox/pg/, include it after the standard and pure outbox headers:
// PostgreSQL's headers #define names (snprintf, Max...) that the C++ library uses.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <type_traits>

extern "C" {
#include "postgres.h"
#include "access/xact.h"
#include "utils/elog.h"
#include "utils/palloc.h"
#include "utils/resowner.h"
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

// Fault injection for the tests only (outbox.debug_fault = 'bad_alloc_in_pg_try', which exists
// only while outbox.test_switches is on: debug.cpp sets this flag): the next PgTry of this
// process throws std::bad_alloc inside its PG_TRY body, as a container that runs out of memory
// there would. One shot: cleared when it fires.
extern bool debug_bad_alloc_in_pg_try;

// Copies the current PostgreSQL error (already caught with PG_CATCH) into a PgError, flushes
// the error state and throws. Switches back to `context` first.
[[noreturn]] void ThrowCaughtPgError(MemoryContext context);

// Throws the debug fault (see debug_bad_alloc_in_pg_try) and disarms it.
[[noreturn]] void ThrowDebugFault();

// What the error machinery looked like where an entry point began.
struct ErrorStackState {
    sigjmp_buf *exception_stack;
    ErrorContextCallback *context_stack;
    MemoryContext memory;
};

inline ErrorStackState SaveErrorStack() noexcept {
    return ErrorStackState{PG_exception_stack, error_context_stack, CurrentMemoryContext};
}

// After an entry point caught a C++ exception: switches back to the memory context it had on
// entry, and checks that PG_exception_stack and error_context_stack are what they were. If not,
// an exception left a PG_TRY body somewhere (a bug: PgTry and PgFinally prevent it) and the
// next ERROR would jump into a finished frame: both are put back and a WARNING says where.
// Returns whether they had to be repaired.
bool RestoreErrorStack(const ErrorStackState &at_entry, const char *where) noexcept;

// Runs `fn`, which calls PostgreSQL functions that may ereport(ERROR), and turns such an error
// into a thrown PgError; a C++ exception of `fn` is rethrown as it is, after PG_END_TRY.
// The caller must still abort the transaction the error happened in. Not inlined, so that the
// setjmp frame holds no variable of the caller's.
template <typename F>
[[gnu::noinline]] void PgTryVoid(F &fn, std::exception_ptr *cxx_error) {
    MemoryContext context = CurrentMemoryContext;
    volatile bool failed = false;
    PG_TRY();
    {
        // Nothing C++ may leave this block: the exception is kept and rethrown below.
        try {
            if (unlikely(debug_bad_alloc_in_pg_try))
                ThrowDebugFault();
            fn();
        } catch (...) {
            *cxx_error = std::current_exception();
        }
    }
    PG_CATCH();
    { failed = true; }
    PG_END_TRY();
    if (failed)
        ThrowCaughtPgError(context);
    if (*cxx_error) {
        MemoryContextSwitchTo(context);
        std::rethrow_exception(*cxx_error);
    }
}

template <typename F>
auto PgTry(F &&fn) -> decltype(fn()) {
    using R = decltype(fn());
    std::exception_ptr cxx_error;  // outside the setjmp frame: nothing there to clobber
    if constexpr (std::is_void_v<R>) {
        PgTryVoid(fn, &cxx_error);
    } else {
        static_assert(std::is_trivially_copyable_v<R>, "PgTry returns plain values only");
        R result{};
        auto store = [&result, &fn] { result = fn(); };
        PgTryVoid(store, &cxx_error);
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

// ereport(ERROR) with what CaptureCurrentException recorded; with `hide_statement`, the
// statement is not logged with it (errhidestmt: it may carry secrets).
[[noreturn]] void RaiseCaughtError(const CaughtError *error, bool hide_statement = false);

// Runs C++ code `fn` from a function PostgreSQL called. Any exception becomes an
// ereport(ERROR) raised after the catch block has been left and the error stack checked.
// `fn` may ereport(ERROR) itself (PostgreSQL's longjmp then leaves through this frame, which
// holds nothing with a destructor), but must not own objects with destructors where it does.
template <typename F>
auto CxxTry(F &&fn, bool hide_statement = false) -> decltype(fn()) {
    using R = decltype(fn());
    ErrorStackState entry = SaveErrorStack();
    CaughtError error;
    if constexpr (std::is_void_v<R>) {
        try {
            fn();
            return;
        } catch (...) {
            CaptureCurrentException(&error);
        }
    } else {
        static_assert(std::is_trivially_copyable_v<R>, "CxxTry returns plain values only");
        try {
            return fn();
        } catch (...) {
            CaptureCurrentException(&error);
        }
    }
    RestoreErrorStack(entry, "an outbox entry point");
    RaiseCaughtError(&error, hide_statement);
}

// The main function of a background worker: runs `fn`; an exception that gets this far is
// logged, the error stack checked, and the process exits with status 1 (the postmaster or the
// launcher starts it again) instead of letting std::terminate abort it, which the postmaster
// would answer by restarting every session of the server.
[[noreturn]] void ExitAfterCaughtError(const char *process, const CaughtError *error);

template <typename F>
void BackgroundWorkerBody(const char *process, F &&fn) {
    ErrorStackState entry = SaveErrorStack();
    CaughtError error;
    try {
        fn();
        return;
    } catch (...) {
        CaptureCurrentException(&error);
    }
    RestoreErrorStack(entry, process);
    ExitAfterCaughtError(process, &error);
}

// From code PostgreSQL called: runs `body`, then `cleanup` however `body` ends (PG_FINALLY).
// A PostgreSQL error of `body` goes on after the cleanup; a C++ exception of `body` or of the
// cleanup is caught inside the PG_TRY body and raised as an ERROR after it.
template <typename Body, typename Cleanup>
[[gnu::noinline]] void PgFinally(Body &&body, Cleanup &&cleanup) {
    static CaughtError error;  // static: not in the setjmp frame, and too big for the stack
    volatile bool cxx_failed = false;
    auto run_cleanup = [&cleanup, &cxx_failed]() noexcept {
        try {
            cleanup();
        } catch (...) {
            if (!cxx_failed)
                CaptureCurrentException(&error);
            cxx_failed = true;
        }
    };
    PG_TRY();
    {
        try {
            body();
        } catch (...) {
            CaptureCurrentException(&error);
            cxx_failed = true;
        }
    }
    PG_CATCH();
    {
        run_cleanup();
        PG_RE_THROW();
    }
    PG_END_TRY();
    run_cleanup();
    if (cxx_failed)
        RaiseCaughtError(&error);
}

// Runs C++ code `body` (which calls PostgreSQL through PgTry) in a subtransaction of the
// current transaction: released when it returns, rolled back when it throws, so that only its
// own work is undone. Returns false with *error then. The memory context and resource owner
// are put back as they were either way.
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

}  // namespace outbox::pg
