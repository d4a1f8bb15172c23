// Webhook driver: one libcurl multi handle per destination (CurlMulti, brokers/curl_multi.hpp
// says how it is driven and why every call into it runs with signals blocked), one POST per
// message. libcurl's callbacks (headers, body, open socket) run on the worker's thread inside
// those calls and only record into plain members. Over HTTPS, Poll also serves every socket
// every 50 ms while transfers run, against a lost HTTP/2 wake-up in libcurl (Sweep).
#include "outbox/brokers/webhook/driver.hpp"

#include <arpa/inet.h>
#include <strings.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <deque>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <curl/curl.h>

#include "outbox/brokers/webhook/classify.hpp"
#include "outbox/brokers/cloudevents.hpp"
#include "outbox/brokers/curl_multi.hpp"
#include "outbox/brokers/signals.hpp"
#include "outbox/clock.hpp"
#include "outbox/headers.hpp"
#include "outbox/network_policy.hpp"
#include "outbox/one_line.hpp"
#include "outbox/brokers/webhook/retry_after.hpp"
#include "outbox/signing.hpp"

namespace outbox {

namespace {

constexpr size_t kBodySnippetBytes = 200;
// Response bytes kept: enough for the snippet; the rest of a response is read and discarded.
constexpr size_t kBodyKeepBytes = 256;
constexpr size_t kRetryAfterKeepBytes = 128;
// How often every socket of an HTTPS destination is served even without an event (see Sweep).
constexpr int64_t kSweepIntervalNs = 50 * 1000000;
// Parts of the URL shorter than this are not searched for in error texts: too likely to match
// harmless words, and too short to be a credential.
constexpr size_t kMinRedactBytes = 6;

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
    return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// One request: its easy handle (reused from transfer to transfer) and what the callbacks record.
struct Transfer {
    CURL *easy = nullptr;
    curl_slist *headers = nullptr;
    bool active = false;  // added to the multi handle
    int64_t id = 0;
    int64_t lease_token = 0;
    std::string body;  // the payload; libcurl reads it in place (CURLOPT_POSTFIELDS)
    char error[CURL_ERROR_SIZE] = {0};
    char response[kBodyKeepBytes] = {0};
    size_t response_len = 0;
    char retry_after[kRetryAfterKeepBytes] = {0};
    size_t retry_after_len = 0;
    bool has_retry_after = false;
    // Addresses of this request's connection attempts (OnOpenSocket): the first one
    // outbox.webhook_allowed_networks refused, how many it refused, how many it let through.
    const std::vector<Network> *allowed = nullptr;
    char refused_address[48] = {0};
    int refused = 0;
    int opened = 0;

    Transfer() = default;
    Transfer(const Transfer &) = delete;
    Transfer &operator=(const Transfer &) = delete;
    ~Transfer() {
        if (easy)
            curl_easy_cleanup(easy);
        curl_slist_free_all(headers);
    }
};

class WebhookDriver final : public Driver {
  public:
    explicit WebhookDriver(const WebhookDriverOptions &options);
    ~WebhookDriver() override;

    bool Init(std::string *error);

    void Submit(std::vector<Message> batch) override;
    void Poll(std::vector<Outcome> &out) override;
    size_t InFlight() const override { return active_ + waiting_.size() + ready_.size(); }
    size_t Capacity() const override {
        return Broken() || InFlight() >= max_in_flight_ ? 0 : max_in_flight_ - InFlight();
    }
    int WaitFd() const override { return multi_.WaitFd(); }
    int64_t PollTimeoutMs() const override;
    void Abandon() override;
    bool Broken() const override { return multi_.Broken(); }
    void TakeLog(std::vector<std::string> &lines) override {
        multi_.TakeLog(lines);
        for (std::string &l : log_)
            lines.push_back(std::move(l));
        log_.clear();
    }

  private:
    static curl_socket_t OnOpenSocket(void *clientp, curlsocktype purpose,
                                      struct curl_sockaddr *address);
    static size_t OnHeader(char *data, size_t size, size_t count, void *userp);
    static size_t OnBody(char *data, size_t size, size_t count, void *userp);

