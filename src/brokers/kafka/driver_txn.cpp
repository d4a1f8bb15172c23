// Kafka driver for "delivery": "exactly_once": a transactional producer, one transaction per
// batch (one claim, one lease token), one transaction open at a time.
//
// Each transaction carries the batch's messages and its marker: a consumer-group offset for
// partition 0 of the destination's topic, group = the transactional.id, offset = the batch's
// sequence number, metadata = its lease token (exactly_once.hpp). Kafka makes the offset
// visible only if the transaction commits, so on start, after init_transactions has fenced the
// predecessor and aborted what it left open, rd_kafka_committed() tells which batch committed
// last; that is the driver's first outcome (OutcomeKind::Marker), and it takes no batch before.
//
// Threads: the transactional calls block (init, commit, abort wait for the coordinator), and one
// outbox-driver process serves every destination of its worker, so they run on a thread of the
// driver's own. Poll, on the helper's thread, only takes what that thread finished (under a
// mutex) and never blocks. librdkafka's callbacks are served by the driver's thread alone.
//
// Adoption (KafkaDriverOptions::adopt, exactly_once.hpp): the transactional.id is another worker
// index's. The driver fences it and reads its marker, once (a few tries within the call
// timeout), and stops: the Marker outcome, or Broken. It must not retry for long: that worker,
// if it is alive after all, restarts its producer and fences this one in turn.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <librdkafka/rdkafka.h>

#include "outbox/broker_address.hpp"
#include "outbox/brokers/cloudevents.hpp"
#include "outbox/brokers/kafka/classify.hpp"
#include "outbox/brokers/kafka/driver.hpp"
#include "outbox/brokers/kafka/record.hpp"
#include "outbox/brokers/signals.hpp"
#include "outbox/exactly_once.hpp"

namespace outbox {

namespace {

std::string ErrorText(rd_kafka_resp_err_t err) {
    return std::string(rd_kafka_err2name(err)) + ": " + rd_kafka_err2str(err);
}

class KafkaTxnDriver final : public Driver {
  public:
    explicit KafkaTxnDriver(std::string source) : source_(std::move(source)) {}
    ~KafkaTxnDriver() override;

    bool Init(const KafkaDriverOptions &options, std::string *error);

    void Submit(std::vector<Message> batch) override;
    void Poll(std::vector<Outcome> &out) override;
    size_t InFlight() const override {
        std::lock_guard<std::mutex> lock(mu_);
        return in_flight_;
    }
    // One batch at a time, and none before the marker was read.
    size_t Capacity() const override {
        std::lock_guard<std::mutex> lock(mu_);
        return adopt_ || !marker_told_ || fatal_ || in_flight_ > 0 ? 0 : max_in_flight_;
    }
    int WaitFd() const override { return pipe_[0]; }
    int64_t PollTimeoutMs() const override { return -1; }
    void Abandon() override;
    bool Broken() const override {
        std::lock_guard<std::mutex> lock(mu_);
        return fatal_;
    }
    void TakeLog(std::vector<std::string> &lines) override {
        std::lock_guard<std::mutex> lock(mu_);
        for (std::string &l : log_)
            lines.push_back(std::move(l));
        log_.clear();
    }

  private:
    struct Report {
        rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
        rd_kafka_msg_status_t status = RD_KAFKA_MSG_STATUS_NOT_PERSISTED;
        int32_t partition = -1;
        int64_t offset = -1;
        bool reported = false;
    };

