// Test switches of the worker processes: see include/outbox/pg/debug.hpp.
#include "outbox/pg/debug.hpp"

#include <cstring>

#include "outbox/ipc/supervisor.hpp"

extern "C" {
#include "postgres.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/wait_event.h"
}

#include "outbox/pg/compat.hpp"
#include "outbox/pg/settings.hpp"

namespace outbox::pg {

bool PausesForTests() {
    return setting_debug_pause != nullptr && setting_debug_pause[0] != '\0';
}

// The driver process holds its drivers meanwhile (polls none), so that the process stands still
// at that point as it did when the drivers ran inside it: a webhook handed to the driver is not
// sent meanwhile, while librdkafka's threads send what they were given (test/t/082, 084).
void PauseForTest(const char *phase, DriverProcess *drivers) {
    if (!PausesForTests() || strcmp(setting_debug_pause, phase) != 0)
        return;
    static uint32 wait_event = 0;
    if (wait_event == 0)
        wait_event = NewWaitEvent("OutboxDebugPause");
    ereport(LOG, (errmsg("outbox: pausing %d ms in phase \"%s\" (outbox.debug_pause)",
                         setting_debug_pause_ms, phase)));
    if (drivers)
        drivers->Freeze(true);
    (void)WaitLatch(nullptr, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, setting_debug_pause_ms, wait_event);
    if (drivers)
        drivers->Freeze(false);
}

}  // namespace outbox::pg
