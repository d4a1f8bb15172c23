// Test switches of the worker processes (settings outbox.debug_*: superuser-only, hidden from
// SHOW ALL and postgresql.conf.sample).
#pragma once

namespace outbox {
class DriverProcess;
}

namespace outbox::pg {

// outbox.debug_pause: when it names `phase`, the process waits outbox.debug_pause_ms there,
// with its driver process frozen meanwhile (it polls no driver), so that the crash tests can
// kill or stop it at that point. `drivers` may be nullptr.
void PauseForTest(const char *phase, DriverProcess *drivers);

// Whether outbox.debug_pause is set at all (the crash tests need the leased path).
bool PausesForTests();

}  // namespace outbox::pg
