// The redis driver's connection (include/outbox/brokers/redis/connection.hpp).
#include "outbox/brokers/redis/connection.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "outbox/clock.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

void RedisConnection::Close() {
    if (ssl != nullptr)
        SSL_free(ssl);
    if (ctx != nullptr)
        SSL_CTX_free(ctx);
    if (fd >= 0)
        close(fd);
    ssl = nullptr;
    ctx = nullptr;
    fd = -1;
}

std::string RedisTlsError(const char *what) {
    unsigned long e = ERR_get_error();
    std::string text = what;
    if (e != 0) {
        char buf[256];
        ERR_error_string_n(e, buf, sizeof buf);
        text += std::string(": ") + buf;
    }
    ERR_clear_error();
    return text;
}

namespace {

class Handshake {
  public:
    Handshake(RedisConnection *c, int64_t deadline_ms) : c_(c), deadline_ms_(deadline_ms) {}
    ~Handshake() {
        if (reader_ != nullptr)
            redisReaderFree(reader_);
    }

    // Waits until the socket is readable (`write` false) or writable; false on the deadline.
    bool Wait(bool write) {
        int64_t left = deadline_ms_ - MonotonicMs();
        if (left <= 0)
            return false;
        struct pollfd p = {c_->fd, short(write ? POLLOUT : POLLIN), 0};
        int n;
        do {
            n = poll(&p, 1, int(left));
        } while (n < 0 && errno == EINTR);
        return n > 0;
    }

    bool TlsConnect(std::string *error) {
        for (;;) {
            int r = SSL_connect(c_->ssl);
            if (r == 1)
                return true;
            int e = SSL_get_error(c_->ssl, r);
            if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) &&
                Wait(e == SSL_ERROR_WANT_WRITE))
                continue;
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                *error = "TLS handshake timed out";
            } else {
                long verify = SSL_get_verify_result(c_->ssl);
                *error = verify != X509_V_OK
                             ? std::string("TLS handshake failed: certificate verification: ") +
                                   X509_verify_cert_error_string(verify)
                             : RedisTlsError("TLS handshake failed");
            }
            return false;
        }
    }

    // Sends one command and returns its reply (nullptr with *error on failure); the caller
    // frees it.
    redisReply *Command(const std::vector<std::string> &args, std::string *error) {
        std::vector<const char *> argv;
        std::vector<size_t> lens;
        for (const std::string &a : args) {
            argv.push_back(a.data());
            lens.push_back(a.size());
        }
        char *cmd = nullptr;
        int len = redisFormatCommandArgv(&cmd, int(argv.size()), argv.data(), lens.data());
        if (len < 0) {
            *error = "out of memory formatting a command";
            return nullptr;
        }
        std::string out(cmd, size_t(len));
        redisFreeCommand(cmd);
        size_t done = 0;
        while (done < out.size()) {
            ssize_t n;
            if (c_->ssl != nullptr) {
                n = SSL_write(c_->ssl, out.data() + done, int(out.size() - done));
                if (n <= 0) {
                    int e = SSL_get_error(c_->ssl, int(n));
                    if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) &&
                        Wait(e == SSL_ERROR_WANT_WRITE))
                        continue;
                    *error = RedisTlsError("TLS write failed");
                    return nullptr;
                }
            } else {
                n = send(c_->fd, out.data() + done, out.size() - done, MSG_NOSIGNAL);
                if (n < 0 && (errno == EAGAIN || errno == EINTR) && Wait(true))
                    continue;
                if (n <= 0) {
                    *error = std::string("send failed: ") + strerror(errno);
                    return nullptr;
                }
            }
            done += size_t(n);
        }
        if (reader_ == nullptr)
            reader_ = redisReaderCreate();
        for (;;) {
            void *reply = nullptr;
            if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
                *error = std::string("not a Redis server: ") + reader_->errstr;
                return nullptr;
            }
            if (reply != nullptr)
                return static_cast<redisReply *>(reply);
            char buf[4096];
            ssize_t n;
            if (c_->ssl != nullptr) {
                n = SSL_read(c_->ssl, buf, sizeof buf);
                if (n <= 0) {
                    int e = SSL_get_error(c_->ssl, int(n));
                    if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) &&
                        Wait(e == SSL_ERROR_WANT_WRITE))
                        continue;
                    *error = e == SSL_ERROR_WANT_READ
                                 ? "no answer within connect_timeout"
                                 : RedisTlsError("the server closed the TLS connection");
                    return nullptr;
                }
            } else {
                n = recv(c_->fd, buf, sizeof buf, 0);
                if (n < 0 && (errno == EAGAIN || errno == EINTR) && Wait(false))
                    continue;
                if (n < 0 && errno == EAGAIN) {
                    *error = "no answer within connect_timeout";
                    return nullptr;
                }
                if (n <= 0) {
                    *error = n == 0 ? "the server closed the connection"
                                    : std::string("receive failed: ") + strerror(errno);
                    return nullptr;
                }
            }
            redisReaderFeed(reader_, buf, size_t(n));
        }
    }

  private:
    RedisConnection *c_;
    int64_t deadline_ms_;
    redisReader *reader_ = nullptr;
};

