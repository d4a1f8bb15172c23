// End-to-end latency of the outbox relay, and of the raw broker round trip as its floor.
//
//   latency --mode relay  --conninfo C --bootstrap B --topic T --destination D
//           [--rate R] [--connections N] [--duration S] [--warmup S] [--backlog] [--dump FILE]
//           [--fetch-wait-ms MS] [--isolation-level read_committed|read_uncommitted]
//   latency --mode direct --bootstrap B --topic T [--rate R] [--connections N] [--duration S]
//
// relay: N producer connections each run single-row transactions
//            BEGIN; INSERT INTO outbox.messages (destination, key, payload) VALUES (...)
//            RETURNING event_id; COMMIT;
//        and note the time just after COMMIT returns, per event_id.
// direct: N threads produce straight to the broker with an idempotent, acks=all librdkafka
//        producer (linger.ms=1, as the relay's producer) and note the time just before
//        produce(), per message id (carried, like the relay's, in the ce_id header).
// Both: a librdkafka consumer assigned to every partition of T at the current end offsets
// (fetch.wait.max.ms 1, or --fetch-wait-ms: a real cluster holds a fetch until data arrives or
// the wait passes, so it is asked with a long wait rather than polled every millisecond, which
// costs its brokers CPU the figures would show; --isolation-level, default read_committed as
// librdkafka's: a message of a Kafka transaction arrives when its transaction commits) notes
// when each ce_id arrives; latency = arrival - commit (or produce). Sending is paced to R
// messages/s over all connections (a global schedule; a late sender catches up without
// sleeping), or unpaced with R = 0. Messages sent during the first --warmup seconds are
// delivered but not counted. With --backlog (relay), a separate connection samples SELECT
// count(*) FROM outbox.messages every second. --dump writes one line per counted message,
// "<ms since the start> <latency ms>" in commit order, to look at outliers.
//
// Where the time goes: on a topic whose timestamps are the broker's (message.timestamp.type
// LogAppendTime), each arrival also carries when the partition leader appended it, so the
// latency splits at the broker: send -> append (relay: the commit, the worker's claim, the
// driver, librdkafka's batch and the produce request; direct: librdkafka and the request) and
// append -> arrival (the consumer's fetch), each to_append_*/from_append_* in ms (the wall
// clock; the broker's timestamps have millisecond resolution).
//
// Prints one line of key=value pairs:
//   sent= received= missing= duplicates= seconds= rate= p50_ms= p90_ms= p99_ms= p999_ms= max_ms=
//   [to_append_p50_ms= to_append_p99_ms= from_append_p50_ms= from_append_p99_ms=]
//   [backlog_max= backlog_final=] catch_up_s=
// (rate: messages/s committed or produced in the measured window; catch_up_s: how long after
// the last send the last message arrived.)
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

// The wall clock in microseconds, to compare with a broker's LogAppendTime (milliseconds).
int64_t WallUs() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

[[noreturn]] void Die(const std::string &msg) {
    std::fprintf(stderr, "latency: %s\n", msg.c_str());
    std::exit(1);
}

struct Options {
    std::string mode;
    std::string conninfo;
    std::string bootstrap;
    std::string topic;
    std::string destination;
    double rate = 1000;  // messages/s over all connections; 0 = unpaced
    int connections = 4;
    double duration = 10;
    double warmup = 1;
    std::string fetch_wait_ms = "1";
    std::string isolation_level = "read_committed";
    bool backlog = false;
    double drain_timeout = 120;
    std::string dump;
};

Options Parse(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc)
                Die("missing value for " + a);
            return argv[++i];
        };
        if (a == "--mode")
            o.mode = value();
        else if (a == "--conninfo")
            o.conninfo = value();
        else if (a == "--bootstrap")
            o.bootstrap = value();
        else if (a == "--topic")
            o.topic = value();
        else if (a == "--destination")
            o.destination = value();
        else if (a == "--rate")
            o.rate = std::atof(value().c_str());
        else if (a == "--connections")
            o.connections = std::max(1, std::atoi(value().c_str()));
        else if (a == "--duration")
            o.duration = std::atof(value().c_str());
        else if (a == "--warmup")
            o.warmup = std::atof(value().c_str());
        else if (a == "--fetch-wait-ms")
            o.fetch_wait_ms = value();
        else if (a == "--isolation-level")
            o.isolation_level = value();
        else if (a == "--backlog")
            o.backlog = true;
        else if (a == "--dump")
            o.dump = value();
        else if (a == "--drain-timeout")
            o.drain_timeout = std::atof(value().c_str());
        else
            Die("unknown argument " + a);
    }
    if ((o.mode != "relay" && o.mode != "direct") || o.bootstrap.empty() || o.topic.empty() ||
        (o.mode == "relay" && (o.conninfo.empty() || o.destination.empty())))
        Die("usage: see the comment at the top of latency.cpp");
    return o;
}

