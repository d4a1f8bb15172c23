// The libcurl multi loop of the HTTP drivers (include/outbox/brokers/curl_multi.hpp).
#include "outbox/brokers/curl_multi.hpp"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "outbox/brokers/signals.hpp"
#include "outbox/clock.hpp"

namespace outbox {

namespace {

constexpr const char *kUserAgent = "outbox/0.1";
constexpr int kMaxEpollEvents = 64;

}  // namespace

void EnsureCurlGlobalInit() {
    // A plain static: trivially destructible, and only the main thread calls this.
    static bool initialised = false;
    if (!initialised)
        initialised = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

std::string CurlDefaultCaFile() {
    std::string ca_file;
#if LIBCURL_VERSION_NUM >= 0x075400
    if (CURL *probe = curl_easy_init()) {
        char *path = nullptr;
        if (curl_easy_getinfo(probe, CURLINFO_CAINFO, &path) == CURLE_OK && path != nullptr &&
            access(path, R_OK) == 0)
            ca_file = path;
        curl_easy_cleanup(probe);
    }
#endif
    return ca_file;
}

bool SetHttpPostOptions(CURL *e, const HttpPostOptions &o) {
    bool ok =
        curl_easy_setopt(e, CURLOPT_URL, o.url) == CURLE_OK &&
#if LIBCURL_VERSION_NUM >= 0x075500
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK &&
#else
        curl_easy_setopt(e, CURLOPT_PROTOCOLS, long(CURLPROTO_HTTP | CURLPROTO_HTTPS)) ==
            CURLE_OK &&
#endif
        curl_easy_setopt(e, CURLOPT_POST, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, long(o.timeout_ms)) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                         long(std::min(o.timeout_ms, kCurlMaxConnectTimeoutMs))) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_USERAGENT, kUserAgent) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, o.tls_verify ? 1L : 0L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, o.tls_verify ? 2L : 0L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, o.error_buffer) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, o.on_header) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_HEADERDATA, o.request) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, o.on_body) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEDATA, o.request) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PRIVATE, o.request) == CURLE_OK &&
        // Every address a connection uses is checked as its socket is opened.
        curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, o.on_open_socket) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, o.request) == CURLE_OK &&
        // No proxy from the server's environment (http_proxy...): the address check must see
        // where the request goes, not a proxy that would go anywhere for it.
        curl_easy_setopt(e, CURLOPT_PROXY, "") == CURLE_OK;
    // Trust exactly one CA file and no CA directory: a configured ca_file is then the only
    // trust anchor (not added to the system's), and libcurl caches the parsed store in the multi
    // handle, which it never does while a CA directory is set (Debian's default). Parsing the
    // system bundle costs ~50 ms of CPU per new TLS connection otherwise.
    if (ok && o.ca_file != nullptr && !o.ca_file->empty())
        ok = curl_easy_setopt(e, CURLOPT_CAINFO, o.ca_file->c_str()) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_CAPATH, static_cast<char *>(nullptr)) == CURLE_OK;
    if (!ok)
        return false;
#if LIBCURL_VERSION_NUM >= 0x075700
    // Removing a handle while its name is being resolved would otherwise join the resolver
    // thread, i.e. block for as long as the DNS lookup takes.
    curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
#endif
    return true;
}

bool CurlRequestSent(CURL *easy) {
    long request_size = 0;
    if (curl_easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &request_size) != CURLE_OK)
        return true;
    return request_size > 0;
}

bool CurlMulti::Init(size_t max_connections, std::string *error) {
    sockets_.reserve(max_connections + 8);
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) {
        *error = std::string("could not create an epoll fd: ") + strerror(errno);
        return false;
    }
    multi_ = curl_multi_init();
    if (multi_ == nullptr) {
        *error = "could not create a libcurl multi handle";
        return false;
    }
    long max = static_cast<long>(max_connections);
    if (curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, OnSocket) != CURLM_OK ||
        curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this) != CURLM_OK ||
        curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, OnTimer) != CURLM_OK ||
        curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this) != CURLM_OK ||
        curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, max) != CURLM_OK ||
        curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, max) != CURLM_OK) {
        *error = "libcurl refused the multi handle options";
        return false;
    }
    return true;
}

CurlMulti::~CurlMulti() {
    SignalsBlocked blocked;
    if (multi_)
        curl_multi_cleanup(multi_);  // closes the cached connections (OnSocket still works)
    if (epoll_fd_ >= 0)
        close(epoll_fd_);
}