    static void OnDelivery(rd_kafka_t *, const rd_kafka_message_t *msg, void *opaque);
    static void OnError(rd_kafka_t *, int err, const char *reason, void *opaque);
    static void OnLog(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
    static int OnConnect(int fd, const struct sockaddr *address, int length, const char *broker,
                         void *opaque);
    void Log(std::string line);
    void Finish(std::vector<Outcome> outcomes, bool fatal = false);
    void Run();
    bool Start();
    bool ReadMarker(int64_t *token);
    void Deliver(std::vector<Message> &batch);
    bool ProduceAll(std::vector<Message> &batch, std::vector<Outcome> &out);
    bool AllAcknowledged(std::vector<Message> &batch, std::vector<Outcome> &out);
    // Ends the open transaction with an abort; false when its end is not known (fatal).
    bool AbortOpen();
    bool Stopping() {
        std::lock_guard<std::mutex> lock(mu_);
        return stop_;
    }
    // Waits up to `ms` for a batch or the stop, serving librdkafka meanwhile.
    void Pause(int ms);

    rd_kafka_t *rk_ = nullptr;
    std::string source_;
    CloudEventsMode mode_ = CloudEventsMode::Binary;
    std::string transactional_id_, marker_topic_;
    // What the marker's consumer needs of the config: every librdkafka property (the security
    // settings above all); producer-only ones are ignored by a consumer.
    std::vector<std::pair<std::string, std::string>> properties_;
    int64_t call_timeout_ms_ = 10000;
    int64_t sequence_ = 0;  // the last committed batch's number (the marker's offset)
    size_t max_in_flight_ = 1000;
    bool adopt_ = false;
    BrokerGuard guard_;
    int pipe_[2] = {-1, -1};
    std::thread thread_;

    // Between the threads (mu_):
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::vector<Message>> queue_;  // batches not begun yet
    size_t in_flight_ = 0;                    // messages submitted and not returned by Poll
    std::vector<Outcome> done_;               // outcomes for Poll
    std::vector<std::string> log_;
    bool marker_told_ = false;  // the Marker outcome was handed to Poll
    bool fatal_ = false;
    bool stop_ = false;
    bool abandon_ = false;

    // The driver's thread only:
    std::vector<Report> reports_;  // by the message's index in the batch (its opaque)
    std::string last_error_;       // librdkafka's latest error: what an outage says
};

bool KafkaTxnDriver::Init(const KafkaDriverOptions &options, std::string *error) {
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
    mode_ = options.config.cloudevents;
    transactional_id_ = options.transactional_id;
    marker_topic_ = options.config.default_topic;
    properties_ = options.config.properties;
    max_in_flight_ = std::max<size_t>(1, options.max_in_flight);
    adopt_ = options.adopt;
    if (transactional_id_.empty() || marker_topic_.empty()) {
        *error = "an exactly-once destination needs a transactional.id and a topic";
        rd_kafka_conf_destroy(conf);
        return false;
    }
    if (!guard_.Set(options.address_rule, error) ||
        !guard_.CheckKafkaSideHosts(options.config.properties, error)) {
        rd_kafka_conf_destroy(conf);
        return false;
    }
    // A transaction must be decided well within the batch's lease: the coordinator aborts one
    // left open longer (a worker that froze), and its messages time out before that.
    int64_t txn_timeout = std::max<int64_t>(2000, options.lease_timeout_ms / 2);
    call_timeout_ms_ = std::max<int64_t>(1000, std::min<int64_t>(10000, txn_timeout / 2));
    bool ok = set("client.id", options.client_id) && set("linger.ms", "1") &&
              set("socket.nagle.disable", "true") && set("reconnect.backoff.max.ms", "1000");
    for (const auto &[key, value] : options.config.properties)
        ok = ok && set(key, value);
    ok = ok && set("enable.idempotence", "true") && set("acks", "all") &&
         set("log.queue", "true") && set("transactional.id", transactional_id_) &&
         set("transaction.timeout.ms", std::to_string(txn_timeout)) &&
         set("message.timeout.ms", std::to_string(txn_timeout));
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
    SignalsBlocked blocked;  // librdkafka's threads and ours take no signal of the helper's
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk_ == nullptr) {
        *error = std::string("could not create the Kafka producer: ") + errstr;
        rd_kafka_conf_destroy(conf);
        return false;
    }
    rd_kafka_set_log_queue(rk_, nullptr);  // logs to the main queue, served by our thread
    thread_ = std::thread([this] { Run(); });
    return true;
}

KafkaTxnDriver::~KafkaTxnDriver() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
        thread_.join();
    if (rk_) {
        // A transaction still open is aborted by the next producer of this transactional.id.
        rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT |
                                RD_KAFKA_PURGE_F_NON_BLOCKING);
        rd_kafka_poll(rk_, 0);
        rd_kafka_destroy(rk_);
    }
    for (int fd : pipe_)
        if (fd >= 0)
            close(fd);
}