// What a sender noted: the id carried in ce_id, when it was committed (or produced), and
// whether it counts (sent after the warm-up).
struct Sent {
    std::string id;
    int64_t at_ns;
    bool counted;
    int64_t wall_us;  // WallUs() at the same moment
};

// One arrival: its ce_id, when (NowNs), and the broker's append time and the wall clock then
// (append_ms -1: the topic's timestamps are not the broker's).
struct Arrival {
    std::string id;
    int64_t at_ns;
    int64_t append_ms;
    int64_t wall_us;
};

// Sends are numbered globally; send i is due at start + i / rate.
class Schedule {
  public:
    Schedule(double rate, double duration_s) : rate_(rate), duration_ns_(int64_t(duration_s * 1e9)) {}
    void Start() { start_ns_ = NowNs(); }
    int64_t start_ns() const { return start_ns_; }
    // The next send's index, after sleeping until it is due; -1 when the run is over.
    int64_t Next() {
        int64_t i = next_.fetch_add(1);
        if (rate_ > 0) {
            int64_t due = start_ns_ + int64_t(double(i) * 1e9 / rate_);
            if (due - start_ns_ >= duration_ns_)
                return -1;
            int64_t wait = due - NowNs();
            if (wait > 0)
                std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
            return i;
        }
        return NowNs() - start_ns_ >= duration_ns_ ? -1 : i;
    }

  private:
    double rate_;
    int64_t duration_ns_;
    int64_t start_ns_ = 0;
    std::atomic<int64_t> next_{0};
};

std::string Payload(int64_t i) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "{\"order_id\": %" PRId64 ", \"customer\": \"customer-%" PRId64
                  "\", \"status\": \"created\", \"amount\": %.2f, \"currency\": \"EUR\", "
                  "\"items\": %" PRId64 ", \"placed_at\": \"2024-05-01T12:00:00Z\", "
                  "\"channel\": \"web\"}",
                  i, i % 1000, double(i % 10000) * 1.37, i % 7 + 1);
    return buf;
}

