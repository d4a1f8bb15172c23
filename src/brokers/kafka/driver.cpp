// Kafka driver: one idempotent, acks=all librdkafka producer per destination.
//
// Threads: librdkafka runs its own threads; they never touch PostgreSQL. Its callbacks
// (delivery reports, errors, logs) are routed to the main queue and served only by Poll(),
// on the worker's thread, and only record into plain members. The main queue writes a byte to
// a pipe when it becomes non-empty, so the worker can sleep on that fd instead of polling.
#include "outbox/brokers/kafka/driver.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <librdkafka/rdkafka.h>

#include "outbox/broker_address.hpp"
#include "outbox/brokers/kafka/classify.hpp"
#include "outbox/brokers/kafka/record.hpp"
#include "outbox/brokers/kafka/window.hpp"
#include "outbox/clock.hpp"
#include "outbox/brokers/cloudevents.hpp"
#include "outbox/brokers/signals.hpp"

namespace outbox {

namespace {

// Defaults that favour latency and bounded retries; a destination's config may override them
// (the guarantee-bearing ones are refused at definition time and forced below anyway).
constexpr const char *kDefaults[][2] = {
    {"linger.ms", "1"},
    // A few quick retries inside librdkafka; after that the row's own backoff takes over and
    // the attempt is counted.
    {"message.send.max.retries", "3"},
    {"retry.backoff.ms", "100"},
    {"socket.keepalive.enable", "true"},
    // Nagle's algorithm holds small produce requests back until the previous one is acked
    // (40 ms with delayed acks): latency, and throughput once the pipeline waits on acks.
    {"socket.nagle.disable", "true"},
    // A broker that comes back is found within a second (librdkafka's default backs off to 10 s).
    {"reconnect.backoff.max.ms", "1000"},
};

// How long Submit or Poll waits for the cluster to say whether a topic exists: only after
// librdkafka reported the topic unknown (see TopicExistsNow).
constexpr int kTopicQueryMs = 2000;

// When the next messages are held in the driver (see Submit): from so many messages handed to
// librdkafka and not yet reported (below it, a message or a few per round trip: a producer
// committing a row at a time, every message goes out at once), and only while acknowledgements
// take so long (below it the broker thread spins for a short round trip at most, and holding
// would cost a fast drain its pipelining).
constexpr size_t kHoldFrom = 64;
constexpr int64_t kHoldAckMs = 10;

// What a message to a topic the cluster would not say anything about is told.
constexpr const char *kTopicNoAnswer =
    " (no broker answered whether the topic exists now; trying again later)";

bool IsUnknownTopic(rd_kafka_resp_err_t err) {
    return err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
           err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
}

std::string ErrorText(rd_kafka_resp_err_t err) {
    return std::string(rd_kafka_err2name(err)) + ": " + rd_kafka_err2str(err);
}

class KafkaDriver final : public Driver {
  public:
    KafkaDriver(std::string source, const KafkaDriverOptions &options)
        : source_(std::move(source)),
          max_in_flight_(options.max_in_flight),
          max_in_flight_bytes_(options.max_in_flight_bytes),
          window_(options.base_in_flight > 0 ? options.base_in_flight : options.max_in_flight,
                  options.max_in_flight) {}
    ~KafkaDriver() override;

    bool Init(const KafkaDriverOptions &options, std::string *error);

    void Submit(std::vector<Message> batch) override;
    void Poll(std::vector<Outcome> &out) override;
    size_t InFlight() const override { return in_flight_.size() + held_.size(); }
    size_t Capacity() const override {
        // The default window: wide while acknowledgements are fast (window.hpp) and the
        // messages in flight are light (see KafkaDriverOptions). A configured one is its base
        // and its width alike, and has no bound on bytes (0).
        size_t window = in_flight_bytes_ + held_bytes_ >= max_in_flight_bytes_
                            ? std::min(window_.Base(), max_in_flight_)
                            : window_.Width();
        return fatal_ || InFlight() >= window ? 0 : window - InFlight();
    }
    int WaitFd() const override { return pipe_[0]; }
    // While messages are in flight the worker comes back often enough to notice a stall.
    int64_t PollTimeoutMs() const override { return InFlight() == 0 ? -1 : 100; }
    void Abandon() override;
    void SetProbing(bool probing) override { probing_ = probing; }
    bool Broken() const override { return fatal_; }
    void TakeLog(std::vector<std::string> &lines) override {
        for (std::string &l : log_)
            lines.push_back(std::move(l));
        log_.clear();
    }

