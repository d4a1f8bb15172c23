// NATS JetStream driver with cnats.
//
// Threads: cnats runs its own (reader, flusher, reconnect, timers, the delivery of the PubAck
// inbox). Every cnats call that can start one runs with all signals blocked (SignalsBlocked),
// so PostgreSQL's handlers stay on the worker's thread. The first connection attempt can take
// up to connect_timeout, so it runs in a short-lived thread of ours (the skeleton of
// outbox/brokers/io_thread.hpp); after that cnats reconnects by itself. cnats's callbacks
// (PubAck, disconnect, errors) never touch PostgreSQL: they record into a mutex-protected Core
// and write a byte to a pipe, the driver's WaitFd.
//
// Correlation: a PubAck comes back with the natsMsg that was published; the Core maps each
// message in flight to its row. The map is updated under the lock before the publish and in
// the callback itself, so a message's address is never mistaken for a later one's.
#include "outbox/brokers/nats/driver.hpp"

#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nats/nats.h>

#include "outbox/broker_address.hpp"
#include "outbox/brokers/nats/classify.hpp"
#include "outbox/clock.hpp"
#include "outbox/brokers/cloudevents.hpp"
#include "outbox/brokers/io_thread.hpp"
#include "outbox/brokers/signals.hpp"

namespace outbox {

namespace {

// After this long without a connection, what is in flight comes back deferred.
constexpr int64_t kOutageMs = 1000;
// A failed first connection (bad credentials file...) is tried again this often.
constexpr int64_t kConnectRetryMs = 2000;

// cnats's text for a status, with the library's last error detail when there is one.
std::string StatusText(natsStatus s) {
    std::string text = std::string(natsStatus_GetText(s));
    natsStatus last = NATS_OK;
    const char *detail = nats_GetLastError(&last);
    if (detail != nullptr && detail[0] != '\0' && last == s && text != detail)
        text += ": " + std::string(detail);
    if (text.size() > 300)
        text.resize(300);
    return text;
}

// The worker's thread, the connector thread and cnats's callbacks: ThreadShared's hand-over
// (outcomes, log), the messages awaiting a PubAck, the connection once made.
struct Core : ThreadShared {
    NatsDriverOptions options;
    std::string ce_type_fallback;
    BrokerGuard guard;  // outbox.broker_allowed_networks

    struct Pending {
        int64_t id;
        int64_t lease_token;
        std::string subject;
        int64_t submitted_ms;
        bool lost;  // not connected when it was published
    };
    std::unordered_map<natsMsg *, Pending> pending;  // under mu
    // The connection, once the connector thread made it (under mu until adopted).
    natsConnection *nc = nullptr;
    jsCtx *js = nullptr;
    std::string connect_error;  // the first connection failed outright: why

