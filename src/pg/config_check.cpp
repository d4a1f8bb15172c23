// The definition-time config check (include/outbox/pg/config_errors.hpp): in outbox-driver,
// which links the brokers' client libraries the kinds' checks use (this module does not).
#include <cstdint>
#include <string>

#include "outbox/ipc/check_client.hpp"
#include "outbox/pg/config_errors.hpp"

extern "C" {
#include "postgres.h"
#include "miscadmin.h"
}

#include "outbox/pg/driver_process.hpp"
#include "outbox/pg/guard.hpp"

namespace outbox::pg {

namespace {

// How long one check may take: the kinds' checks answer in milliseconds; a helper that takes
// this long is broken.
constexpr int64_t kCheckTimeoutMs = 10000;

}  // namespace

ConfigAnswer CheckConfig(const ConfigQuery &query) {
    DriverProcessOptions process = CurrentDriverProcessOptions();
    CheckClientOptions options;
    options.program = process.program;
    options.memory_limit_bytes = process.memory_limit_bytes;
    options.timeout_ms = kCheckTimeoutMs;
    // A cancel or a termination ends the wait (PgTry turns its ERROR into a PgError, which
    // ends the helper on its way out).
    options.check_interrupts = [] {
        if (InterruptPending)
            PgTry([] { CHECK_FOR_INTERRUPTS(); });
    };
    ConfigAnswer answer;
    std::string why;
    if (CheckInHelper(options, query, &answer, &why))
        return answer;
    throw PgError(ERRCODE_SYSTEM_ERROR, "could not check the config: " + why, "",
                  "outbox-driver, installed next to the outbox module, checks configs with the "
                  "brokers' client libraries; see the server log.");
}

}  // namespace outbox::pg
