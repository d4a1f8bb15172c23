// Starting outbox-driver (see include/outbox/ipc/spawn.hpp).
#include "outbox/ipc/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

extern char **environ;

namespace outbox {

namespace {

// The socket buffers: a whole claim of small messages in one write.
constexpr int kSocketBuffer = 1 << 20;

// The child, between fork and exec: async-signal-safe calls only.
[[noreturn]] void ExecChild(char *const *argv, pid_t parent, const struct rlimit &limit, int sock,
                            int exec_report, int dev_null, long max_fd) {
    // Its own session: the postmaster signals the worker's process group at shutdown and crash
    // (SIGTERM, SIGQUIT), and the helper's life is its parent's to end.
    setsid();
    // Dies with the parent (the thread that forked it: PostgreSQL processes are single-threaded).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
    // Nothing of PostgreSQL's signal setup crosses exec: default handlers (ignored signals would
    // otherwise stay ignored), then an empty mask.
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setrlimit(RLIMIT_AS, &limit);
    // fd 3: the socket; fd 4: the exec pipe; 0 and 1: /dev/null; 2 stays the parent's stderr
    // (the server log), where a library's last words (abort messages) belong. Everything else
    // is closed: no PostgreSQL file, socket or pipe reaches the helper.
    int s = fcntl(sock, F_DUPFD_CLOEXEC, 10);
    int report = fcntl(exec_report, F_DUPFD_CLOEXEC, 10);
    int null_fd = dev_null >= 0 ? fcntl(dev_null, F_DUPFD_CLOEXEC, 10) : -1;
    if (s < 0 || report < 0 || dup2(s, 3) < 0 || dup2(report, 4) < 0)
        _exit(126);
    fcntl(4, F_SETFD, FD_CLOEXEC);
    if (null_fd >= 0) {
        dup2(null_fd, 0);
        dup2(null_fd, 1);
    }
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 5u, ~0u, 0u) != 0)
#endif
        for (long fd = 5; fd < max_fd; fd++)
            close(int(fd));
    execve(argv[0], argv, environ);
    int e = errno;
    ssize_t ignored = write(4, &e, sizeof e);
    (void)ignored;
    _exit(127);
}

}  // namespace

rlim_t SoftLimit(uint64_t bytes, rlim_t max) {
    rlim_t want = bytes ? rlim_t(bytes) : RLIM_INFINITY;
    return max != RLIM_INFINITY && (want == RLIM_INFINITY || want > max) ? max : want;
}

bool SpawnHelper(const std::string &program, const std::vector<std::string> &args,
                 uint64_t memory_limit_bytes, pid_t *pid_out, int *sock_out, std::string *why) {
    // Everything the child needs is prepared before fork: after it, only async-signal-safe
    // calls until exec.
    std::vector<char *> argv;
    argv.push_back(const_cast<char *>(program.c_str()));
    for (const std::string &a : args)
        argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    // The soft limit only (DriverProcess::SetOptions); the hard one stays what the server has.
    struct rlimit limit;
    if (getrlimit(RLIMIT_AS, &limit) != 0)
        limit.rlim_max = RLIM_INFINITY;
    limit.rlim_cur = SoftLimit(memory_limit_bytes, limit.rlim_max);
    long max_fd = sysconf(_SC_OPEN_MAX);
    if (max_fd < 0 || max_fd > 65536)
        max_fd = 65536;

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        *why = std::string("socketpair: ") + strerror(errno);
        return false;
    }
    for (int fd : sv) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSocketBuffer, sizeof kSocketBuffer);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBuffer, sizeof kSocketBuffer);
    }
    int exec_pipe[2];  // the child writes exec's errno here; closed by a successful exec
    if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        *why = std::string("pipe: ") + strerror(e);
        return false;
    }
    int dev_null = open("/dev/null", O_RDWR | O_CLOEXEC);
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    // No PostgreSQL signal handler may run in the child before exec: every signal is blocked
    // across the fork, and the child resets the handlers before it unblocks them.
    sigset_t all, saved;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &saved);
    pid_t pid = fork();
    if (pid == 0)
        ExecChild(argv.data(), parent, limit, sv[1], exec_pipe[1], dev_null, max_fd);
    int fork_errno = errno;
    sigprocmask(SIG_SETMASK, &saved, nullptr);
    close(sv[1]);
    close(exec_pipe[1]);
    if (dev_null >= 0)
        close(dev_null);
    if (pid < 0) {
        close(sv[0]);
        close(exec_pipe[0]);
        *why = std::string("fork: ") + strerror(fork_errno);
        return false;
    }
    int exec_errno = 0;
    ssize_t n;
    do {
        n = read(exec_pipe[0], &exec_errno, sizeof exec_errno);
    } while (n < 0 && errno == EINTR);
    close(exec_pipe[0]);
    if (n > 0) {
        close(sv[0]);
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        *why = strerror(exec_errno);
        return false;
    }
    *pid_out = pid;
    *sock_out = sv[0];
    return true;
}

}  // namespace outbox