  private:
    struct Pending {
        int64_t id;
        int64_t lease_token;
        int64_t submitted_ms;  // monotonic
        size_t bytes;          // key, value and headers, for KafkaErrorHint
    };
    struct Report {
        uint64_t seq;
        rd_kafka_resp_err_t err;
        rd_kafka_msg_status_t status;
        int32_t partition;
        int64_t offset;
        std::string topic;  // only for an unknown topic (see TopicExistsNow)
    };
    enum class TopicAnswer { NotAsked, Exists, Missing, NoAnswer };

    static void OnDelivery(rd_kafka_t *, const rd_kafka_message_t *msg, void *opaque);
    static void OnError(rd_kafka_t *, int err, const char *reason, void *opaque);
    static void OnLog(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
    static int OnConnect(int fd, const struct sockaddr *address, int length, const char *broker,
                         void *opaque);
    void AddLog(std::string line);
    void PurgeIfStalled();
    void Produce(std::vector<Message> &batch);
    void ReleaseHeld();
    void HandBackHeld();
    std::string Explain(rd_kafka_resp_err_t err, size_t message_bytes) const;
    // The producer's fatal error (NO_ERROR if none) and its text, explained, in *error.
    rd_kafka_resp_err_t FatalError(size_t message_bytes, std::string *error) const;
    TopicAnswer TopicExistsNow(const std::string &topic, std::map<std::string, TopicAnswer> &asked);
    void KnowTopic(const std::string &topic);

    rd_kafka_t *rk_ = nullptr;
    rd_kafka_queue_t *main_queue_ = nullptr;
    // A handle for every topic produced to, made before its first message (see KnowTopic).
    std::map<std::string, rd_kafka_topic_t *> topics_;
    int pipe_[2] = {-1, -1};
    std::string source_;
    CloudEventsMode mode_ = CloudEventsMode::Binary;
    size_t max_in_flight_;
    size_t max_in_flight_bytes_;  // the default window's bound on in_flight_bytes_ + held_bytes_
    size_t in_flight_bytes_ = 0;  // Pending::bytes of in_flight_
    size_t held_bytes_ = 0;       // payloads and keys of held_
    KafkaWindow window_;          // the window's width (fixed when the config sets it)
    uint64_t next_seq_ = 1;
    std::map<uint64_t, Pending> in_flight_;  // by submission order: begin() is the oldest
    // Submitted but not handed to librdkafka yet (see Submit), in submission order.
    std::vector<Message> held_;
    int64_t held_since_ms_ = 0;  // when the oldest of held_ was submitted
    int64_t ack_ms_ = 0;         // how long the last acknowledged message took
    int64_t message_timeout_ms_ = 0;
    int64_t all_down_since_ms_ = 0;  // when librdkafka said all brokers are down; 0 = not since
    int64_t purged_ms_ = 0;          // the last purge; its reports may take a few polls
    // librdkafka's latest error (error_cb) since the last delivery: what a purged message
    // reports instead of "_PURGE_QUEUE" (e.g. a failed SASL authentication).
    std::string last_broker_error_;
    size_t batch_size_ = 0;           // batch.size, for KafkaErrorHint
    std::string sasl_mechanism_;      // sasl.mechanisms, for KafkaErrorHint
    bool probing_ = false;            // one probe in flight: held until a broker is back
    std::vector<Report> reports_;     // delivery reports recorded by OnDelivery
    std::vector<Outcome> immediate_;  // messages librdkafka refused in Submit
    std::vector<std::string> log_;
    bool fatal_ = false;
    bool record_failed_ = false;  // a callback could not record (out of memory)
    // outbox.broker_allowed_networks, checked for every connection librdkafka makes (OnConnect,
    // on its broker threads), and the last refusal, for the log.
    BrokerGuard guard_;
    std::mutex refusal_mu_;
    std::string refusal_;
};

bool KafkaDriver::Init(const KafkaDriverOptions &options, std::string *error) {
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    auto set = [&](const std::string &key, const std::string &value) {
        if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), errstr, sizeof errstr) ==
            RD_KAFKA_CONF_OK)
            return true;
        *error = "librdkafka refused \"" + key + "\"";
        if (!IsSecretSetting(key))
            *error += std::string(": ") + errstr;
        return false;
    };
    auto user_sets = [&](const char *key) {
        return std::any_of(options.config.properties.begin(), options.config.properties.end(),
                           [&](const auto &p) { return p.first == key; });
    };

