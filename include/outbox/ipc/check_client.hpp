// A backend's definition-time config check: create/alter_destination and
// create/alter_subscription run `outbox-driver --check` once, send it the query and read its
// answer (the kinds' checks need their client libraries, which the module does not link). Pure
// POSIX, no PostgreSQL: the caller (src/pg/config_check.cpp) supplies the settings and how to
// notice a cancel.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "outbox/config_query.hpp"

namespace outbox {

struct CheckClientOptions {
    std::string program;              // the outbox-driver executable
    uint64_t memory_limit_bytes = 0;  // its RLIMIT_AS (outbox.driver_memory_limit); 0: none
    int64_t timeout_ms = 10000;       // the whole exchange, start to answer
    // Called whenever a wait is interrupted and at least every 100 ms: it may throw (a cancel
    // or termination pending in the caller), which ends the helper and the check.
    std::function<void()> check_interrupts;
};

// Runs the check of `query` in a helper of its own; false with *why when it gives no answer (it
// could not be started, crashed, timed out or sent something else). The helper is gone when
// this returns or throws.
bool CheckInHelper(const CheckClientOptions &options, const ConfigQuery &query,
                   ConfigAnswer *answer, std::string *why);

}  // namespace outbox
