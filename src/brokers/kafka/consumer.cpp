// The inbox's Kafka consumer (see include/outbox/brokers/kafka/consumer.hpp).
//
// Threads: librdkafka's own; one metadata thread of ours, which only calls librdkafka's
// blocking metadata and watermark queries and hands its result over under a mutex; and the
// helper's loop, which owns everything else. librdkafka's callbacks (errors, logs) and events
// are served by rd_kafka_consumer_poll on the helper's loop only: the main queue is forwarded
// to the consumer queue, and that queue writes a byte to a pipe when it gets something, as does
// the metadata thread when it has a new result, so the loop sleeps on one fd.
#include "outbox/broker_address.hpp"
#include "outbox/brokers/kafka/consumer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include <librdkafka/rdkafka.h>

#include "outbox/clock.hpp"
#include "outbox/config.hpp"
#include "outbox/frame_limits.hpp"
#include "outbox/brokers/signals.hpp"

namespace outbox {

namespace {

// Records read in one Poll at most, so that one busy consumer does not hold up the helper's
// loop (the producing drivers and the other consumers); the rest is read on the next turn.
constexpr size_t kMaxRecordsPerPoll = 5000;
// The same log line is written at most once in this long.
constexpr int64_t kLogRepeatMs = 60000;

std::string ErrorText(rd_kafka_resp_err_t err) {
    return std::string(rd_kafka_err2name(err)) + ": " + rd_kafka_err2str(err);
}

std::string PartitionName(const std::string &topic, int32_t partition) {
    return topic + "[" + std::to_string(partition) + "]";
}

// One refresh of metadata and watermarks, made by the metadata thread.
struct Round {
    bool answered = false;  // the metadata request got an answer
    std::vector<PartitionInfo> partitions;
    std::vector<std::string> missing_topics;
    std::string error;
    int64_t started_ms = 0;
};

class Consumer final : public KafkaConsumer {
  public:
    explicit Consumer(const KafkaConsumerOptions &options) : options_(options) {}
    ~Consumer() override;

    bool Init(std::string *error);

    void Assign(uint64_t generation, std::vector<ConsumerAssignment> assignment) override;
    void Credit(uint64_t records, uint64_t bytes) override {
        window_records_ -= std::min<uint64_t>(records, window_records_);
        window_bytes_ -= std::min<uint64_t>(bytes, window_bytes_);
    }
    void Poll(std::vector<ConsumedRecord> &out) override;
    uint64_t Generation() const override { return generation_; }
    bool TakeState(ConsumerState *state) override;
    int WaitFd() const override { return pipe_[0]; }
    int64_t PollTimeoutMs() const override { return more_ ? 0 : -1; }
    void TakeLog(std::vector<std::string> &lines) override {
        for (std::string &l : log_)
            lines.push_back(std::move(l));
        log_.clear();
    }