    mode_ = options.config.cloudevents;
    if (!guard_.Set(options.address_rule, error) ||
        !guard_.CheckKafkaSideHosts(options.config.properties, error)) {
        rd_kafka_conf_destroy(conf);
        return false;
    }
    bool ok = set("client.id", options.client_id);
    for (const auto &d : kDefaults)
        ok = ok && set(d[0], d[1]);
    for (const auto &[key, value] : options.config.properties)
        ok = ok && set(key, value);
    // A delivery must be decided before the lease lapses, or another worker could take the
    // row over while librdkafka still retries it.
    int64_t timeout_cap = std::max<int64_t>(1000, options.lease_timeout_ms / 2);
    message_timeout_ms_ = timeout_cap;
    if (!user_sets("message.timeout.ms") && !user_sets("delivery.timeout.ms"))
        ok = ok && set("message.timeout.ms", std::to_string(timeout_cap));
    else {
        size_t size = sizeof errstr;
        if (rd_kafka_conf_get(conf, "message.timeout.ms", errstr, &size) == RD_KAFKA_CONF_OK &&
            std::atoll(errstr) > timeout_cap) {
            AddLog("message.timeout.ms lowered to " + std::to_string(timeout_cap) +
                   " to stay within outbox.lease_timeout");
            ok = ok && set("message.timeout.ms", std::to_string(timeout_cap));
        } else if (size <= sizeof errstr) {
            message_timeout_ms_ = std::atoll(errstr);
        }
    }
    // A topic the broker does not know is reported (UNKNOWN_TOPIC_OR_PART: dead) only after
    // topic.metadata.propagation.max.ms (default 30 s); a message that times out first is an
    // outage and would be deferred for ever. Keep it below message.timeout.ms.
    int64_t propagation_cap = std::min<int64_t>(30000, message_timeout_ms_ / 2);
    if (!user_sets("topic.metadata.propagation.max.ms")) {
        ok = ok && set("topic.metadata.propagation.max.ms", std::to_string(propagation_cap));
    } else {
        size_t size = sizeof errstr;
        if (rd_kafka_conf_get(conf, "topic.metadata.propagation.max.ms", errstr, &size) ==
                RD_KAFKA_CONF_OK &&
            std::atoll(errstr) > propagation_cap) {
            AddLog("topic.metadata.propagation.max.ms lowered to " +
                   std::to_string(propagation_cap) + " to stay below message.timeout.ms");
            ok = ok && set("topic.metadata.propagation.max.ms", std::to_string(propagation_cap));
        }
    }
    {
        size_t size = sizeof errstr;
        if (rd_kafka_conf_get(conf, "batch.size", errstr, &size) == RD_KAFKA_CONF_OK)
            batch_size_ = static_cast<size_t>(std::atoll(errstr));
        size = sizeof errstr;
        if (rd_kafka_conf_get(conf, "sasl.mechanisms", errstr, &size) == RD_KAFKA_CONF_OK &&
            (user_sets("sasl.mechanisms") || user_sets("sasl.mechanism")))
            sasl_mechanism_ = errstr;
    }
    // The guarantees: idempotent, acknowledged by all in-sync replicas.
    ok = ok && set("enable.idempotence", "true") && set("acks", "all") && set("log.queue", "true");
    if (!ok) {
        rd_kafka_conf_destroy(conf);
        return false;
    }
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_dr_msg_cb(conf, OnDelivery);
    rd_kafka_conf_set_error_cb(conf, OnError);
    rd_kafka_conf_set_log_cb(conf, OnLog);
    if (guard_.guarded())
        rd_kafka_conf_set_connect_cb(conf, OnConnect);

