// Latency and throughput of the outbox relay to Redis Streams, and of a direct client of the same
// library (hiredis: pipelined XADDs with the relay's fields) as the floor.
//
//   redis_bench publish --port P --stream S --count N [--window W]
//   redis_bench latency --mode relay|direct --port P --stream S [--conninfo C --destination D]
//           [--rate R] [--connections N] [--duration S] [--warmup S]
//
// publish: N entries as fast as Redis answers them, at most W unanswered (default 1000, the
//   relay's default window): the direct-client floor of a drain. Prints: count= seconds= rate=
// latency relay: N connections run single-row transactions INSERT ... RETURNING event_id, paced
//   to R messages/s in all, and note the time after COMMIT. direct: one client adds entries at the
//   same pace (pipelined, replies read as they come) and notes the time before the XADD. Both: a
//   reader (XREAD BLOCK on the stream, its own connection) notes when each ce_id arrives;
//   latency = arrival - commit (or XADD). Prints: sent= received= missing= rate= p50_ms= p99_ms=
//   max_ms=
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

[[noreturn]] void Die(const std::string &msg) {
    std::fprintf(stderr, "redis_bench: %s\n", msg.c_str());
    std::exit(1);
}

struct Options {
    std::string cmd, mode, conninfo, destination, stream;
    int port = 6379;
    double rate = 1000, duration = 10, warmup = 1;
    int connections = 8;
    long count = 0;
    long window = 1000;
};

Options Parse(int argc, char **argv) {
    Options o;
    if (argc < 2)
        Die("usage: redis_bench publish|latency --port P --stream S ...");
    o.cmd = argv[1];
    for (int i = 2; i + 1 < argc; i += 2) {
        std::string a = argv[i], v = argv[i + 1];
        if (a == "--mode")
            o.mode = v;
        else if (a == "--port")
            o.port = std::atoi(v.c_str());
        else if (a == "--stream")
            o.stream = v;
        else if (a == "--conninfo")
            o.conninfo = v;
        else if (a == "--destination")
            o.destination = v;
        else if (a == "--rate")
            o.rate = std::atof(v.c_str());
        else if (a == "--duration")
            o.duration = std::atof(v.c_str());
        else if (a == "--warmup")
            o.warmup = std::atof(v.c_str());
        else if (a == "--connections")
            o.connections = std::atoi(v.c_str());
        else if (a == "--count")
            o.count = std::atol(v.c_str());
        else if (a == "--window")
            o.window = std::atol(v.c_str());
        else
            Die("unknown option " + a);
    }
    return o;
}

redisContext *Connect(int port) {
    redisContext *c = redisConnect("127.0.0.1", port);
    if (c == nullptr || c->err)
        Die(std::string("connect: ") + (c ? c->errstr : "out of memory"));
    return c;
}

// The entry the relay sends for a message of the bench (driver.cpp, RedisEntryFields).
void AppendXadd(redisContext *c, const std::string &stream, const std::string &id,
                const std::string &payload) {
    const char *argv[] = {"XADD",
                          stream.c_str(),
                          "*",
                          "payload",
                          payload.c_str(),
                          "key",
                          "k",
                          "ce_specversion",
                          "1.0",
                          "ce_id",
                          id.c_str(),
                          "ce_source",
                          "/outbox/bench",
                          "ce_type",
                          stream.c_str(),
                          "ce_time",
                          "2026-01-01T00:00:00.000Z",
                          "ce_datacontenttype",
                          "application/json"};
    int argc = sizeof argv / sizeof argv[0];
    if (redisAppendCommandArgv(c, argc, argv, nullptr) != REDIS_OK)
        Die("append failed");
}

void ReadReply(redisContext *c) {
    void *reply = nullptr;
    if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr)
        Die(std::string("reply: ") + c->errstr);
    auto *r = static_cast<redisReply *>(reply);
    if (r->type == REDIS_REPLY_ERROR)
        Die(std::string("XADD: ") + r->str);
    freeReplyObject(r);
}