  private:
    static void OnError(rd_kafka_t *, int err, const char *reason, void *opaque);
    static void OnLog(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
    static int OnConnect(int fd, const struct sockaddr *address, int length, const char *broker,
                         void *opaque);
    void AddLog(std::string line);
    void Wake();
    void MetadataLoop();
    Round FetchRound();
    void TakeRound();
    void QueryWatermarks(int64_t which, Round *r);
    void OnConsumeError(const rd_kafka_message_t *m);
    void Block(const ConsumedRecord &r, size_t encoded);
    bool WindowOpen() const {
        return window_records_ < options_.window_records && window_bytes_ < options_.window_bytes;
    }

    KafkaConsumerOptions options_;
    rd_kafka_t *rk_ = nullptr;
    rd_kafka_queue_t *queue_ = nullptr;
    int pipe_[2] = {-1, -1};
    int64_t query_timeout_ms_ = 1000;

    // The helper's loop only.
    uint64_t generation_ = 0;
    std::set<std::pair<std::string, int32_t>> assigned_;
    std::set<std::pair<std::string, int32_t>> blocked_;  // a record too large to send: stopped
    uint64_t window_records_ = 0;                        // sent and not yet credited
    uint64_t window_bytes_ = 0;
    bool more_ = false;  // Poll stopped at kMaxRecordsPerPoll with the window open
    ConsumerState state_;
    ConsumerState sent_;
    bool told_ = false;
    std::string metadata_error_;
    std::string blocked_error_;
    // The last error librdkafka reported; for one partition (consumer_error_partition_ set),
    // cleared by a record of that partition, else by any record or a clean metadata round
    // begun after it.
    std::string consumer_error_;
    std::pair<std::string, int32_t> consumer_error_partition_;
    bool consumer_error_global_ = false;
    int64_t consumer_error_ms_ = 0;
    std::vector<std::string> log_;
    std::map<std::string, int64_t> logged_;  // line -> when it was last logged

    // Shared with the metadata thread.
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<bool> stop_{false};
    bool round_ready_ = false;  // under mu_
    Round round_;               // under mu_
    std::string refusal_;       // under mu_: OnConnect's last refusal, for the log

    // outbox.broker_allowed_networks, checked for every connection librdkafka makes.
    BrokerGuard guard_;
};

bool Consumer::Init(std::string *error) {
    if (options_.topics.empty()) {
        *error = "a Kafka consumer needs at least one topic";
        return false;
    }
    for (const std::string &t : options_.topics)
        if (t.empty()) {
            *error = "a Kafka consumer's topic name is empty";
            return false;
        }
    if (options_.window_records == 0 || options_.window_bytes == 0 ||
        options_.metadata_interval_ms < 10) {
        *error =
            "a Kafka consumer needs a window of at least one record and one byte, and a "
            "metadata interval of at least 10 ms";
        return false;
    }
    query_timeout_ms_ = std::clamp<int64_t>(options_.metadata_interval_ms, 500, 5000);

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
        return std::any_of(options_.properties.begin(), options_.properties.end(),
                           [&](const auto &p) { return p.first == key; });
    };
    if (!guard_.Set(options_.address_rule, error) ||
        !guard_.CheckKafkaSideHosts(options_.properties, error)) {
        rd_kafka_conf_destroy(conf);
        return false;
    }
    bool ok = set("client.id", options_.client_id);
    for (const auto &[key, value] : options_.properties)
        ok = ok && set(key, value);
    // librdkafka wants a group for assign(), though nothing here joins it or commits to it
    // (offsets live in PostgreSQL); the client id names it unless the user chose one (a
    // cluster with ACLs may require a group the principal may describe).
    if (!user_sets("group.id"))
        ok =
            ok && set("group.id", options_.client_id.empty() ? "outbox-inbox" : options_.client_id);
    if (!user_sets("auto.offset.reset"))
        ok = ok && set("auto.offset.reset", "earliest");
    ok = ok && set("enable.auto.commit", "false") && set("enable.auto.offset.store", "false") &&
         set("enable.partition.eof", "false") && set("log.queue", "true");
    if (!ok) {
        rd_kafka_conf_destroy(conf);
        return false;
    }
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_error_cb(conf, OnError);
    rd_kafka_conf_set_log_cb(conf, OnLog);
    if (guard_.guarded())
        rd_kafka_conf_set_connect_cb(conf, OnConnect);
    if (pipe2(pipe_, O_NONBLOCK | O_CLOEXEC) != 0) {
        *error = std::string("could not create a pipe: ") + strerror(errno);
        rd_kafka_conf_destroy(conf);
        return false;
    }
    SignalsBlocked blocked;  // librdkafka's threads and ours start with every signal blocked
    rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk_ == nullptr) {
        *error = std::string("could not create the Kafka consumer: ") + errstr;
        rd_kafka_conf_destroy(conf);  // not taken over on failure
        return false;
    }
    rd_kafka_poll_set_consumer(rk_);       // callbacks and events: served by consumer_poll
    rd_kafka_set_log_queue(rk_, nullptr);  // logs to the main queue, forwarded likewise
    queue_ = rd_kafka_queue_get_consumer(rk_);
    rd_kafka_queue_io_event_enable(queue_, pipe_[1], "1", 1);
    thread_ = std::thread([this] { MetadataLoop(); });
    return true;
}

Consumer::~Consumer() {
    if (thread_.joinable()) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();  // at most one query's timeout
    }
    if (rk_) {
        rd_kafka_queue_io_event_enable(queue_, -1, nullptr, 0);
        rd_kafka_queue_destroy(queue_);
        // Nothing to commit or leave: the assignment simply ends with the handle.
        rd_kafka_destroy_flags(rk_, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    }
    for (int fd : pipe_)
        if (fd >= 0)
            close(fd);
}

void Consumer::Wake() {
    char one = '1';
    ssize_t ignored = write(pipe_[1], &one, 1);  // a full pipe wakes the loop as well
    (void)ignored;
}

void Consumer::AddLog(std::string line) {
    int64_t now = MonotonicMs();
    auto it = logged_.find(line);
    if (it != logged_.end() && now - it->second < kLogRepeatMs)
        return;
    if (logged_.size() > 256)
        logged_.clear();
    logged_[line] = now;
    log_.push_back(protocol::CutText(line, protocol::kMaxTextBytes));
}

void Consumer::OnError(rd_kafka_t *, int err, const char *reason, void *opaque) {
    auto *self = static_cast<Consumer *>(opaque);
    try {
        std::string line =
            std::string(rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err))) + ": " + reason;
        self->consumer_error_ = line;
        self->consumer_error_partition_ = {};
        self->consumer_error_global_ = true;
        self->consumer_error_ms_ = MonotonicMs();
        self->AddLog(std::move(line));
    } catch (...) {
    }
}