    std::atomic<int64_t> last_disconnect_ms{0};
    std::atomic<int64_t> last_connect_ms{0};  // the latest (re)connection, MonotonicMs
    std::atomic<bool> closed{false};
};

// How long after a (re)connection a restarted server's JetStream may still be restoring its
// streams and answer "no responders" for a subject a stream does listen on.
constexpr int64_t kJetStreamSettleMs = 10000;

// cnats callbacks: record and return.
void OnPubAck(jsCtx *, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure) {
    auto *core = static_cast<Core *>(closure);
    // One byte in the pipe per batch of outcomes: Poll drains the pipe before it takes them, so
    // an outcome added to a non-empty list is always collected with the ones before it.
    bool wake = true;
    try {
        std::lock_guard<std::mutex> lock(core->mu);
        wake = core->outcomes.empty();
        auto it = core->pending.find(msg);
        if (it != core->pending.end()) {
            const Core::Pending &p = it->second;
            natsStatus status = pa != nullptr ? NATS_OK : pae != nullptr ? pae->Err : NATS_ERR;
            int js_error = pae != nullptr ? static_cast<int>(pae->ErrCode) : 0;
            bool lost = p.lost || core->last_disconnect_ms.load() >= p.submitted_ms;
            bool just_connected = MonotonicMs() - core->last_connect_ms.load() < kJetStreamSettleMs;
            OutcomeKind kind = ClassifyNatsPublish(status, js_error, lost, just_connected);
            std::string error;
            if (kind != OutcomeKind::Delivered) {
                if (status == NATS_NO_RESPONDERS && kind == OutcomeKind::Defer) {
                    error = "JetStream not answering for subject " + p.subject +
                            " yet (no responders right after connecting): waiting for it";
                } else if (status == NATS_NO_RESPONDERS) {
                    error = "no stream for subject " + p.subject +
                            ": JetStream has no stream listening on it (no responders)";
                } else if (status == NATS_TIMEOUT) {
                    error = "no PubAck within " + std::to_string(core->options.ack_timeout_ms) +
                            " ms" + (lost ? " (the connection was lost meanwhile)" : "");
                } else {
                    error = natsStatus_GetText(status);
                    if (js_error != 0)
                        error += ": JetStream error " + std::to_string(js_error);
                    if (pae != nullptr && pae->ErrText != nullptr && pae->ErrText[0] != '\0')
                        error += ": " + std::string(pae->ErrText).substr(0, 300);
                }
            }
            core->outcomes.push_back(Outcome{p.id, p.lease_token, kind, std::move(error), -1});
            core->pending.erase(it);
        }
    } catch (...) {
        core->record_failed = true;
    }
    natsMsg_Destroy(msg);
    if (wake)
        core->Notify();
}

void OnDisconnected(natsConnection *, void *closure) {
    auto *core = static_cast<Core *>(closure);
    core->last_disconnect_ms.store(MonotonicMs());
    core->Notify();
}

void OnReconnected(natsConnection *, void *closure) {
    auto *core = static_cast<Core *>(closure);
    core->last_connect_ms.store(MonotonicMs());
    try {
        std::lock_guard<std::mutex> lock(core->mu);
        core->AddLogLocked("connected to NATS again");
    } catch (...) {
    }
    core->Notify();
}

void OnConnected(natsConnection *, void *closure) {
    auto *core = static_cast<Core *>(closure);
    core->last_connect_ms.store(MonotonicMs());
    core->Notify();
}

void OnClosed(natsConnection *, void *closure) {
    auto *core = static_cast<Core *>(closure);
    core->closed.store(true);
    core->Notify();
}

void OnAsyncError(natsConnection *, natsSubscription *, natsStatus err, void *closure) {
    auto *core = static_cast<Core *>(closure);
    try {
        std::lock_guard<std::mutex> lock(core->mu);
        core->AddLogLocked(std::string("asynchronous NATS error: ") + natsStatus_GetText(err));
    } catch (...) {
    }
    core->Notify();
}

class NatsDriver final : public ThreadedDriver {
  public:
    explicit NatsDriver(std::shared_ptr<Core> core)
        : ThreadedDriver(core, core->options.max_in_flight), core_(std::move(core)) {}
    ~NatsDriver() override;

    bool Start(std::string *error);

    void Submit(std::vector<Message> batch) override;
    void Poll(std::vector<Outcome> &out) override;
    int64_t PollTimeoutMs() const override { return in_flight_ == 0 ? -1 : 100; }
    void Abandon() override;
    bool Broken() const override { return core_->closed.load(); }

  private:
    natsOptions *BuildOptions(std::string *error);
    void Publish(Message &m);
    void Answer(const Message &m, OutcomeKind kind, std::string error);
    void HandBackPending(const std::string &why);
    bool Connected() const {
        return nc_ != nullptr && natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED;
    }