    if (pipe2(pipe_, O_NONBLOCK | O_CLOEXEC) != 0) {
        *error = std::string("could not create a pipe: ") + strerror(errno);
        rd_kafka_conf_destroy(conf);
        return false;
    }
    {
        SignalsBlocked blocked;
        rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    }
    if (rk_ == nullptr) {
        *error = std::string("could not create the Kafka producer: ") + errstr;
        rd_kafka_conf_destroy(conf);  // not taken over on failure
        return false;
    }
    rd_kafka_set_log_queue(rk_, nullptr);  // logs to the main queue, served by Poll
    main_queue_ = rd_kafka_queue_get_main(rk_);
    rd_kafka_queue_io_event_enable(main_queue_, pipe_[1], "1", 1);
    // The destination's default topic is looked up now, not when its first message waits for it.
    if (!options.config.default_topic.empty())
        KnowTopic(options.config.default_topic);
    return true;
}

KafkaDriver::~KafkaDriver() {
    if (rk_) {
        // Nothing in flight can be reported to anyone any more: drop it and stop the threads.
        rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT |
                                RD_KAFKA_PURGE_F_NON_BLOCKING);
        rd_kafka_queue_io_event_enable(main_queue_, -1, nullptr, 0);
        rd_kafka_queue_destroy(main_queue_);
        for (const auto &[name, rkt] : topics_)
            rd_kafka_topic_destroy(rkt);
        rd_kafka_poll(rk_, 0);
        rd_kafka_destroy(rk_);
    }
    for (int fd : pipe_)
        if (fd >= 0)
            close(fd);
}

// librdkafka's text for an error, with what it means where that text alone misleads.
std::string KafkaDriver::Explain(rd_kafka_resp_err_t err, size_t message_bytes) const {
    KafkaErrorContext c;
    c.err = err;
    c.message_bytes = message_bytes;
    c.batch_size = batch_size_;
    c.sasl_mechanism = sasl_mechanism_;
    c.librdkafka_version = rd_kafka_version();
    std::string hint = KafkaErrorHint(c);
    return hint.empty() ? std::string() : " " + hint;
}

rd_kafka_resp_err_t KafkaDriver::FatalError(size_t message_bytes, std::string *error) const {
    char text[512];
    rd_kafka_resp_err_t fatal = rd_kafka_fatal_error(rk_, text, sizeof text);
    if (fatal)
        *error =
            std::string(rd_kafka_err2name(fatal)) + ": " + text + Explain(fatal, message_bytes);
    return fatal;
}

