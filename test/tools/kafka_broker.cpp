// kafka_broker — a Kafka-protocol test broker for the outbox test suite.
//
// It hosts librdkafka's built-in mock cluster (rdkafka_mock.h), which speaks
// the real Kafka wire protocol on 127.0.0.1, so that the extension's
// librdkafka producer and independent clients such as kcat can talk to it.
// A small line-based TCP control protocol (also on 127.0.0.1) lets a test
// take brokers down/up, add latency, create topics and inject errors.
//
//   kafka_broker --bootstrap-file PATH --control-file PATH
//                [--brokers N] [--partitions N] [--topic NAME]...
//
// See README.md next to this file for the control commands and for what the
// mock cluster does and does not emulate.

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

// Nagle's algorithm is off for the mock brokers' connections: accept_nodelay.cpp.

namespace {

// The mock cluster auto-creates topics (from a MetadataRequest that allows
// auto-creation, which is what a producer sends) with this many partitions.
// The value is hard-coded inside librdkafka and cannot be changed via the
// public API.
constexpr int kMockAutoCreatePartitions = 4;

// Longest control line accepted; longer lines get an error and a disconnect.
constexpr size_t kMaxLine = 64 * 1024;

struct Options {
    std::string bootstrap_file;
    std::string control_file;
    int brokers = 1;
    int partitions = kMockAutoCreatePartitions;
    std::vector<std::string> topics;  // pre-created at start-up
};

[[noreturn]] void die(const std::string &msg) {
    std::fprintf(stderr, "kafka_broker: %s\n", msg.c_str());
    std::exit(1);
}

void usage_and_exit(int code) {
    std::fprintf(code ? stderr : stdout,
                 "usage: kafka_broker --bootstrap-file PATH --control-file PATH\n"
                 "                    [--brokers N (default 1)]\n"
                 "                    [--partitions N (default 4)]\n"
                 "                    [--topic NAME]...  (pre-create with "
                 "--partitions partitions)\n");
    std::exit(code);
}

// Strict base-10 integer parse; false on garbage or out of [lo, hi].
bool parse_int(const std::string &s, long lo, long hi, long *out) {
    if (s.empty())
        return false;
    char *end = nullptr;
    errno = 0;
    long v = std::strtol(s.c_str(), &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

Options parse_args(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc)
                die("missing value for " + a);
            return argv[++i];
        };
        long n;
        if (a == "--bootstrap-file") {
            o.bootstrap_file = value();
        } else if (a == "--control-file") {
            o.control_file = value();
        } else if (a == "--brokers") {
            if (!parse_int(value(), 1, 64, &n))
                die("--brokers: expected 1..64");
            o.brokers = static_cast<int>(n);
        } else if (a == "--partitions") {
            if (!parse_int(value(), 1, 10000, &n))
                die("--partitions: expected 1..10000");
            o.partitions = static_cast<int>(n);
        } else if (a == "--topic") {
            o.topics.push_back(value());
        } else if (a == "-h" || a == "--help") {
            usage_and_exit(0);
        } else {
            std::fprintf(stderr, "kafka_broker: unknown argument '%s'\n", a.c_str());
            usage_and_exit(2);
        }
    }
    if (o.bootstrap_file.empty() || o.control_file.empty())
        usage_and_exit(2);
    return o;
}

// Write `content` to `path` atomically: readers either see no file, the old
// file or the complete new file, never a partial one.
void write_file_atomic(const std::string &path, const std::string &content) {
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    FILE *f = std::fopen(tmp.c_str(), "w");
    if (!f)
        die("cannot write " + tmp + ": " + std::strerror(errno));
    bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
    ok = (std::fflush(f) == 0) && ok;
    ok = (fsync(fileno(f)) == 0) && ok;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        die("cannot write " + path + ": " + std::strerror(errno));
    }
}

