// MQTT 5 driver with libmosquitto.
//
// Threads: one I/O thread of ours per driver (the skeleton of outbox/brokers/io_thread.hpp)
// owns the libmosquitto client: it connects, publishes, reads the acknowledgements
// (mosquitto_loop_read/write/misc on its own poll) and reconnects — libmosquitto's own loop
// thread is not used, because its reconnects would resolve and connect without the broker
// guard. The thread starts with every signal blocked
// (SignalsBlocked), so PostgreSQL's handlers stay on the worker's thread. libmosquitto's
// callbacks run inside the thread's loop calls; they record into the mutex-protected Core and
// write a byte to a pipe, the driver's WaitFd. The worker's thread only queues messages (Submit)
// and collects outcomes (Poll): it never waits for the network.
//
// Session: the client id is fixed per destination and worker, clean start is off and the
// CONNECT carries a session expiry interval, so that a reconnect resumes the session and
// libmosquitto resends what was in flight (QoS 1 PUBLISH again with DUP, QoS 2 PUBLISH or
// PUBREL where the exchange stopped). Correlation: libmosquitto numbers each publish (its packet
// identifier, "mid"); the Core maps each mid in flight to its row. A mid handed back (outage,
// ack timeout, Abandon) is forgotten: an acknowledgement that still comes for it is ignored,
// and a copy libmosquitto sends again after a reconnect is a duplicate, which at-least-once
// allows (the consumer drops it by event id).
#include "outbox/brokers/mqtt/driver.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
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

#include <mosquitto.h>
#include "outbox/brokers/mqtt/protocol.hpp"

#include "outbox/broker_address.hpp"
#include "outbox/brokers/io_thread.hpp"
#include "outbox/brokers/mqtt/classify.hpp"
#include "outbox/brokers/mqtt/encode.hpp"
#include "outbox/clock.hpp"