// "Unknown topic" is permanent only if the cluster still says so when asked afresh. librdkafka
// fails a message at once while the metadata it last had said the topic was missing (it asks
// again about once a second), and a broker can answer from metadata older than a topic created
// a moment ago: a DBA who creates the topic and requeues at once must get the messages
// delivered, not dead-lettered again. The answer also updates librdkafka's view of the topic.
// Asked once per topic per Submit or Poll (`asked`); brokers that do not answer cost a call
// kTopicQueryMs once (well below the supervisor's answer timeout).
KafkaDriver::TopicAnswer KafkaDriver::TopicExistsNow(const std::string &topic,
                                                     std::map<std::string, TopicAnswer> &asked) {
    auto found = asked.find(topic);
    if (found != asked.end())
        return found->second;
    // Brokers that did not answer for one topic are not waited for again in the same call.
    if (std::any_of(asked.begin(), asked.end(),
                    [](const auto &a) { return a.second == TopicAnswer::NoAnswer; }))
        return TopicAnswer::NoAnswer;
    TopicAnswer answer = TopicAnswer::NoAnswer;
    if (rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk_, topic.c_str(), nullptr)) {
        const rd_kafka_metadata_t *md = nullptr;
        if (rd_kafka_metadata(rk_, 0, rkt, &md, kTopicQueryMs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            md->topic_cnt == 1) {
            const rd_kafka_metadata_topic_t &t = md->topics[0];
            if (t.err == RD_KAFKA_RESP_ERR_NO_ERROR && t.partition_cnt > 0)
                answer = TopicAnswer::Exists;
            else if (IsUnknownTopic(t.err))
                answer = TopicAnswer::Missing;
        }
        if (md != nullptr)
            rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
    }
    asked.emplace(topic, answer);
    return answer;
}

// A topic librdkafka has no handle for yet is looked up now. rd_kafka_producev() creates the
// handle it needs without asking the cluster about the topic: its first messages would wait in
// the unassigned queue until librdkafka's one-second timer notices the unknown topic (up to a
// second). rd_kafka_topic_new() sends the metadata request at once. The handle is kept (it keeps
// librdkafka's topic) until the producer goes.
void KafkaDriver::KnowTopic(const std::string &topic) {
    if (topics_.count(topic) != 0)
        return;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk_, topic.c_str(), nullptr);
    if (rkt == nullptr)
        return;  // an invalid name: rd_kafka_producev() reports it for the message
    try {
        topics_.emplace(topic, rkt);
    } catch (...) {
        rd_kafka_topic_destroy(rkt);
        throw;
    }
}

void KafkaDriver::AddLog(std::string line) {
    // Consecutive repeats (a broker that stays down) are logged once.
    if (!log_.empty() && log_.back() == line)
        return;
    log_.push_back(std::move(line));
}

void KafkaDriver::OnDelivery(rd_kafka_t *, const rd_kafka_message_t *msg, void *opaque) {
    auto *self = static_cast<KafkaDriver *>(opaque);
    try {
        self->reports_.push_back(
            Report{reinterpret_cast<uintptr_t>(msg->_private), msg->err,
                   rd_kafka_message_status(msg), msg->partition, msg->offset,
                   IsUnknownTopic(msg->err) ? rd_kafka_topic_name(msg->rkt) : std::string()});
    } catch (...) {
        self->record_failed_ = true;
    }
}

void KafkaDriver::OnError(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    auto *self = static_cast<KafkaDriver *>(opaque);
    try {
        if (err == RD_KAFKA_RESP_ERR__FATAL) {
            char fatal[512];
            rd_kafka_resp_err_t code = rd_kafka_fatal_error(rk, fatal, sizeof fatal);
            self->fatal_ = true;
            self->AddLog(std::string("fatal producer error ") + rd_kafka_err2name(code) + ": " +
                         fatal + "; the producer will be rebuilt");
            return;
        }
        if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
            self->all_down_since_ms_ = MonotonicMs();
        std::string line = std::string(rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err))) +
                           ": " + reason + self->Explain(static_cast<rd_kafka_resp_err_t>(err), 0);
        // "all brokers are down" says less than the error that brought them down.
        if (err != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || self->last_broker_error_.empty())
            self->last_broker_error_ = line.substr(0, 600);
        self->AddLog(std::move(line));
    } catch (...) {
        self->record_failed_ = true;
    }
}

void KafkaDriver::OnLog(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    auto *self = static_cast<KafkaDriver *>(rd_kafka_opaque(rk));
    if (level > 4)
        return;  // warnings and worse only (syslog levels)
    try {
        self->AddLog(std::string(fac) + ": " + buf);
    } catch (...) {
        self->record_failed_ = true;
    }
}