std::string upper(std::string s) {
    for (auto &c : s)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

// Error-name lookup built from librdkafka's own table, so every name that
// rd_kafka_err2name() prints is accepted (e.g. NOT_ENOUGH_REPLICAS,
// MSG_SIZE_TOO_LARGE, NO_ERROR, and internal ones such as _TRANSPORT).
// Also accepted: the RD_KAFKA_RESP_ERR_ prefix, any letter case, and a
// numeric code.
class ErrorNames {
  public:
    ErrorNames() {
        const struct rd_kafka_err_desc *descs = nullptr;
        size_t cnt = 0;
        rd_kafka_get_err_descs(&descs, &cnt);
        for (size_t i = 0; i < cnt; i++) {
            if (!descs[i].name)
                continue;  // the table has gaps
            by_name_[upper(descs[i].name)] = descs[i].code;
        }
    }

    bool lookup(const std::string &in, rd_kafka_resp_err_t *out) const {
        std::string s = upper(in);
        const std::string prefix = "RD_KAFKA_RESP_ERR_";
        if (s.compare(0, prefix.size(), prefix) == 0)
            s = s.substr(prefix.size());
        auto it = by_name_.find(s);
        if (it != by_name_.end()) {
            *out = it->second;
            return true;
        }
        long n;
        if (parse_int(in, -1000, 1000, &n)) {
            *out = static_cast<rd_kafka_resp_err_t>(n);
            return true;
        }
        return false;
    }

  private:
    std::map<std::string, rd_kafka_resp_err_t> by_name_;
};

// Kafka ApiKeys whose request-error stack can be controlled. The mock
// consults a per-ApiKey stack once per request of that type.
bool api_key_from_name(const std::string &name, int16_t *key) {
    static const std::map<std::string, int16_t> keys = {
        {"produce", 0},            // ProduceRequest
        {"fetch", 1},              // FetchRequest
        {"list_offsets", 2},       // ListOffsetsRequest
        {"init_producer_id", 22},  // InitProducerIdRequest (idempotence)
    };
    auto it = keys.find(name);
    if (it == keys.end())
        return false;
    *key = it->second;
    return true;
}

// Small deterministic PRNG (SplitMix64): the same seed always yields the
// same error pattern, independent of the C library.
uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

class Broker {
  public:
    Broker(rd_kafka_mock_cluster_t *mcluster, const Options &opts) : mc_(mcluster), opts_(opts) {}

    // Executes one control line and returns the reply line (no newline).
    // Sets *quit when the client asked the broker to exit.
    std::string execute(const std::string &line, bool *quit) {
        std::vector<std::string> a;
        std::istringstream ss(line);
        for (std::string w; ss >> w;)
            a.push_back(w);
        if (a.empty())
            return "err empty command";
        const std::string &cmd = a[0];

        if (cmd == "ping")
            return "ok";
        if (cmd == "quit") {
            *quit = true;
            return "ok";
        }
        if (cmd == "down" || cmd == "up")
            return cmd_updown(a);
        if (cmd == "rtt")
            return cmd_rtt(a);
        if (cmd == "errors")
            return cmd_errors(a);
        if (cmd == "error_rate")
            return cmd_error_rate(a);
        if (cmd == "clear")
            return cmd_clear(a);
        if (cmd == "create")
            return cmd_create(a);
        if (cmd == "topic_error")
            return cmd_topic_error(a);
        return "err unknown command '" + cmd + "'";
    }

    // Creates a topic with the given partition count. Replication factor is
    // the broker count, so with several brokers the partition leaders are
    // spread over them (the mock picks a random leader among the replicas).
    rd_kafka_resp_err_t create_topic(const std::string &topic, int partitions) {
        return rd_kafka_mock_topic_create(mc_, topic.c_str(), partitions, opts_.brokers);
    }

  private:
    static std::string api_err(rd_kafka_resp_err_t err) {
        if (!err)
            return "ok";
        return std::string("err ") + rd_kafka_err2name(err) + ": " + rd_kafka_err2str(err);
    }

    // "all" -> -1, otherwise a broker id 1..N.
    bool parse_broker(const std::string &s, int32_t *id) const {
        if (s == "all") {
            *id = -1;
            return true;
        }
        long n;
        if (!parse_int(s, 1, opts_.brokers, &n))
            return false;
        *id = static_cast<int32_t>(n);
        return true;
    }

    std::string cmd_updown(const std::vector<std::string> &a) {
        int32_t id;
        if (a.size() != 2 || !parse_broker(a[1], &id))
            return "err usage: " + a[0] + " <broker_id 1.." + std::to_string(opts_.brokers) +
                   "|all>";
        return api_err(a[0] == "down" ? rd_kafka_mock_broker_set_down(mc_, id)
                                      : rd_kafka_mock_broker_set_up(mc_, id));
    }

    std::string cmd_rtt(const std::vector<std::string> &a) {
        int32_t id;
        long ms;
        if (a.size() != 3 || !parse_broker(a[1], &id) || !parse_int(a[2], 0, 3600 * 1000, &ms))
            return "err usage: rtt <broker_id|all> <ms>";
        return api_err(rd_kafka_mock_broker_set_rtt(mc_, id, static_cast<int>(ms)));
    }

    // errors <api> <count> <ERR_NAME> [<ERR_NAME>...]
    // Pushes `count` copies of the sequence: the next count*len requests of
    // that type get these errors in order (NO_ERROR entries pass a request).
    std::string cmd_errors(const std::vector<std::string> &a) {
        int16_t key;
        long count;
        if (a.size() < 4 || !api_key_from_name(a[1], &key) || !parse_int(a[2], 1, 1000000, &count))
            return "err usage: errors produce <count> <ERR_NAME> [<ERR_NAME>...]";
        std::vector<rd_kafka_resp_err_t> seq;
        for (size_t i = 3; i < a.size(); i++) {
            rd_kafka_resp_err_t e;
            if (!names_.lookup(a[i], &e))
                return "err unknown error name '" + a[i] + "'";
            seq.push_back(e);
        }
        std::vector<rd_kafka_resp_err_t> all;
        all.reserve(seq.size() * static_cast<size_t>(count));
        for (long r = 0; r < count; r++)
            all.insert(all.end(), seq.begin(), seq.end());
        rd_kafka_mock_push_request_errors_array(mc_, key, all.size(), all.data());
        return "ok pushed=" + std::to_string(all.size());
    }

    // error_rate <api> <percent> <count> <ERR_NAME> [seed]
    // Pushes `count` entries, each ERR_NAME with probability percent/100 and
    // NO_ERROR otherwise. The mock pops one entry per request and a popped
    // NO_ERROR (0) lets that request through normally, so this yields an
    // error rate over the next `count` requests of that type.
    std::string cmd_error_rate(const std::vector<std::string> &a) {
        int16_t key;
        long count, seed = 1;
        rd_kafka_resp_err_t err;
        if (a.size() < 5 || a.size() > 6 || !api_key_from_name(a[1], &key) ||
            !parse_int(a[3], 1, 1000000, &count))
            return "err usage: error_rate produce <percent> <count> <ERR_NAME> [seed]";
        char *end = nullptr;
        double pct = std::strtod(a[2].c_str(), &end);
        if (*end != '\0' || end == a[2].c_str() || !(pct >= 0.0 && pct <= 100.0))
            return "err percent must be a number in 0..100";
        if (!names_.lookup(a[4], &err))
            return "err unknown error name '" + a[4] + "'";
        if (a.size() == 6 && !parse_int(a[5], 0, 0x7fffffffL, &seed))
            return "err seed must be a non-negative integer";

        uint64_t state = static_cast<uint64_t>(seed);
        std::vector<rd_kafka_resp_err_t> all(static_cast<size_t>(count));
        long failing = 0;
        for (auto &e : all) {
            // 53 random bits -> uniform double in [0, 1).
            double u = static_cast<double>(splitmix64(&state) >> 11) / 9007199254740992.0;
            e = (u * 100.0 < pct) ? err : RD_KAFKA_RESP_ERR_NO_ERROR;
            if (e)
                failing++;
        }
        rd_kafka_mock_push_request_errors_array(mc_, key, all.size(), all.data());
        return "ok pushed=" + std::to_string(count) + " errors=" + std::to_string(failing);
    }

    std::string cmd_clear(const std::vector<std::string> &a) {
        int16_t key;
        if (a.size() != 2 || !api_key_from_name(a[1], &key))
            return "err usage: clear produce";
        rd_kafka_mock_clear_request_errors(mc_, key);
        return "ok";
    }

    std::string cmd_create(const std::vector<std::string> &a) {
        long parts;
        if (a.size() != 3 || !parse_int(a[2], 1, 10000, &parts))
            return "err usage: create <topic> <partitions>";
        return api_err(create_topic(a[1], static_cast<int>(parts)));
    }

    // Note: the mock only reports a topic error in Metadata responses (and
    // AddPartitionsToTxn), and creates the topic if it does not exist yet.
    std::string cmd_topic_error(const std::vector<std::string> &a) {
        rd_kafka_resp_err_t err;
        if (a.size() != 3)
            return "err usage: topic_error <topic> <ERR_NAME>";
        if (!names_.lookup(a[2], &err))
            return "err unknown error name '" + a[2] + "'";
        rd_kafka_mock_topic_set_error(mc_, a[1].c_str(), err);
        return "ok";
    }

    rd_kafka_mock_cluster_t *mc_;
    const Options &opts_;
    ErrorNames names_;
};

// TCP listener on 127.0.0.1 with an ephemeral port. Returns fd and port.
int open_control_listener(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die(std::string("socket: ") + std::strerror(errno));
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = 0;
    if (bind(fd, reinterpret_cast<sockaddr *>(&sin), sizeof(sin)) != 0)
        die(std::string("bind: ") + std::strerror(errno));
    if (listen(fd, 16) != 0)
        die(std::string("listen: ") + std::strerror(errno));
    socklen_t len = sizeof(sin);
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&sin), &len) != 0)
        die(std::string("getsockname: ") + std::strerror(errno));
    *port = ntohs(sin.sin_port);
    return fd;
}

