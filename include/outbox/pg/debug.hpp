// Every test switch of the module, behind one gate (issue 36). outbox.test_switches (postmaster,
// default off) decides at server start whether the outbox.debug_* settings exist at all; while it
// is off they are not defined (the reserved "outbox." prefix then refuses their names) and every
// function below answers "off". The switches themselves are hidden from SHOW ALL and the sample
// config: superuser-only or sighup.
#pragma once

namespace outbox {
class DriverProcess;
}

namespace outbox::pg {

// Defines outbox.test_switches and, when it is on, the outbox.debug_* settings. Called once from
// DefineSettings, before the prefix is reserved.
void DefineTestSwitches();

// outbox.debug_pause: when it names `phase`, the process waits outbox.debug_pause_ms there,
// with its driver process frozen meanwhile (it polls no driver), so that the crash tests can
// kill or stop it at that point. `drivers` may be nullptr.
void PauseForTest(const char *phase, DriverProcess *drivers);

// Whether outbox.debug_pause is set at all (the crash tests need the leased path).
bool PausesForTests();

// Whether outbox.debug_pause names `phase`.
bool PausesInPhase(const char *phase);

// outbox.debug_driver_fault: what the driver process is told to fail with (see
// src/ipc/helper_main.cpp: "segv:KEY", "abort:KEY", "oom:KEY", "hang:KEY", "leak:BYTES");
// empty when none, and always empty while the gate is off.
const char *DriverFaultForTests();

}  // namespace outbox::pg