    Transfer *NewTransfer(std::string *error);
    void StartWaiting();
    bool Start(Message &m, int64_t waited_ms, Transfer *t, std::string *why, OutcomeKind *kind);
    curl_slist *BuildHeaders(const Message &m, int64_t timestamp, const std::string &signature);
    void Sweep();
    void CollectFinished();
    Outcome Finish(Transfer *t, CURLcode result);
    void Release(Transfer *t);
    std::string Redact(std::string text) const;
    void AddLog(std::string line);

    WebhookConfig config_;
    std::string destination_;
    std::string source_;
    std::string ce_type_fallback_;  // default_topic, else the destination's name
    size_t max_in_flight_;
    int64_t budget_ms_;   // submit to outcome, at most: half of outbox.lease_timeout
    int64_t timeout_ms_;  // config_.timeout_ms, lowered to budget_ms_
    std::string allowed_text_;
    std::vector<Network> allowed_;
    bool show_response_body_;
    bool is_https_ = false;                  // HTTP/2 is possible (only negotiated over TLS)
    std::string ca_file_;                    // the CA bundle trusted; empty: libcurl's defaults
    std::vector<std::string> secret_parts_;  // URL parts never to be shown in an error

    // Before pool_: the easy handles are cleaned up before the multi handle.
    CurlMulti multi_;
    int64_t next_sweep_ns_ = -1;  // HTTPS only; -1 while nothing is in flight

    std::vector<std::unique_ptr<Transfer>> pool_;  // every transfer ever made (<= max_in_flight)
    std::vector<Transfer *> free_;                 // idle ones, ready for reuse
    size_t active_ = 0;
    struct Waiting {
        Message message;
        int64_t submitted_ns;  // monotonic
    };
    std::deque<Waiting> waiting_;  // submitted beyond max_in_flight, not started yet
    std::vector<Outcome> ready_;   // known outcomes not yet returned by Poll
    std::vector<std::string> log_;
};

WebhookDriver::WebhookDriver(const WebhookDriverOptions &options)
    : config_(options.config),
      destination_(options.destination),
      source_(options.source),
      max_in_flight_(static_cast<size_t>(std::max(1, options.config.max_in_flight))),
      budget_ms_(std::max<int64_t>(1, options.lease_timeout_ms / 2)),
      timeout_ms_(std::min(options.config.timeout_ms, budget_ms_)),
      allowed_text_(options.allowed_networks),
      show_response_body_(options.show_response_body) {
    if (!config_.default_topic.empty())
        ce_type_fallback_ = config_.default_topic;
    else
        ce_type_fallback_ = destination_;
}

bool WebhookDriver::Init(std::string *error) {
    // The URL's credentials, path and query may be secret (many services put a token in the
    // path): remember them so that no error text can quote them.
    secret_parts_.push_back(config_.url);
    if (CURLU *u = curl_url()) {
        if (curl_url_set(u, CURLUPART_URL, config_.url.c_str(), 0) == CURLUE_OK) {
            for (CURLUPart part :
                 {CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_PATH, CURLUPART_QUERY}) {
                char *value = nullptr;
                if (curl_url_get(u, part, &value, 0) == CURLUE_OK && value != nullptr &&
                    strlen(value) >= kMinRedactBytes)
                    secret_parts_.emplace_back(value);
                curl_free(value);
            }
            char *scheme = nullptr;
            if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK && scheme != nullptr)
                is_https_ = strcasecmp(scheme, "https") == 0;
            curl_free(scheme);
        }
        curl_url_cleanup(u);
    }

    ca_file_ = config_.ca_file.empty() ? CurlDefaultCaFile() : config_.ca_file;

