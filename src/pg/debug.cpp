// Every test switch of the module (issue 36): see include/outbox/pg/debug.hpp.
#include "outbox/pg/debug.hpp"

#include <cstring>

#include "outbox/ipc/supervisor.hpp"

extern "C" {
#include "postgres.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/wait_event.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/guard.hpp"

namespace outbox::pg {

namespace {

// outbox.test_switches. The outbox.debug_* variables below keep their "off" values (nullptr, 0)
// unless it was on at server start: only then are their settings defined, so nothing a
// postgresql.conf says about them can reach them otherwise.
bool test_switches = false;
// outbox.debug_driver_fault (superuser): the driver process fails on purpose (debug.hpp).
char *debug_driver_fault = nullptr;
// outbox.debug_pause, outbox.debug_pause_ms (sighup): the worker stops that long in the named
// phase ("claim": claimed, before the commit; "publish": messages handed to the driver;
// "write-back": written back, before the commit), so a test can stop the server at exactly that
// point. Off (empty) costs one string test per phase.
char *debug_pause = nullptr;
int debug_pause_ms = 0;
// outbox.debug_fault (superuser): "bad_alloc_in_pg_try" makes the next PgTry of each process that
// takes the setting throw std::bad_alloc inside its PG_TRY body (guard.hpp). Set again (or
// reloaded) to fire again.
char *debug_fault = nullptr;

// outbox.debug_fault: arms the one-shot fault of this process (see guard.hpp).
bool CheckDebugFault(char **newval, void **, GucSource) {
    if (**newval == '\0' || strcmp(*newval, "bad_alloc_in_pg_try") == 0)
        return true;
    GUC_check_errdetail("outbox.debug_fault is empty or \"bad_alloc_in_pg_try\".");
    return false;
}

void AssignDebugFault(const char *newval, void *) {
    debug_bad_alloc_in_pg_try = strcmp(newval, "bad_alloc_in_pg_try") == 0;
}

}  // namespace

void DefineTestSwitches() {
    // Postmaster-level so that only whoever edits postgresql.conf (or ALTER SYSTEM, a superuser)
    // and restarts the server can turn it on; shown in pg_settings so that an operator sees it.
    DefineCustomBoolVariable(
        "outbox.test_switches",
        "Enables the fault-injection switches for the extension's own tests.",
        "Off: the outbox.debug_* settings do not exist and no fault can be injected. On, a "
        "superuser can make the workers pause and their driver processes crash. Must stay off in "
        "production.",
        &test_switches, false, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    if (!test_switches)
        return;
    DefineCustomStringVariable("outbox.debug_driver_fault", "Fault injection for tests only.",
                               nullptr, &debug_driver_fault, "", PGC_SUSET,
                               GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, nullptr, nullptr, nullptr);
    DefineCustomStringVariable("outbox.debug_pause", "Fault injection for tests only.", nullptr,
                               &debug_pause, "", PGC_SIGHUP, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
                               nullptr, nullptr, nullptr);
    DefineCustomIntVariable("outbox.debug_pause_ms", "Fault injection for tests only.", nullptr,
                            &debug_pause_ms, 0, 0, 600 * 1000, PGC_SIGHUP,
                            GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE | GUC_UNIT_MS, nullptr, nullptr,
                            nullptr);
    DefineCustomStringVariable("outbox.debug_fault", "Fault injection for tests only.", nullptr,
                               &debug_fault, "", PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
                               CheckDebugFault, AssignDebugFault, nullptr);
}

bool PausesForTests() {
    return debug_pause != nullptr && debug_pause[0] != '\0';
}

bool PausesInPhase(const char *phase) {
    return PausesForTests() && strcmp(debug_pause, phase) == 0;
}

const char *DriverFaultForTests() {
    return debug_driver_fault != nullptr ? debug_driver_fault : "";
}

// The driver process holds its drivers meanwhile (polls none), so that the process stands still
// at that point as it did when the drivers ran inside it: a webhook handed to the driver is not
// sent meanwhile, while librdkafka's threads send what they were given (test/t/082, 084).
void PauseForTest(const char *phase, DriverProcess *drivers) {
    if (!PausesInPhase(phase))
        return;
    static uint32 wait_event = 0;
    if (wait_event == 0)
        wait_event = NewWaitEvent("OutboxDebugPause");
    ereport(LOG, (errmsg("outbox: pausing %d ms in phase \"%s\" (outbox.debug_pause)",
                         debug_pause_ms, phase)));
    if (drivers)
        drivers->Freeze(true);
    (void)WaitLatch(nullptr, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, debug_pause_ms, wait_event);
    if (drivers)
        drivers->Freeze(false);
}

}  // namespace outbox::pg
