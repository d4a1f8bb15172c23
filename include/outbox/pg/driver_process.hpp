// The worker's drivers: built in its driver process (outbox-driver, see driver_supervisor.hpp)
// from the destinations' configs and the settings; the PostgreSQL side of that (GUCs, where the
// helper is installed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "outbox/dispatcher.hpp"
#include "outbox/ipc/supervisor.hpp"

namespace outbox::pg {

// The driver process settings in force: the helper installed next to the module
// ($libdir/outbox-driver), outbox.driver_memory_limit, outbox.poison_after, the test-only fault
// switch, and bounds derived from outbox.lease_timeout.
DriverProcessOptions CurrentDriverProcessOptions();

// What the worker tells the driver of one destination besides its config (broker_kind.hpp).
DriverContext MakeDriverContext(const DestinationSpec &spec, const std::string &database,
                                int worker_index, const DispatchSettings &settings);

// The driver of one destination, built in `process`, which checks the stored config first.
// nullptr with *error when it cannot be built (the dispatcher retries later and outbox.stats()
// shows the error).
std::unique_ptr<Driver> BuildDriver(DriverProcess *process, const DestinationSpec &spec,
                                    const std::string &database, int worker_index,
                                    const DispatchSettings &settings, std::string *error);

// Exactly-once adoption (exactly_once.hpp): a driver of `spec` with worker `worker_index`'s
// transactional.id that only fences it and reads its marker (DriverContext::adopt).
std::unique_ptr<Driver> BuildAdoptingDriver(DriverProcess *process, const DestinationSpec &spec,
                                            const std::string &database, int worker_index,
                                            const DispatchSettings &settings, std::string *error);

}  // namespace outbox::pg