    std::shared_ptr<Core> core_;
    std::thread connector_;
    natsConnection *nc_ = nullptr;  // adopted from the core once connected (or connecting)
    jsCtx *js_ = nullptr;
    std::deque<Message> held_;  // submitted before the connection existed, or the held probe
    int64_t started_ms_ = 0;
    int64_t down_since_ms_ = 0;
    int64_t probe_held_since_ms_ = 0;
    std::vector<Outcome> immediate_;
};

// A guarded destination's servers, each resolved and checked (a name with any refused address
// is refused whole), given to cnats as the addresses checked: cnats then connects and
// reconnects to nothing else (the servers a cluster advertises are ignored). With TLS the
// certificate is still verified for the name, when the servers share one. Called before each
// connection attempt, so a name is resolved anew; false with *why when refused.
static bool PinGuardedServers(Core &core, natsOptions *opts, std::string *why) {
    if (!core.guard.guarded())
        return true;
    const NatsConfig &c = core.options.config;
    std::vector<std::string> pinned;
    std::string tls_name;
    bool names_differ = false;
    for (const std::string &server : c.servers) {
        std::string host = BrokerUrlHost(server);
        std::vector<std::string> addresses;
        if (!core.guard.Resolve(host, &addresses, why))
            return false;
        if (!LiteralAddressOfHost(host)) {
            names_differ = names_differ || (!tls_name.empty() && tls_name != host);
            tls_name = host;
        }
        for (const std::string &a : addresses)
            pinned.push_back(ReplaceBrokerUrlHost(server, a));
    }
    bool tls = c.tls || !c.ca_file.empty() || !c.cert_file.empty();
    for (const std::string &s : c.servers)
        tls = tls || strncasecmp(s.c_str(), "tls://", 6) == 0;
    if (tls && names_differ)
        return true;  // one expected name for all: the names stay (checked just now)
    std::vector<const char *> urls;
    for (const std::string &p : pinned)
        urls.push_back(p.c_str());
    natsStatus s = natsOptions_SetServers(opts, urls.data(), int(urls.size()));
    if (s == NATS_OK)
        s = natsOptions_SetIgnoreDiscoveredServers(opts, true);
    if (s == NATS_OK && tls && !tls_name.empty())
        s = natsOptions_SetExpectedHostname(opts, tls_name.c_str());
    if (s != NATS_OK)
        *why = "cnats refused the checked addresses: " + StatusText(s);
    return s == NATS_OK;
}

natsOptions *NatsDriver::BuildOptions(std::string *error) {
    const NatsConfig &c = core_->options.config;
    natsOptions *opts = nullptr;
    if (natsOptions_Create(&opts) != NATS_OK) {
        *error = "could not create the NATS options: " + StatusText(NATS_NO_MEMORY);
        return nullptr;
    }
    std::vector<const char *> servers;
    bool tls = c.tls || !c.ca_file.empty() || !c.cert_file.empty();
    for (const std::string &s : c.servers) {
        servers.push_back(s.c_str());
        tls = tls || strncasecmp(s.c_str(), "tls://", 6) == 0;
    }
    // Each step names the setting but never its value (a URL or a password).
    auto step = [&](natsStatus s, const char *what) {
        if (s == NATS_OK || !error->empty())
            return;
        *error = std::string("cnats refused ") + what + ": " + natsStatus_GetText(s);
    };
    error->clear();
    step(natsOptions_SetServers(opts, servers.data(), static_cast<int>(servers.size())),
         "\"servers\"");
    step(natsOptions_SetName(opts, core_->options.client_name.c_str()), "the connection name");
    step(natsOptions_SetTimeout(opts, c.connect_timeout_ms), "\"connect_timeout\"");
    step(natsOptions_SetMaxReconnect(opts, -1), "the reconnect limit");
    step(natsOptions_SetReconnectWait(opts, 250), "the reconnect wait");
    step(natsOptions_SetPingInterval(opts, 5000), "the ping interval");
    step(natsOptions_SetMaxPingsOut(opts, 2), "the ping limit");
    step(natsOptions_SetWriteDeadline(opts, 5000), "the write deadline");
    step(natsOptions_SetRetryOnFailedConnect(opts, true, OnConnected, core_.get()),
         "the connect retry");
    step(natsOptions_SetDisconnectedCB(opts, OnDisconnected, core_.get()), "a callback");
    step(natsOptions_SetReconnectedCB(opts, OnReconnected, core_.get()), "a callback");
    step(natsOptions_SetClosedCB(opts, OnClosed, core_.get()), "a callback");
    step(natsOptions_SetErrorHandler(opts, OnAsyncError, core_.get()), "a callback");
    if (!c.user.empty())
        step(natsOptions_SetUserInfo(opts, c.user.c_str(),
                                     c.password.empty() ? nullptr : c.password.c_str()),
             "\"user\"/\"password\"");
    if (!c.token.empty())
        step(natsOptions_SetToken(opts, c.token.c_str()), "\"token\"");
    if (!c.creds_file.empty())
        step(natsOptions_SetUserCredentialsFromFiles(opts, c.creds_file.c_str(), nullptr),
             "\"creds_file\"");
    if (!c.nkey.empty())
        step(natsOptions_SetNKeyFromSeed(opts, c.nkey.c_str(), c.nkey_seed_file.c_str()),
             "\"nkey\"/\"nkey_seed_file\"");
    if (tls) {
        step(natsOptions_SetSecure(opts, true), "TLS");
        if (!c.ca_file.empty())
            step(natsOptions_LoadCATrustedCertificates(opts, c.ca_file.c_str()), "\"ca_file\"");
        if (!c.cert_file.empty())
            step(natsOptions_LoadCertificatesChain(opts, c.cert_file.c_str(), c.key_file.c_str()),
                 "\"cert_file\"/\"key_file\"");
        if (!c.tls_verify)
            step(natsOptions_SkipServerVerification(opts, true), "\"tls_verify\"");
    }
    if (!error->empty()) {
        natsOptions_Destroy(opts);
        return nullptr;
    }
    return opts;
}

bool NatsDriver::Start(std::string *error) {
    started_ms_ = MonotonicMs();
    if (!core_->notify.Open(error))
        return false;
    SignalsBlocked blocked;
    // Starts cnats's process-wide threads the first time; later calls only count.
    natsStatus s = nats_Open(-1);
    if (s != NATS_OK) {
        *error = "could not initialise cnats: " + StatusText(s);
        return false;
    }
    natsOptions *opts = BuildOptions(error);
    if (opts == nullptr) {
        nats_ReleaseThreadMemory();
        return false;
    }
    std::shared_ptr<Core> core = core_;
    auto connect = [core, opts] {
        natsConnection *nc = nullptr;
        jsCtx *js = nullptr;
        std::string failure;
        for (;;) {
            std::string refused;
            bool allowed = PinGuardedServers(*core, opts, &refused);
            natsStatus st = allowed ? natsConnection_Connect(&nc, opts) : NATS_NOT_PERMITTED;
            if (st == NATS_OK)
                core->last_connect_ms.store(MonotonicMs());
            if (st == NATS_OK || st == NATS_NOT_YET_CONNECTED) {
                jsOptions jo;
                jsOptions_Init(&jo);
                jo.PublishAsync.AckHandler = OnPubAck;
                jo.PublishAsync.AckHandlerClosure = core.get();
                // No stall inside a publish: the driver bounds what is in flight itself.
                jo.PublishAsync.MaxPending =
                    static_cast<int64_t>(core->options.max_in_flight) * 4 + 1024;
                jo.Wait = core->options.ack_timeout_ms;
                st = natsConnection_JetStream(&js, nc, &jo);
                if (st == NATS_OK)
                    break;
                natsConnection_Destroy(nc);
                nc = nullptr;
            }
            failure = allowed ? "cannot connect to NATS: " + StatusText(st)
                              : "not connecting to NATS: " + refused;
            {
                std::unique_lock<std::mutex> lock(core->mu);
                // A guarded destination shows only that its broker cannot be reached (the
                // dispatcher says so): why goes to the server log, once per change.
                if (core->guard.guarded() && failure != core->connect_error)
                    core->AddLogLocked(failure);
                core->connect_error = failure;
                core->Notify();
                if (core->cv.wait_for(lock, std::chrono::milliseconds(kConnectRetryMs),
                                      [&] { return core->stop; }))
                    break;
            }
        }
        natsOptions_Destroy(opts);
        std::unique_lock<std::mutex> lock(core->mu);
        if (core->stop) {
            // Nobody will adopt the connection any more.
            lock.unlock();
            if (js)
                jsCtx_Destroy(js);
            if (nc)
                natsConnection_Destroy(nc);
        } else {
            core->nc = nc;
            core->js = js;
            core->connect_error.clear();
            lock.unlock();
        }
        core->Notify();
        nats_ReleaseThreadMemory();
    };
    if (!StartThread(&connector_, core, connect, "the NATS connector thread", error)) {
        natsOptions_Destroy(opts);
        return false;
    }
    return true;
}

NatsDriver::~NatsDriver() {
    SignalsBlocked blocked;
    // The first connection attempt is bounded by connect_timeout; a thread still in it cleans
    // up after itself (it holds its own reference to the core).
    StopThread(connector_, *core_, 1000);
    {
        std::lock_guard<std::mutex> lock(core_->mu);
        if (js_ == nullptr && core_->js != nullptr) {
            js_ = core_->js;
            nc_ = core_->nc;
        }
        core_->js = nullptr;
        core_->nc = nullptr;
    }
    if (js_ != nullptr)
        jsCtx_Destroy(js_);
    if (nc_ != nullptr)
        natsConnection_Destroy(nc_);  // closes; its threads are gone when this returns
    nats_ReleaseThreadMemory();
}

void NatsDriver::Answer(const Message &m, OutcomeKind kind, std::string error) {
    immediate_.push_back(Outcome{m.id, m.lease_token, kind, std::move(error), -1});
}

void NatsDriver::Submit(std::vector<Message> batch) {
    in_flight_ += batch.size();
    SignalsBlocked blocked;  // the first publish subscribes to the PubAck inbox (a thread)
    for (Message &m : batch) {
        if (js_ == nullptr)
            held_.push_back(std::move(m));
        else
            Publish(m);
    }
}

// One asynchronous JetStream publish; its outcome arrives in OnPubAck, or at once here.
void NatsDriver::Publish(Message &m) {
    const NatsConfig &c = core_->options.config;
    const std::string &subject = !m.topic.empty() ? m.topic : c.subject;
    if (subject.empty()) {
        Answer(m, OutcomeKind::Dead, "message has no subject (no topic, no default \"subject\")");
        return;
    }
    natsMsg *msg = nullptr;
    natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, m.payload.data(),
                                  static_cast<int>(m.payload.size()));
    std::string content_type = m.payload_is_json ? "application/json" : "application/octet-stream";
    for (const auto &[name, value] : m.headers) {
        if (s != NATS_OK)
            break;
        if (strcasecmp(name.c_str(), "content-type") == 0)
            content_type = value;
        if (IsCloudEventTypeHeader(name))
            continue;  // sent as ce-type below
        s = natsMsgHeader_Add(msg, name.c_str(), value.c_str());
    }
    // CloudEvents NATS protocol binding, binary mode: ce-<attribute> headers, percent-encoded.
    const std::string ce_type =
        CloudEventType(m, !c.subject.empty() ? c.subject : core_->ce_type_fallback);
    const std::pair<const char *, std::string> ce[] = {
        {"ce-id", m.event_id},
        {"ce-type", PercentEncodeNatsHeaderValue(ce_type)},
        {"ce-source", PercentEncodeNatsHeaderValue(core_->options.source)},
        {"ce-specversion", "1.0"},
        {"ce-time", FormatRfc3339Ms(m.created_at_ms)},
        {"ce-datacontenttype", PercentEncodeNatsHeaderValue(content_type)},
    };
    for (const auto &[name, value] : ce)
        if (s == NATS_OK)
            s = natsMsgHeader_Set(msg, name, value.c_str());
    if (s != NATS_OK) {
        natsMsg_Destroy(msg);
        Answer(m, OutcomeKind::Retry, "could not build the NATS message: " + StatusText(s));
        return;
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = m.event_id.c_str();  // Nats-Msg-Id: JetStream drops a copy sent again
    po.MaxWait = core_->options.ack_timeout_ms;
    bool connected = Connected();
    natsMsg *key = msg;
    {
        std::lock_guard<std::mutex> lock(core_->mu);
        core_->pending.emplace(
            key, Core::Pending{m.id, m.lease_token, subject, MonotonicMs(), !connected});
    }
    s = js_PublishMsgAsync(js_, &msg, &po);
    if (s != NATS_OK) {
        {
            std::lock_guard<std::mutex> lock(core_->mu);
            core_->pending.erase(key);
        }
        natsMsg_Destroy(msg);  // still ours when the publish failed
        OutcomeKind kind = ClassifyNatsPublish(s, 0, !connected);
        std::string error = s == NATS_MAX_PAYLOAD
                                ? "message is larger than the NATS server's max_payload"
                                : StatusText(s);
        Answer(m, kind, std::move(error));
    }
}

// Everything awaiting a PubAck comes back deferred (cnats forgets it; a copy it still sends
// after reconnecting is dropped by JetStream's duplicate window).
void NatsDriver::HandBackPending(const std::string &why) {
    if (js_ == nullptr)
        return;
    natsMsgList list;
    memset(&list, 0, sizeof list);
    if (js_PublishAsyncGetPendingList(&list, js_) != NATS_OK)
        return;
    {
        std::lock_guard<std::mutex> lock(core_->mu);
        for (int i = 0; i < list.Count; i++) {
            auto it = core_->pending.find(list.Msgs[i]);
            if (it == core_->pending.end())
                continue;
            immediate_.push_back(
                Outcome{it->second.id, it->second.lease_token, OutcomeKind::Defer, why, -1});
            core_->pending.erase(it);
        }
    }
    natsMsgList_Destroy(&list);
}

void NatsDriver::Poll(std::vector<Outcome> &out) {
    core_->notify.Drain();
    SignalsBlocked blocked;
    int64_t now = MonotonicMs();
    std::string connect_error;
    {
        std::lock_guard<std::mutex> lock(core_->mu);
        if (js_ == nullptr && core_->js != nullptr) {
            js_ = core_->js;
            nc_ = core_->nc;
            core_->js = nullptr;
            core_->nc = nullptr;
        }
        connect_error = core_->connect_error;
    }
    bool connected = Connected();
    if (connected) {
        down_since_ms_ = 0;
    } else if (down_since_ms_ == 0 && (nc_ != nullptr || !connect_error.empty())) {
        down_since_ms_ = now;
    }
    bool down = !connected && ((down_since_ms_ != 0 && now - down_since_ms_ >= kOutageMs) ||
                               (js_ == nullptr && !connect_error.empty()) ||
                               (js_ == nullptr && now - started_ms_ >= kOutageMs));
    std::string why;
    if (down) {
        const char *last = nullptr;
        if (nc_ != nullptr && natsConnection_GetLastError(nc_, &last) != NATS_OK && last && last[0])
            why = std::string("not connected to NATS: ") + std::string(last).substr(0, 300);
        else if (!connect_error.empty())
            why = connect_error;
        else
            why = "not connected to NATS";
        // A probe waits for the connection (up to the PubAck timeout), so delivery resumes as
        // soon as the server is back; everything else is handed back.
        if (!core_->probing.load()) {
            HandBackPending(why);
            probe_held_since_ms_ = 0;
        }
    }
    if (js_ != nullptr && (!down || core_->probing.load())) {
        while (!held_.empty()) {
            Publish(held_.front());
            held_.pop_front();
        }
    } else if (!held_.empty()) {
        bool hold = core_->probing.load() && held_.size() == 1;
        if (hold && probe_held_since_ms_ == 0)
            probe_held_since_ms_ = now;
        if (down && (!hold || now - probe_held_since_ms_ >= core_->options.ack_timeout_ms)) {
            for (Message &m : held_)
                Answer(m, OutcomeKind::Defer, why);
            held_.clear();
            probe_held_since_ms_ = 0;
        }
    }

    std::vector<Outcome> got;
    core_->TakeOutcomes(got, "out of memory while recording PubAcks");
    for (Outcome &o : immediate_)
        got.push_back(std::move(o));
    immediate_.clear();
    Deliver(got, out);
}

void NatsDriver::Abandon() {
    SignalsBlocked blocked;
    HandBackPending("abandoned before the PubAck");
    for (Message &m : held_)
        Answer(m, OutcomeKind::Defer, "abandoned before it was published");
    held_.clear();
    core_->Notify();
}

}  // namespace

std::unique_ptr<Driver> MakeNatsDriver(const NatsDriverOptions &options, std::string *error) {
    auto core = std::make_shared<Core>();
    core->options = options;
    if (core->options.max_in_flight == 0)
        core->options.max_in_flight = 1;
    if (core->options.ack_timeout_ms <= 0)
        core->options.ack_timeout_ms = 5000;
    core->ce_type_fallback = options.destination;
    if (!core->guard.Set(options.address_rule, error))
        return nullptr;
    auto driver = std::make_unique<NatsDriver>(std::move(core));
    if (!driver->Start(error))
        return nullptr;
    return driver;
}

}  // namespace outbox
