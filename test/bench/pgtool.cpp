// Small libpq helpers for test/bench/run, where a shell loop around psql would cost more than
// what it measures.
//
//   pgtool drain-floor CONNINFO TABLE BATCH [ORDER_BY]
//       The drain floor: DELETE FROM TABLE WHERE id IN (SELECT id FROM TABLE [ORDER BY
//       ORDER_BY] LIMIT BATCH FOR UPDATE SKIP LOCKED) RETURNING * in a loop, one transaction per statement (autocommit),
//       until a statement deletes nothing. Every returned row is transferred and read.
//       Prints: rows=N bytes=B seconds=S backend_cpu_s=C (C: the server backend's user + system
//       CPU during the loop, from /proc/<pid>/stat; -1 when the server is not on this machine)
//
//   pgtool resume-wait CONNINFO DESTINATION N TIMEOUT_S [STALL_S]
//       Resumes a paused destination and waits until N more of its messages are done
//       (delivered, dead-lettered or expired, by the destination's counters in shared memory,
//       polled every 5 ms), then until outbox.stats() shows nothing pending, in flight,
//       retrying or waiting. The clock starts just before outbox.resume() and stops when both
//       hold. Prints: seconds=S delivered=D dead=X; on a timeout, or when nothing was done
//       for STALL_S seconds: seconds=timeout|stalled ... and exits 1.
//
//   pgtool time-query CONNINFO REPEAT SQL
//       Runs SQL REPEAT times (after one untimed run) and prints
//       median_ms=M min_ms=A max_ms=B rows=R
//
//   pgtool deliver-one CONNINFO DESTINATION TOPIC TIMEOUT_S
//       Commits one message for DESTINATION to TOPIC (autocommit INSERT) and waits until its row
//       is gone (delivered and deleted by the relay), polling every millisecond. The clock
//       starts just before the INSERT. Prints: ms=M (or ms=timeout and exits 1).
#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

[[noreturn]] void Die(const std::string &msg) {
    std::fprintf(stderr, "pgtool: %s\n", msg.c_str());
    std::exit(1);
}

PGconn *Connect(const char *conninfo) {
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        Die(std::string("connection failed: ") + PQerrorMessage(c));
    return c;
}

PGresult *Exec(PGconn *c, const std::string &sql, ExecStatusType want) {
    PGresult *r = PQexec(c, sql.c_str());
    if (PQresultStatus(r) != want)
        Die("'" + sql.substr(0, 80) + "': " + PQerrorMessage(c));
    return r;
}