    std::string network_error;
    if (!ParseNetworkList(allowed_text_, &allowed_, &network_error)) {
        *error = "outbox.webhook_allowed_networks is invalid: " + network_error;
        return false;
    }
    if (timeout_ms_ < config_.timeout_ms)
        AddLog("timeout_ms lowered from " + std::to_string(config_.timeout_ms) + " to " +
               std::to_string(timeout_ms_) + " ms to stay within half of outbox.lease_timeout (" +
               std::to_string(budget_ms_ * 2) + " ms): a longer request would outlive its lease");

    if (!multi_.Init(max_in_flight_, error))
        return false;
    // HTTP/2 multiplexing where the server offers it; without nghttp2 libcurl says no and
    // HTTP/1.1 keep-alive does the job.
    curl_multi_setopt(multi_.handle(), CURLMOPT_PIPELINING, long(CURLPIPE_MULTIPLEX));

    // One transfer now, so that a libcurl that refuses an option fails here, not per message.
    Transfer *t = NewTransfer(error);
    if (t == nullptr)
        return false;
    free_.push_back(t);

    if (!config_.tls_verify)
        AddLog("TLS verification is OFF for destination " + destination_);
    return true;
}

WebhookDriver::~WebhookDriver() {
    SignalsBlocked blocked;
    for (auto &t : pool_) {
        if (t->active && multi_.handle())
            multi_.Remove(t->easy);
        t->active = false;
    }
    pool_.clear();  // easy handles go before the multi handle (multi_'s destructor)
}

void WebhookDriver::AddLog(std::string line) {
    // Consecutive repeats are logged once.
    if (!log_.empty() && log_.back() == line)
        return;
    log_.push_back(std::move(line));
}

// A new easy handle with every option that is the same for all requests of this destination.
Transfer *WebhookDriver::NewTransfer(std::string *error) {
    auto t = std::make_unique<Transfer>();
    t->easy = curl_easy_init();
    if (t->easy == nullptr) {
        *error = "could not create a libcurl easy handle";
        return nullptr;
    }
    CURL *e = t->easy;
    t->allowed = &allowed_;
    // In HttpPostOptions' order: URL, timeout, TLS, CA file, error buffer, callbacks, their data.
    // clang-format off
    HttpPostOptions options{config_.url.c_str(), timeout_ms_, config_.tls_verify, &ca_file_, t->error,
                            OnHeader, OnBody, t.get(), OnOpenSocket};
    // clang-format on
    if (!SetHttpPostOptions(e, options)) {
        *error = "libcurl refused an option for destination " + destination_;
        return nullptr;
    }
    // Optional: HTTP/2 over TLS when offered (fails without nghttp2), waiting for a connection
    // that may multiplex rather than opening one per request.
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, long(CURL_HTTP_VERSION_2TLS));
    if (is_https_)
        curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    pool_.push_back(std::move(t));
    return pool_.back().get();
}