// Resolves the server's name, checks every address against the guard, and connects to the
// first that answers; false with *error.
bool ConnectSocket(const RedisConfig &cfg, const BrokerGuard &guard, int64_t deadline,
                   RedisConnection *c, std::string *error) {
    const std::string where = cfg.host + ":" + std::to_string(cfg.port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo *list = nullptr;
    std::string port = std::to_string(cfg.port);
    int rc = getaddrinfo(cfg.host.c_str(), port.c_str(), &hints, &list);
    if (rc != 0) {
        *error = "cannot resolve " + cfg.host + ": " + gai_strerror(rc);
        return false;
    }
    std::unique_ptr<struct addrinfo, void (*)(struct addrinfo *)> owned(list, freeaddrinfo);
    // A name with any refused address is refused whole (BrokerGuard::Resolve's rule).
    for (struct addrinfo *a = list; a != nullptr; a = a->ai_next) {
        std::string why;
        if (!guard.Allows(a->ai_addr, &why)) {
            *error = "not connecting to Redis at " + where + ": " + why;
            return false;
        }
    }
    std::string last = "no address";
    for (struct addrinfo *a = list; a != nullptr && c->fd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            last = strerror(errno);
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            last = strerror(errno);
            close(fd);
            continue;
        }
        struct pollfd p = {fd, POLLOUT, 0};
        int64_t left = std::max<int64_t>(0, deadline - MonotonicMs());
        int n;
        do {
            n = poll(&p, 1, int(left));
        } while (n < 0 && errno == EINTR);
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (n <= 0) {
            last = "connect timed out";
        } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
            last = strerror(soerr != 0 ? soerr : errno);
        } else {
            c->fd = fd;
            break;
        }
        close(fd);
    }
    if (c->fd < 0) {
        *error = "cannot connect to Redis at " + where + ": " + last;
        return false;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(c->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    return true;
}

// The TLS context and session for the connected socket (the handshake is the caller's).
bool SetUpTls(const RedisConfig &cfg, RedisConnection *c, std::string *error) {
    c->ctx = SSL_CTX_new(TLS_client_method());
    if (c->ctx == nullptr) {
        *error = RedisTlsError("cannot create a TLS context");
        return false;
    }
    SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(c->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (cfg.tls_verify) {
        SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, nullptr);
        if (!cfg.ca_file.empty()
                ? SSL_CTX_load_verify_locations(c->ctx, cfg.ca_file.c_str(), nullptr) != 1
                : SSL_CTX_set_default_verify_paths(c->ctx) != 1) {
            *error = RedisTlsError("cannot load \"ca_file\"");
            return false;
        }
    } else {
        SSL_CTX_set_verify(c->ctx, SSL_VERIFY_NONE, nullptr);
    }
    if (!cfg.cert_file.empty() &&
        (SSL_CTX_use_certificate_chain_file(c->ctx, cfg.cert_file.c_str()) != 1 ||
         SSL_CTX_use_PrivateKey_file(c->ctx, cfg.key_file.c_str(), SSL_FILETYPE_PEM) != 1)) {
        *error = RedisTlsError("cannot load \"cert_file\"/\"key_file\"");
        return false;
    }
    c->ssl = SSL_new(c->ctx);
    if (c->ssl == nullptr || SSL_set_fd(c->ssl, c->fd) != 1) {
        *error = RedisTlsError("cannot create a TLS session");
        return false;
    }
    bool literal = LiteralAddressOfHost(cfg.host).has_value();
    if (!literal)
        SSL_set_tlsext_host_name(c->ssl, cfg.host.c_str());
    if (cfg.tls_verify) {
        X509_VERIFY_PARAM *param = SSL_get0_param(c->ssl);
        if (literal ? X509_VERIFY_PARAM_set1_ip_asc(param, cfg.host.c_str()) != 1
                    : X509_VERIFY_PARAM_set1_host(param, cfg.host.c_str(), 0) != 1) {
            *error = RedisTlsError("cannot set the expected server name");
            return false;
        }
    }
    return true;
}

}  // namespace

bool MakeRedisConnection(const RedisConfig &cfg, const std::string &client_name,
                         const BrokerGuard &guard, RedisConnection *c, std::string *error) {
    const std::string where = cfg.host + ":" + std::to_string(cfg.port);
    int64_t deadline = MonotonicMs() + cfg.connect_timeout_ms;
    if (!ConnectSocket(cfg, guard, deadline, c, error))
        return false;
    if (cfg.tls && !SetUpTls(cfg, c, error))
        return false;
    Handshake hs(c, deadline);
    std::string why;
    if (c->ssl != nullptr && !hs.TlsConnect(&why)) {
        *error = "cannot connect to Redis at " + where + ": " + why;
        return false;
    }
    std::vector<std::vector<std::string>> commands;
    if (!cfg.password.empty()) {
        if (cfg.user.empty())
            commands.push_back({"AUTH", cfg.password});
        else
            commands.push_back({"AUTH", cfg.user, cfg.password});
    }
    if (cfg.database != 0)
        commands.push_back({"SELECT", std::to_string(cfg.database)});
    // Only what CLIENT LIST shows: a refusal (ACL, an old server) does not matter.
    commands.push_back({"CLIENT", "SETNAME", client_name});
    for (const auto &command : commands) {
        redisReply *reply = hs.Command(command, &why);
        if (reply == nullptr) {
            *error = "cannot connect to Redis at " + where + ": " + why;
            return false;
        }
        bool failed = reply->type == REDIS_REPLY_ERROR && command[0] != "CLIENT";
        std::string text = failed ? std::string(reply->str, reply->len).substr(0, 300) : "";
        freeReplyObject(reply);
        if (failed) {
            // The command is named, never its arguments (the password).
            *error = "Redis refused " + command[0] + " at " + where + ": " + text;
            return false;
        }
    }
    return true;
}

}  // namespace outbox
