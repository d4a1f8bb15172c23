// Latency and throughput of the outbox relay to RabbitMQ and NATS JetStream, and of a direct
// publish from the same client library (librabbitmq with publisher confirms, cnats with PubAck)
// as the floor.
//
//   brokers latency --kind amqp|nats --mode relay|direct [--conninfo C --destination D]
//           --url U (amqp://... or nats://...) --target T [--rate R] [--connections N]
//           [--duration S] [--warmup S]
//   brokers publish --kind amqp|nats --url U --target T --count N [--window W]
//   (--kind sqs: --url is the queue URL of an SQS-compatible server, signed for region
//   "elasticmq"; --target is unused. publish: SendMessageBatch requests of 10 on a libcurl multi
//   handle, W/10 in flight; latency direct: one-entry SendMessageBatch requests at the pace;
//   the consumer: 4 threads of ReceiveMessage (long polls) + DeleteMessageBatch, by the ce-id
//   attribute.)
//   (--kind redis: --url redis://host:port, --target the stream. publish: pipelined XADDs of
//   the relay's fields on one hiredis connection, at most W unanswered; latency direct: the
//   same XADDs at the pace, each sent at once and its reply read when it is there; the
//   consumer: XREAD BLOCK on the stream from its end, its own connection, by the ce_id field.)
//
// T is where messages go and are read back: for amqp the queue (published through the default
// exchange with routing key T), for nats the subject (a stream must store it).
// latency relay: N connections run single-row transactions INSERT ... RETURNING event_id,
//   paced to R messages/s in all, and note the time after COMMIT. direct: one publisher sends
//   at the same pace with confirms (amqp) / async PubAck (nats) and notes the time before the
//   publish. Both: a consumer of the same library (basic.consume on the queue / a core
//   subscription on the subject) notes when each id (cloudEvents:id / ce-id) arrives; latency =
//   arrival - commit (or publish). Prints: sent= received= missing= rate= p50_ms= p99_ms=
//   max_ms=
// publish: N messages as fast as the broker confirms them, at most W unconfirmed (default
//   1000): the direct-publish floor of a drain. Prints: count= seconds= rate=
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <libpq-fe.h>
#include <nats/nats.h>
// mqtt kind
#include <mosquitto.h>
#include "outbox/brokers/mqtt/protocol.hpp"  // MQTT_PROP_*: picks libmosquitto 2.0's or 2.1's header
#include <curl/curl.h>
#include <nlohmann/json.hpp>
// redis kind
#include <hiredis/hiredis.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
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
    std::fprintf(stderr, "brokers: %s\n", msg.c_str());
    std::exit(1);
}

struct Options {
    std::string cmd, kind, mode, conninfo, destination, url, target;
    double rate = 1000, duration = 10, warmup = 1;
    int connections = 8;
    long count = 0;
    long window = 1000;
};

Options Parse(int argc, char **argv) {
    Options o;
    if (argc < 2)
        Die("usage: brokers latency|publish --kind amqp|nats|mqtt|sqs|redis ...");
    o.cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        std::string a = argv[i];
        if (i + 1 >= argc)
            Die("missing value for " + a);
        std::string v = argv[++i];
        if (a == "--kind") o.kind = v;
        else if (a == "--mode") o.mode = v;
        else if (a == "--conninfo") o.conninfo = v;
        else if (a == "--destination") o.destination = v;
        else if (a == "--url") o.url = v;
        else if (a == "--target") o.target = v;
        else if (a == "--rate") o.rate = std::atof(v.c_str());
        else if (a == "--duration") o.duration = std::atof(v.c_str());
        else if (a == "--warmup") o.warmup = std::atof(v.c_str());
        else if (a == "--connections") o.connections = std::atoi(v.c_str());
        else if (a == "--count") o.count = std::atol(v.c_str());
        else if (a == "--window") o.window = std::atol(v.c_str());
        else Die("unknown option " + a);
    }
    if (o.kind != "amqp" && o.kind != "nats" && o.kind != "mqtt" && o.kind != "sqs" &&
        o.kind != "redis")
        Die("--kind must be amqp, nats, mqtt, sqs or redis");
    return o;
}

// Sent and arrival times per id.
struct Times {
    std::mutex mu;
    std::unordered_map<std::string, int64_t> sent, arrived;
    void Sent(const std::string &id, int64_t t) {
        std::lock_guard<std::mutex> l(mu);
        sent[id] = t;
    }
    void Arrived(const std::string &id, int64_t t) {
        std::lock_guard<std::mutex> l(mu);
        arrived.emplace(id, t);
    }
};