void KafkaTxnDriver::OnDelivery(rd_kafka_t *, const rd_kafka_message_t *msg, void *opaque) {
    auto *self = static_cast<KafkaTxnDriver *>(opaque);
    size_t index = reinterpret_cast<uintptr_t>(msg->_private);
    if (index >= self->reports_.size())
        return;
    Report &r = self->reports_[index];
    r.err = msg->err;
    r.status = rd_kafka_message_status(msg);
    r.partition = msg->partition;
    r.offset = msg->offset;
    r.reported = true;
}

void KafkaTxnDriver::OnError(rd_kafka_t *, int err, const char *reason, void *opaque) {
    auto *self = static_cast<KafkaTxnDriver *>(opaque);
    try {
        std::string line =
            std::string(rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err))) + ": " + reason;
        self->last_error_ = line.substr(0, 600);
        self->Log(std::move(line));
    } catch (...) {
    }
}

void KafkaTxnDriver::OnLog(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    if (level > 4)
        return;
    auto *self = static_cast<KafkaTxnDriver *>(rd_kafka_opaque(rk));
    try {
        self->Log(std::string(fac) + ": " + buf);
    } catch (...) {
    }
}

int KafkaTxnDriver::OnConnect(int fd, const struct sockaddr *address, int length,
                              const char *broker, void *opaque) {
    auto *self = static_cast<KafkaTxnDriver *>(opaque);
    try {
        std::string why;
        int rc = self->guard_.Connect(fd, address, unsigned(length), &why);
        if (rc == EACCES)
            self->Log(std::string("not connecting to ") + broker + ": " + why);
        return rc;
    } catch (...) {
        return ENOMEM;
    }
}

void KafkaTxnDriver::Log(std::string line) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!log_.empty() && log_.back() == line)
        return;
    if (log_.size() < 1000)
        log_.push_back(std::move(line));
}

// Hands a batch's outcomes to Poll and wakes the helper.
void KafkaTxnDriver::Finish(std::vector<Outcome> outcomes, bool fatal) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (Outcome &o : outcomes)
            done_.push_back(std::move(o));
        if (fatal)
            fatal_ = true;
    }
    char one = 1;
    ssize_t written = write(pipe_[1], &one, 1);
    (void)written;  // a full pipe wakes the helper already
}

void KafkaTxnDriver::Pause(int ms) {
    rd_kafka_poll(rk_, 0);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(ms),
                 [this] { return stop_ || (!queue_.empty() && marker_told_); });
}

// The last committed batch's token, from the marker; false while the cluster does not answer.
bool KafkaTxnDriver::ReadMarker(int64_t *token) {
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (const auto &[key, value] : properties_)
        rd_kafka_conf_set(conf, key.c_str(), value.c_str(), errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "group.id", transactional_id_.c_str(), errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "isolation.level", "read_committed", errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "log.queue", "true", errstr, sizeof errstr);
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_log_cb(conf, OnLog);
    if (guard_.guarded())
        rd_kafka_conf_set_connect_cb(conf, OnConnect);
    rd_kafka_t *consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (consumer == nullptr) {
        rd_kafka_conf_destroy(conf);
        Log(std::string("could not create the consumer that reads the marker: ") + errstr);
        return false;
    }
    rd_kafka_set_log_queue(consumer, nullptr);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, marker_topic_.c_str(), 0);
    rd_kafka_resp_err_t err = rd_kafka_committed(consumer, list, int(call_timeout_ms_));
    rd_kafka_resp_err_t part_err = list->elems[0].err;
    // A topic the cluster does not know holds no committed batch: nothing to recover (a broker
    // may say so for an offset of an unknown topic, as librdkafka's mock cluster does).
    bool no_topic =
        err == RD_KAFKA_RESP_ERR_NO_ERROR && (part_err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
                                              part_err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC);
    if (no_topic)
        list->elems[0].offset = RD_KAFKA_OFFSET_INVALID;
    bool ok =
        err == RD_KAFKA_RESP_ERR_NO_ERROR && (no_topic || part_err == RD_KAFKA_RESP_ERR_NO_ERROR);
    if (ok) {
        const rd_kafka_topic_partition_t &p = list->elems[0];
        *token = 0;
        sequence_ = 0;
        if (p.offset >= 0) {
            std::string metadata(static_cast<const char *>(p.metadata), p.metadata_size);
            std::optional<int64_t> t = ParseMarkerMetadata(metadata);
            if (t)
                *token = *t;
            sequence_ = p.offset;
        }
    } else {
        Log("could not read the marker of " + transactional_id_ + ": " +
            ErrorText(err != RD_KAFKA_RESP_ERR_NO_ERROR ? err : list->elems[0].err));
    }
    rd_kafka_topic_partition_list_destroy(list);
    rd_kafka_destroy(consumer);
    return ok;
}