// libcurl is about to connect to `address` (each address of the name in turn): refused unless
// outbox.webhook_allowed_networks allows it. A refused address is not connected to; libcurl
// then tries the next one, and fails the request with CURLE_COULDNT_CONNECT when none is left
// (Finish tells that apart from an outage). Never throws: plain C data only.
curl_socket_t WebhookDriver::OnOpenSocket(void *clientp, curlsocktype purpose,
                                          struct curl_sockaddr *address) {
    auto *t = static_cast<Transfer *>(clientp);
    if (purpose == CURLSOCKTYPE_IPCXN) {
        std::optional<IpAddress> ip = AddressOfSockaddr(&address->addr);
        if (!ip || !AddressAllowed(*ip, *t->allowed)) {
            if (t->refused++ == 0) {
                snprintf(t->refused_address, sizeof t->refused_address, "?");
                if (ip)
                    inet_ntop(ip->v6 ? AF_INET6 : AF_INET, ip->bytes, t->refused_address,
                              sizeof t->refused_address);
            }
            return CURL_SOCKET_BAD;
        }
    }
    t->opened++;
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

// Records Retry-After of the final response (a new status line forgets earlier headers).
size_t WebhookDriver::OnHeader(char *data, size_t size, size_t count, void *userp) {
    auto *t = static_cast<Transfer *>(userp);
    size_t len = size * count;
    std::string_view line(data, len);
    if (line.substr(0, 5) == "HTTP/") {
        t->has_retry_after = false;
        t->retry_after_len = 0;
        return len;
    }
    constexpr std::string_view kName = "retry-after:";
    if (len > kName.size() && EqualsIgnoringCase(line.substr(0, kName.size()), kName)) {
        std::string_view value = line.substr(kName.size());
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
            value.remove_prefix(1);
        while (!value.empty() && (value.back() == '\r' || value.back() == '\n' ||
                                  value.back() == ' ' || value.back() == '\t'))
            value.remove_suffix(1);
        t->retry_after_len = std::min(value.size(), kRetryAfterKeepBytes);
        memcpy(t->retry_after, value.data(), t->retry_after_len);
        t->has_retry_after = true;
    }
    return len;
}

// Keeps the start of the response body for error texts; the rest is read and dropped.
size_t WebhookDriver::OnBody(char *data, size_t size, size_t count, void *userp) {
    auto *t = static_cast<Transfer *>(userp);
    size_t len = size * count;
    size_t keep = std::min(len, kBodyKeepBytes - t->response_len);
    memcpy(t->response + t->response_len, data, keep);
    t->response_len += keep;
    return len;
}

// The request headers, in the documented order. Returns nullptr when out of memory.
curl_slist *WebhookDriver::BuildHeaders(const Message &m, int64_t timestamp,
                                        const std::string &signature) {
    curl_slist *list = nullptr;
    bool ok = true;
    std::string line;
    auto add = [&](std::string_view name, std::string_view value) {
        if (!ok)
            return;
        line.assign(name.data(), name.size());
        // "Name:" would make libcurl drop the header; "Name;" sends it with an empty value.
        if (value.empty()) {
            line.push_back(';');
        } else {
            line.append(": ");
            line.append(value.data(), value.size());
        }
        curl_slist *next = curl_slist_append(list, line.c_str());
        if (next == nullptr)
            ok = false;
        else
            list = next;
    };
    auto is_content_type = [](const std::string &name) {
        return EqualsIgnoringCase(name, "content-type");
    };
    // Headers the relay sets itself cannot be replaced; a bad one (it passed no check) is
    // dropped rather than sent, so it can never split the request.
    auto sendable = [](const std::pair<std::string, std::string> &h) {
        return IsValidHeaderName(h.first) && IsValidHeaderValue(h.second) &&
               !IsReservedHeaderName(h.first);
    };

    // content-type: the producer's, else the destination's, else by payload column.
    std::string_view content_type =
        m.payload_is_json ? "application/json" : "application/octet-stream";
    bool content_type_set = false;
    const Headers *sources[] = {&m.headers, &config_.headers};
    for (const Headers *source : sources) {
        for (const auto &h : *source) {
            if (!content_type_set && is_content_type(h.first) && sendable(h)) {
                content_type = h.second;
                content_type_set = true;
            }
        }
    }
    // Structured mode: the body is the whole event, the attributes are in it.
    const bool structured = config_.cloudevents == CloudEventsMode::Structured;
    add("content-type", structured ? "application/cloudevents+json" : content_type);
    std::string ts = std::to_string(timestamp);
    add("webhook-id", m.event_id);
    add("webhook-timestamp", ts);
    if (!signature.empty())
        add("webhook-signature", signature);
    if (!structured) {
        add("ce-id", m.event_id);
        add("ce-type", CloudEventType(m, ce_type_fallback_));
        add("ce-source", source_);
        add("ce-time", FormatRfc3339Ms(m.created_at_ms));
        add("ce-specversion", "1.0");
    }
    for (const auto &h : config_.headers) {
        if (is_content_type(h.first) || !sendable(h))
            continue;
        bool replaced = std::any_of(m.headers.begin(), m.headers.end(), [&](const auto &p) {
            return EqualsIgnoringCase(p.first, h.first) && sendable(p);
        });
        if (!replaced)
            add(h.first, h.second);
    }
    for (const auto &h : m.headers) {
        if (!is_content_type(h.first) && sendable(h))
            add(h.first, h.second);
    }
    // A bare "Expect:" stops libcurl from sending "Expect: 100-continue" for larger bodies,
    // which costs a round trip (or a one-second stall with servers that ignore it).
    if (ok) {
        curl_slist *next = curl_slist_append(list, "Expect:");
        if (next == nullptr)
            ok = false;
        else
            list = next;
    }
    if (!ok) {
        curl_slist_free_all(list);
        return nullptr;
    }
    return list;
}

// Hands one message to libcurl on transfer `t`. On failure sets *why and *kind and leaves `t`
// unused.
bool WebhookDriver::Start(Message &m, int64_t waited_ms, Transfer *t, std::string *why,
                          OutcomeKind *kind) {
    // The request and its wait for a connection together stay within budget_ms_.
    int64_t timeout_ms = std::min(timeout_ms_, budget_ms_ - waited_ms);
    if (timeout_ms < 1) {
        *kind = OutcomeKind::Defer;
        *why = "not sent: waited " + std::to_string(waited_ms) + " ms for one of the " +
               std::to_string(max_in_flight_) +
               " connections (max_in_flight), past half of outbox.lease_timeout";
        return false;
    }
    int64_t timestamp = static_cast<int64_t>(time(nullptr));
    // Structured mode sends (and signs) the event document instead of the payload. Built
    // again on every attempt from the row, like everything else of a request.
    if (config_.cloudevents == CloudEventsMode::Structured)
        m.payload =
            StructuredEvent(m, AttributesOf(m, source_, ce_type_fallback_, &config_.headers));
    std::string signature;
    // The attempt's own timestamp, signed again on every attempt (Standard Webhooks: the
    // timestamp is the attempt's, so that a receiver's tolerance check stops replays).
    if (!config_.secret_keys.empty() || !config_.signing_keys.empty()) {
        signature = SignatureHeader(config_.secret_keys, m.event_id, timestamp, m.payload,
                                    config_.signing_keys);
        if (signature.empty()) {
            *kind = OutcomeKind::Retry;
            *why = "could not sign";
            return false;
        }
    }
    curl_slist *headers = BuildHeaders(m, timestamp, signature);
    if (headers == nullptr) {
        *kind = OutcomeKind::Retry;
        *why = "out of memory while building the request headers";
        return false;
    }
    curl_slist_free_all(t->headers);
    t->headers = headers;
    t->id = m.id;
    t->lease_token = m.lease_token;
    t->body = std::move(m.payload);
    t->error[0] = '\0';
    t->response_len = 0;
    t->retry_after_len = 0;
    t->has_retry_after = false;
    t->refused_address[0] = '\0';
    t->refused = 0;
    t->opened = 0;
    curl_easy_setopt(t->easy, CURLOPT_TIMEOUT_MS, long(timeout_ms));
    curl_easy_setopt(t->easy, CURLOPT_CONNECTTIMEOUT_MS,
                     long(std::min<int64_t>(timeout_ms, kCurlMaxConnectTimeoutMs)));
    curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(t->easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(t->body.size()));
    curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, t->body.data());
    CURLMcode rc = multi_.Add(t->easy);
    if (rc != CURLM_OK) {
        *kind = OutcomeKind::Retry;
        *why = std::string("could not start the request: ") + curl_multi_strerror(rc);
        std::string().swap(t->body);
        return false;
    }
    t->active = true;
    ++active_;
    return true;
}