// ---------------------------------------------------------------------------------------------
// AMQP (librabbitmq)
// ---------------------------------------------------------------------------------------------
amqp_connection_state_t AmqpConnect(const std::string &url) {
    std::vector<char> buf(url.begin(), url.end());
    buf.push_back('\0');
    amqp_connection_info info;
    amqp_default_connection_info(&info);
    if (amqp_parse_url(buf.data(), &info) != AMQP_STATUS_OK)
        Die("bad amqp url");
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (amqp_socket_open(s, info.host, info.port) != AMQP_STATUS_OK)
        Die("cannot connect to RabbitMQ");
    amqp_rpc_reply_t r = amqp_login(c, info.vhost, 0, 131072, 30, AMQP_SASL_METHOD_PLAIN,
                                    info.user, info.password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        Die("amqp login failed");
    amqp_channel_open(c, 1);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
        Die("amqp channel.open failed");
    return c;
}

// Reads every confirm that has arrived; returns how many messages they confirmed.
long AmqpReadConfirms(amqp_connection_state_t c, uint64_t *confirmed_upto, bool block) {
    long n = 0;
    for (;;) {
        amqp_frame_t f;
        struct timeval tv = {0, block && n == 0 ? 100000 : 0};
        int st = amqp_simple_wait_frame_noblock(c, &f, &tv);
        if (st == AMQP_STATUS_TIMEOUT)
            break;
        if (st != AMQP_STATUS_OK)
            Die(std::string("amqp: ") + amqp_error_string2(st));
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        if (f.payload.method.id == AMQP_BASIC_ACK_METHOD ||
            f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
            uint64_t tag = f.payload.method.id == AMQP_BASIC_ACK_METHOD
                               ? static_cast<amqp_basic_ack_t *>(f.payload.method.decoded)->delivery_tag
                               : static_cast<amqp_basic_nack_t *>(f.payload.method.decoded)->delivery_tag;
            bool multiple = f.payload.method.id == AMQP_BASIC_ACK_METHOD
                                ? static_cast<amqp_basic_ack_t *>(f.payload.method.decoded)->multiple
                                : static_cast<amqp_basic_nack_t *>(f.payload.method.decoded)->multiple;
            uint64_t upto = multiple ? tag : std::max(*confirmed_upto + 1, tag);
            if (upto > *confirmed_upto) {
                n += static_cast<long>(upto - *confirmed_upto);
                *confirmed_upto = upto;
            }
        } else if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
                   f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
            Die("the broker closed the channel");
        }
    }
    amqp_maybe_release_buffers(c);
    return n;
}

void AmqpPublishOne(amqp_connection_state_t c, const std::string &queue, const std::string &id,
                    const std::string &body) {
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    amqp_table_entry_t e;
    e.key = amqp_cstring_bytes("cloudEvents:id");
    e.value.kind = AMQP_FIELD_KIND_UTF8;
    e.value.value.bytes = amqp_cstring_bytes(id.c_str());
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
               AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
    p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p.message_id = amqp_cstring_bytes(id.c_str());
    p.content_type = amqp_cstring_bytes("application/json");
    p.headers.num_entries = 1;
    p.headers.entries = &e;
    amqp_bytes_t b;
    b.len = body.size();
    b.bytes = const_cast<char *>(body.data());
    if (amqp_basic_publish(c, 1, amqp_empty_bytes, amqp_cstring_bytes(queue.c_str()), 1, 0, &p,
                           b) != AMQP_STATUS_OK)
        Die("amqp publish failed");
}