//-------------------------------------------------------------------------------------------
// Consumer: every partition of the topic from its current end offset.
//-------------------------------------------------------------------------------------------
class Consumer {
  public:
    explicit Consumer(const Options &o) {
        char err[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        auto set = [&](const char *k, const char *v) {
            if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK)
                Die(std::string("consumer config ") + k + ": " + err);
        };
        set("bootstrap.servers", o.bootstrap.c_str());
        set("group.id", "outbox-bench-latency");
        set("enable.auto.commit", "false");
        set("enable.partition.eof", "false");
        set("fetch.wait.max.ms", o.fetch_wait_ms.c_str());
        set("fetch.min.bytes", "1");
        set("fetch.error.backoff.ms", "1");
        set("isolation.level", o.isolation_level.c_str());
        set("client.id", "outbox-bench-consumer");
        rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
        if (!rk_)
            Die(std::string("consumer: ") + err);
        rd_kafka_poll_set_consumer(rk_);

        const rd_kafka_metadata_t *md = nullptr;
        rd_kafka_topic_t *t = rd_kafka_topic_new(rk_, o.topic.c_str(), nullptr);
        if (rd_kafka_metadata(rk_, 0, t, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
            md->topic_cnt != 1 || md->topics[0].partition_cnt < 1)
            Die("no metadata for topic " + o.topic);
        int partitions = md->topics[0].partition_cnt;
        rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(t);

        // Explicit end offsets: nothing produced after this point can be missed.
        rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(partitions);
        for (int p = 0; p < partitions; p++) {
            int64_t lo = 0, hi = 0;
            rd_kafka_resp_err_t e =
                rd_kafka_query_watermark_offsets(rk_, o.topic.c_str(), p, &lo, &hi, 10000);
            if (e)
                Die(std::string("watermarks: ") + rd_kafka_err2str(e));
            rd_kafka_topic_partition_list_add(list, o.topic.c_str(), p)->offset = hi;
        }
        if (rd_kafka_assign(rk_, list))
            Die("assign failed");
        rd_kafka_topic_partition_list_destroy(list);
        thread_ = std::thread([this] { Run(); });
    }

    ~Consumer() {
        stop_ = true;
        thread_.join();
        rd_kafka_consumer_close(rk_);
        rd_kafka_destroy(rk_);
    }

    int64_t count() const { return count_.load(); }
    int64_t last_ns() const { return last_ns_.load(); }
    // Arrivals, valid once the consumer is stopped (or under the caller's care).
    std::vector<Arrival> Take() {
        std::lock_guard<std::mutex> g(mu_);
        return std::move(arrivals_);
    }

  private:
    void Run() {
        while (!stop_) {
            rd_kafka_message_t *m = rd_kafka_consumer_poll(rk_, 20);
            if (!m)
                continue;
            int64_t at = NowNs();
            int64_t wall = WallUs();
            if (!m->err) {
                rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
                int64_t ts = rd_kafka_message_timestamp(m, &type);
                int64_t append_ms = type == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME ? ts : -1;
                rd_kafka_headers_t *h = nullptr;
                const void *v = nullptr;
                size_t n = 0;
                if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
                    rd_kafka_header_get_last(h, "ce_id", &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                    std::lock_guard<std::mutex> g(mu_);
                    arrivals_.push_back(Arrival{std::string(static_cast<const char *>(v), n), at,
                                                append_ms, wall});
                }
                count_++;
                last_ns_ = at;
            }
            rd_kafka_message_destroy(m);
        }
    }

    rd_kafka_t *rk_ = nullptr;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<int64_t> count_{0};
    std::atomic<int64_t> last_ns_{0};
    std::mutex mu_;
    std::vector<Arrival> arrivals_;
};

//-------------------------------------------------------------------------------------------
// Senders
//-------------------------------------------------------------------------------------------
PGconn *Connect(const std::string &conninfo) {
    PGconn *c = PQconnectdb(conninfo.c_str());
    if (PQstatus(c) != CONNECTION_OK)
        Die(std::string("connection failed: ") + PQerrorMessage(c));
    return c;
}

void Command(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        Die(std::string(sql) + ": " + PQerrorMessage(c));
    PQclear(r);
}

void RelaySender(const Options &o, Schedule &schedule, std::vector<Sent> &out) {
    PGconn *c = Connect(o.conninfo);
    PGresult *p = PQprepare(c, "ins",
                            "INSERT INTO outbox.messages (destination, key, payload) "
                            "VALUES ($1, $2, $3::jsonb) RETURNING event_id",
                            3, nullptr);
    if (PQresultStatus(p) != PGRES_COMMAND_OK)
        Die(std::string("prepare: ") + PQerrorMessage(c));
    PQclear(p);
    int64_t warmup_ns = int64_t(o.warmup * 1e9);
    for (int64_t i; (i = schedule.Next()) >= 0;) {
        std::string key = "customer-" + std::to_string(i % 1000);
        std::string payload = Payload(i);
        const char *params[3] = {o.destination.c_str(), key.c_str(), payload.c_str()};
        Command(c, "BEGIN");
        PGresult *r = PQexecPrepared(c, "ins", 3, params, nullptr, nullptr, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            Die(std::string("insert: ") + PQerrorMessage(c));
        std::string id = PQgetvalue(r, 0, 0);
        PQclear(r);
        Command(c, "COMMIT");
        int64_t at = NowNs();
        out.push_back(Sent{std::move(id), at, at - schedule.start_ns() >= warmup_ns, WallUs()});
    }
    PQfinish(c);
}

class DirectProducer {
  public:
    explicit DirectProducer(const Options &o) {
        char err[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        auto set = [&](const char *k, const char *v) {
            if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK)
                Die(std::string("producer config ") + k + ": " + err);
        };
        set("bootstrap.servers", o.bootstrap.c_str());
        set("enable.idempotence", "true");
        set("acks", "all");
        set("linger.ms", "1");  // the relay's defaults
        set("socket.nagle.disable", "true");
        set("client.id", "outbox-bench-direct");
        rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t *, const rd_kafka_message_t *m, void *) {
            if (m->err)
                std::fprintf(stderr, "latency: delivery failed: %s\n", rd_kafka_err2str(m->err));
        });
        rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
        if (!rk_)
            Die(std::string("producer: ") + err);
        poller_ = std::thread([this] {
            while (!stop_)
                rd_kafka_poll(rk_, 10);
        });
    }
    ~DirectProducer() {
        rd_kafka_flush(rk_, 10000);
        stop_ = true;
        poller_.join();
        rd_kafka_destroy(rk_);
    }
    void Send(const Options &o, Schedule &schedule, std::vector<Sent> &out, int thread) {
        int64_t warmup_ns = int64_t(o.warmup * 1e9);
        for (int64_t i; (i = schedule.Next()) >= 0;) {
            std::string id = "direct-" + std::to_string(thread) + "-" + std::to_string(i);
            std::string key = "customer-" + std::to_string(i % 1000);
            std::string payload = Payload(i);
            int64_t at = NowNs();
            int64_t wall = WallUs();
            rd_kafka_resp_err_t e = rd_kafka_producev(
                rk_, RD_KAFKA_V_TOPIC(o.topic.c_str()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_KEY(key.data(), key.size()),
                RD_KAFKA_V_VALUE(payload.data(), payload.size()),
                RD_KAFKA_V_HEADER("ce_id", id.data(), ssize_t(id.size())), RD_KAFKA_V_END);
            if (e)
                Die(std::string("produce: ") + rd_kafka_err2str(e));
            out.push_back(Sent{std::move(id), at, at - schedule.start_ns() >= warmup_ns, wall});
        }
    }

  private:
    rd_kafka_t *rk_ = nullptr;
    std::thread poller_;
    std::atomic<bool> stop_{false};
};

// Samples the backlog every second until stopped.
class BacklogSampler {
  public:
    explicit BacklogSampler(const std::string &conninfo) : conn_(Connect(conninfo)) {
        thread_ = std::thread([this] {
            while (!stop_) {
                Sample();
                for (int i = 0; i < 10 && !stop_; i++)
                    std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
        });
    }
    // Stops sampling and takes one last sample.
    void Stop() {
        stop_ = true;
        thread_.join();
        Sample();
        PQfinish(conn_);
    }
    int64_t max() const { return max_; }
    int64_t last() const { return last_; }

  private:
    void Sample() {
        PGresult *r = PQexec(conn_, "SELECT count(*) FROM outbox.messages");
        if (PQresultStatus(r) == PGRES_TUPLES_OK) {
            last_ = std::atoll(PQgetvalue(r, 0, 0));
            max_ = std::max(max_, last_);
        }
        PQclear(r);
    }
    PGconn *conn_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    int64_t max_ = 0, last_ = 0;
};

double Percentile(const std::vector<int64_t> &sorted_us, double q) {
    if (sorted_us.empty())
        return 0;
    size_t i = size_t(q * double(sorted_us.size() - 1) + 0.5);
    return double(sorted_us[std::min(i, sorted_us.size() - 1)]) / 1000.0;
}

}  // namespace

int main(int argc, char **argv) {
    Options o = Parse(argc, argv);
    Consumer consumer(o);
    std::unique_ptr<DirectProducer> direct;
    if (o.mode == "direct")
        direct = std::make_unique<DirectProducer>(o);
    // Let the consumer's first fetches go out before anything is sent.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));

    std::unique_ptr<BacklogSampler> sampler;
    if (o.backlog)
        sampler = std::make_unique<BacklogSampler>(o.conninfo);

    Schedule schedule(o.rate, o.duration);
    std::vector<std::vector<Sent>> per_thread(o.connections);
    std::vector<std::thread> threads;
    schedule.Start();
    for (int t = 0; t < o.connections; t++)
        threads.emplace_back([&, t] {
            if (direct)
                direct->Send(o, schedule, per_thread[t], t);
            else
                RelaySender(o, schedule, per_thread[t]);
        });
    for (auto &t : threads)
        t.join();
    int64_t sent_end_ns = NowNs();
    if (sampler)
        sampler->Stop();

    int64_t sent = 0, counted_sent = 0, first_counted = INT64_MAX, last_counted = 0;
    struct SentAt {
        int64_t at_ns;  // -1 once seen
        bool counted;
        int64_t wall_us;
    };
    std::unordered_map<std::string, SentAt> by_id;
    for (auto &v : per_thread)
        for (Sent &s : v) {
            sent++;
            if (s.counted) {
                counted_sent++;
                first_counted = std::min(first_counted, s.at_ns);
                last_counted = std::max(last_counted, s.at_ns);
            }
            by_id.emplace(std::move(s.id), SentAt{s.at_ns, s.counted, s.wall_us});
        }

    // Wait for everything to arrive (or for the drain timeout).
    int64_t deadline = NowNs() + int64_t(o.drain_timeout * 1e9);
    while (consumer.count() < sent && NowNs() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // late duplicates
    int64_t last_arrival = consumer.last_ns();
    auto arrivals = consumer.Take();

    std::vector<int64_t> lat_us, to_append_us, from_append_us;
    std::vector<std::pair<int64_t, int64_t>> timeline;  // (sent at, latency), for --dump
    lat_us.reserve(size_t(counted_sent));
    int64_t received = 0, duplicates = 0;
    for (const Arrival &a : arrivals) {
        auto it = by_id.find(a.id);
        if (it == by_id.end())
            continue;  // not ours
        SentAt &s = it->second;
        if (s.at_ns < 0) {
            duplicates++;
            continue;
        }
        received++;
        if (s.counted) {
            lat_us.push_back((a.at_ns - s.at_ns) / 1000);
            if (a.append_ms >= 0) {
                to_append_us.push_back(a.append_ms * 1000 - s.wall_us);
                from_append_us.push_back(a.wall_us - a.append_ms * 1000);
            }
            if (!o.dump.empty())
                timeline.emplace_back(s.at_ns - schedule.start_ns(), lat_us.back());
        }
        s.at_ns = -1;  // seen
    }
    if (!o.dump.empty()) {
        std::sort(timeline.begin(), timeline.end());
        FILE *f = std::fopen(o.dump.c_str(), "w");
        if (!f)
            Die("cannot write " + o.dump);
        for (auto &[t, l] : timeline)
            std::fprintf(f, "%.3f %.3f\n", double(t) / 1e6, double(l) / 1e3);
        std::fclose(f);
    }
    std::sort(lat_us.begin(), lat_us.end());
    double window_s = counted_sent > 1 ? double(last_counted - first_counted) / 1e9 : 0;
    std::printf("sent=%" PRId64 " received=%" PRId64 " missing=%" PRId64 " duplicates=%" PRId64
                " seconds=%.2f rate=%.0f p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f p999_ms=%.2f "
                "max_ms=%.2f",
                sent, received, sent - received, duplicates, window_s,
                window_s > 0 ? double(counted_sent - 1) / window_s : 0, Percentile(lat_us, 0.5),
                Percentile(lat_us, 0.9), Percentile(lat_us, 0.99), Percentile(lat_us, 0.999),
                lat_us.empty() ? 0.0 : double(lat_us.back()) / 1000.0);
    // Only when every counted arrival had the broker's timestamp (the split is of all of them).
    if (!to_append_us.empty() && to_append_us.size() == lat_us.size()) {
        std::sort(to_append_us.begin(), to_append_us.end());
        std::sort(from_append_us.begin(), from_append_us.end());
        std::printf(" to_append_p50_ms=%.2f to_append_p99_ms=%.2f from_append_p50_ms=%.2f "
                    "from_append_p99_ms=%.2f",
                    Percentile(to_append_us, 0.5), Percentile(to_append_us, 0.99),
                    Percentile(from_append_us, 0.5), Percentile(from_append_us, 0.99));
    }
    if (sampler)
        std::printf(" backlog_max=%" PRId64 " backlog_final=%" PRId64, sampler->max(),
                    sampler->last());
    std::printf(" catch_up_s=%.2f\n",
                last_arrival > sent_end_ns ? double(last_arrival - sent_end_ns) / 1e9 : 0.0);
    return 0;
}