// On a broker thread of librdkafka's: the bootstrap brokers and every broker the cluster
// advertises pass through here.
int KafkaDriver::OnConnect(int fd, const struct sockaddr *address, int length, const char *broker,
                           void *opaque) {
    auto *self = static_cast<KafkaDriver *>(opaque);
    try {
        std::string why;
        int rc = self->guard_.Connect(fd, address, unsigned(length), &why);
        if (rc == EACCES) {
            std::lock_guard<std::mutex> lock(self->refusal_mu_);
            self->refusal_ = std::string("not connecting to ") + broker + ": " + why;
        }
        return rc;
    } catch (...) {
        return ENOMEM;
    }
}

// A batch goes to librdkafka at once unless many messages are out already and acknowledgements
// are slow (kHoldFrom, kHoldAckMs); then it waits here until those are reported. With the
// idempotent producer librdkafka sends a partition's next request only once fewer than five of its
// messages are in flight, but it sets its broker thread's next wake-up from linger.ms before it
// checks that: while a partition's request waits for its acknowledgement and more messages wait
// behind it, the thread wakes up at once, again and again (librdkafka 2.0.2,
// rd_kafka_toppar_producer_serve). With acknowledgements taking tens of milliseconds that was a
// core spinning for the whole drain. Held here, the messages go out when the previous ones are
// reported, which is when librdkafka could send them anyway, and in requests as large.
void KafkaDriver::Submit(std::vector<Message> batch) {
    if (batch.empty())
        return;
    if (held_.empty() && (in_flight_.size() < kHoldFrom || ack_ms_ < kHoldAckMs)) {
        Produce(batch);
        return;
    }
    if (held_.empty())
        held_since_ms_ = MonotonicMs();
    held_.reserve(held_.size() + batch.size());
    for (Message &m : batch) {
        held_bytes_ += m.payload.size() + (m.key ? m.key->size() : 0);
        held_.push_back(std::move(m));
    }
    ReleaseHeld();  // the ones out may have been reported meanwhile
}

// Hands the held messages to librdkafka once few enough are out. Not held for longer than a
// quarter of message.timeout.ms, so that a message's delivery is still decided well within its
// lease (see Init) when the ones before it take that long.
void KafkaDriver::ReleaseHeld() {
    if (held_.empty() ||
        (in_flight_.size() >= kHoldFrom &&
         MonotonicMs() - held_since_ms_ < std::max<int64_t>(100, message_timeout_ms_ / 4)))
        return;
    std::vector<Message> held;
    held.swap(held_);
    held_bytes_ = 0;
    Produce(held);
}

// Held messages were never sent: they come back as deferred with the messages in flight that
// are purged (see PurgeIfStalled and Abandon).
void KafkaDriver::HandBackHeld() {
    for (const Message &m : held_)
        immediate_.push_back(Outcome{m.id, m.lease_token, OutcomeKind::Defer,
                                     "not sent: handed back with the messages in flight", -1});
    held_.clear();
    held_bytes_ = 0;
}