void Consumer::OnLog(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    auto *self = static_cast<Consumer *>(rd_kafka_opaque(rk));
    if (level > 4)
        return;  // warnings and worse only (syslog levels)
    try {
        self->AddLog(std::string(fac) + ": " + buf);
    } catch (...) {
    }
}

void Consumer::MetadataLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
        lock.unlock();
        Round r;
        try {
            r = FetchRound();
        } catch (...) {
            r = Round{};
            r.error = "out of memory while reading the cluster's metadata";
        }
        lock.lock();
        if (stop_)
            break;
        round_ = std::move(r);
        round_ready_ = true;
        Wake();
        cv_.wait_for(lock, std::chrono::milliseconds(options_.metadata_interval_ms),
                     [this] { return stop_.load(); });
    }
}

// The metadata thread: the partitions of the subscribed topics and their watermarks.
Round Consumer::FetchRound() {
    Round r;
    r.started_ms = MonotonicMs();
    const struct rd_kafka_metadata *md = nullptr;
    // Every topic, not only ours: a request naming a missing topic may create it on a
    // cluster with auto-creation on.
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk_, 1, nullptr, &md, int(query_timeout_ms_));
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        r.error = "metadata request failed: " + ErrorText(err);
        return r;
    }
    r.answered = true;
    std::set<std::string> seen;
    for (const std::string &topic : options_.topics) {
        if (!seen.insert(topic).second)
            continue;
        const rd_kafka_metadata_topic *found = nullptr;
        for (int i = 0; i < md->topic_cnt; i++)
            if (topic == md->topics[i].topic)
                found = &md->topics[i];
        if (found == nullptr || found->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
            r.missing_topics.push_back(topic);
            continue;
        }
        if (found->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (r.error.empty())
                r.error = "topic " + topic + ": " + ErrorText(found->err);
            continue;
        }
        for (int p = 0; p < found->partition_cnt; p++)
            r.partitions.push_back(PartitionInfo{topic, found->partitions[p].id, -1, -1});
    }
    rd_kafka_metadata_destroy(md);
    std::sort(r.partitions.begin(), r.partitions.end(), [](const auto &a, const auto &b) {
        return std::tie(a.topic, a.partition) < std::tie(b.topic, b.partition);
    });
    if (!stop_ && !r.partitions.empty()) {
        QueryWatermarks(RD_KAFKA_OFFSET_BEGINNING, &r);
        QueryWatermarks(RD_KAFKA_OFFSET_END, &r);
    }
    return r;
}