namespace outbox {

namespace {

// After this long without a connection, what is in flight comes back deferred.
constexpr int64_t kOutageMs = 1000;
// Reconnect attempts start this often and slow down to kReconnectMaxMs.
constexpr int64_t kReconnectMinMs = 100;
constexpr int64_t kReconnectMaxMs = 2000;
// How often acknowledgement deadlines are checked.
constexpr int64_t kDeadlineCheckMs = 200;

int64_t UnixMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The worker's thread and the I/O thread: ThreadShared's hand-over (the queue of messages not
// published yet, outcomes, log; the wake pipe carries new messages and stop), and the mids in
// flight.
struct Core : ThreadShared {
    MqttDriverOptions options;
    BrokerGuard guard;  // outbox.broker_allowed_networks

    struct Pending {
        int64_t id;
        int64_t lease_token;
        std::string topic;
        int64_t sent_ms;
    };
    std::unordered_map<int, Pending> pending;  // by mid, under mu

    // The I/O thread's own state (not under mu).
    bool session_up = false;    // CONNACK with success received on the current socket
    int64_t down_since_ms = 0;  // since when there is no session; 0 while there is one
    std::string down_reason;    // why not
    int64_t next_attempt_ms = 0;
    int64_t backoff_ms = kReconnectMinMs;
    int64_t probe_held_since_ms = 0;
    bool ever_connected = false;
    std::string last_logged;  // the last connection failure logged (each is logged once)

    // A line from the I/O thread wakes the worker, which logs it at once.
    void Log(std::string line) {
        AddLog(std::move(line));
        Notify();
    }
};

// The text of a disconnect's code: an MQTT reason code the broker sent (DISCONNECT, 0x80 and
// up), else libmosquitto's error.
std::string DisconnectText(int rc) {
    if (rc >= 0x80)
        return "the MQTT broker disconnected: " + MqttReasonText(rc);
    if (rc == MOSQ_ERR_ERRNO)
        return std::string("connection to the MQTT broker lost: ") + strerror(errno);
    return std::string("connection to the MQTT broker lost: ") + mosquitto_strerror(rc);
}

// The broker's Reason String property, when it sent one.
std::string ReasonString(const mosquitto_property *props) {
    char *text = nullptr;
    if (props != nullptr &&
        mosquitto_property_read_string(props, MQTT_PROP_REASON_STRING, &text, false) != nullptr &&
        text != nullptr) {
        std::string s(text);
        free(text);
        if (s.size() > 300)
            s.resize(300);
        return s;
    }
    return "";
}

// libmosquitto callbacks (in the I/O thread, inside its loop calls): record and return.
void OnConnect(struct mosquitto *, void *closure, int rc, int flags,
               const mosquitto_property *props) {
    auto *core = static_cast<Core *>(closure);
    if (rc == 0) {
        bool was_down = core->ever_connected;
        core->session_up = true;
        core->ever_connected = true;
        core->down_since_ms = 0;
        core->down_reason.clear();
        core->backoff_ms = kReconnectMinMs;
        core->last_logged.clear();
        if (was_down)
            core->Log(std::string("connected to the MQTT broker again") +
                      ((flags & 1) ? " (session resumed)" : " (new session)"));
    } else {
        std::string why = ReasonString(props);
        core->down_reason = "the MQTT broker refused the connection: " + MqttReasonText(rc) +
                            (why.empty() ? "" : " (" + why + ")");
        if (core->down_reason != core->last_logged)
            core->Log(core->last_logged = core->down_reason);
    }
}

void OnDisconnect(struct mosquitto *, void *closure, int rc, const mosquitto_property *props) {
    auto *core = static_cast<Core *>(closure);
    bool was_up = core->session_up;
    core->session_up = false;
    if (core->down_since_ms == 0)
        core->down_since_ms = MonotonicMs();
    if (was_up || core->down_reason.empty()) {
        std::string why = ReasonString(props);
        core->down_reason = DisconnectText(rc) + (why.empty() ? "" : " (" + why + ")");
    }
    if (was_up && rc != MOSQ_ERR_SUCCESS)
        core->Log(core->down_reason);
}

void OnPublish(struct mosquitto *, void *closure, int mid, int reason_code,
               const mosquitto_property *props) {
    auto *core = static_cast<Core *>(closure);
    try {
        std::lock_guard<std::mutex> lock(core->mu);
        auto it = core->pending.find(mid);
        if (it == core->pending.end())
            return;  // handed back already: this copy is a duplicate
        OutcomeKind kind = ClassifyMqttReason(reason_code);
        std::string error;
        if (kind != OutcomeKind::Delivered) {
            std::string why = ReasonString(props);
            error = "the MQTT broker refused the message to topic " +
                    it->second.topic.substr(0, 200) + ": " + MqttReasonText(reason_code) +
                    (why.empty() ? "" : " (" + why + ")");
        }
        core->AnswerLocked(it->second.id, it->second.lease_token, kind, std::move(error));
        core->pending.erase(it);
    } catch (...) {
        core->record_failed = true;
    }
}

class MqttDriver final : public ThreadedDriver {
  public:
    explicit MqttDriver(std::shared_ptr<Core> core)
        : ThreadedDriver(core, core->options.max_in_flight), core_(std::move(core)) {}
    ~MqttDriver() override { StopThread(io_, *core_, 2000); }

    bool Start(std::string *error);

    void Submit(std::vector<Message> batch) override { Enqueue(batch); }
    void Poll(std::vector<Outcome> &out) override;
    int64_t PollTimeoutMs() const override { return in_flight_ == 0 ? -1 : 200; }
    void Abandon() override;

  private:
    std::shared_ptr<Core> core_;
    std::thread io_;
};

// The I/O thread's work on one client.
class Io {
  public:
    Io(std::shared_ptr<Core> core, struct mosquitto *mosq) : core_(std::move(core)), mosq_(mosq) {}
    void Run();

  private:
    void Connect(int64_t now);
    void Publish(Message &m);
    void HandBack(int64_t now);
    void CheckDeadlines(int64_t now);

    std::shared_ptr<Core> core_;
    struct mosquitto *mosq_;
    int64_t last_deadline_check_ms_ = 0;
};

// One connection attempt: the broker guard first (the name resolved and every address checked;
// without TLS the client then connects to a checked address itself, so it connects to nothing
// else), then a blocking TCP connect and CONNECT (clean start off, session expiry), then the
// peer the socket reached is checked again before any message is published.
void Io::Connect(int64_t now) {
    Core &core = *core_;
    const MqttConfig &c = core.options.config;
    std::string host = c.host;
    std::string why;
    auto fail = [&](std::string reason) {
        core.down_reason = std::move(reason);
        core.next_attempt_ms = now + core.backoff_ms;
        core.backoff_ms = std::min(core.backoff_ms * 2, kReconnectMaxMs);
        if (core.down_reason != core.last_logged)
            core.Log(core.last_logged = core.down_reason);
    };
    if (core.guard.guarded()) {
        std::vector<std::string> addresses;
        if (!core.guard.Resolve(host, &addresses, &why))
            return fail("not connecting to the MQTT broker at " + host + ": " + why);
        // With TLS the certificate is verified for the name, so the name stays (and the peer is
        // checked below); without, the checked address is what the client connects to.
        if (!c.tls && !addresses.empty())
            host = addresses.front();
    }
    mosquitto_property *props = nullptr;
    int rc = mosquitto_property_add_int32(&props, MQTT_PROP_SESSION_EXPIRY_INTERVAL,
                                          static_cast<uint32_t>(c.session_expiry_ms / 1000));
    if (rc == MOSQ_ERR_SUCCESS) {
        errno = 0;
        rc = mosquitto_connect_bind_v5(mosq_, host.c_str(), c.port,
                                       static_cast<int>(c.keepalive_ms / 1000), nullptr, props);
    }
    int saved_errno = errno;
    mosquitto_property_free_all(&props);
    if (rc != MOSQ_ERR_SUCCESS) {
        std::string text = rc == MOSQ_ERR_ERRNO ? strerror(saved_errno) : mosquitto_strerror(rc);
        if (rc == MOSQ_ERR_TLS)
            text =
                "TLS handshake failed (check \"ca_file\", \"cert_file\"/\"key_file\", "
                "\"tls_verify\")";
        return fail("cannot connect to the MQTT broker at " + c.host + ":" +
                    std::to_string(c.port) + ": " + text);
    }
    if (core.guard.guarded()) {
        struct sockaddr_storage peer;
        socklen_t length = sizeof peer;
        int fd = mosquitto_socket(mosq_);
        bool ok =
            fd >= 0 && getpeername(fd, reinterpret_cast<struct sockaddr *>(&peer), &length) == 0;
        if (!ok || !core.guard.Allows(reinterpret_cast<struct sockaddr *>(&peer), &why)) {
            mosquitto_disconnect(mosq_);
            return fail("not connecting to the MQTT broker at " + c.host + ": " +
                        (ok ? why : std::string(strerror(errno))));
        }
    }
    // The next attempt, should the broker refuse the session (CONNACK) or drop it at once.
    core.next_attempt_ms = now + core.backoff_ms;
    core.backoff_ms = std::min(core.backoff_ms * 2, kReconnectMaxMs);
}

// One PUBLISH; its outcome arrives in OnPublish, or at once here.
void Io::Publish(Message &m) {
    Core &core = *core_;
    const MqttConfig &c = core.options.config;
    std::string topic = !m.topic.empty() ? m.topic : c.topic;
    // libmosquitto is called without the lock held: a callback it runs takes it.
    auto answer = [&](OutcomeKind kind, std::string error) {
        std::lock_guard<std::mutex> lock(core.mu);
        core.AnswerLocked(m.id, m.lease_token, kind, std::move(error));
    };
    if (topic.empty()) {
        answer(OutcomeKind::Dead, "message has no topic (no topic, no default \"topic\")");
        return;
    }
    MqttPublication p =
        BuildMqttPublication(m, topic, core.options.source,
                             !c.topic.empty() ? c.topic : core.options.destination, UnixMs());
    mosquitto_property *props = nullptr;
    int rc = MOSQ_ERR_SUCCESS;
    if (p.utf8_payload)
        rc = mosquitto_property_add_byte(&props, MQTT_PROP_PAYLOAD_FORMAT_INDICATOR, 1);
    if (rc == MOSQ_ERR_SUCCESS && !p.content_type.empty())
        rc = mosquitto_property_add_string(&props, MQTT_PROP_CONTENT_TYPE, p.content_type.c_str());
    if (rc == MOSQ_ERR_SUCCESS)
        rc = mosquitto_property_add_binary(&props, MQTT_PROP_CORRELATION_DATA,
                                           p.correlation_data.data(),
                                           static_cast<uint16_t>(p.correlation_data.size()));
    if (rc == MOSQ_ERR_SUCCESS && p.expiry_s > 0)
        rc = mosquitto_property_add_int32(&props, MQTT_PROP_MESSAGE_EXPIRY_INTERVAL, p.expiry_s);
    for (const auto &[name, value] : p.user_properties) {
        if (rc != MOSQ_ERR_SUCCESS)
            break;
        rc = mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, name.c_str(),
                                                value.c_str());
    }
    int mid = 0;
    if (rc == MOSQ_ERR_SUCCESS)
        rc = mosquitto_publish_v5(mosq_, &mid, p.topic.c_str(), static_cast<int>(p.payload.size()),
                                  p.payload.data(), c.qos, c.retain, props);
    mosquitto_property_free_all(&props);
    if (rc != MOSQ_ERR_SUCCESS) {
        OutcomeKind kind = ClassifyMqttPublishError(rc);
        std::string error =
            rc == MOSQ_ERR_OVERSIZE_PACKET
                ? "message is larger than the MQTT broker's maximum packet size"
                : "could not publish to topic " + p.topic.substr(0, 200) + ": " +
                      (rc == MOSQ_ERR_ERRNO ? strerror(errno) : mosquitto_strerror(rc));
        answer(kind, std::move(error));
        return;
    }
    // Its acknowledgement is read by this thread later (OnPublish), never before this.
    std::lock_guard<std::mutex> lock(core.mu);
    core.pending[mid] = Core::Pending{m.id, m.lease_token, std::move(p.topic), MonotonicMs()};
}

// Without a session for kOutageMs: what awaits an acknowledgement comes back deferred, and the
// queue too, but a probe (the dispatcher sends one message at a time while the destination is
// unreachable) waits up to the ack timeout, so delivery resumes as soon as the broker is back.
void Io::HandBack(int64_t now) {
    Core &core = *core_;
    std::string why =
        core.down_reason.empty() ? "not connected to the MQTT broker" : core.down_reason;
    std::lock_guard<std::mutex> lock(core.mu);
    for (auto &[mid, p] : core.pending)
        core.AnswerLocked(p.id, p.lease_token, OutcomeKind::Defer, why);
    core.pending.clear();
    bool hold = core.probing.load() && core.queue.size() == 1;
    if (hold && core.probe_held_since_ms == 0)
        core.probe_held_since_ms = now;
    if (!core.queue.empty() &&
        (!hold || now - core.probe_held_since_ms >= core.options.ack_timeout_ms)) {
        for (Message &m : core.queue)
            core.AnswerLocked(m.id, m.lease_token, OutcomeKind::Defer, why);
        core.queue.clear();
        core.probe_held_since_ms = 0;
    }
}

// A message without its acknowledgement within the ack timeout, on a live session: Retry.
void Io::CheckDeadlines(int64_t now) {
    Core &core = *core_;
    if (now - last_deadline_check_ms_ < kDeadlineCheckMs)
        return;
    last_deadline_check_ms_ = now;
    std::lock_guard<std::mutex> lock(core.mu);
    for (auto it = core.pending.begin(); it != core.pending.end();) {
        if (now - it->second.sent_ms >= core.options.ack_timeout_ms) {
            core.AnswerLocked(it->second.id, it->second.lease_token, OutcomeKind::Retry,
                              "no " +
                                  std::string(core.options.config.qos == 2 ? "PUBCOMP" : "PUBACK") +
                                  " within " + std::to_string(core.options.ack_timeout_ms) + " ms");
            it = core.pending.erase(it);
        } else {
            ++it;
        }
    }
}

void Io::Run() {
    Core &core = *core_;
    core.down_since_ms = MonotonicMs();
    std::vector<Message> batch;
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(core.mu);
            if (core.stop)
                break;
        }
        int64_t now = MonotonicMs();
        int sock = mosquitto_socket(mosq_);
        if (sock < 0 && core.session_up) {
            core.session_up = false;  // closed without a callback
            core.down_since_ms = now;
        }
        if (sock < 0 && now >= core.next_attempt_ms) {
            Connect(now);
            sock = mosquitto_socket(mosq_);
        }
        struct pollfd fds[2];
        fds[0] = {core.wake.fd(), POLLIN, 0};
        int nfds = 1;
        if (sock >= 0) {
            fds[1] = {sock,
                      static_cast<short>(POLLIN | (mosquitto_want_write(mosq_) ? POLLOUT : 0)), 0};
            nfds = 2;
        }
        int timeout = 100;
        if (sock < 0)
            timeout = static_cast<int>(std::clamp<int64_t>(core.next_attempt_ms - now, 0, 100));
        int n = poll(fds, nfds, timeout);
        if (n > 0 && (fds[0].revents & POLLIN))
            core.wake.Drain();
        if (sock >= 0) {
            if (n > 0 && (fds[1].revents & (POLLIN | POLLERR | POLLHUP)))
                mosquitto_loop_read(mosq_, 1);
            if (mosquitto_socket(mosq_) >= 0 && mosquitto_want_write(mosq_))
                mosquitto_loop_write(mosq_, 1);
            if (mosquitto_socket(mosq_) >= 0)
                mosquitto_loop_misc(
                    mosq_);  // keep alive: PINGREQ, and a broker that stopped answering
        }
        now = MonotonicMs();
        if (core.session_up) {
            {
                std::lock_guard<std::mutex> lock(core.mu);
                core.probe_held_since_ms = 0;
                batch.assign(std::make_move_iterator(core.queue.begin()),
                             std::make_move_iterator(core.queue.end()));
                core.queue.clear();
            }
            for (Message &m : batch)
                Publish(m);
            batch.clear();
            CheckDeadlines(now);
        } else if (core.down_since_ms != 0 && now - core.down_since_ms >= kOutageMs) {
            HandBack(now);
        }
    }
    // A normal disconnect keeps the session on the broker for its expiry interval.
    if (core.session_up) {
        mosquitto_disconnect(mosq_);
        mosquitto_loop_write(mosq_, 1);
    }
    mosquitto_destroy(mosq_);
}

