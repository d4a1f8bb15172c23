#include "outbox/ipc/pipe_io.hpp"

#include <sys/socket.h>

#include <cerrno>

namespace outbox {

bool SendAvailable(int fd, const std::string &bytes, size_t *done) {
    while (*done < bytes.size()) {
        ssize_t n = send(fd, bytes.data() + *done, bytes.size() - *done, MSG_NOSIGNAL);
        if (n > 0)
            *done += size_t(n);
        else if (n < 0 && errno == EINTR)
            continue;
        else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        else
            return false;
    }
    return true;
}

}  // namespace outbox