// The low (RD_KAFKA_OFFSET_BEGINNING) or high (RD_KAFKA_OFFSET_END) watermarks of every
// partition of the round, one ListOffsets request per leader. Not rd_kafka_query_watermark_offsets:
// before librdkafka 2.3.0 (bookworm has 2.0.2) it waits for the answer without a deadline, and a
// request caught by its broker's going down is never answered: the thread hung until the broker
// came back, and the subscription showed the cluster reachable, its lag 0, all that time.
// rd_kafka_offsets_for_times keeps to its timeout, and the same request with a logical offset
// for a timestamp answers the watermarks (the consumer's isolation.level decides, as for those).
void Consumer::QueryWatermarks(int64_t which, Round *r) {
    rd_kafka_topic_partition_list_t *list =
        rd_kafka_topic_partition_list_new(int(r->partitions.size()));
    for (const PartitionInfo &p : r->partitions)
        rd_kafka_topic_partition_list_add(list, p.topic.c_str(), p.partition)->offset = which;
    rd_kafka_resp_err_t err = rd_kafka_offsets_for_times(rk_, list, int(query_timeout_ms_));
    for (PartitionInfo &p : r->partitions) {
        const rd_kafka_topic_partition_t *t =
            rd_kafka_topic_partition_list_find(list, p.topic.c_str(), p.partition);
        rd_kafka_resp_err_t e = err != RD_KAFKA_RESP_ERR_NO_ERROR ? err
                                : t == nullptr ? RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION
                                               : t->err;
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR && t->offset < 0)
            e = RD_KAFKA_RESP_ERR__FAIL;  // no offset in the answer
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (r->error.empty())
                r->error =
                    "watermarks of " + PartitionName(p.topic, p.partition) + ": " + ErrorText(e);
            continue;
        }
        (which == RD_KAFKA_OFFSET_END ? p.high : p.low) = t->offset;
    }
    rd_kafka_topic_partition_list_destroy(list);
}

void Consumer::TakeRound() {
    Round r;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!round_ready_)
            return;
        r = std::move(round_);
        round_ready_ = false;
    }
    state_.reachable = r.answered;
    if (r.answered) {
        state_.known = true;
        state_.partitions = std::move(r.partitions);
        state_.missing_topics = std::move(r.missing_topics);
    }
    if (!r.error.empty() && r.error != metadata_error_)
        AddLog(r.error);
    metadata_error_ = r.error;
    // The cluster answered everything after the error was reported: it is over.
    if (r.answered && r.error.empty() && consumer_error_global_ &&
        r.started_ms > consumer_error_ms_) {
        consumer_error_.clear();
        consumer_error_global_ = false;
    }
}

void Consumer::Assign(uint64_t generation, std::vector<ConsumerAssignment> assignment) {
    generation_ = generation;
    window_records_ = window_bytes_ = 0;
    more_ = false;
    assigned_.clear();
    blocked_.clear();
    blocked_error_.clear();
    consumer_error_.clear();
    consumer_error_global_ = false;
    rd_kafka_topic_partition_list_t *list =
        rd_kafka_topic_partition_list_new(int(std::max<size_t>(1, assignment.size())));
    for (const ConsumerAssignment &a : assignment) {
        assigned_.insert({a.topic, a.partition});
        rd_kafka_topic_partition_list_add(list, a.topic.c_str(), a.partition)->offset = a.offset;
    }
    rd_kafka_resp_err_t err = rd_kafka_assign(rk_, assignment.empty() ? nullptr : list);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR && !assignment.empty())
        rd_kafka_resume_partitions(rk_, list);  // a partition stopped by Block goes on
    rd_kafka_topic_partition_list_destroy(list);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        consumer_error_ = "the assignment was refused: " + ErrorText(err);
        consumer_error_global_ = false;
        consumer_error_ms_ = MonotonicMs();
        AddLog(consumer_error_);
    }
}

void Consumer::OnConsumeError(const rd_kafka_message_t *m) {
    std::string line;
    if (m->rkt != nullptr) {
        std::string topic = rd_kafka_topic_name(m->rkt);
        consumer_error_partition_ = {topic, m->partition};
        consumer_error_global_ = false;
        line = PartitionName(topic, m->partition) + ": ";
    } else {
        consumer_error_partition_ = {};
        consumer_error_global_ = true;
    }
    line += std::string(rd_kafka_err2name(m->err)) + ": " + rd_kafka_message_errstr(m);
    consumer_error_ = line;
    consumer_error_ms_ = MonotonicMs();
    AddLog(std::move(line));
}

// A record too large for the protocol: its partition stops there (nothing after it is sent,
// so nothing is skipped) until the worker assigns it again.
void Consumer::Block(const ConsumedRecord &r, size_t encoded) {
    blocked_.insert({r.topic, r.partition});
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, r.topic.c_str(), r.partition);
    rd_kafka_pause_partitions(rk_, list);
    rd_kafka_topic_partition_list_destroy(list);
    blocked_error_ = PartitionName(r.topic, r.partition) + " stops at offset " +
                     std::to_string(r.offset) + ": the record is " + std::to_string(encoded) +
                     " bytes, more than the " + std::to_string(protocol::kMaxRecordBytes) +
                     " a consumed record may have";
    AddLog(blocked_error_);
}