// Fences the predecessor, reads the marker and tells it (the first outcome); false when the
// driver cannot go on (fatal) or stops.
bool KafkaTxnDriver::Start() {
    // Adopting: a few tries, then Broken (the worker tries again later, not in a loop here).
    const int tries = adopt_ ? 3 : -1;
    for (int attempt = 1;; attempt++) {
        if (Stopping())
            return false;
        rd_kafka_error_t *e = rd_kafka_init_transactions(rk_, int(call_timeout_ms_));
        if (e == nullptr)
            break;
        bool fatal = rd_kafka_error_is_fatal(e) || attempt == tries;
        Log(std::string("init_transactions: ") + rd_kafka_error_name(e) + ": " +
            rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        if (fatal) {
            Finish({}, true);
            return false;
        }
        Pause(1000);
    }
    // The topic is looked up first: a cluster that creates topics on demand (the mock) makes it
    // now, and the marker's offsets then have a partition to belong to.
    if (rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk_, marker_topic_.c_str(), nullptr)) {
        const rd_kafka_metadata_t *md = nullptr;
        if (rd_kafka_metadata(rk_, 0, rkt, &md, int(call_timeout_ms_)) ==
                RD_KAFKA_RESP_ERR_NO_ERROR &&
            md != nullptr)
            rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
    }
    int64_t token = 0;
    for (int attempt = 1; !ReadMarker(&token); attempt++) {
        if (Stopping())
            return false;
        if (attempt == tries) {
            Finish({}, true);
            return false;
        }
        Pause(1000);
    }
    Outcome marker;
    marker.kind = OutcomeKind::Marker;
    marker.lease_token = token;
    {
        std::lock_guard<std::mutex> lock(mu_);
        done_.push_back(std::move(marker));
    }
    char one = 1;
    ssize_t written = write(pipe_[1], &one, 1);
    (void)written;
    return true;
}

bool KafkaTxnDriver::AbortOpen() {
    for (int tries = 0; tries < 5; tries++) {
        rd_kafka_error_t *e = rd_kafka_abort_transaction(rk_, int(call_timeout_ms_));
        if (e == nullptr)
            return true;
        bool fatal = rd_kafka_error_is_fatal(e);
        Log(std::string("abort_transaction: ") + rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        if (fatal)
            return false;
    }
    return false;
}

// Hands every message of the batch to librdkafka, in order, all prepared first
// (brokers/kafka/record.hpp says why); false (with the refused message's outcome in `out`) when
// one is refused.
bool KafkaTxnDriver::ProduceAll(std::vector<Message> &batch, std::vector<Outcome> &out) {
    std::vector<ReadyRecord> ready;
    ready.reserve(batch.size());
    for (size_t i = 0; i < batch.size(); i++) {
        if (batch[i].topic.empty()) {
            out[i].kind = OutcomeKind::Dead;
            out[i].error = "message has no topic";
            return false;
        }
        ready.push_back(MakeReadyRecord(batch[i], source_, mode_));
    }
    for (size_t i = 0; i < batch.size(); i++) {
        rd_kafka_resp_err_t err =
            ready[i].Produce(rk_, batch[i], reinterpret_cast<void *>(uintptr_t(i)));
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            out[i].kind = ClassifyKafkaResult(err, RD_KAFKA_MSG_STATUS_NOT_PERSISTED);
            out[i].error = ErrorText(err);
            return false;
        }
    }
    return true;
}