void CurlMulti::Fail(std::string line) {
    broken_ = true;
    // Consecutive repeats are logged once.
    if (!log_.empty() && log_.back() == line)
        return;
    log_.push_back(std::move(line));
}

void CurlMulti::TakeLog(std::vector<std::string> &lines) {
    for (std::string &l : log_)
        lines.push_back(std::move(l));
    log_.clear();
}

// libcurl wants socket `s` watched for `what` (or no longer watched): mirror it in the epoll set.
int CurlMulti::OnSocket(CURL *, curl_socket_t s, int what, void *userp, void *socketp) {
    auto *self = static_cast<CurlMulti *>(userp);
    std::vector<curl_socket_t> &known = self->sockets_;
    auto it = std::find(known.begin(), known.end(), s);
    if (what == CURL_POLL_REMOVE) {
        // Fails harmlessly when libcurl already closed the socket (closing drops it from epoll).
        epoll_ctl(self->epoll_fd_, EPOLL_CTL_DEL, s, nullptr);
        if (it != known.end()) {
            *it = known.back();
            known.pop_back();
        }
        return 0;
    }
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = ((what & CURL_POLL_IN) ? uint32_t(EPOLLIN) : 0u) |
                ((what & CURL_POLL_OUT) ? uint32_t(EPOLLOUT) : 0u);
    ev.data.fd = s;
    // socketp is non-null once the socket was added; a closed and reused fd number may still
    // disagree with the kernel, hence the fallback to the other operation.
    int op = socketp != nullptr ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(self->epoll_fd_, op, s, &ev) != 0) {
        int other = op == EPOLL_CTL_MOD && errno == ENOENT   ? EPOLL_CTL_ADD
                    : op == EPOLL_CTL_ADD && errno == EEXIST ? EPOLL_CTL_MOD
                                                             : -1;
        if (other < 0 || epoll_ctl(self->epoll_fd_, other, s, &ev) != 0) {
            // Out of memory or epoll watches: this transfer ends by its timeout; rebuild.
            self->socket_errno_ = errno;
            return 0;
        }
    }
    if (socketp == nullptr)
        curl_multi_assign(self->multi_, s, self);
    if (it == known.end()) {
        // Reserved for max_connections + a few sockets in Init; growing beyond may still fail.
        try {
            known.push_back(s);
        } catch (...) {
            self->socket_errno_ = ENOMEM;
        }
    }
    return 0;
}

// libcurl wants socket_action(CURL_SOCKET_TIMEOUT) after `timeout_ms` (-1: cancel).
int CurlMulti::OnTimer(CURLM *, long timeout_ms, void *userp) {
    auto *self = static_cast<CurlMulti *>(userp);
    self->timer_deadline_ns_ =
        timeout_ms < 0 ? -1 : MonotonicNs() + static_cast<int64_t>(timeout_ms) * 1000000;
    return 0;
}

void CurlMulti::SocketAction(curl_socket_t s, int mask) {
    int running = 0;
    CURLMcode rc = curl_multi_socket_action(multi_, s, mask, &running);
    if (rc != CURLM_OK && rc != CURLM_BAD_SOCKET)
        Fail(std::string("libcurl multi handle failed: ") + curl_multi_strerror(rc) +
             "; the driver will be rebuilt");
    if (socket_errno_ != 0 && !broken_)
        Fail("could not add a socket to the epoll set: " + std::string(strerror(socket_errno_)) +
             "; the driver will be rebuilt");
}

void CurlMulti::ServeReady() {
    struct epoll_event events[kMaxEpollEvents];
    int n = epoll_wait(epoll_fd_, events, kMaxEpollEvents, 0);
    for (int i = 0; i < n; ++i) {
        int mask = 0;
        if (events[i].events & EPOLLIN)
            mask |= CURL_CSELECT_IN;
        if (events[i].events & EPOLLOUT)
            mask |= CURL_CSELECT_OUT;
        if (events[i].events & (EPOLLERR | EPOLLHUP))
            mask |= CURL_CSELECT_ERR;
        SocketAction(events[i].data.fd, mask);
    }
    if (timer_deadline_ns_ >= 0 && MonotonicNs() >= timer_deadline_ns_) {
        timer_deadline_ns_ = -1;  // libcurl sets the next one from inside the call
        SocketAction(CURL_SOCKET_TIMEOUT, 0);
    }
}

void CurlMulti::ServeEverySocket() {
    // A copy: serving one socket may close another and change the list.
    std::vector<curl_socket_t> sockets = sockets_;
    for (curl_socket_t s : sockets)
        SocketAction(s, CURL_CSELECT_IN);
}

}  // namespace outbox