bool MqttDriver::Start(std::string *error) {
    Core &core = *core_;
    const MqttConfig &c = core.options.config;
    if (!core.notify.Open(error) || !core.wake.Open(error))
        return false;
    struct mosquitto *mosq =
        mosquitto_new(core.options.client_id.c_str(), /*clean_session=*/false, core_.get());
    if (mosq == nullptr) {
        *error = std::string("could not create the MQTT client: ") + strerror(errno);
        return false;
    }
    // Each step names the setting but never its value (a password).
    error->clear();
    auto step = [&](int rc, const char *what) {
        if (rc == MOSQ_ERR_SUCCESS || !error->empty())
            return;
        *error = std::string("libmosquitto refused ") + what + ": " + mosquitto_strerror(rc);
    };
    step(mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5), "MQTT 5");
    step(
        mosquitto_int_option(mosq, MOSQ_OPT_SEND_MAXIMUM,
                             static_cast<int>(std::min<size_t>(core.options.max_in_flight, 65535))),
        "\"max_in_flight\"");
    step(mosquitto_int_option(mosq, MOSQ_OPT_TCP_NODELAY, 1), "TCP_NODELAY");
    if (!c.username.empty())
        step(mosquitto_username_pw_set(mosq, c.username.c_str(),
                                       c.password.empty() ? nullptr : c.password.c_str()),
             "\"username\"/\"password\"");
    if (c.tls) {
        if (c.ca_file.empty())
            step(mosquitto_int_option(mosq, MOSQ_OPT_TLS_USE_OS_CERTS, 1), "the system's CAs");
        step(mosquitto_tls_set(mosq, c.ca_file.empty() ? nullptr : c.ca_file.c_str(), nullptr,
                               c.cert_file.empty() ? nullptr : c.cert_file.c_str(),
                               c.key_file.empty() ? nullptr : c.key_file.c_str(), nullptr),
             "\"ca_file\"/\"cert_file\"/\"key_file\"");
        if (!c.tls_verify) {
            step(mosquitto_tls_opts_set(mosq, 0, nullptr, nullptr), "\"tls_verify\"");
            step(mosquitto_tls_insecure_set(mosq, true), "\"tls_verify\"");
        }
    }
    if (!error->empty()) {
        mosquitto_destroy(mosq);
        return false;
    }
    mosquitto_connect_v5_callback_set(mosq, OnConnect);
    mosquitto_disconnect_v5_callback_set(mosq, OnDisconnect);
    mosquitto_publish_v5_callback_set(mosq, OnPublish);
    std::shared_ptr<Core> owner = core_;
    if (!StartThread(
            &io_, owner, [owner, mosq] { Io(owner, mosq).Run(); }, "the MQTT I/O thread", error)) {
        mosquitto_destroy(mosq);
        return false;
    }
    return true;
}

