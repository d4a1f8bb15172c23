// The libcurl multi loop of the HTTP drivers (webhook, sqs): one multi handle per destination,
// driven with the multi socket API, so that a driver never blocks the worker and needs no
// thread of its own.
//
// Threads: libcurl runs no threads of its own except the threaded resolver, which only resolves
// names. Every call here that may start a resolver thread (or end one) must run with all
// signals blocked (SignalsBlocked, brokers/signals.hpp), so those threads never run
// PostgreSQL's handlers; the destructor blocks them itself. libcurl's callbacks run on the
// caller's thread inside those calls and only record into plain members.
//
// Waiting: the sockets libcurl asks to watch are kept in an epoll fd, which is the driver's
// WaitFd (an epoll fd is readable when any fd in it is ready); libcurl's timer is reported by
// TimerDeadlineNs for the driver's PollTimeoutMs. ServeReady serves the ready sockets and the
// expired timer with curl_multi_socket_action; CollectFinished hands each finished transfer
// back with its own context (CURLOPT_PRIVATE). What stays each kind's own: its requests, their
// easy handles' callbacks, and what an answer means.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <curl/curl.h>

namespace outbox {

// curl_global_init once per process. Not thread-safe: call it from the main thread only, before
// any other thread could use libcurl. A failed initialisation is tried again on the next call.
void EnsureCurlGlobalInit();

// libcurl's built-in CA bundle when it has one that can be read (libcurl >= 7.84), else "":
// libcurl's defaults (file and/or directory) then stay as they are.
std::string CurlDefaultCaFile();

// The longest a connect may take, whatever a request's own timeout.
constexpr int64_t kCurlMaxConnectTimeoutMs = 10000;

// The options every POST of an HTTP driver sets on its easy handle (SetHttpPostOptions).
struct HttpPostOptions {
    const char *url = nullptr;
    int64_t timeout_ms = 10000;  // the whole request
    bool tls_verify = true;
    const std::string *ca_file = nullptr;  // the one CA file trusted; empty: libcurl's defaults
    char *error_buffer = nullptr;          // CURL_ERROR_SIZE bytes
    curl_write_callback on_header = nullptr;
    curl_write_callback on_body = nullptr;
    void *request = nullptr;  // the callbacks' data and CURLOPT_PRIVATE: the request's context
    curl_opensocket_callback on_open_socket = nullptr;  // checks each address before connecting
};

// Sets the options of `options` and those that are the same for every HTTP driver (http and
// https only, POST, no signals, no redirects, no proxy from the environment, TCP keep-alive, the
// user agent, a connect timeout of at most 10 s). False when libcurl refused one.
bool SetHttpPostOptions(CURL *easy, const HttpPostOptions &options);

// Whether any byte of the request on `easy` reached the socket. CURLINFO_REQUEST_SIZE counts
// request bytes actually written (it is reset when a transfer starts and stays 0 when the
// connection was refused, could not be resolved or timed out while connecting). Unknown: true
// (the worst case: an attempt is spent, nothing is lost).
bool CurlRequestSent(CURL *easy);

class CurlMulti {
  public:
    CurlMulti() = default;
    // Cleans the multi handle up (closing its cached connections) with signals blocked. The
    // easy handles must have been removed and cleaned up before.
    ~CurlMulti();
    CurlMulti(const CurlMulti &) = delete;
    CurlMulti &operator=(const CurlMulti &) = delete;

    // The epoll fd and the multi handle, with at most `max_connections` connections to the host
    // and in the connection cache. False with *error when either could not be made.
    bool Init(size_t max_connections, std::string *error);

    CURLM *handle() const { return multi_; }
    int WaitFd() const { return epoll_fd_; }

    // curl_multi_add_handle and curl_multi_remove_handle. Need signals blocked.
    CURLMcode Add(CURL *easy) { return curl_multi_add_handle(multi_, easy); }
    void Remove(CURL *easy) { curl_multi_remove_handle(multi_, easy); }

    // curl_multi_socket_action(CURL_SOCKET_TIMEOUT): starts what was added (connect, or send
    // on a kept-alive connection) now rather than one wait later. Needs signals blocked.
    void Kick() { SocketAction(CURL_SOCKET_TIMEOUT, 0); }

    // Serves the sockets epoll reports ready and libcurl's timer when it has expired. Never
    // blocks. Needs signals blocked.
    void ServeReady();

    // Serves every watched socket as if readable (see the webhook driver's Sweep). Needs
    // signals blocked.
    void ServeEverySocket();

    // Calls done(request, result) for every transfer libcurl reports as finished, `request`
    // being its CURLOPT_PRIVATE (never null). `done` takes the handle off the multi handle
    // (Remove) before it returns.
    template <typename Done>
    void CollectFinished(Done &&done) {
        int queued = 0;
        while (CURLMsg *msg = curl_multi_info_read(multi_, &queued)) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            CURLcode result = msg->data.result;
            char *request = nullptr;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &request);
            if (request != nullptr)
                done(static_cast<void *>(request), result);
        }
    }

    // When libcurl wants socket_action(CURL_SOCKET_TIMEOUT) (monotonic ns), or -1: never.
    int64_t TimerDeadlineNs() const { return timer_deadline_ns_; }

    // True once the multi handle failed or a socket could not be watched: the driver must be
    // rebuilt. TakeLog moves the lines that say why into `lines`.
    bool Broken() const { return broken_; }
    void TakeLog(std::vector<std::string> &lines);

  private:
    static int OnSocket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp);
    static int OnTimer(CURLM *multi, long timeout_ms, void *userp);

    // One curl_multi_socket_action call; a failure of the multi handle itself breaks it.
    void SocketAction(curl_socket_t s, int mask);
    void Fail(std::string line);

    CURLM *multi_ = nullptr;
    int epoll_fd_ = -1;
    int64_t timer_deadline_ns_ = -1;
    std::vector<curl_socket_t> sockets_;  // every socket in the epoll set
    int socket_errno_ = 0;                // set by OnSocket when epoll_ctl failed
    bool broken_ = false;
    std::vector<std::string> log_;
};

}  // namespace outbox