// Starts waiting messages while there is room. Needs signals blocked (see the caller).
void WebhookDriver::StartWaiting() {
    int64_t now_ns = MonotonicNs();
    while (!waiting_.empty() && active_ < max_in_flight_) {
        Message &m = waiting_.front().message;
        int64_t waited_ms = (now_ns - waiting_.front().submitted_ns) / 1000000;
        std::string why;
        OutcomeKind kind = OutcomeKind::Retry;
        Transfer *t = nullptr;
        if (!free_.empty()) {
            t = free_.back();
            free_.pop_back();
        } else {
            t = NewTransfer(&why);
        }
        if (t == nullptr || !Start(m, waited_ms, t, &why, &kind)) {
            if (t != nullptr)
                free_.push_back(t);
            ready_.push_back(Outcome{m.id, m.lease_token, kind, Redact(std::move(why)), -1});
        }
        waiting_.pop_front();
    }
}

void WebhookDriver::Submit(std::vector<Message> batch) {
    int64_t now_ns = MonotonicNs();
    for (Message &m : batch)
        waiting_.push_back(Waiting{std::move(m), now_ns});
    SignalsBlocked blocked;
    StartWaiting();
    // Kick the new transfers off now (connect, or send on a kept-alive connection) rather than
    // one wait later; whatever finishes at once is collected so PollTimeoutMs reports it.
    multi_.Kick();
    CollectFinished();
}