// Waits for every message's delivery report; false (with the failures' outcomes in `out`) when
// one failed or did not come in time.
bool KafkaTxnDriver::AllAcknowledged(std::vector<Message> &batch, std::vector<Outcome> &out) {
    bool refused = false;
    // Every message acknowledged (or failed) before the marker: commit_transaction would flush
    // too, but a marker written ahead of its messages is what a broker that does not hide
    // aborted transactions (librdkafka's mock cluster) must never see.
    {
        rd_kafka_resp_err_t flushed = rd_kafka_flush(rk_, int(call_timeout_ms_) * 2);
        for (size_t i = 0; i < batch.size(); i++) {
            const Report &r = reports_[i];
            if (!r.reported) {
                if (flushed != RD_KAFKA_RESP_ERR_NO_ERROR) {
                    refused = true;
                    out[i].kind = OutcomeKind::Defer;
                    out[i].error = "not acknowledged in time" +
                                   (last_error_.empty() ? std::string()
                                                        : "; last broker error " + last_error_);
                }
                continue;
            }
            if (r.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
                refused = true;
                out[i].kind = ClassifyKafkaResult(r.err, r.status);
                if (out[i].kind == OutcomeKind::Delivered)
                    out[i].kind = OutcomeKind::Aborted;
                out[i].error = ErrorText(r.err);
            } else {
                out[i].partition = r.partition;
                out[i].offset = r.offset;
            }
        }
    }
    return !refused;
}

// One batch, one transaction: produce, wait for every message, the marker, commit. A message
// refused or failed aborts the whole transaction (so a committed batch holds every message of
// its lease): it gets its own outcome, the others Aborted (due again at once).
void KafkaTxnDriver::Deliver(std::vector<Message> &batch) {
    const int64_t token = batch.front().lease_token;
    std::vector<Outcome> out(batch.size());
    for (size_t i = 0; i < batch.size(); i++) {
        out[i].id = batch[i].id;
        out[i].lease_token = batch[i].lease_token;
        out[i].kind = OutcomeKind::Aborted;
    }
    auto all = [&](OutcomeKind kind, const std::string &why) {
        for (Outcome &o : out) {
            o.kind = kind;
            o.error = why;
        }
    };
    // An error of a transactional call: fatal (fenced, or the producer cannot go on: the
    // transaction's end is unknown), or one that needs an abort, or worth a retry.
    auto failed = [&](rd_kafka_error_t *e, const char *call) {
        std::string why =
            std::string(call) + ": " + rd_kafka_error_name(e) + ": " + rd_kafka_error_string(e);
        bool fatal = rd_kafka_error_is_fatal(e);
        rd_kafka_error_destroy(e);
        Log(why);
        if (fatal || !AbortOpen()) {
            all(OutcomeKind::InDoubt, why + "; the producer is rebuilt and reads its marker");
            Finish(std::move(out), true);
        } else {
            all(OutcomeKind::Aborted, why + "; transaction aborted");
            Finish(std::move(out));
        }
    };

    if (rd_kafka_error_t *e = rd_kafka_begin_transaction(rk_)) {
        bool fatal = rd_kafka_error_is_fatal(e);
        std::string why = std::string("begin_transaction: ") + rd_kafka_error_string(e);
        rd_kafka_error_destroy(e);
        all(OutcomeKind::Aborted, why);  // nothing was sent
        Finish(std::move(out), fatal);
        return;
    }
    reports_.assign(batch.size(), Report{});
    bool refused = !ProduceAll(batch, out) || !AllAcknowledged(batch, out);
    if (refused) {
        for (Outcome &o : out)
            if (o.kind == OutcomeKind::Aborted && o.error.empty())
                o.error = "its transaction was aborted (another message of the batch failed)";
        if (!AbortOpen()) {
            all(OutcomeKind::InDoubt, "the transaction could not be aborted");
            Finish(std::move(out), true);
            return;
        }
        Finish(std::move(out));
        return;
    }

    rd_kafka_topic_partition_list_t *offsets = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_t *p =
        rd_kafka_topic_partition_list_add(offsets, marker_topic_.c_str(), 0);
    p->offset = sequence_ + 1;
    std::string metadata = MarkerMetadata(token);
    p->metadata = malloc(metadata.size());
    if (p->metadata != nullptr) {
        memcpy(p->metadata, metadata.data(), metadata.size());
        p->metadata_size = metadata.size();
    }
    rd_kafka_consumer_group_metadata_t *group =
        rd_kafka_consumer_group_metadata_new(transactional_id_.c_str());
    rd_kafka_error_t *e =
        rd_kafka_send_offsets_to_transaction(rk_, offsets, group, int(call_timeout_ms_));
    rd_kafka_consumer_group_metadata_destroy(group);
    rd_kafka_topic_partition_list_destroy(offsets);
    if (e != nullptr) {
        failed(e, "send_offsets_to_transaction");
        return;
    }
    for (int tries = 0;; tries++) {
        e = rd_kafka_commit_transaction(rk_, int(call_timeout_ms_));
        if (e == nullptr)
            break;
        if (rd_kafka_error_is_retriable(e) && tries < 5 && !Stopping()) {
            Log(std::string("commit_transaction: ") + rd_kafka_error_string(e) + "; again");
            rd_kafka_error_destroy(e);
            continue;
        }
        failed(e, "commit_transaction");
        return;
    }
    sequence_++;
    for (Outcome &o : out) {
        o.kind = OutcomeKind::Delivered;
        o.error.clear();
    }
    Finish(std::move(out));
}