// Consumer thread: basic.consume (no-ack) until `stop`, noting arrivals by cloudEvents:id.
void AmqpConsume(const std::string &url, const std::string &queue, Times *times,
                 std::atomic<bool> *stop, std::atomic<bool> *ready) {
    amqp_connection_state_t c = AmqpConnect(url);
    amqp_basic_qos(c, 1, 0, 5000, 0);
    amqp_basic_consume(c, 1, amqp_cstring_bytes(queue.c_str()), amqp_empty_bytes, 0, 1, 0,
                       amqp_empty_table);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
        Die("amqp basic.consume failed (does the queue exist?)");
    ready->store(true);
    while (!stop->load()) {
        amqp_envelope_t env;
        struct timeval tv = {0, 100000};
        amqp_maybe_release_buffers(c);
        amqp_rpc_reply_t r = amqp_consume_message(c, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT)
            continue;
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
            Die("amqp consume failed");
        int64_t t = NowNs();
        const amqp_table_t &h = env.message.properties.headers;
        for (int i = 0; i < h.num_entries; i++) {
            std::string key(static_cast<char *>(h.entries[i].key.bytes), h.entries[i].key.len);
            if (key == "cloudEvents:id" && h.entries[i].value.kind == AMQP_FIELD_KIND_UTF8) {
                amqp_bytes_t v = h.entries[i].value.value.bytes;
                times->Arrived(std::string(static_cast<char *>(v.bytes), v.len), t);
            }
        }
        amqp_destroy_envelope(&env);
    }
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

// ---------------------------------------------------------------------------------------------
// NATS (cnats)
// ---------------------------------------------------------------------------------------------
natsConnection *NatsConnect(const std::string &url) {
    natsConnection *nc = nullptr;
    if (natsConnection_ConnectTo(&nc, url.c_str()) != NATS_OK)
        Die("cannot connect to NATS");
    return nc;
}

void OnNatsMsg(natsConnection *, natsSubscription *, natsMsg *msg, void *closure) {
    int64_t t = NowNs();
    const char *id = nullptr;
    if (natsMsgHeader_Get(msg, "ce-id", &id) == NATS_OK && id != nullptr)
        static_cast<Times *>(closure)->Arrived(id, t);
    natsMsg_Destroy(msg);
}

std::atomic<long> nats_acked{0};
std::atomic<long> nats_failed{0};

void OnNatsAck(jsCtx *, natsMsg *msg, jsPubAck *pa, jsPubAckErr *, void *) {
    (pa != nullptr ? nats_acked : nats_failed).fetch_add(1);
    natsMsg_Destroy(msg);
}

jsCtx *NatsJetStream(natsConnection *nc) {
    jsOptions o;
    jsOptions_Init(&o);
    o.PublishAsync.AckHandler = OnNatsAck;
    o.PublishAsync.MaxPending = 1 << 20;
    jsCtx *js = nullptr;
    if (natsConnection_JetStream(&js, nc, &o) != NATS_OK)
        Die("no JetStream context");
    return js;
}

void NatsPublishOne(jsCtx *js, const std::string &subject, const std::string &id,
                    const std::string &body) {
    natsMsg *m = nullptr;
    natsMsg_Create(&m, subject.c_str(), nullptr, body.data(), static_cast<int>(body.size()));
    natsMsgHeader_Set(m, "ce-id", id.c_str());
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = id.c_str();
    if (js_PublishMsgAsync(js, &m, &po) != NATS_OK)
        Die("nats publish failed");
    natsMsg_Destroy(m);
}

// ---------------------------------------------------------------------------------------------
// MQTT 5 (libmosquitto), mqtt kind: --url mqtt://host:port; T is the topic. The consumer is a
// QoS 1 subscription that reads the "id" user property; the direct publisher publishes QoS 1
// with the same user property, at most W awaiting their PUBACK.
// ---------------------------------------------------------------------------------------------
std::atomic<long> mqtt_acked{0};
std::atomic<bool> mqtt_connected{false};

// The host and port of scheme://host:port (the port `port` when it has none).
std::string UrlHostPort(const std::string &url, int *port) {
    std::string rest = url.substr(url.find("://") == std::string::npos ? 0 : url.find("://") + 3);
    size_t colon = rest.rfind(':');
    if (colon != std::string::npos)
        *port = std::atoi(rest.c_str() + colon + 1);
    return rest.substr(0, colon);
}

struct mosquitto *MqttConnect(const std::string &url, const char *id, void *closure) {
    int port = 1883;
    std::string host = UrlHostPort(url, &port);
    mosquitto_lib_init();
    struct mosquitto *m = mosquitto_new(id, true, closure);
    mosquitto_int_option(m, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
    mosquitto_int_option(m, MOSQ_OPT_SEND_MAXIMUM, 1000);
    mosquitto_int_option(m, MOSQ_OPT_TCP_NODELAY, 1);
    mosquitto_connect_v5_callback_set(m, [](struct mosquitto *, void *, int rc, int, const mosquitto_property *) {
        if (rc == 0)
            mqtt_connected.store(true);
    });
    mosquitto_publish_v5_callback_set(m, [](struct mosquitto *, void *, int, int, const mosquitto_property *) {
        mqtt_acked.fetch_add(1);
    });
    if (mosquitto_connect_bind_v5(m, host.c_str(), port, 30, nullptr, nullptr) != MOSQ_ERR_SUCCESS)
        Die("cannot connect to the MQTT broker");
    if (mosquitto_loop_start(m) != MOSQ_ERR_SUCCESS)
        Die("mosquitto_loop_start failed");
    while (!mqtt_connected.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return m;
}

void OnMqttMessage(struct mosquitto *, void *closure, const struct mosquitto_message *,
                   const mosquitto_property *props) {
    int64_t t = NowNs();
    char *name = nullptr, *value = nullptr;
    for (const mosquitto_property *p = props; p != nullptr; p = mosquitto_property_next(p)) {
        if (mosquitto_property_identifier(p) != MQTT_PROP_USER_PROPERTY)
            continue;
        if (mosquitto_property_read_string_pair(p, MQTT_PROP_USER_PROPERTY, &name, &value, false) != nullptr) {
            if (std::strcmp(name, "id") == 0)
                static_cast<Times *>(closure)->Arrived(value, t);
            free(name);
            free(value);
        }
    }
}

struct mosquitto *MqttSubscribe(const std::string &url, const std::string &topic, Times *times) {
    struct mosquitto *m = MqttConnect(url, nullptr, times);
    mosquitto_message_v5_callback_set(m, OnMqttMessage);
    if (mosquitto_subscribe_v5(m, nullptr, topic.c_str(), 1, 0, nullptr) != MOSQ_ERR_SUCCESS)
        Die("mqtt subscribe failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return m;
}

void MqttPublishOne(struct mosquitto *m, const std::string &topic, const std::string &id,
                    const std::string &body) {
    mosquitto_property *props = nullptr;
    mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, "id", id.c_str());
    if (mosquitto_publish_v5(m, nullptr, topic.c_str(), static_cast<int>(body.size()), body.data(), 1,
                             false, props) != MOSQ_ERR_SUCCESS)
        Die("mqtt publish failed");
    mosquitto_property_free_all(&props);
}
// ---- end of the mqtt kind -------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// SQS (libcurl with its AWS SigV4, the relay's own library), sqs kind (issue 42)
// ---------------------------------------------------------------------------------------------
std::string SqsEndpoint(const std::string &queue_url) {
    size_t slash = queue_url.find('/', queue_url.find("://") + 3);
    return queue_url.substr(0, slash) + "/";
}

size_t SqsCollect(char *data, size_t size, size_t count, void *userp) {
    static_cast<std::string *>(userp)->append(data, size * count);
    return size * count;
}

// One AWS JSON 1.0 request on an easy handle (body and response owned by the caller).
CURL *SqsEasy(const std::string &queue_url, const char *target, const std::string &body,
              std::string *response, curl_slist **headers) {
    CURL *e = curl_easy_init();
    *headers = curl_slist_append(nullptr, "Content-Type: application/x-amz-json-1.0");
    *headers = curl_slist_append(*headers, (std::string("X-Amz-Target: AmazonSQS.") + target).c_str());
    *headers = curl_slist_append(*headers, "Expect:");
    curl_easy_setopt(e, CURLOPT_URL, SqsEndpoint(queue_url).c_str());
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, *headers);
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, "aws:amz:elasticmq:sqs");
    curl_easy_setopt(e, CURLOPT_USERNAME, "bench");
    curl_easy_setopt(e, CURLOPT_PASSWORD, "bench");
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, long(body.size()));
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, SqsCollect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, response);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 30000L);
    return e;
}