void WebhookDriver::Poll(std::vector<Outcome> &out) {
    SignalsBlocked blocked;
    multi_.ServeReady();
    Sweep();
    CollectFinished();
    if (!waiting_.empty() && active_ < max_in_flight_) {
        StartWaiting();
        multi_.Kick();
        CollectFinished();
    }
    for (Outcome &o : ready_)
        out.push_back(std::move(o));
    ready_.clear();
}

int64_t WebhookDriver::PollTimeoutMs() const {
    if (!ready_.empty() || (!waiting_.empty() && active_ < max_in_flight_))
        return 0;
    int64_t deadline = multi_.TimerDeadlineNs();
    if (active_ > 0 && next_sweep_ns_ >= 0 && (deadline < 0 || next_sweep_ns_ < deadline))
        deadline = next_sweep_ns_;
    if (deadline >= 0) {
        int64_t left = deadline - MonotonicNs();
        // Rounded up: waking a little early would only find the timer not yet expired.
        return left <= 0 ? 0 : (left + 999999) / 1000000;
    }
    // libcurl always has a timer while transfers run (their timeouts); this is a safety net.
    return active_ > 0 ? 1000 : -1;
}

// libcurl 7.88 can leave an HTTP/2 stream whose response was already read from the shared
// connection unprocessed until that transfer's own timeout (fixed upstream in 8.0, curl PR
// #10530), because no socket event or timer is left to wake it. Over HTTPS, every
// kSweepIntervalNs while transfers run, each socket is served as if readable: a stalled stream
// then finishes within that interval instead of after timeout_ms. For an HTTP/1.1 connection
// this costs one recv that says EAGAIN.
void WebhookDriver::Sweep() {
    if (!is_https_ || active_ == 0) {
        next_sweep_ns_ = -1;
        return;
    }
    int64_t now = MonotonicNs();
    if (next_sweep_ns_ < 0) {
        next_sweep_ns_ = now + kSweepIntervalNs;
        return;
    }
    if (now < next_sweep_ns_)
        return;
    next_sweep_ns_ = now + kSweepIntervalNs;
    multi_.ServeEverySocket();
}

// Turns every transfer libcurl reports as done into an outcome.
void WebhookDriver::CollectFinished() {
    multi_.CollectFinished([this](void *request, CURLcode result) {
        auto *t = static_cast<Transfer *>(request);
        if (!t->active)
            return;
        ready_.push_back(Finish(t, result));
        Release(t);
    });
}

