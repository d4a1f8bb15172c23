// AMQP 0-9-1 driver (RabbitMQ) with librabbitmq.
//
// Threads: librabbitmq is a blocking, single-threaded library (connect, login, channel RPCs, and
// a send that waits while the broker applies flow control). So the whole connection lives in
// one I/O thread per destination (the skeleton of outbox/brokers/io_thread.hpp), started with
// every signal blocked, which never touches PostgreSQL. The worker's thread only hands messages
// over (Submit) and collects outcomes (Poll) through a mutex-protected Core; the I/O thread
// writes a byte to a pipe whenever there is something to collect, and that pipe is the driver's
// WaitFd. Submit writes a byte to the I/O thread's own wake pipe. Nothing the worker calls can
// block on the network.
//
// Confirms: the channel is in confirm mode, so the broker numbers the publishes 1, 2, 3... and
// acknowledges them (basic.ack, possibly "multiple") or refuses them (basic.nack). A mandatory
// message no queue is bound for comes back as basic.return before its basic.ack; the return
// is matched to the oldest unconfirmed publish with its message_id (= event_id).
#include "outbox/brokers/amqp/driver.hpp"
#include "outbox/brokers/amqp/rabbitmq_c.hpp"

#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "outbox/broker_address.hpp"
#include "outbox/brokers/amqp/classify.hpp"
#include "outbox/clock.hpp"
#include "outbox/brokers/cloudevents.hpp"
#include "outbox/brokers/io_thread.hpp"
#include "outbox/headers.hpp"

namespace outbox {

namespace {

constexpr amqp_channel_t kChannel = 1;
constexpr int kFrameMax = 131072;
// Reconnecting: the first retry soon, then at most this far apart.
constexpr int64_t kReconnectMinMs = 250;
constexpr int64_t kReconnectMaxMs = 2000;
// The I/O thread's longest sleep (it also sends heartbeats and checks confirm timeouts).
constexpr int kIdleWaitMs = 200;
// How long the frames of a returned message may take after its basic.return.
constexpr int64_t kReturnBodyWaitMs = 5000;

struct timeval MsToTimeval(int64_t ms) {
    struct timeval tv;
    tv.tv_sec = static_cast<time_t>(ms / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
    return tv;
}

amqp_bytes_t Bytes(const std::string &s) {
    amqp_bytes_t b;
    b.len = s.size();
    b.bytes = const_cast<char *>(s.data());
    return b;
}

std::string FromBytes(amqp_bytes_t b) {
    return std::string(static_cast<const char *>(b.bytes), b.len);
}

// "404 NOT_FOUND - no exchange 'x' in vhost '/'": a broker reply, for last_error. The broker's
// text already begins with the code's name.
std::string ReplyText(int code, amqp_bytes_t text) {
    std::string t = FromBytes(text);
    for (char &c : t)
        if (static_cast<unsigned char>(c) < 0x20)
            c = ' ';
    if (t.size() > 300)
        t.resize(300);
    std::string name = AmqpReplyCodeName(code);
    if (!name.empty() && t.compare(0, name.size(), name) == 0)
        return std::to_string(code) + " " + t;
    return std::to_string(code) + (name.empty() ? "" : " " + name) + (t.empty() ? "" : " - " + t);
}

// The reason in an RPC reply that was not normal (never quotes the URL or the credentials).
std::string RpcError(const amqp_rpc_reply_t &r, int *server_code) {
    *server_code = 0;
    switch (r.reply_type) {
        case AMQP_RESPONSE_NORMAL:
            return "";
        case AMQP_RESPONSE_NONE:
            return "missing RPC reply";
        case AMQP_RESPONSE_LIBRARY_EXCEPTION:
            return amqp_error_string2(r.library_error);
        case AMQP_RESPONSE_SERVER_EXCEPTION:
            if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
                auto *m = static_cast<amqp_connection_close_t *>(r.reply.decoded);
                *server_code = m->reply_code;
                return ReplyText(m->reply_code, m->reply_text);
            }
            if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
                auto *m = static_cast<amqp_channel_close_t *>(r.reply.decoded);
                *server_code = m->reply_code;
                return ReplyText(m->reply_code, m->reply_text);
            }
            return "unexpected server reply";
    }
    return "unknown RPC reply";
}

// Everything the worker's thread and the I/O thread share. The I/O thread owns the connection;
// the fields under `mu` (ThreadShared's, and `abandon`) are the hand-over in both directions.
struct Core : ThreadShared {
    // Set once before the thread starts.
    AmqpDriverOptions options;
    std::vector<char> url_buffer;  // amqp_parse_url points into it
    struct amqp_connection_info info;
    std::string where;  // "host:port", for messages (never the credentials)
    std::string ce_type_fallback;
    BrokerGuard guard;  // outbox.broker_allowed_networks