// The entries carry what the relay's carry (docs/destinations.md#sqs): the same message
// attributes (ce-id, ce-type, ce-source, ce-time, ce-specversion, content-type), so that SQS has
// the same work with each message from either client.
std::string SqsBatch(const std::string &queue_url, const std::vector<std::string> &ids,
                     const std::vector<std::string> &bodies) {
    auto attribute = [](const std::string &value) {
        return nlohmann::json{{"DataType", "String"}, {"StringValue", value}};
    };
    char now[32];
    time_t t = time(nullptr);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%S.000Z", gmtime(&t));
    nlohmann::json entries = nlohmann::json::array();
    for (size_t i = 0; i < ids.size(); i++)
        entries.push_back({{"Id", std::to_string(i)}, {"MessageBody", bodies[i]},
                           {"MessageAttributes", {{"ce-id", attribute(ids[i])},
                                                  {"ce-type", attribute("bench")},
                                                  {"ce-source", attribute("/outbox/bench")},
                                                  {"ce-time", attribute(now)},
                                                  {"ce-specversion", attribute("1.0")},
                                                  {"content-type", attribute("application/json")}}}});
    return nlohmann::json{{"QueueUrl", queue_url}, {"Entries", entries}}.dump();
}

// The payload the bench queues for the relay (PAYLOAD_SQL in test/bench/lib.sh), as jsonb prints
// it: the direct client sends the same bodies.
std::string SqsBenchPayload(long g) {
    char buf[320];
    snprintf(buf, sizeof buf,
             "{\"items\": %ld, \"amount\": %.2f, \"status\": \"created\", \"channel\": \"web\", "
             "\"currency\": \"EUR\", \"customer\": \"customer-%ld\", \"order_id\": %ld, "
             "\"placed_at\": \"2024-05-01T12:00:00Z\"}",
             g % 7 + 1, (g % 10000) * 1.37, g % 1000, g);
    return buf;
}