// Sends the whole buffer; false if the peer went away.
bool send_all(int fd, const std::string &s) {
    size_t off = 0;
    while (off < s.size()) {
        ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        off += static_cast<size_t>(n);
    }
    return true;
}

struct Client {
    int fd;
    std::string buf;  // bytes received but not yet terminated by '\n'
};

// Serves control connections until a signal arrives or a client sends
// `quit`. Commands are executed one at a time in this thread; each reply
// is one line.
void serve(Broker &broker, int listen_fd, int sig_fd) {
    std::vector<Client> clients;
    bool quit = false;
    while (!quit) {
        std::vector<pollfd> pfds;
        pfds.push_back({sig_fd, POLLIN, 0});
        pfds.push_back({listen_fd, POLLIN, 0});
        for (auto &c : clients)
            pfds.push_back({c.fd, POLLIN, 0});

        if (poll(pfds.data(), pfds.size(), -1) < 0) {
            if (errno == EINTR)
                continue;
            die(std::string("poll: ") + std::strerror(errno));
        }
        if (pfds[0].revents) {
            signalfd_siginfo si;
            if (read(sig_fd, &si, sizeof(si)) > 0)
                std::fprintf(stderr, "kafka_broker: got signal %u, exiting\n", si.ssi_signo);
            break;
        }
        if (pfds[1].revents & POLLIN) {
            int cfd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (cfd >= 0)
                clients.push_back({cfd, {}});
        }

        // Client fds start at pfds[2]; new clients accepted above are polled
        // from the next iteration on.
        std::vector<int> closed;
        for (size_t i = 2; i < pfds.size() && !quit; i++) {
            if (!pfds[i].revents)
                continue;
            Client &c = clients[i - 2];
            char tmp[4096];
            ssize_t n = recv(c.fd, tmp, sizeof(tmp), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                closed.push_back(c.fd);
                continue;
            }
            c.buf.append(tmp, static_cast<size_t>(n));
            size_t nl;
            bool alive = true;
            while (alive && !quit && (nl = c.buf.find('\n')) != std::string::npos) {
                std::string line = c.buf.substr(0, nl);
                c.buf.erase(0, nl + 1);
                if (!line.empty() && line.back() == '\r')
                    line.pop_back();
                alive = send_all(c.fd, broker.execute(line, &quit) + "\n");
            }
            if (alive && c.buf.size() > kMaxLine) {
                send_all(c.fd, "err line too long\n");
                alive = false;
            }
            if (!alive)
                closed.push_back(c.fd);
        }
        for (int fd : closed) {
            close(fd);
            clients.erase(std::remove_if(clients.begin(), clients.end(),
                                         [fd](const Client &c) { return c.fd == fd; }),
                          clients.end());
        }
    }
    for (auto &c : clients)
        close(c.fd);
}

}  // namespace

