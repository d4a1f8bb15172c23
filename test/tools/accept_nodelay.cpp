// Nagle's algorithm off for every connection a process hosting librdkafka's mock cluster
// accepts: linked into the test broker (kafka_broker) and the unit tests (kafka_mock.hpp).
//
// librdkafka's mock brokers leave Nagle's algorithm on for the connections they accept. A
// response written while an earlier one is not yet acknowledged then sits behind the client's
// delayed ACK (~40 ms each on Linux), which real Kafka brokers (TCP_NODELAY) never do, and which
// would make every latency and throughput figure measured against the mock an artifact of it (a
// unit test's drain of 20,000 messages took 0.1-2.9 s with it, 0.05 s without). The process's
// own accept() and accept4() take precedence over libc's for librdkafka, and turn Nagle off as
// real brokers do.
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

extern "C" {
using AcceptFn = int (*)(int, struct sockaddr *, socklen_t *);
using Accept4Fn = int (*)(int, struct sockaddr *, socklen_t *, int);

static int NoDelay(int fd) {
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // not TCP on AF_UNIX: harmless
    }
    return fd;
}

int accept(int sockfd, struct sockaddr *addr, socklen_t *addrlen) {
    static AcceptFn real = reinterpret_cast<AcceptFn>(dlsym(RTLD_NEXT, "accept"));
    return NoDelay(real(sockfd, addr, addrlen));
}

int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags) {
    static Accept4Fn real = reinterpret_cast<Accept4Fn>(dlsym(RTLD_NEXT, "accept4"));
    return NoDelay(real(sockfd, addr, addrlen, flags));
}
}