std::string IdFor(long n) {
    char buf[64];
    snprintf(buf, sizeof buf, "direct-%ld-%lld", n, static_cast<long long>(NowNs()));
    return buf;
}

int Publish(const Options &o) {
    std::string body = "{\"bench\": true, \"pad\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}";
    redisContext *c = Connect(o.port);
    int64_t t0 = NowNs();
    long answered = 0;
    for (long n = 0; n < o.count; n++) {
        AppendXadd(c, o.stream, IdFor(n), body);
        // Replies are read when the window is full, so the pipeline stays W deep, as the
        // relay's does; redisGetReply flushes what was appended first.
        while (n + 1 - answered >= o.window) {
            ReadReply(c);
            answered++;
        }
    }
    while (answered < o.count) {
        ReadReply(c);
        answered++;
    }
    double s = (NowNs() - t0) / 1e9;
    redisFree(c);
    std::printf("count=%ld seconds=%.3f rate=%.0f\n", o.count, s, o.count / s);
    return 0;
}

struct Times {
    std::mutex mu;
    std::unordered_map<std::string, int64_t> sent, arrived;
    void Sent(const std::string &id, int64_t t) {
        std::lock_guard<std::mutex> l(mu);
        sent[id] = t;
    }
};

// XREAD BLOCK from the stream's end as of the start; notes each ce_id's arrival.
void Reader(const Options &o, Times *times, std::atomic<bool> *stop, std::atomic<bool> *ready) {
    redisContext *c = Connect(o.port);
    std::string last = "0-0";
    redisReply *info =
        static_cast<redisReply *>(redisCommand(c, "XINFO STREAM %s", o.stream.c_str()));
    if (info != nullptr && info->type == REDIS_REPLY_ARRAY)
        for (size_t j = 0; j + 1 < info->elements; j += 2)
            if (std::strcmp(info->element[j]->str, "last-generated-id") == 0)
                last = info->element[j + 1]->str;
    freeReplyObject(info);
    ready->store(true);
    while (!stop->load()) {
        redisReply *r = static_cast<redisReply *>(redisCommand(
            c, "XREAD COUNT 1000 BLOCK 100 STREAMS %s %s", o.stream.c_str(), last.c_str()));
        if (r == nullptr)
            Die(std::string("XREAD: ") + c->errstr);
        int64_t t = NowNs();
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
            redisReply *entries = r->element[0]->element[1];
            std::lock_guard<std::mutex> l(times->mu);
            for (size_t i = 0; i < entries->elements; i++) {
                redisReply *e = entries->element[i];
                last = std::string(e->element[0]->str, e->element[0]->len);
                redisReply *f = e->element[1];
                for (size_t j = 0; j + 1 < f->elements; j += 2)
                    if (std::strcmp(f->element[j]->str, "ce_id") == 0)
                        times->arrived.emplace(
                            std::string(f->element[j + 1]->str, f->element[j + 1]->len), t);
            }
        }
        freeReplyObject(r);
    }
    redisFree(c);
}

void RelayProducer(const Options &o, int index, int64_t start_ns, std::atomic<long> *next,
                   long total, Times *times) {
    PGconn *pg = PQconnectdb(o.conninfo.c_str());
    if (PQstatus(pg) != CONNECTION_OK)
        Die(std::string("connect: ") + PQerrorMessage(pg));
    PQclear(PQexec(pg, "SET synchronous_commit = on"));
    std::string sql = "INSERT INTO outbox.messages (destination, key, payload) VALUES ('" +
                      o.destination + "', $1, '{\"bench\": true}') RETURNING event_id";
    for (;;) {
        long n = next->fetch_add(1);
        if (n >= total)
            break;
        int64_t due = start_ns + static_cast<int64_t>(n * 1e9 / o.rate);
        int64_t now = NowNs();
        if (due > now)
            std::this_thread::sleep_for(std::chrono::nanoseconds(due - now));
        std::string key = "k" + std::to_string(index);
        const char *params[] = {key.c_str()};
        PGresult *r = PQexecParams(pg, sql.c_str(), 1, nullptr, params, nullptr, nullptr, 0);
        int64_t t = NowNs();
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            Die(std::string("insert: ") + PQerrorMessage(pg));
        if (static_cast<double>(due - start_ns) / 1e9 >= o.warmup)
            times->Sent(PQgetvalue(r, 0, 0), t);
        PQclear(r);
    }
    PQfinish(pg);
}