    bool abandon = false;  // under mu

    std::atomic<int> socket_fd{-1};
    std::atomic<int64_t> last_loop_ms{0};  // the I/O thread's latest turn

    // I/O thread only.
    amqp_connection_state_t conn = nullptr;
    struct Unconfirmed {
        int64_t id;
        int64_t lease_token;
        std::string event_id;
        std::string routing_key;
        int64_t published_ms;
        bool returned = false;
        std::string return_reason;
    };
    std::map<uint64_t, Unconfirmed> unconfirmed;  // by delivery tag
    uint64_t next_tag = 1;
    int64_t down_since_ms = 0;  // 0: connected, or never tried
    int64_t next_connect_ms = 0;
    int64_t reconnect_delay_ms = kReconnectMinMs;
    std::string last_error;  // why the latest connection attempt failed / ended
    int64_t probe_held_since_ms = 0;

    // No byte in the pipe per outcome: Run notifies once per turn.
    void AddOutcome(int64_t id, int64_t token, OutcomeKind kind, std::string error) {
        std::lock_guard<std::mutex> lock(mu);
        outcomes.push_back(Outcome{id, token, kind, std::move(error), -1});
    }

    void Run();
    bool Connect();
    void Disconnect(bool polite);
    void ConnectionEnded(int reply_code, const std::string &why);
    bool PublishQueued();
    bool Publish(Message &m);
    bool ReadFrames();
    bool ReadReturn(const amqp_basic_return_t &r);
    void Confirm(uint64_t tag, bool multiple, bool ack);
    bool ReopenChannel(int reply_code, const std::string &why);
    void FailUnconfirmed(OutcomeKind kind, const std::string &why);
    void AnswerQueuedWhileDown(int64_t now);
    void AnswerAbandoned();
    void Wait(int timeout_ms);
};

// The I/O thread.
void Core::Run() {
    for (;;) {
        int64_t now = MonotonicMs();
        last_loop_ms.store(now);
        bool stopping, abandoning;
        {
            std::lock_guard<std::mutex> lock(mu);
            stopping = stop;
            abandoning = abandon;
        }
        if (stopping)
            break;
        if (abandoning) {
            AnswerAbandoned();
            Notify();
            Wait(kIdleWaitMs);
            continue;
        }
        if (conn == nullptr) {
            if (now >= next_connect_ms && !Connect()) {
                if (down_since_ms == 0)
                    down_since_ms = now;
                next_connect_ms = now + reconnect_delay_ms;
                reconnect_delay_ms = std::min(kReconnectMaxMs, reconnect_delay_ms * 2);
            }
            if (conn == nullptr) {
                AnswerQueuedWhileDown(MonotonicMs());
                Notify();
                Wait(static_cast<int>(
                    std::clamp<int64_t>(next_connect_ms - MonotonicMs(), 0, kIdleWaitMs)));
                continue;
            }
        }
        bool alive = PublishQueued() && ReadFrames();
        if (alive && !unconfirmed.empty() &&
            MonotonicMs() - unconfirmed.begin()->second.published_ms > options.confirm_timeout_ms) {
            AddLog("no confirm from " + where + " within " +
                   std::to_string(options.confirm_timeout_ms) +
                   " ms: handing back the messages in flight and reconnecting");
            ConnectionEnded(
                0, "no confirm within " + std::to_string(options.confirm_timeout_ms) + " ms");
            alive = false;
        }
        Notify();
        if (!alive)
            continue;
        // Frames already read into librabbitmq's buffer would not wake poll().
        if (amqp_frames_enqueued(conn) || amqp_data_in_buffer(conn))
            continue;
        bool has_queue;
        {
            std::lock_guard<std::mutex> lock(mu);
            has_queue = !queue.empty();
        }
        if (!has_queue)
            Wait(kIdleWaitMs);
    }
    // Stopping: a polite close when the broker answers at once; nothing here is owed anyone.
    if (conn != nullptr)
        Disconnect(true);
}

// Sleeps until the socket is readable, the worker wakes us, or `timeout_ms` passes.
void Core::Wait(int timeout_ms) {
    struct pollfd fds[2];
    int n = 0;
    fds[n++] = {wake.fd(), POLLIN, 0};
    if (conn != nullptr)
        fds[n++] = {amqp_get_sockfd(conn), POLLIN, 0};
    if (poll(fds, n, timeout_ms) > 0 && (fds[0].revents & POLLIN))
        wake.Drain();
}

// Opens the connection, logs in, opens the channel in confirm mode. On failure records why in
// last_error and leaves conn null.
bool Core::Connect() {
    conn = amqp_new_connection();
    if (conn == nullptr) {
        last_error = "out of memory creating the connection";
        return false;
    }
    amqp_socket_t *socket = info.ssl ? amqp_ssl_socket_new(conn) : amqp_tcp_socket_new(conn);
    auto fail = [&](std::string why) {
        // A guarded destination shows only that its broker cannot be reached (the dispatcher
        // says so): why goes to the server log, once per change.
        if (guard.guarded() && why != last_error)
            AddLog(why);
        last_error = std::move(why);
        Disconnect(false);
        return false;
    };
    if (socket == nullptr)
        return fail("could not create a socket");
    if (info.ssl) {
        const AmqpConfig &c = options.config;
        amqp_ssl_socket_set_verify_peer(socket, c.tls_verify ? 1 : 0);
        amqp_ssl_socket_set_verify_hostname(socket, c.tls_verify ? 1 : 0);
        if (!c.ca_file.empty() && amqp_ssl_socket_set_cacert(socket, c.ca_file.c_str()) != 0)
            return fail("could not load \"ca_file\"");
        if (!c.cert_file.empty() &&
            amqp_ssl_socket_set_key(socket, c.cert_file.c_str(), c.key_file.c_str()) != 0)
            return fail("could not load \"cert_file\"/\"key_file\"");
    }
    // A guarded broker's name is resolved and checked first, and the address rabbitmq-c then
    // connected to is checked again before anything is sent (the name may resolve anew).
    std::string why;
    std::vector<std::string> addresses;
    if (guard.guarded() && !guard.Resolve(info.host, &addresses, &why))
        return fail("not connecting to " + where + ": " + why);
    struct timeval timeout = MsToTimeval(options.config.connect_timeout_ms);
    int status = amqp_socket_open_noblock(socket, info.host, info.port, &timeout);
    if (status != AMQP_STATUS_OK)
        return fail("cannot connect to " + where + ": " + amqp_error_string2(status));
    if (guard.guarded()) {
        struct sockaddr_storage peer;
        socklen_t length = sizeof peer;
        if (getpeername(amqp_get_sockfd(conn), reinterpret_cast<struct sockaddr *>(&peer),
                        &length) != 0)
            return fail("cannot connect to " + where + ": " + strerror(errno));
        if (!guard.Allows(reinterpret_cast<struct sockaddr *>(&peer), &why))
            return fail("not connecting to " + where + ": " + why);
    }
    amqp_set_handshake_timeout(conn, &timeout);
    amqp_set_rpc_timeout(conn, &timeout);

    amqp_table_entry_t entry;
    entry.key = amqp_cstring_bytes("connection_name");
    entry.value.kind = AMQP_FIELD_KIND_UTF8;
    entry.value.value.bytes = Bytes(options.client_name);
    amqp_table_t properties{1, &entry};
    amqp_rpc_reply_t reply =
        amqp_login_with_properties(conn, info.vhost, 0, kFrameMax, options.config.heartbeat_s,
                                   &properties, AMQP_SASL_METHOD_PLAIN, info.user, info.password);
    int code = 0;
    if (reply.reply_type != AMQP_RESPONSE_NORMAL)
        return fail("login to " + where + " failed: " + RpcError(reply, &code));
    amqp_channel_open(conn, kChannel);
    reply = amqp_get_rpc_reply(conn);
    if (reply.reply_type != AMQP_RESPONSE_NORMAL)
        return fail("could not open a channel on " + where + ": " + RpcError(reply, &code));
    amqp_confirm_select(conn, kChannel);
    reply = amqp_get_rpc_reply(conn);
    if (reply.reply_type != AMQP_RESPONSE_NORMAL)
        return fail("could not select confirm mode on " + where + ": " + RpcError(reply, &code));
    next_tag = 1;
    socket_fd.store(amqp_get_sockfd(conn));
    if (down_since_ms != 0)
        AddLog("connected to " + where + " again");
    down_since_ms = 0;
    reconnect_delay_ms = kReconnectMinMs;
    last_error.clear();
    return true;
}

// Drops the connection (after a connection.close with a short timeout when `polite`).
void Core::Disconnect(bool polite) {
    if (conn == nullptr)
        return;
    socket_fd.store(-1);
    if (polite) {
        struct timeval quick = MsToTimeval(500);
        amqp_set_rpc_timeout(conn, &quick);
        amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    }
    amqp_destroy_connection(conn);
    conn = nullptr;
}

// The connection is gone (`reply_code` 0: lost, else the broker's connection.close code): the
// unconfirmed messages get their outcome and a reconnect is due soon.
void Core::ConnectionEnded(int reply_code, const std::string &why) {
    last_error = why;
    OutcomeKind kind = ClassifyAmqpConnectionEnd(reply_code);
    FailUnconfirmed(kind, (kind == OutcomeKind::Defer ? "connection to " + where + " lost"
                                                      : "connection to " + where + " closed") +
                              " before the broker confirmed: " + why);
    Disconnect(false);
    int64_t now = MonotonicMs();
    down_since_ms = now;
    next_connect_ms = now + kReconnectMinMs;
    reconnect_delay_ms = kReconnectMinMs;
}

void Core::FailUnconfirmed(OutcomeKind kind, const std::string &why) {
    for (auto &[tag, u] : unconfirmed)
        AddOutcome(u.id, u.lease_token, u.returned ? OutcomeKind::Dead : kind,
                   u.returned ? u.return_reason : why);
    unconfirmed.clear();
}

// While no connection can be made, queued messages come back as deferred (the dispatcher then
// probes one message at a time). A probe is held until the broker is back, up to the confirm
// timeout, so that delivery resumes the moment the connection is made again.
void Core::AnswerQueuedWhileDown(int64_t now) {
    if (down_since_ms == 0)
        return;  // the first attempt has not finished yet
    std::deque<Message> taken;
    {
        std::lock_guard<std::mutex> lock(mu);
        if (queue.empty()) {
            probe_held_since_ms = 0;
            return;
        }
        if (probing.load() && queue.size() == 1) {
            if (probe_held_since_ms == 0)
                probe_held_since_ms = now;
            if (now - probe_held_since_ms < options.confirm_timeout_ms)
                return;
        }
        taken.swap(queue);
        probe_held_since_ms = 0;
    }
    std::string why = last_error.empty() ? "not connected to " + where : last_error;
    for (Message &m : taken)
        AddOutcome(m.id, m.lease_token, OutcomeKind::Defer, why);
}

// Abandon(): nothing more is published; what waits or is unconfirmed comes back deferred.
void Core::AnswerAbandoned() {
    std::deque<Message> taken;
    {
        std::lock_guard<std::mutex> lock(mu);
        taken.swap(queue);
    }
    for (Message &m : taken)
        AddOutcome(m.id, m.lease_token, OutcomeKind::Defer, "abandoned before it was published");
    FailUnconfirmed(OutcomeKind::Defer, "abandoned before the broker confirmed");
}

// Publishes everything queued. False when the connection failed.
bool Core::PublishQueued() {
    std::deque<Message> taken;
    {
        std::lock_guard<std::mutex> lock(mu);
        taken.swap(queue);
    }
    probe_held_since_ms = 0;
    while (!taken.empty()) {
        if (!Publish(taken.front())) {
            // Not sent: back to the front of the queue, for the next connection.
            std::lock_guard<std::mutex> lock(mu);
            for (auto it = taken.rbegin(); it != taken.rend(); ++it)
                queue.push_front(std::move(*it));
            return false;
        }
        taken.pop_front();
    }
    return true;
}

// One basic.publish. False when the connection failed (then nothing of `m` was recorded).
bool Core::Publish(Message &m) {
    const std::string &routing_key = !m.topic.empty() ? m.topic : options.config.routing_key;
    // The producer's ce_type header, else the routing key, else the destination's name.
    const std::string ce_type = CloudEventType(
        m, !options.config.routing_key.empty() ? options.config.routing_key : ce_type_fallback);
    std::string time = FormatRfc3339Ms(m.created_at_ms);

    // The producer's content-type header is the message's content type (as for webhooks).
    std::string content_type = m.payload_is_json ? "application/json" : "application/octet-stream";
    std::vector<amqp_table_entry_t> entries;
    entries.reserve(m.headers.size() + 5);
    auto add = [&](const std::string &name, const std::string &value) {
        amqp_table_entry_t e;
        e.key = Bytes(name);
        e.value.kind = AMQP_FIELD_KIND_UTF8;
        e.value.value.bytes = Bytes(value);
        entries.push_back(e);
    };
    for (const auto &[name, value] : m.headers) {
        if (name.size() == 12 && strncasecmp(name.c_str(), "content-type", 12) == 0) {
            content_type = value;
            continue;
        }
        if (name.size() > 128 || IsReservedHeaderName(name))
            continue;  // a field-table name is at most 128 bytes; the check refuses both
        add(name, value);
    }
    // CloudEvents AMQP protocol binding, binary mode: the attributes as application
    // properties (AMQP 0-9-1 headers) "cloudEvents:<name>"; datacontenttype is content-type.
    static const std::string kId = "cloudEvents:id", kType = "cloudEvents:type",
                             kSource = "cloudEvents:source", kSpec = "cloudEvents:specversion",
                             kTime = "cloudEvents:time", kSpecVersion = "1.0";
    add(kId, m.event_id);
    add(kType, ce_type);
    add(kSource, options.source);
    add(kSpec, kSpecVersion);
    add(kTime, time);

    amqp_basic_properties_t props;
    memset(&props, 0, sizeof props);
    props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                   AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG |
                   AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_APP_ID_FLAG;
    props.content_type = Bytes(content_type);
    props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    props.message_id = Bytes(m.event_id);
    props.timestamp = static_cast<uint64_t>(m.created_at_ms / 1000);
    props.type = Bytes(ce_type);
    static const std::string kAppId = "outbox";
    props.app_id = Bytes(kAppId);
    props.headers.num_entries = static_cast<int>(entries.size());
    props.headers.entries = entries.data();

    int status =
        amqp_basic_publish(conn, kChannel, Bytes(options.config.exchange), Bytes(routing_key),
                           /*mandatory=*/1, /*immediate=*/0, &props, Bytes(m.payload));
    if (status != AMQP_STATUS_OK) {
        ConnectionEnded(0, std::string("publish failed: ") + amqp_error_string2(status));
        return false;
    }
    unconfirmed.emplace(next_tag++, Unconfirmed{m.id, m.lease_token, m.event_id, routing_key,
                                                MonotonicMs(), false, std::string()});
    return true;
}

// Reads every frame that has arrived and acts on it. False when the connection ended.
bool Core::ReadFrames() {
    for (;;) {
        amqp_frame_t frame;
        struct timeval zero = {0, 0};
        int status = amqp_simple_wait_frame_noblock(conn, &frame, &zero);
        if (status == AMQP_STATUS_TIMEOUT)
            break;
        if (status != AMQP_STATUS_OK) {
            ConnectionEnded(0, amqp_error_string2(status));
            return false;
        }
        if (frame.frame_type != AMQP_FRAME_METHOD)
            continue;  // content outside a basic.return, heartbeats: nothing to do
        switch (frame.payload.method.id) {
            case AMQP_BASIC_ACK_METHOD: {
                auto *a = static_cast<amqp_basic_ack_t *>(frame.payload.method.decoded);
                Confirm(a->delivery_tag, a->multiple != 0, true);
                break;
            }
            case AMQP_BASIC_NACK_METHOD: {
                auto *n = static_cast<amqp_basic_nack_t *>(frame.payload.method.decoded);
                Confirm(n->delivery_tag, n->multiple != 0, false);
                break;
            }
            case AMQP_BASIC_RETURN_METHOD: {
                amqp_basic_return_t r =
                    *static_cast<amqp_basic_return_t *>(frame.payload.method.decoded);
                if (!ReadReturn(r))
                    return false;
                break;
            }
            case AMQP_CHANNEL_CLOSE_METHOD: {
                auto *c = static_cast<amqp_channel_close_t *>(frame.payload.method.decoded);
                int code = c->reply_code;
                std::string why = ReplyText(code, c->reply_text);
                amqp_channel_close_ok_t ok;
                memset(&ok, 0, sizeof ok);
                amqp_send_method(conn, kChannel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
                if (!ReopenChannel(code, why))
                    return false;
                break;
            }
            case AMQP_CONNECTION_CLOSE_METHOD: {
                auto *c = static_cast<amqp_connection_close_t *>(frame.payload.method.decoded);
                int code = c->reply_code;
                std::string why =
                    "the broker closed the connection: " + ReplyText(code, c->reply_text);
                amqp_connection_close_ok_t ok;
                memset(&ok, 0, sizeof ok);
                amqp_send_method(conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
                AddLog(why);
                ConnectionEnded(code, why);
                return false;
            }
            case AMQP_CONNECTION_BLOCKED_METHOD: {
                auto *b = static_cast<amqp_connection_blocked_t *>(frame.payload.method.decoded);
                AddLog("the broker blocked the connection (publishes wait): " +
                       FromBytes(b->reason));
                break;
            }
            case AMQP_CONNECTION_UNBLOCKED_METHOD:
                AddLog("the broker unblocked the connection");
                break;
            default:
                break;
        }
    }
    amqp_maybe_release_buffers(conn);
    return true;
}

// A basic.return: reads the returned message's header and body and marks the publish it
// belongs to. False when the connection ended meanwhile.
bool Core::ReadReturn(const amqp_basic_return_t &r) {
    std::string reason = std::string(ClassifyAmqpReturn(r.reply_code) == OutcomeKind::Dead
                                         ? "unroutable: "
                                         : "returned by the broker: ") +
                         (AmqpReplyCodeName(r.reply_code)[0] ? AmqpReplyCodeName(r.reply_code)
                                                             : std::to_string(r.reply_code)) +
                         " exchange=" + FromBytes(r.exchange) +
                         " routing_key=" + FromBytes(r.routing_key);
    std::string message_id;
    uint64_t body_size = 0, received = 0;
    bool header_seen = false;
    int64_t deadline = MonotonicMs() + kReturnBodyWaitMs;
    while (!header_seen || received < body_size) {
        amqp_frame_t frame;
        struct timeval tv = MsToTimeval(std::max<int64_t>(0, deadline - MonotonicMs()));
        int status = amqp_simple_wait_frame_noblock(conn, &frame, &tv);
        if (status != AMQP_STATUS_OK) {
            ConnectionEnded(
                0, std::string("reading a returned message: ") + amqp_error_string2(status));
            return false;
        }
        if (frame.frame_type == AMQP_FRAME_HEADER) {
            header_seen = true;
            body_size = frame.payload.properties.body_size;
            auto *p = static_cast<amqp_basic_properties_t *>(frame.payload.properties.decoded);
            if (p != nullptr && (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG))
                message_id = FromBytes(p->message_id);
        } else if (frame.frame_type == AMQP_FRAME_BODY) {
            received += frame.payload.body_fragment.len;
        }
    }
    OutcomeKind kind = ClassifyAmqpReturn(r.reply_code);
    for (auto &[tag, u] : unconfirmed) {
        if (!u.returned && u.event_id == message_id) {
            u.returned = true;
            // Only NO_ROUTE/NO_CONSUMERS are final; another return code spends an attempt.
            u.return_reason = reason;
            if (kind != OutcomeKind::Dead) {
                AddOutcome(u.id, u.lease_token, kind, reason);
                unconfirmed.erase(tag);
            }
            break;
        }
    }
    return true;
}

// basic.ack / basic.nack for `tag` (and every earlier one when `multiple`).
void Core::Confirm(uint64_t tag, bool multiple, bool ack) {
    auto resolve = [&](const Unconfirmed &u) {
        if (u.returned)
            AddOutcome(u.id, u.lease_token, OutcomeKind::Dead, u.return_reason);
        else if (ack)
            AddOutcome(u.id, u.lease_token, OutcomeKind::Delivered, std::string());
        else
            AddOutcome(u.id, u.lease_token, OutcomeKind::Retry,
                       "basic.nack: the broker did not take the message (a queue limit with "
                       "overflow reject-publish, or an internal error)");
    };
    if (multiple) {
        auto end = tag == 0 ? unconfirmed.end() : unconfirmed.upper_bound(tag);
        for (auto it = unconfirmed.begin(); it != end; ++it)
            resolve(it->second);
        unconfirmed.erase(unconfirmed.begin(), end);
        return;
    }
    auto it = unconfirmed.find(tag);
    if (it == unconfirmed.end())
        return;
    resolve(it->second);
    unconfirmed.erase(it);
}

// The broker closed the channel: the unconfirmed messages get their outcome, and a new channel
// is opened in confirm mode. False when that failed (the connection is then gone too).
bool Core::ReopenChannel(int reply_code, const std::string &why) {
    AddLog("the broker closed the channel: " + why);
    FailUnconfirmed(ClassifyAmqpChannelClose(reply_code), why);
    amqp_channel_open(conn, kChannel);
    amqp_rpc_reply_t reply = amqp_get_rpc_reply(conn);
    int code = 0;
    if (reply.reply_type == AMQP_RESPONSE_NORMAL) {
        amqp_confirm_select(conn, kChannel);
        reply = amqp_get_rpc_reply(conn);
    }
    if (reply.reply_type != AMQP_RESPONSE_NORMAL) {
        ConnectionEnded(0, "could not reopen the channel: " + RpcError(reply, &code));
        return false;
    }
    next_tag = 1;
    return true;
}

class AmqpDriver final : public ThreadedDriver {
  public:
    explicit AmqpDriver(std::shared_ptr<Core> core)
        : ThreadedDriver(core, core->options.max_in_flight), core_(std::move(core)) {}
    ~AmqpDriver() override;

    bool Start(std::string *error);

    void Submit(std::vector<Message> batch) override { Enqueue(batch); }
    void Poll(std::vector<Outcome> &out) override;
    int64_t PollTimeoutMs() const override { return in_flight_ == 0 ? -1 : 200; }
    void Abandon() override;

  private:
    std::shared_ptr<Core> core_;
    std::thread thread_;
};

bool AmqpDriver::Start(std::string *error) {
    if (!core_->wake.Open(error) || !core_->notify.Open(error))
        return false;
    std::shared_ptr<Core> core = core_;
    return StartThread(
        &thread_, core,
        [core] {
            try {
                core->Run();
            } catch (...) {
                core->AddLog("the AMQP I/O thread stopped on an unexpected error");
            }
            core->Disconnect(false);
        },
        "the AMQP I/O thread", error);
}

AmqpDriver::~AmqpDriver() {
    if (!thread_.joinable())
        return;
    core_->RequestStop();
    // A thread stuck in a send (broker flow control) is freed by shutting its socket down.
    int fd = core_->socket_fd.load();
    if (!core_->WaitDone(1000)) {
        if (fd >= 0)
            shutdown(fd, SHUT_RDWR);
        // Still connecting (bounded by connect_timeout): let it finish on its own; it holds
        // its own reference to the core.
        JoinOrDetach(thread_, core_->WaitDone(200));
        return;
    }
    thread_.join();
}

void AmqpDriver::Poll(std::vector<Outcome> &out) {
    core_->notify.Drain();
    std::vector<Outcome> got;
    core_->TakeOutcomes(got, nullptr);
    Deliver(got, out);
    // A thread that has not come round for much longer than the confirm timeout is stuck in a
    // send the broker does not read (flow control): shutting the socket down frees it, and
    // what was in flight comes back deferred.
    int64_t last = core_->last_loop_ms.load();
    int fd = core_->socket_fd.load();
    if (in_flight_ > 0 && fd >= 0 && last != 0 &&
        MonotonicMs() - last > core_->options.confirm_timeout_ms + 1000) {
        core_->AddLog("the AMQP I/O thread is stuck in a send: dropping the connection");
        shutdown(fd, SHUT_RDWR);
        core_->last_loop_ms.store(MonotonicMs());
    }
}

void AmqpDriver::Abandon() {
    {
        std::lock_guard<std::mutex> lock(core_->mu);
        core_->abandon = true;
    }
    core_->Wake();
}

}  // namespace

std::unique_ptr<Driver> MakeAmqpDriver(const AmqpDriverOptions &options, std::string *error) {
    auto core = std::make_shared<Core>();
    core->options = options;
    if (core->options.max_in_flight == 0)
        core->options.max_in_flight = 1;
    core->url_buffer.assign(options.config.url.begin(), options.config.url.end());
    core->url_buffer.push_back('\0');
    amqp_default_connection_info(&core->info);
    if (amqp_parse_url(core->url_buffer.data(), &core->info) != AMQP_STATUS_OK) {
        *error = "the \"url\" of the destination does not parse";  // never quoted: credentials
        return nullptr;
    }
    core->where = std::string(core->info.ssl ? "amqps://" : "amqp://") + core->info.host + ":" +
                  std::to_string(core->info.port);
    core->ce_type_fallback = options.destination;
    if (!core->guard.Set(options.address_rule, error))
        return nullptr;
    auto driver = std::make_unique<AmqpDriver>(std::move(core));
    if (!driver->Start(error))
        return nullptr;
    return driver;
}

}  // namespace outbox
