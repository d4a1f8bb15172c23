// The libcurl multi loop the HTTP drivers share (brokers/curl_multi.hpp), driven the way they
// drive it: Add, Kick, wait on WaitFd for the timer's time, ServeReady, CollectFinished. Against
// a port nothing listens on and against a one-answer HTTP server on a thread of the test.
#include "outbox/brokers/curl_multi.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "outbox/brokers/signals.hpp"
#include "outbox/clock.hpp"

namespace outbox {
namespace {

// A listening socket on 127.0.0.1 and its port (the socket is closed when `listen_fd` is null:
// a port nothing listens on).
int LocalPort(int *listen_fd) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<struct sockaddr *>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<struct sockaddr *>(&addr), &len);
    if (listen_fd != nullptr) {
        listen(fd, 4);
        *listen_fd = fd;
    } else {
        close(fd);
    }
    return ntohs(addr.sin_port);
}

struct Request {
    CURL *easy = nullptr;
    char error[CURL_ERROR_SIZE] = {0};
    std::string body;
    bool done = false;
    CURLcode result = CURLE_OK;
};

size_t OnHeader(char *, size_t size, size_t count, void *) {
    return size * count;
}

size_t OnBody(char *data, size_t size, size_t count, void *userp) {
    static_cast<Request *>(userp)->body.append(data, size * count);
    return size * count;
}

curl_socket_t OnOpenSocket(void *, curlsocktype, struct curl_sockaddr *address) {
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

// One POST of "hello" to 127.0.0.1:port through `multi`, waited for (at most 5 s).
void Post(CurlMulti &multi, int port, Request *r) {
    std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
    r->easy = curl_easy_init();
    ASSERT_NE(r->easy, nullptr);
    HttpPostOptions options;
    options.url = url.c_str();
    options.timeout_ms = 5000;
    options.error_buffer = r->error;
    options.on_header = OnHeader;
    options.on_body = OnBody;
    options.request = r;
    options.on_open_socket = OnOpenSocket;
    ASSERT_TRUE(SetHttpPostOptions(r->easy, options));
    curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, "hello");
    SignalsBlocked blocked;
    ASSERT_EQ(multi.Add(r->easy), CURLM_OK);
    multi.Kick();
    int64_t give_up = MonotonicMs() + 5000;
    while (!r->done && MonotonicMs() < give_up) {
        multi.CollectFinished([&](void *request, CURLcode result) {
            auto *finished = static_cast<Request *>(request);
            EXPECT_EQ(finished, r);
            finished->done = true;
            finished->result = result;
            multi.Remove(finished->easy);
        });
        if (r->done)
            break;
        int64_t deadline = multi.TimerDeadlineNs();
        int wait_ms = 100;
        if (deadline >= 0)
            wait_ms = static_cast<int>(
                std::max<int64_t>(0, std::min<int64_t>(100, (deadline - MonotonicNs()) / 1000000)));
        struct pollfd p = {multi.WaitFd(), POLLIN, 0};
        poll(&p, 1, wait_ms);
        multi.ServeReady();
    }
    EXPECT_TRUE(r->done);
    EXPECT_FALSE(multi.Broken());
}

TEST(CurlMultiTest, ARefusedConnectionFinishesUnsent) {
    EnsureCurlGlobalInit();
    CurlMulti multi;
    std::string error;
    ASSERT_TRUE(multi.Init(4, &error)) << error;
    EXPECT_GE(multi.WaitFd(), 0);
    Request r;
    Post(multi, LocalPort(nullptr), &r);
    EXPECT_EQ(r.result, CURLE_COULDNT_CONNECT);
    EXPECT_FALSE(CurlRequestSent(r.easy));
    curl_easy_cleanup(r.easy);
}

TEST(CurlMultiTest, AnAnswerIsCollectedWithItsRequest) {
    EnsureCurlGlobalInit();
    int listen_fd = -1;
    int port = LocalPort(&listen_fd);
    std::string seen;
    std::thread server([&] {
        int c = accept(listen_fd, nullptr, nullptr);
        char buf[4096];
        // Until the end of the request's body ("hello").
        while (seen.find("hello") == std::string::npos) {
            ssize_t n = read(c, buf, sizeof buf);
            if (n <= 0)
                break;
            seen.append(buf, size_t(n));
        }
        const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        ssize_t ignored = write(c, answer, sizeof answer - 1);
        (void)ignored;
        close(c);
    });
    CurlMulti multi;
    std::string error;
    ASSERT_TRUE(multi.Init(4, &error)) << error;
    Request r;
    Post(multi, port, &r);
    server.join();
    close(listen_fd);
    EXPECT_EQ(r.result, CURLE_OK);
    EXPECT_EQ(r.body, "ok");
    EXPECT_TRUE(CurlRequestSent(r.easy));
    long status = 0;
    curl_easy_getinfo(r.easy, CURLINFO_RESPONSE_CODE, &status);
    EXPECT_EQ(status, 200);
    EXPECT_EQ(seen.rfind("POST / HTTP/1.1\r\n", 0), 0u) << seen;
    EXPECT_NE(seen.find("User-Agent: outbox/0.1\r\n"), std::string::npos) << seen;
    curl_easy_cleanup(r.easy);
}

}  // namespace
}  // namespace outbox
