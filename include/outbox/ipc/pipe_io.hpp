// The socket step both ends of the driver pipe share (the worker's DriverProcess in
// driver_supervisor.cpp, the helper's Host in driver_host/main.cpp): sending what a
// non-blocking socket takes. What a full socket means differs, so each end decides that itself:
// the helper watches for room and goes on serving its drivers, the worker waits with a deadline
// while it reads what the helper sends.
#pragma once

#include <cstddef>
#include <string>

namespace outbox {

// Sends bytes[*done..] on the non-blocking socket `fd` until all of it is sent or the socket is
// full, advancing *done; EINTR is retried. False on a socket error, with errno set.
bool SendAvailable(int fd, const std::string &bytes, size_t *done);

}  // namespace outbox