// The outcome of a finished transfer.
Outcome WebhookDriver::Finish(Transfer *t, CURLcode result) {
    Outcome o{t->id, t->lease_token, OutcomeKind::Retry, {}, -1};
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    o.http_status = status >= 100 && status <= 999 ? int32_t(status) : 0;
    if (status >= 200) {
        // The status decides even if reading the rest of the response failed: the endpoint
        // has made its decision by the time it sends the status line.
        o.kind = ClassifyHttpStatus(status);
        if (o.kind == OutcomeKind::Delivered)
            return o;
        std::string text = "HTTP " + std::to_string(status);
        if (status >= 300 && status <= 399) {
            text += ": redirects are not followed";
        } else if (show_response_body_) {
            std::string snippet =
                OneLine(std::string_view(t->response, t->response_len), kBodySnippetBytes);
            if (!snippet.empty())
                text += ": " + snippet;
        }
        o.error = Redact(std::move(text));
        if (o.kind == OutcomeKind::Retry && t->has_retry_after) {
            std::optional<int64_t> ms =
                ParseRetryAfterMs(std::string_view(t->retry_after, t->retry_after_len), UnixMs());
            if (ms)
                o.retry_after_ms = *ms;
        }
        return o;
    }
    // No final status: the transport failed before or while the request was exchanged.
    if (t->refused > 0 && t->opened == 0) {
        // Every address the name had was refused: a configuration error, not an outage, and
        // waiting would not help; the message goes to the dead letters saying why.
        o.kind = OutcomeKind::Dead;
        o.error = std::string("address ") + t->refused_address +
                  " is not allowed by outbox.webhook_allowed_networks";
        if (t->refused > 1)
            o.error +=
                " (nor " + std::to_string(t->refused - 1) + " other address(es) of the host)";
        return o;
    }
    CURLcode code = result == CURLE_OK ? CURLE_GOT_NOTHING : result;
    o.kind = ClassifyCurlResult(code, CurlRequestSent(t->easy));
    std::string text = curl_easy_strerror(code);
    t->error[sizeof t->error - 1] = '\0';
    std::string detail = OneLine(t->error, sizeof t->error);
    if (!detail.empty() && detail != text)
        text += ": " + detail;
    o.error = Redact(std::move(text));
    return o;
}

// Takes `t` off the multi handle and puts it back on the free list.
void WebhookDriver::Release(Transfer *t) {
    multi_.Remove(t->easy);
    t->active = false;
    --active_;
    curl_slist_free_all(t->headers);
    t->headers = nullptr;
    // Points at nothing stale; libcurl reads neither until the next Start sets them again.
    curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, static_cast<curl_slist *>(nullptr));
    curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, static_cast<char *>(nullptr));
    std::string().swap(t->body);  // a large payload is not kept around
    free_.push_back(t);
}

// `text` with every secret part of the URL replaced.
std::string WebhookDriver::Redact(std::string text) const {
    for (const std::string &secret : secret_parts_) {
        if (secret.empty())
            continue;
        constexpr std::string_view kMark = "[redacted]";
        for (size_t at = text.find(secret); at != std::string::npos;
             at = text.find(secret, at + kMark.size()))
            text.replace(at, secret.size(), kMark);
    }
    return text;
}

void WebhookDriver::Abandon() {
    SignalsBlocked blocked;
    // Transfers that already finished keep their real outcome.
    CollectFinished();
    for (auto &owned : pool_) {
        Transfer *t = owned.get();
        if (!t->active)
            continue;
        bool sent = CurlRequestSent(t->easy);
        ready_.push_back(Outcome{t->id, t->lease_token,
                                 sent ? OutcomeKind::Retry : OutcomeKind::Defer,
                                 sent ? "abandoned after the request was sent, before a response"
                                      : "abandoned before the request was sent",
                                 -1});
        Release(t);
    }
    for (Waiting &w : waiting_)
        ready_.push_back(Outcome{w.message.id, w.message.lease_token, OutcomeKind::Defer,
                                 "abandoned before the request was sent", -1});
    waiting_.clear();
}

}  // namespace

std::unique_ptr<Driver> MakeWebhookDriver(const WebhookDriverOptions &options, std::string *error) {
    EnsureCurlGlobalInit();
    auto driver = std::make_unique<WebhookDriver>(options);
    if (!driver->Init(error))
        return nullptr;
    return driver;
}

}  // namespace outbox