void MqttDriver::Poll(std::vector<Outcome> &out) {
    core_->notify.Drain();
    std::vector<Outcome> got;
    core_->TakeOutcomes(got, "out of memory while recording acknowledgements");
    Deliver(got, out);
}

// Everything not acknowledged comes back deferred; an acknowledgement that still arrives for
// it is ignored.
void MqttDriver::Abandon() {
    std::lock_guard<std::mutex> lock(core_->mu);
    for (auto &[mid, p] : core_->pending)
        core_->AnswerLocked(p.id, p.lease_token, OutcomeKind::Defer,
                            "abandoned before the acknowledgement");
    core_->pending.clear();
    for (Message &m : core_->queue)
        core_->AnswerLocked(m.id, m.lease_token, OutcomeKind::Defer,
                            "abandoned before it was published");
    core_->queue.clear();
    core_->Notify();
}

}  // namespace

std::unique_ptr<Driver> MakeMqttDriver(const MqttDriverOptions &options, std::string *error) {
    auto core = std::make_shared<Core>();
    core->options = options;
    if (core->options.max_in_flight == 0)
        core->options.max_in_flight = 1;
    if (core->options.ack_timeout_ms <= 0)
        core->options.ack_timeout_ms = 10000;
    if (!core->guard.Set(options.address_rule, error))
        return nullptr;
    auto driver = std::make_unique<MqttDriver>(std::move(core));
    if (!driver->Start(error))
        return nullptr;
    return driver;
}

}  // namespace outbox