PGresult *ExecParams(PGconn *c, const char *sql, std::vector<const char *> params) {
    PGresult *r = PQexecParams(c, sql, int(params.size()), nullptr, params.data(), nullptr,
                               nullptr, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        Die(std::string("'") + sql + "': " + PQerrorMessage(c));
    return r;
}

// User + system CPU seconds of a process (all its threads), -1 if it cannot be read.
double ProcessCpuSeconds(int pid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = std::fopen(path, "r");
    if (f == nullptr)
        return -1;
    char buf[1024];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    const char *p = std::strrchr(buf, ')');
    unsigned long long utime = 0, stime = 0;
    if (p == nullptr || std::sscanf(p + 2,
                                    "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                                    &utime, &stime) != 2)
        return -1;
    return double(utime + stime) / double(sysconf(_SC_CLK_TCK));
}

int DrainFloor(const char *conninfo, const std::string &table, int batch,
               const std::string &order_by) {
    PGconn *c = Connect(conninfo);
    std::string sql = "DELETE FROM " + table + " WHERE id IN (SELECT id FROM " + table +
                      (order_by.empty() ? "" : " ORDER BY " + order_by) + " LIMIT " +
                      std::to_string(batch) + " FOR UPDATE SKIP LOCKED) RETURNING *";
    // Prepared once, like the worker's plans.
    PGresult *p = PQprepare(c, "drain", sql.c_str(), 0, nullptr);
    if (PQresultStatus(p) != PGRES_COMMAND_OK)
        Die(std::string("prepare: ") + PQerrorMessage(c));
    PQclear(p);
    long long rows = 0, bytes = 0;
    int backend = PQbackendPID(c);
    double cpu0 = ProcessCpuSeconds(backend);
    auto start = Clock::now();
    for (;;) {
        PGresult *r = PQexecPrepared(c, "drain", 0, nullptr, nullptr, nullptr, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            Die(std::string("drain: ") + PQerrorMessage(c));
        int n = PQntuples(r), f = PQnfields(r);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < f; j++)
                bytes += PQgetlength(r, i, j);
        rows += n;
        PQclear(r);
        if (n == 0)
            break;
    }
    double s = Seconds(start, Clock::now());
    double cpu1 = ProcessCpuSeconds(backend);
    std::printf("rows=%lld bytes=%lld seconds=%.3f backend_cpu_s=%.2f\n", rows, bytes, s,
                cpu0 < 0 || cpu1 < 0 ? -1.0 : cpu1 - cpu0);
    PQfinish(c);
    return 0;
}

struct Counters {
    long long delivered = 0, dead = 0, expired = 0;
};

Counters ReadCounters(PGconn *c, const char *dest) {
    PGresult *r = ExecParams(c,
                             "SELECT coalesce(sum(delivered), 0), coalesce(sum(dead), 0), "
                             "coalesce(sum(expired), 0) FROM outbox._destination_counters() "
                             "WHERE destination = $1",
                             {dest});
    Counters k;
    k.delivered = std::atoll(PQgetvalue(r, 0, 0));
    k.dead = std::atoll(PQgetvalue(r, 0, 1));
    k.expired = std::atoll(PQgetvalue(r, 0, 2));
    PQclear(r);
    return k;
}

bool StatsDrained(PGconn *c, const char *dest) {
    PGresult *r = ExecParams(c,
                             "SELECT pending + in_flight + retrying + waiting FROM outbox.stats() "
                             "WHERE destination = $1",
                             {dest});
    bool drained = PQntuples(r) == 1 && std::atoll(PQgetvalue(r, 0, 0)) == 0;
    PQclear(r);
    return drained;
}

int ResumeWait(const char *conninfo, const char *dest, long long n, double timeout_s,
               double stall_s) {
    PGconn *c = Connect(conninfo);
    Counters base = ReadCounters(c, dest);
    auto start = Clock::now();
    PQclear(ExecParams(c, "SELECT outbox.resume($1)", {dest}));
    Counters now;
    long long last_done = -1;
    auto last_progress = start;
    for (;;) {
        now = ReadCounters(c, dest);
        long long done = (now.delivered - base.delivered) + (now.dead - base.dead) +
                         (now.expired - base.expired);
        if (done >= n)
            break;
        auto t = Clock::now();
        if (done != last_done) {
            last_done = done;
            last_progress = t;
        }
        bool stalled = Seconds(last_progress, t) > stall_s;
        if (stalled || Seconds(start, t) > timeout_s) {
            std::printf("seconds=%s delivered=%lld dead=%lld\n", stalled ? "stalled" : "timeout",
                        now.delivered - base.delivered, now.dead - base.dead);
            return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto end = Clock::now();
    // The counters are published after the write-back commits; outbox.stats() must agree.
    while (!StatsDrained(c, dest)) {
        if (Seconds(start, Clock::now()) > timeout_s) {
            std::printf("seconds=timeout delivered=%lld dead=%lld\n",
                        now.delivered - base.delivered, now.dead - base.dead);
            return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        end = Clock::now();
        now = ReadCounters(c, dest);
    }
    std::printf("seconds=%.3f delivered=%lld dead=%lld\n", Seconds(start, end),
                now.delivered - base.delivered, (now.dead - base.dead) + (now.expired - base.expired));
    PQfinish(c);
    return 0;
}

int TimeQuery(const char *conninfo, int repeat, const char *sql) {
    PGconn *c = Connect(conninfo);
    PQclear(Exec(c, sql, PGRES_TUPLES_OK));
    std::vector<double> ms;
    int rows = 0;
    for (int i = 0; i < repeat; i++) {
        auto a = Clock::now();
        PGresult *r = Exec(c, sql, PGRES_TUPLES_OK);
        ms.push_back(Seconds(a, Clock::now()) * 1000);
        rows = PQntuples(r);
        PQclear(r);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("median_ms=%.2f min_ms=%.2f max_ms=%.2f rows=%d\n", ms[ms.size() / 2], ms.front(),
                ms.back(), rows);
    PQfinish(c);
    return 0;
}

int DeliverOne(const char *conninfo, const char *dest, const char *topic, double timeout_s) {
    PGconn *c = Connect(conninfo);
    auto start = Clock::now();
    PGresult *r = ExecParams(c,
                             "INSERT INTO outbox.messages (destination, topic, key, payload) "
                             "VALUES ($1, $2, 'first', '{\"first\": true}') RETURNING id",
                             {dest, topic});
    std::string id = PQgetvalue(r, 0, 0);
    PQclear(r);
    for (;;) {
        r = ExecParams(c, "SELECT 1 FROM outbox.messages WHERE id = $1", {id.c_str()});
        bool gone = PQntuples(r) == 0;
        PQclear(r);
        auto t = Clock::now();
        if (gone) {
            std::printf("ms=%.2f\n", Seconds(start, t) * 1000);
            break;
        }
        if (Seconds(start, t) > timeout_s) {
            std::printf("ms=timeout\n");
            return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    PQfinish(c);
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "drain-floor" && (argc == 5 || argc == 6))
        return DrainFloor(argv[2], argv[3], std::atoi(argv[4]), argc == 6 ? argv[5] : "");
    if (cmd == "resume-wait" && (argc == 6 || argc == 7))
        return ResumeWait(argv[2], argv[3], std::atoll(argv[4]), std::atof(argv[5]),
                          argc == 7 ? std::atof(argv[6]) : std::atof(argv[5]));
    if (cmd == "time-query" && argc == 5)
        return TimeQuery(argv[2], std::atoi(argv[3]), argv[4]);
    if (cmd == "deliver-one" && argc == 6)
        return DeliverOne(argv[2], argv[3], argv[4], std::atof(argv[5]));
    std::fprintf(stderr,
                 "usage: pgtool drain-floor CONNINFO TABLE BATCH [ORDER_BY]\n"
                 "       pgtool resume-wait CONNINFO DESTINATION N TIMEOUT_S [STALL_S]\n"
                 "       pgtool time-query CONNINFO REPEAT SQL\n"
                 "       pgtool deliver-one CONNINFO DESTINATION TOPIC TIMEOUT_S\n");
    return 2;
}
