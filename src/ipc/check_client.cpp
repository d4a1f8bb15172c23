// A backend's definition-time config check (see include/outbox/ipc/check_client.hpp).
#include "outbox/ipc/check_client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <variant>

#include "outbox/clock.hpp"
#include "outbox/ipc/protocol.hpp"
#include "outbox/ipc/spawn.hpp"

namespace outbox {

namespace {

constexpr size_t kReadChunk = 64 * 1024;

// The helper of one check: its socket closed and the process reaped however the check ends (an
// exception included). It exits by itself once it answered, or at EOF; one that does not
// within a moment is killed.
class Helper {
  public:
    Helper(pid_t pid, int sock) : pid_(pid), sock_(sock) {}
    ~Helper() {
        close(sock_);
        int status;
        for (int i = 0; i < 100; i++) {
            pid_t r = waitpid(pid_, &status, WNOHANG);
            if (r == pid_ || (r < 0 && errno != EINTR))
                return;
            usleep(10000);
        }
        kill(pid_, SIGKILL);
        while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
    }
    Helper(const Helper &) = delete;
    Helper &operator=(const Helper &) = delete;

  private:
    pid_t pid_;
    int sock_;
};

// Writes the query and reads the answer on `sock`; false with *why.
bool Exchange(int sock, const CheckClientOptions &options, const std::string &query,
              ConfigAnswer *answer, std::string *why) {
    int64_t deadline = MonotonicMs() + options.timeout_ms;
    size_t sent = 0;
    protocol::FrameReader reader(protocol::kMaxToWorkerFrame);
    for (;;) {
        if (options.check_interrupts)
            options.check_interrupts();
        int64_t left = deadline - MonotonicMs();
        if (left <= 0) {
            *why = "no answer within " + std::to_string(options.timeout_ms / 1000) + " s";
            return false;
        }
        struct pollfd p = {sock, short(POLLIN | (sent < query.size() ? POLLOUT : 0)), 0};
        int rc = poll(&p, 1, int(std::min<int64_t>(left, 100)));
        if (rc < 0 && errno != EINTR) {
            *why = std::string("poll: ") + strerror(errno);
            return false;
        }
        if (rc <= 0)
            continue;
        if ((p.revents & POLLOUT) && sent < query.size()) {
            ssize_t n = send(sock, query.data() + sent, query.size() - sent, MSG_NOSIGNAL);
            if (n > 0)
                sent += size_t(n);
            else if (n < 0 && errno != EINTR && errno != EAGAIN)
                p.revents |= POLLIN;  // read what it said before it went
        }
        if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        char *at = reader.Reserve(kReadChunk);
        ssize_t got = read(sock, at, kReadChunk);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got <= 0) {
            *why = "it ended without an answer (see the server log)";
            return false;
        }
        reader.Commit(size_t(got));
        protocol::Frame frame;
        std::string error;
        protocol::FrameReader::Result r = reader.Next(&frame, &error);
        if (r == protocol::FrameReader::Result::NeedMore)
            continue;
        auto *checked = std::get_if<protocol::CheckedFrame>(&frame);
        if (r == protocol::FrameReader::Result::Error || checked == nullptr) {
            *why = r == protocol::FrameReader::Result::Error ? "a malformed answer: " + error
                                                             : std::string(
                                                                   "an answer other "
                                                                   "than Checked");
            return false;
        }
        *answer = std::move(checked->answer);
        return true;
    }
}

}  // namespace

bool CheckInHelper(const CheckClientOptions &options, const ConfigQuery &query,
                   ConfigAnswer *answer, std::string *why) {
    pid_t pid = 0;
    int sock = -1;
    if (!SpawnHelper(options.program, {"--check"}, options.memory_limit_bytes, &pid, &sock, why)) {
        *why = "could not start " + options.program + ": " + *why;
        return false;
    }
    Helper helper(pid, sock);
    fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
    std::string bytes;
    protocol::Encode(protocol::CheckFrame{query}, &bytes);
    if (Exchange(sock, options, bytes, answer, why))
        return true;
    *why = options.program + " --check: " + *why;
    return false;
}

}  // namespace outbox
