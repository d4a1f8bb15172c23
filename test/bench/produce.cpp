// The direct-produce floor of the drain to a real Kafka cluster: N messages like the relay's
// (the same ~170-byte JSON payload, one of 1000 keys, the five CloudEvents headers) produced
// as fast as librdkafka takes them, by an idempotent acks=all producer with the relay's
// producer settings, to topic T. What any librdkafka producer achieves on this cluster; the
// relay additionally reads the rows out of PostgreSQL and deletes them.
//
//   produce --bootstrap B --topic T --count N
//
// Prints one line: sent= delivered= failed= seconds= rate= (seconds: from the first produce()
// to the last delivery report; rate: delivered / seconds).
#include <librdkafka/rdkafka.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

[[noreturn]] void Die(const std::string &msg) {
    std::fprintf(stderr, "produce: %s\n", msg.c_str());
    std::exit(1);
}

std::atomic<int64_t> delivered{0}, failed{0}, last_report_ns{0};

void OnDelivery(rd_kafka_t *, const rd_kafka_message_t *m, void *) {
    if (m->err) {
        if (failed++ < 5)
            std::fprintf(stderr, "produce: delivery failed: %s\n", rd_kafka_err2str(m->err));
    } else {
        delivered++;
    }
    last_report_ns = NowNs();
}

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

}  // namespace

int main(int argc, char **argv) {
    std::string bootstrap, topic;
    int64_t count = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--bootstrap")
            bootstrap = argv[i + 1];
        else if (a == "--topic")
            topic = argv[i + 1];
        else if (a == "--count")
            count = std::atoll(argv[i + 1]);
        else
            Die("unknown argument " + a);
    }
    if (bootstrap.empty() || topic.empty() || count <= 0)
        Die("usage: produce --bootstrap B --topic T --count N");

    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    // The relay's producer (src/drivers/kafka.cpp): its defaults and its guarantees.
    const char *settings[][2] = {
        {"bootstrap.servers", bootstrap.c_str()},
        {"client.id", "outbox-bench-produce"},
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"linger.ms", "1"},
        {"message.send.max.retries", "3"},
        {"retry.backoff.ms", "100"},
        {"socket.keepalive.enable", "true"},
        {"socket.nagle.disable", "true"},
        {"reconnect.backoff.max.ms", "1000"},
        {"message.timeout.ms", "15000"},
    };
    for (const auto &s : settings)
        if (rd_kafka_conf_set(conf, s[0], s[1], err, sizeof err) != RD_KAFKA_CONF_OK)
            Die(std::string(s[0]) + ": " + err);
    rd_kafka_conf_set_dr_msg_cb(conf, OnDelivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk)
        Die(err);

    // Connected, with the topic's metadata, before the clock starts (the relay's producer is
    // warm too when a drain starts).
    const rd_kafka_metadata_t *md = nullptr;
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
    if (rd_kafka_metadata(rk, 0, t, &md, 30000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        Die("no metadata for " + topic);
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    // And with its producer id: one message, acknowledged, before the clock starts.
    char warm[] = "warm-up";
    if (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_VALUE(warm, 7),
                          RD_KAFKA_V_END) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_flush(rk, 60000) != RD_KAFKA_RESP_ERR_NO_ERROR || delivered != 1)
        Die("the warm-up message was not acknowledged");
    delivered = 0;

    const char *source = "/outbox/bench";
    const char *time = "2024-05-01T12:00:00.000Z";
    int64_t start = NowNs();
    for (int64_t i = 0; i < count; i++) {
        std::string key = "customer-" + std::to_string(i % 1000);
        std::string payload = Payload(i);
        char id[48];  // shaped like a UUIDv7 event_id
        std::snprintf(id, sizeof id, "0190a3c2-7b1e-7cc1-9f4e-%012" PRIx64, uint64_t(i));
        for (;;) {
            rd_kafka_resp_err_t e = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_KEY(key.data(), key.size()),
                RD_KAFKA_V_VALUE(payload.data(), payload.size()),
                RD_KAFKA_V_HEADER("ce_id", id, ssize_t(std::strlen(id))),
                RD_KAFKA_V_HEADER("ce_type", topic.c_str(), ssize_t(topic.size())),
                RD_KAFKA_V_HEADER("ce_source", source, ssize_t(std::strlen(source))),
                RD_KAFKA_V_HEADER("ce_time", time, ssize_t(std::strlen(time))),
                RD_KAFKA_V_HEADER("ce_specversion", "1.0", 3), RD_KAFKA_V_END);
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
                break;
            if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                Die(std::string("produce: ") + rd_kafka_err2str(e));
            rd_kafka_poll(rk, 1);  // librdkafka's queue is full: serve delivery reports
        }
        if ((i & 1023) == 0)
            rd_kafka_poll(rk, 0);
    }
    if (rd_kafka_flush(rk, 120000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        Die("not everything was acknowledged within 120 s");
    double seconds = double(last_report_ns.load() - start) / 1e9;
    std::printf("sent=%" PRId64 " delivered=%" PRId64 " failed=%" PRId64
                " seconds=%.2f rate=%.0f\n",
                count, delivered.load(), failed.load(), seconds,
                seconds > 0 ? double(delivered.load()) / seconds : 0.0);
    rd_kafka_destroy(rk);
    return failed.load() == 0 && delivered.load() == count ? 0 : 1;
}