// A batch is prepared whole, then produced in one tight loop (brokers/kafka/record.hpp says why).
void KafkaDriver::Produce(std::vector<Message> &batch) {
    std::vector<std::pair<Message *, ReadyRecord>> ready;
    ready.reserve(batch.size());
    for (Message &m : batch) {
        if (m.topic.empty()) {
            immediate_.push_back(
                Outcome{m.id, m.lease_token, OutcomeKind::Dead, "message has no topic", -1});
            continue;
        }
        KnowTopic(m.topic);
        ready.emplace_back(&m, MakeReadyRecord(m, source_, mode_));
    }

    std::map<std::string, TopicAnswer> asked;
    for (auto &[message, record] : ready) {
        Message &m = *message;
        ReadyRecord &p = record;
        auto refuse = [&](OutcomeKind kind, std::string error) {
            immediate_.push_back(Outcome{m.id, m.lease_token, kind, std::move(error), -1});
        };
        uint64_t seq = next_seq_++;
        auto produce = [&] { return p.Produce(rk_, m, reinterpret_cast<void *>(seq)); };
        rd_kafka_resp_err_t err = produce();
        // librdkafka last saw the topic missing: produce again if the cluster knows it now.
        TopicAnswer answer = TopicAnswer::NotAsked;
        if (err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC) {
            answer = TopicExistsNow(m.topic, asked);
            if (answer == TopicAnswer::Exists)
                err = produce();
        }
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            std::string fatal_error;
            rd_kafka_resp_err_t fatal = err == RD_KAFKA_RESP_ERR__FATAL
                                            ? FatalError(p.bytes, &fatal_error)
                                            : RD_KAFKA_RESP_ERR_NO_ERROR;
            if (fatal) {
                // The producer failed before this message was queued (its InitProducerId was
                // refused between the driver's opening and this produce, and OnError has not
                // run yet): the outcome of the messages librdkafka purged for it, not a retry.
                fatal_ = true;
                refuse(ClassifyKafkaFatal(fatal), std::move(fatal_error));
            } else if (answer == TopicAnswer::NoAnswer)
                refuse(OutcomeKind::Defer, ErrorText(err) + kTopicNoAnswer);
            else
                refuse(ClassifyKafkaResult(err, RD_KAFKA_MSG_STATUS_NOT_PERSISTED),
                       ErrorText(err) + Explain(err, p.bytes));
            continue;
        }
        in_flight_.emplace(seq, Pending{m.id, m.lease_token, MonotonicMs(), p.bytes});
        in_flight_bytes_ += p.bytes;
    }
}

void KafkaDriver::Poll(std::vector<Outcome> &out) {
    std::map<std::string, TopicAnswer> asked;
    // Drain the pipe first: an event queued after this point writes to it again.
    char buf[256];
    while (read(pipe_[0], buf, sizeof buf) > 0) {
    }
    rd_kafka_poll(rk_, 0);
    PurgeIfStalled();
    rd_kafka_poll(rk_, 0);
    {
        std::lock_guard<std::mutex> lock(refusal_mu_);
        if (!refusal_.empty())
            AddLog(std::move(refusal_));
        refusal_.clear();
    }

    int64_t now = MonotonicMs();
    for (const Report &r : reports_) {
        auto it = in_flight_.find(r.seq);
        if (it == in_flight_.end())
            continue;
        Outcome o{
            it->second.id, it->second.lease_token, ClassifyKafkaResult(r.err, r.status), {}, -1};
        o.partition = r.partition;
        o.offset = r.offset;
        if (o.kind == OutcomeKind::Delivered && r.offset < 0) {
            // Acknowledged as a duplicate of an earlier produce (DUPLICATE_SEQUENCE_NUMBER):
            // librdkafka reports success but no offset says where the message is. A broker
            // whose idempotence state went wrong (seen with librdkafka's mock cluster after an
            // epoch bump) acks messages it never stored, so this is not taken as proof of
            // delivery: the message is sent again (a duplicate at worst).
            o.kind = OutcomeKind::Retry;
            o.error = "acknowledged as a duplicate without an offset; delivering again";
        }
        // Unknown to the broker that answered, or to librdkafka's last metadata: dead only if
        // the cluster says so now (see TopicExistsNow).
        TopicAnswer answer =
            IsUnknownTopic(r.err) ? TopicExistsNow(r.topic, asked) : TopicAnswer::NotAsked;
        if (answer == TopicAnswer::Exists)
            o.kind = OutcomeKind::Retry;
        else if (answer == TopicAnswer::NoAnswer)
            o.kind = OutcomeKind::Defer;
        if (o.kind == OutcomeKind::Delivered) {
            ack_ms_ = now - it->second.submitted_ms;
            window_.Acked(ack_ms_);
            all_down_since_ms_ = 0;
            last_broker_error_.clear();
        }
        // Purged by outbox (see PurgeIfStalled and Abandon: nothing answered in time), or by
        // librdkafka after a fatal error (the queued messages, never sent).
        bool purged =
            r.err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || r.err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
        // A message that timed out says less than the broker error behind it (an outage probe
        // during a failed SASL authentication times out, for instance).
        bool timed_out = r.err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT ||
                         r.err == RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE;
        std::string fatal_error;
        rd_kafka_resp_err_t fatal =
            purged ? FatalError(it->second.bytes, &fatal_error) : RD_KAFKA_RESP_ERR_NO_ERROR;
        if (purged)
            o.kind = fatal ? ClassifyKafkaFatal(fatal) : OutcomeKind::Defer;
        if (o.kind != OutcomeKind::Delivered)
            o.error = fatal ? fatal_error
                      : (purged || timed_out) && !last_broker_error_.empty()
                          ? std::string(timed_out ? "timed out" : "not acknowledged") +
                                "; last broker error " + last_broker_error_
                      : answer == TopicAnswer::Exists
                          ? ErrorText(r.err) + " (the topic exists now; sending again)"
                      : answer == TopicAnswer::NoAnswer ? ErrorText(r.err) + kTopicNoAnswer
                      : r.err != RD_KAFKA_RESP_ERR_NO_ERROR
                          ? ErrorText(r.err) + Explain(r.err, it->second.bytes)
                          : "delivery not confirmed (status POSSIBLY_PERSISTED)";
        if (o.kind != OutcomeKind::Delivered)
            window_.Failed();
        out.push_back(std::move(o));
        in_flight_bytes_ -= it->second.bytes;
        in_flight_.erase(it);
    }
    reports_.clear();
    ReleaseHeld();
    for (Outcome &o : immediate_)
        out.push_back(std::move(o));
    immediate_.clear();
    if (record_failed_) {
        // A report was lost: the affected rows are found again when their leases lapse.
        AddLog("out of memory while recording delivery reports");
        record_failed_ = false;
    }
}