void KafkaTxnDriver::Run() {
    if (!Start() || adopt_)
        return;
    for (;;) {
        std::vector<Message> batch;
        bool abandoned = false;
        {
            std::unique_lock<std::mutex> lock(mu_);
            if (stop_)
                return;
            if (!queue_.empty()) {
                batch = std::move(queue_.front());
                queue_.pop_front();
                abandoned = abandon_;
            }
        }
        if (batch.empty()) {
            Pause(100);
            continue;
        }
        if (abandoned) {
            std::vector<Outcome> out;
            for (const Message &m : batch)
                out.push_back(Outcome{m.id, m.lease_token, OutcomeKind::Aborted,
                                      "not sent: handed back at shutdown", -1});
            Finish(std::move(out));
            continue;
        }
        Deliver(batch);
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (fatal_)
                return;
        }
    }
}

void KafkaTxnDriver::Submit(std::vector<Message> batch) {
    if (batch.empty())
        return;
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ += batch.size();
    // One transaction per lease token (a claim); a Submit normally holds exactly one.
    std::map<int64_t, std::vector<Message>> by_token;
    std::vector<int64_t> order;
    for (Message &m : batch) {
        if (!by_token.count(m.lease_token))
            order.push_back(m.lease_token);
        by_token[m.lease_token].push_back(std::move(m));
    }
    for (int64_t t : order)
        queue_.push_back(std::move(by_token[t]));
    cv_.notify_all();
}

void KafkaTxnDriver::Poll(std::vector<Outcome> &out) {
    char buf[256];
    while (read(pipe_[0], buf, sizeof buf) > 0) {
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (Outcome &o : done_) {
        if (o.kind == OutcomeKind::Marker)
            marker_told_ = true;
        else if (in_flight_ > 0)
            in_flight_--;
        out.push_back(std::move(o));
    }
    done_.clear();
    if (fatal_) {
        // Batches not begun: nothing of them was sent.
        for (auto &batch : queue_)
            for (const Message &m : batch) {
                out.push_back(Outcome{m.id, m.lease_token, OutcomeKind::Aborted,
                                      "not sent: the producer is rebuilt", -1});
                if (in_flight_ > 0)
                    in_flight_--;
            }
        queue_.clear();
    }
}

void KafkaTxnDriver::Abandon() {
    std::lock_guard<std::mutex> lock(mu_);
    abandon_ = true;
    cv_.notify_all();
}

}  // namespace

std::unique_ptr<Driver> MakeKafkaTxnDriver(const KafkaDriverOptions &options, std::string *error) {
    auto driver = std::make_unique<KafkaTxnDriver>(options.source);
    if (!driver->Init(options, error))
        return nullptr;
    return driver;
}

}  // namespace outbox