void Consumer::Poll(std::vector<ConsumedRecord> &out) {
    // Drain the pipe first: anything queued after this point writes to it again.
    char buf[256];
    while (read(pipe_[0], buf, sizeof buf) > 0) {
    }
    TakeRound();
    more_ = false;
    size_t n = 0;
    while (WindowOpen()) {
        if (n == kMaxRecordsPerPoll) {
            more_ = true;
            break;
        }
        // Also serves the callbacks (errors, logs) of the main queue, forwarded here.
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk_, 0);
        if (m == nullptr)
            break;
        if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            OnConsumeError(m);
            rd_kafka_message_destroy(m);
            continue;
        }
        ConsumedRecord r;
        r.topic = rd_kafka_topic_name(m->rkt);
        r.partition = m->partition;
        r.offset = m->offset;
        auto tp = std::make_pair(r.topic, r.partition);
        // Not of the current assignment (librdkafka drops a replaced fetch's records itself;
        // this is the second fence), or of a partition stopped by Block.
        if (!assigned_.count(tp) || blocked_.count(tp)) {
            rd_kafka_message_destroy(m);
            continue;
        }
        if (m->key != nullptr)
            r.key.emplace(static_cast<const char *>(m->key), m->key_len);
        if (m->payload != nullptr)
            r.value.emplace(static_cast<const char *>(m->payload), m->len);
        rd_kafka_headers_t *headers = nullptr;
        if (rd_kafka_message_headers(m, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR && headers) {
            const char *name;
            const void *value;
            size_t size;
            for (size_t i = 0; rd_kafka_header_get_all(headers, i, &name, &value, &size) ==
                               RD_KAFKA_RESP_ERR_NO_ERROR;
                 i++)
                r.headers.emplace_back(
                    name, value ? std::string(static_cast<const char *>(value), size) : "");
        }
        rd_kafka_timestamp_type_t type;
        int64_t ts = rd_kafka_message_timestamp(m, &type);
        r.timestamp_ms = type == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE || ts < 0 ? -1 : ts;
        rd_kafka_message_destroy(m);
        if (!protocol::RecordFits(r)) {
            Block(r, RecordBytes(r));
            continue;
        }
        if (!consumer_error_.empty() &&
            (consumer_error_global_ || consumer_error_partition_ == tp)) {
            consumer_error_.clear();
            consumer_error_global_ = false;
        }
        window_records_++;
        window_bytes_ += RecordBytes(r);
        out.push_back(std::move(r));
        n++;
    }
}

// On a broker thread of librdkafka's (see KafkaDriver::OnConnect).
int Consumer::OnConnect(int fd, const struct sockaddr *address, int length, const char *broker,
                        void *opaque) {
    auto *self = static_cast<Consumer *>(opaque);
    try {
        std::string why;
        int rc = self->guard_.Connect(fd, address, unsigned(length), &why);
        if (rc == EACCES) {
            std::lock_guard<std::mutex> lock(self->mu_);
            self->refusal_ = std::string("not connecting to ") + broker + ": " + why;
        }
        return rc;
    } catch (...) {
        return ENOMEM;
    }
}

bool Consumer::TakeState(ConsumerState *state) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!refusal_.empty())
            AddLog(std::move(refusal_));
        refusal_.clear();
    }
    state_.error = !metadata_error_.empty()  ? metadata_error_
                   : !blocked_error_.empty() ? blocked_error_
                                             : consumer_error_;
    // Why the cluster cannot be reached is shown only for a subscription a superuser configured
    // (what it answers once it answers is the broker's).
    if (guard_.guarded() && !state_.reachable && !state_.error.empty() &&
        state_.error != blocked_error_)
        state_.error = kWhyHidden;
    state_.error = protocol::CutText(state_.error, protocol::kMaxTextBytes);
    if (told_ && state_ == sent_)
        return false;
    sent_ = state_;
    told_ = true;
    *state = state_;
    return true;
}

}  // namespace

std::unique_ptr<KafkaConsumer> MakeKafkaConsumer(const KafkaConsumerOptions &options,
                                                 std::string *error) {
    auto consumer = std::make_unique<Consumer>(options);
    if (!consumer->Init(error))
        return nullptr;
    return consumer;
}

}  // namespace outbox