int Latency(const Options &o) {
    Times times;
    std::atomic<bool> stop{false}, ready{false};
    std::thread reader(Reader, std::cref(o), &times, &stop, &ready);
    while (!ready.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    long total = static_cast<long>(o.rate * o.duration);
    int64_t start = NowNs() + 100000000;
    if (o.mode == "relay") {
        std::atomic<long> next{0};
        std::vector<std::thread> producers;
        for (int i = 0; i < o.connections; i++)
            producers.emplace_back(RelayProducer, std::cref(o), i, start, &next, total, &times);
        for (auto &t : producers)
            t.join();
    } else {
        redisContext *c = Connect(o.port);
        long answered = 0;
        for (long n = 0; n < total; n++) {
            int64_t due = start + static_cast<int64_t>(n * 1e9 / o.rate);
            int64_t now = NowNs();
            if (due > now)
                std::this_thread::sleep_for(std::chrono::nanoseconds(due - now));
            std::string id = IdFor(n);
            if (static_cast<double>(due - start) / 1e9 >= o.warmup)
                times.Sent(id, NowNs());
            AppendXadd(c, o.stream, id, "{\"bench\": true}");
            // Sent now, its reply read when it is there: pipelined like the relay, so an fsync
            // per XADD (appendfsync always) does not hold back the next one.
            int done = 0;
            while (!done)
                if (redisBufferWrite(c, &done) != REDIS_OK)
                    Die(std::string("write: ") + c->errstr);
            struct pollfd p = {c->fd, POLLIN, 0};
            while (poll(&p, 1, 0) > 0) {
                if (redisBufferRead(c) != REDIS_OK)
                    Die(std::string("read: ") + c->errstr);
                void *reply = nullptr;
                while (redisGetReplyFromReader(c, &reply) == REDIS_OK && reply != nullptr) {
                    freeReplyObject(reply);
                    answered++;
                }
            }
        }
        while (answered < total) {
            ReadReply(c);
            answered++;
        }
        redisFree(c);
    }
    int64_t sent_end = NowNs();
    int64_t deadline = NowNs() + 30000000000LL;
    for (;;) {
        size_t got = 0, want = 0;
        {
            std::lock_guard<std::mutex> l(times.mu);
            want = times.sent.size();
            for (const auto &[id, t] : times.sent)
                got += times.arrived.count(id);
        }
        if (got >= want || NowNs() > deadline)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    stop.store(true);
    reader.join();
    std::vector<double> lat;
    size_t missing = 0;
    for (const auto &[id, t] : times.sent) {
        auto it = times.arrived.find(id);
        if (it == times.arrived.end())
            missing++;
        else
            lat.push_back((it->second - t) / 1e6);
    }
    std::sort(lat.begin(), lat.end());
    auto q = [&](double p) {
        return lat.empty() ? 0.0
                           : lat[std::min(lat.size() - 1, static_cast<size_t>(p * lat.size()))];
    };
    double seconds = (sent_end - start) / 1e9;
    std::printf("sent=%zu received=%zu missing=%zu rate=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n",
                times.sent.size(), lat.size(), missing, total / std::max(seconds, 1e-9), q(0.5),
                q(0.99), lat.empty() ? 0.0 : lat.back());
    return missing == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
    Options o = Parse(argc, argv);
    if (o.cmd == "latency")
        return Latency(o);
    if (o.cmd == "publish")
        return Publish(o);
    Die("unknown command " + o.cmd);
}
