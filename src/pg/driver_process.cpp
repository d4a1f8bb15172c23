// The worker's drivers in its driver process (see include/outbox/pg/driver_process.hpp).
#include <algorithm>
#include <memory>
#include <string>

#include "outbox/broker_kind.hpp"
#include "outbox/ipc/protocol.hpp"
#include "outbox/pg/debug.hpp"
#include "outbox/pg/driver_process.hpp"

extern "C" {
#include "postgres.h"
#include "miscadmin.h"
}

#include "outbox/pg/settings.hpp"

namespace outbox::pg {

namespace {

// A helper that says nothing for this long while an answer is due is killed and restarted.
constexpr int64_t kAnswerTimeoutMs = 10000;

}  // namespace

DriverProcessOptions CurrentDriverProcessOptions() {
    DriverProcessOptions o;
    // Installed by `make install` next to outbox.so (PGXS's pkglibdir, the server's $libdir).
    o.program = std::string(pkglib_path) + "/outbox-driver";
    o.memory_limit_bytes = uint64_t(setting_driver_memory_limit_mb) * 1024 * 1024;
    o.poison_after = setting_poison_after;
    // A suspect waits for its turn at most half a lease: its row stays leased to this worker.
    o.hold_limit_ms = std::max<int64_t>(500, setting_lease_timeout_ms / 2);
    o.fault = DriverFaultForTests();  // empty unless outbox.test_switches is on
    o.answer_timeout_ms = kAnswerTimeoutMs;
    return o;
}

DriverContext MakeDriverContext(const DestinationSpec &spec, const std::string &database,
                                int worker_index, const DispatchSettings &settings) {
    DriverContext context;
    context.destination = spec.name;
    context.source = "/outbox/" + database;
    context.client_name = "outbox-" + database + "-" + spec.name;
    context.worker_index = worker_index;
    context.lease_timeout_ms = settings.lease_timeout_ms;
    context.default_in_flight = InFlightWindow(settings.batch_size);
    // An answer due well within the lease.
    context.answer_timeout_ms = std::max<int64_t>(1000, settings.lease_timeout_ms / 2);
    context.config_by_superuser = spec.config_by_superuser;
    context.address_rule = {!spec.config_by_superuser, settings.broker_allowed_networks};
    context.webhook_allowed_networks = settings.webhook_allowed_networks;
    context.transactional_id =
        "outbox-" + database + "-" + spec.name + "-" + std::to_string(worker_index);
    return context;
}

std::unique_ptr<Driver> BuildDriver(DriverProcess *process, const DestinationSpec &spec,
                                    const std::string &database, int worker_index,
                                    const DispatchSettings &settings, std::string *error) {
    DriverContext context = MakeDriverContext(spec, database, worker_index, settings);
    return process->Open(spec.config.kind->name, spec.name,
                         protocol::EncodeOpenOptions(spec.config_json, context), error);
}

std::unique_ptr<Driver> BuildAdoptingDriver(DriverProcess *process, const DestinationSpec &spec,
                                            const std::string &database, int worker_index,
                                            const DispatchSettings &settings, std::string *error) {
    DriverContext context = MakeDriverContext(spec, database, worker_index, settings);
    context.adopt = true;
    return process->Open(spec.config.kind->name,
                         spec.name + " (adopting worker " + std::to_string(worker_index) + ")",
                         protocol::EncodeOpenOptions(spec.config_json, context), error);
}

}  // namespace outbox::pg
