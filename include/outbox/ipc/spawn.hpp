// Starting outbox-driver (fork + exec), for a worker's driver process (supervisor.hpp) and for a
// backend's one definition-time check (check_client.hpp). Pure POSIX, no PostgreSQL.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace outbox {

// RLIMIT_AS soft limit for `bytes` (0: none) under the hard limit `max`.
rlim_t SoftLimit(uint64_t bytes, rlim_t max);

// Starts `program` with `args` (after argv[0]) the way PostgreSQL starts a COPY ... PROGRAM, and
// further: in a session of its own (the postmaster's signals to the caller's process group do
// not reach it), dying with the caller (PR_SET_PDEATHSIG), default signal handlers, an empty
// signal mask, RLIMIT_AS soft-limited to `memory_limit_bytes` (0: none); fd 3 its end of a
// socketpair, 0 and 1 /dev/null, 2 the caller's stderr (the server log), nothing else open.
// On success *pid and *sock (the caller's end, close-on-exec, blocking); false with *why when it
// could not be started (exec's own errno included).
bool SpawnHelper(const std::string &program, const std::vector<std::string> &args,
                 uint64_t memory_limit_bytes, pid_t *pid, int *sock, std::string *why);

}  // namespace outbox