// librdkafka keeps retrying while no broker is reachable, and with the idempotent producer it
// does not always time messages out then. The rows' leases must not lapse meanwhile (another
// worker would deliver them too), so the driver gives up on its own: when all brokers have been
// down for a second, or when a message has waited past message.timeout.ms, everything in flight
// is purged and comes back as deferred (no attempt spent). A probe is not purged for the
// outage: librdkafka sends it the moment a broker is back, which ends the outage at once.
// The purge's reports can take a few polls to arrive; it is not repeated meanwhile.
void KafkaDriver::PurgeIfStalled() {
    int64_t now = MonotonicMs();
    if (in_flight_.empty() || now - purged_ms_ < 1000)
        return;
    int64_t oldest = in_flight_.begin()->second.submitted_ms;
    bool down = !probing_ && all_down_since_ms_ != 0 && now - all_down_since_ms_ >= 1000 &&
                now - oldest >= 1000;
    bool overdue = now - oldest > message_timeout_ms_ + 1000;
    if (!down && !overdue)
        return;
    purged_ms_ = now;
    AddLog(down ? "all brokers down: handing back the messages in flight"
                : "no delivery report within message.timeout.ms: handing back the messages in "
                  "flight");
    HandBackHeld();
    rd_kafka_purge(
        rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT | RD_KAFKA_PURGE_F_NON_BLOCKING);
}

void KafkaDriver::Abandon() {
    // The purge reports arrive through Poll as Defer; at shutdown the dispatcher hands those
    // rows back.
    HandBackHeld();
    rd_kafka_purge(
        rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT | RD_KAFKA_PURGE_F_NON_BLOCKING);
}

}  // namespace

std::unique_ptr<Driver> MakeKafkaDriver(const KafkaDriverOptions &options, std::string *error) {
    auto driver = std::make_unique<KafkaDriver>(options.source, options);
    if (!driver->Init(options, error))
        return nullptr;
    return driver;
}

}  // namespace outbox