// A pool of SendMessageBatch requests on one multi handle.
struct SqsSender {
    struct Req {
        CURL *easy = nullptr;
        curl_slist *headers = nullptr;
        std::string body, response;
        size_t n = 0;
    };
    std::string queue_url;
    CURLM *multi = curl_multi_init();
    std::vector<Req *> active;
    long done = 0, failed = 0;

    void Send(const std::vector<std::string> &ids, const std::vector<std::string> &bodies) {
        auto *r = new Req;
        r->body = SqsBatch(queue_url, ids, bodies);
        r->n = ids.size();
        r->easy = SqsEasy(queue_url, "SendMessageBatch", r->body, &r->response, &r->headers);
        curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
        curl_multi_add_handle(multi, r->easy);
        active.push_back(r);
    }
    // Serves the transfers for up to `wait_ms`; collects the finished ones.
    void Pump(int wait_ms) {
        int running = 0;
        curl_multi_perform(multi, &running);
        if (running > 0 && wait_ms > 0)
            curl_multi_poll(multi, nullptr, 0, wait_ms, nullptr);
        curl_multi_perform(multi, &running);
        int queued = 0;
        while (CURLMsg *m = curl_multi_info_read(multi, &queued)) {
            if (m->msg != CURLMSG_DONE)
                continue;
            Req *r = nullptr;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &r);
            long status = 0;
            curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
            bool ok = m->data.result == CURLE_OK && status == 200 &&
                      r->response.find("\"Failed\":[{") == std::string::npos;
            (ok ? done : failed) += static_cast<long>(r->n);
            curl_multi_remove_handle(multi, r->easy);
            curl_easy_cleanup(r->easy);
            curl_slist_free_all(r->headers);
            active.erase(std::find(active.begin(), active.end(), r));
            delete r;
        }
    }
};

// Consumer thread: ReceiveMessage long polls and DeleteMessageBatch until `stop`.
void SqsConsume(const std::string &queue_url, Times *times, std::atomic<bool> *stop) {
    std::string receive = nlohmann::json{{"QueueUrl", queue_url}, {"MaxNumberOfMessages", 10},
                                         {"WaitTimeSeconds", 1},
                                         {"MessageAttributeNames", {"ce-id"}}}.dump();
    while (!stop->load()) {
        std::string response;
        curl_slist *h = nullptr;
        CURL *e = SqsEasy(queue_url, "ReceiveMessage", receive, &response, &h);
        CURLcode rc = curl_easy_perform(e);
        int64_t t = NowNs();
        curl_easy_cleanup(e);
        curl_slist_free_all(h);
        if (rc != CURLE_OK)
            continue;
        nlohmann::json doc = nlohmann::json::parse(response, nullptr, false);
        if (doc.is_discarded() || !doc.contains("Messages"))
            continue;
        nlohmann::json del = nlohmann::json::array();
        for (const auto &m : doc["Messages"]) {
            if (m.contains("MessageAttributes") && m["MessageAttributes"].contains("ce-id"))
                times->Arrived(m["MessageAttributes"]["ce-id"]["StringValue"].get<std::string>(), t);
            del.push_back({{"Id", std::to_string(del.size())}, {"ReceiptHandle", m["ReceiptHandle"]}});
        }
        if (del.empty())
            continue;
        std::string body = nlohmann::json{{"QueueUrl", queue_url}, {"Entries", del}}.dump();
        std::string ignored;
        e = SqsEasy(queue_url, "DeleteMessageBatch", body, &ignored, &h);
        curl_easy_perform(e);
        curl_easy_cleanup(e);
        curl_slist_free_all(h);
    }
}
// --- end of the sqs kind's block