int main(int argc, char **argv) {
    Options opts = parse_args(argc, argv);

    // Block the termination signals before librdkafka starts its threads
    // (they inherit the mask) and receive them synchronously via signalfd.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    if (pthread_sigmask(SIG_BLOCK, &sigs, nullptr) != 0)
        die("pthread_sigmask failed");
    int sig_fd = signalfd(-1, &sigs, SFD_CLOEXEC);
    if (sig_fd < 0)
        die(std::string("signalfd: ") + std::strerror(errno));
    signal(SIGPIPE, SIG_IGN);

    // The mock cluster needs an rd_kafka_t for its internal bookkeeping. It
    // is never used to produce; it has no bootstrap servers of its own.
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    // The handle's receive limit also caps the request size the mock
    // brokers accept; use librdkafka's maximum so large batches pass.
    // log_level 4 (warning) hides the notice that this handle has no
    // bootstrap.servers; mock broker errors are still logged to stderr.
    if (rd_kafka_conf_set(conf, "receive.message.max.bytes", "1000000000", errstr,
                          sizeof(errstr)) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
        die(errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk)
        die(std::string("rd_kafka_new: ") + errstr);

    // Each mock broker listens on its own ephemeral port bound to
    // INADDR_LOOPBACK (127.0.0.1) and advertises 127.0.0.1:<port>.
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, opts.brokers);
    if (!mc)
        die("rd_kafka_mock_cluster_new failed");
    std::string bootstraps = rd_kafka_mock_cluster_bootstraps(mc);

    Broker broker(mc, opts);
    for (const auto &t : opts.topics) {
        rd_kafka_resp_err_t err = broker.create_topic(t, opts.partitions);
        if (err)
            die("cannot create topic " + t + ": " + rd_kafka_err2str(err));
    }
    if (opts.partitions != kMockAutoCreatePartitions)
        std::fprintf(stderr,
                     "kafka_broker: note: the mock cluster auto-creates topics with %d "
                     "partitions; --partitions %d applies to --topic and `create` only\n",
                     kMockAutoCreatePartitions, opts.partitions);

    int control_port = 0;
    int listen_fd = open_control_listener(&control_port);

    write_file_atomic(opts.bootstrap_file, bootstraps + "\n");
    write_file_atomic(opts.control_file, std::to_string(control_port) + "\n");
    std::printf("ready bootstrap=%s control=%d\n", bootstraps.c_str(), control_port);
    std::fflush(stdout);

    serve(broker, listen_fd, sig_fd);

    close(listen_fd);
    close(sig_fd);
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}