// ---------------------------------------------------------------------------------------------
// Redis Streams (hiredis, the library the relay encodes and parses with), redis kind
// ---------------------------------------------------------------------------------------------
redisContext *RedisConnect(const std::string &url) {
    int port = 6379;
    std::string host = UrlHostPort(url, &port);
    redisContext *c = redisConnect(host.c_str(), port);
    if (c == nullptr || c->err)
        Die(std::string("redis connect: ") + (c ? c->errstr : "out of memory"));
    return c;
}

// Appends (does not send) the XADD of the entry the relay sends for a message of the bench
// (src/brokers/redis/driver.cpp, RedisEntryFields).
void RedisAppendXadd(redisContext *c, const std::string &stream, const std::string &id,
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
    if (redisAppendCommandArgv(c, sizeof argv / sizeof argv[0], argv, nullptr) != REDIS_OK)
        Die("redis append failed");
}

// Waits for the next reply (sending what was appended first).
void RedisReadReply(redisContext *c) {
    void *reply = nullptr;
    if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr)
        Die(std::string("redis reply: ") + c->errstr);
    auto *r = static_cast<redisReply *>(reply);
    if (r->type == REDIS_REPLY_ERROR)
        Die(std::string("XADD: ") + r->str);
    freeReplyObject(r);
}

// Sends what was appended, then counts the replies already there into *answered: pipelined
// like the relay, so an fsync per XADD (appendfsync always) does not hold back the next one.
void RedisSendAndReadAvailable(redisContext *c, long *answered) {
    int done = 0;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK)
            Die(std::string("redis write: ") + c->errstr);
    struct pollfd p = {c->fd, POLLIN, 0};
    while (poll(&p, 1, 0) > 0) {
        if (redisBufferRead(c) != REDIS_OK)
            Die(std::string("redis read: ") + c->errstr);
        void *reply = nullptr;
        while (redisGetReplyFromReader(c, &reply) == REDIS_OK && reply != nullptr) {
            freeReplyObject(reply);
            (*answered)++;
        }
    }
}

// Consumer thread: XREAD BLOCK from the stream's end as of the start until `stop`, noting
// arrivals by ce_id.
void RedisConsume(const std::string &url, const std::string &stream, Times *times,
                  std::atomic<bool> *stop, std::atomic<bool> *ready) {
    redisContext *c = RedisConnect(url);
    std::string last = "0-0";
    redisReply *info =
        static_cast<redisReply *>(redisCommand(c, "XINFO STREAM %s", stream.c_str()));
    if (info != nullptr && info->type == REDIS_REPLY_ARRAY)
        for (size_t j = 0; j + 1 < info->elements; j += 2)
            if (std::strcmp(info->element[j]->str, "last-generated-id") == 0)
                last = info->element[j + 1]->str;
    freeReplyObject(info);
    ready->store(true);
    while (!stop->load()) {
        redisReply *r = static_cast<redisReply *>(redisCommand(
            c, "XREAD COUNT 1000 BLOCK 100 STREAMS %s %s", stream.c_str(), last.c_str()));
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
// --- end of the redis kind's block

// ---------------------------------------------------------------------------------------------
// The relay's producers: paced single-row transactions.
// ---------------------------------------------------------------------------------------------
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

std::string IdFor(long n) {
    char buf[64];
    snprintf(buf, sizeof buf, "direct-%ld-%lld", n, static_cast<long long>(NowNs()));
    return buf;
}

int Latency(const Options &o) {
    Times times;
    std::atomic<bool> stop{false}, ready{false};
    std::thread consumer;
    natsConnection *sub_nc = nullptr;
    natsSubscription *sub = nullptr;
    struct mosquitto *mqtt_sub = nullptr;  // mqtt kind
    std::vector<std::thread> sqs_consumers;
    if (o.kind == "mqtt") {
        mqtt_sub = MqttSubscribe(o.url, o.target, &times);
    } else if (o.kind == "sqs") {
        for (int i = 0; i < 4; i++)
            sqs_consumers.emplace_back(SqsConsume, o.url, &times, &stop);
    } else if (o.kind == "amqp" || o.kind == "redis") {
        consumer = o.kind == "amqp"
                       ? std::thread(AmqpConsume, o.url, o.target, &times, &stop, &ready)
                       : std::thread(RedisConsume, o.url, o.target, &times, &stop, &ready);
        while (!ready.load())
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } else {
        sub_nc = NatsConnect(o.url);
        if (natsConnection_Subscribe(&sub, sub_nc, o.target.c_str(), OnNatsMsg, &times) != NATS_OK)
            Die("nats subscribe failed");
        natsConnection_Flush(sub_nc);
    }
    long total = static_cast<long>(o.rate * o.duration);
    int64_t start = NowNs() + 100000000;
    if (o.mode == "relay") {
        std::atomic<long> next{0};
        std::vector<std::thread> producers;
        for (int i = 0; i < o.connections; i++)
            producers.emplace_back(RelayProducer, std::cref(o), i, start, &next, total, &times);
        for (auto &t : producers)
            t.join();
    } else if (o.kind == "sqs") {
        SqsSender sender;
        sender.queue_url = o.url;
        for (long n = 0; n < total; n++) {
            int64_t due = start + static_cast<int64_t>(n * 1e9 / o.rate);
            for (;;) {
                int64_t now = NowNs();
                if (now >= due)
                    break;
                sender.Pump(static_cast<int>(std::min<int64_t>((due - now) / 1000000, 1)));
            }
            std::string id = IdFor(n);
            if (static_cast<double>(due - start) / 1e9 >= o.warmup)
                times.Sent(id, NowNs());
            sender.Send({id}, {"{\"bench\": true}"});
            sender.Pump(0);
        }
        while (!sender.active.empty())
            sender.Pump(100);
    } else {
        amqp_connection_state_t c = nullptr;
        natsConnection *nc = nullptr;
        jsCtx *js = nullptr;
        struct mosquitto *mq = nullptr;  // mqtt kind
        redisContext *rc = nullptr;      // redis kind
        long answered = 0;
        uint64_t confirmed = 0;
        if (o.kind == "redis") {
            rc = RedisConnect(o.url);
        } else if (o.kind == "mqtt") {
            mqtt_connected.store(false);
            mq = MqttConnect(o.url, nullptr, nullptr);
        } else if (o.kind == "amqp") {
            c = AmqpConnect(o.url);
            amqp_confirm_select(c, 1);
            if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
                Die("confirm.select failed");
        } else {
            nc = NatsConnect(o.url);
            js = NatsJetStream(nc);
        }
        for (long n = 0; n < total; n++) {
            int64_t due = start + static_cast<int64_t>(n * 1e9 / o.rate);
            for (;;) {
                int64_t now = NowNs();
                if (now >= due)
                    break;
                if (c != nullptr)
                    AmqpReadConfirms(c, &confirmed, false);
                if (rc != nullptr) {  // its replies are read after each send: one sleep
                    std::this_thread::sleep_for(std::chrono::nanoseconds(due - now));
                    break;
                }
                std::this_thread::sleep_for(
                    std::chrono::nanoseconds(std::min<int64_t>(due - now, 200000)));
            }
            std::string id = IdFor(n);
            if (static_cast<double>(due - start) / 1e9 >= o.warmup)
                times.Sent(id, NowNs());
            if (rc != nullptr) {
                RedisAppendXadd(rc, o.target, id, "{\"bench\": true}");
                RedisSendAndReadAvailable(rc, &answered);
            } else if (mq != nullptr)
                MqttPublishOne(mq, o.target, id, "{\"bench\": true}");
            else if (c != nullptr)
                AmqpPublishOne(c, o.target, id, "{\"bench\": true}");
            else
                NatsPublishOne(js, o.target, id, "{\"bench\": true}");
        }
        if (rc != nullptr) {
            while (answered < total) {
                RedisReadReply(rc);
                answered++;
            }
            redisFree(rc);
        } else if (mq != nullptr) {
            while (mqtt_acked.load() < total)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            mosquitto_disconnect(mq);
            mosquitto_loop_stop(mq, false);
            mosquitto_destroy(mq);
        } else if (c != nullptr) {
            while (confirmed < static_cast<uint64_t>(total))
                AmqpReadConfirms(c, &confirmed, true);
            amqp_connection_close(c, AMQP_REPLY_SUCCESS);
            amqp_destroy_connection(c);
        } else {
            jsPubOptions po;
            jsPubOptions_Init(&po);
            po.MaxWait = 30000;
            js_PublishAsyncComplete(js, &po);
            jsCtx_Destroy(js);
            natsConnection_Destroy(nc);
        }
    }
    int64_t sent_end = NowNs();
    // Everything arrives within a few seconds, or is missing.
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
    if (consumer.joinable())
        consumer.join();
    if (mqtt_sub != nullptr) {
        mosquitto_disconnect(mqtt_sub);
        mosquitto_loop_stop(mqtt_sub, false);
        mosquitto_destroy(mqtt_sub);
    }
    for (auto &t : sqs_consumers)
        t.join();
    if (sub != nullptr) {
        natsSubscription_Unsubscribe(sub);
        natsSubscription_Destroy(sub);
        natsConnection_Destroy(sub_nc);
    }
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
        return lat.empty() ? 0.0 : lat[std::min(lat.size() - 1, static_cast<size_t>(p * lat.size()))];
    };
    double seconds = (sent_end - start) / 1e9;
    std::printf("sent=%zu received=%zu missing=%zu rate=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n",
                times.sent.size(), lat.size(), missing, total / std::max(seconds, 1e-9), q(0.5),
                q(0.99), lat.empty() ? 0.0 : lat.back());
    return missing == 0 ? 0 : 1;
}

int Publish(const Options &o) {
    std::string body = "{\"bench\": true, \"pad\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}";
    int64_t t0 = NowNs();
    if (o.kind == "mqtt") {  // mqtt kind
        struct mosquitto *m = MqttConnect(o.url, nullptr, nullptr);
        t0 = NowNs();
        for (long n = 0; n < o.count; n++) {
            while (n - mqtt_acked.load() >= o.window)
                std::this_thread::sleep_for(std::chrono::microseconds(50));
            MqttPublishOne(m, o.target, IdFor(n), body);
        }
        while (mqtt_acked.load() < o.count)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        mosquitto_disconnect(m);
        mosquitto_loop_stop(m, false);
        mosquitto_destroy(m);
    } else if (o.kind == "redis") {
        redisContext *c = RedisConnect(o.url);
        t0 = NowNs();
        long answered = 0;
        for (long n = 0; n < o.count; n++) {
            RedisAppendXadd(c, o.target, IdFor(n), body);
            // Replies are read when the window is full, so the pipeline stays W deep, as the
            // relay's does; redisGetReply sends what was appended first.
            while (n + 1 - answered >= o.window) {
                RedisReadReply(c);
                answered++;
            }
        }
        while (answered < o.count) {
            RedisReadReply(c);
            answered++;
        }
        redisFree(c);
    } else if (o.kind == "sqs") {
        SqsSender sender;
        sender.queue_url = o.url;
        size_t requests = static_cast<size_t>(std::max<long>(1, o.window / 10));
        long n = 0;
        while (n < o.count || !sender.active.empty()) {
            while (n < o.count && sender.active.size() < requests) {
                std::vector<std::string> ids, bodies;
                for (; ids.size() < 10 && n < o.count; n++) {
                    ids.push_back(IdFor(n));
                    bodies.push_back(SqsBenchPayload(n + 1));
                }
                sender.Send(ids, bodies);
            }
            sender.Pump(100);
        }
        if (sender.failed > 0)
            Die(std::to_string(sender.failed) + " messages failed");
    } else if (o.kind == "amqp") {
        amqp_connection_state_t c = AmqpConnect(o.url);
        amqp_confirm_select(c, 1);
        if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
            Die("confirm.select failed");
        uint64_t confirmed = 0;
        for (long n = 0; n < o.count; n++) {
            while (static_cast<long>(n - confirmed) >= o.window)
                AmqpReadConfirms(c, &confirmed, true);
            AmqpPublishOne(c, o.target, IdFor(n), body);
            if (n % 64 == 0)
                AmqpReadConfirms(c, &confirmed, false);
        }
        while (confirmed < static_cast<uint64_t>(o.count))
            AmqpReadConfirms(c, &confirmed, true);
        amqp_connection_close(c, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(c);
    } else {
        natsConnection *nc = NatsConnect(o.url);
        jsCtx *js = NatsJetStream(nc);
        for (long n = 0; n < o.count; n++) {
            while (n - nats_acked.load() - nats_failed.load() >= o.window)
                std::this_thread::sleep_for(std::chrono::microseconds(50));
            NatsPublishOne(js, o.target, IdFor(n), body);
        }
        while (nats_acked.load() + nats_failed.load() < o.count)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (nats_failed.load() > 0)
            Die(std::to_string(nats_failed.load()) + " publishes failed");
        jsCtx_Destroy(js);
        natsConnection_Destroy(nc);
    }
    double s = (NowNs() - t0) / 1e9;
    std::printf("count=%ld seconds=%.3f rate=%.0f\n", o.count, s, o.count / s);
    return 0;
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
