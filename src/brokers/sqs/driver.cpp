// SQS driver: one libcurl multi handle per destination (CurlMulti, brokers/curl_multi.hpp says
// how it is driven and why every call into it runs with signals blocked). No thread of its own.
//
// Messages are encoded when submitted (a message SQS cannot take is dead at once) and packed
// into SendMessageBatch requests of up to 10 entries and 256 KiB, in submission order; a
// request starts as soon as a connection is free, so a lone message is never held back.
// Every address a connection uses is checked as its socket is opened (BrokerGuard).
#include "outbox/brokers/sqs/driver.hpp"

#include <strings.h>
#include <sys/socket.h>

#include <algorithm>
#include <deque>
#include <string_view>
#include <utility>
#include <vector>

#include <curl/curl.h>

#include "outbox/broker_address.hpp"
#include "outbox/brokers/curl_multi.hpp"
#include "outbox/brokers/signals.hpp"
#include "outbox/brokers/sqs/classify.hpp"
#include "outbox/brokers/sqs/request.hpp"
#include "outbox/clock.hpp"

namespace outbox {

namespace {

constexpr size_t kResponseKeepBytes = 1 << 20;  // a batch's answer is ~300 bytes an entry
constexpr size_t kQueryErrorKeepBytes = 256;

// The start of a server's text as one line of printable characters, for error texts.
std::string OneLine(std::string_view text, size_t max_bytes = 300) {
    std::string out(text.substr(0, max_bytes));
    for (char &c : out)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F)
            c = ' ';
    return out;
}

// A message encoded and waiting for a request.
struct Entry {
    int64_t id = 0;
    int64_t lease_token = 0;
    std::string members;
    size_t sqs_bytes = 0;
    int64_t submitted_ns = 0;
};

// One SendMessageBatch request: its easy handle (reused) and what the callbacks record.
struct Request {
    CURL *easy = nullptr;
    bool active = false;
    std::vector<Entry> entries;
    std::string body;
    char error[CURL_ERROR_SIZE] = {0};
    std::string response;
    std::string query_error;  // x-amzn-query-error
    const BrokerGuard *guard = nullptr;
    std::string refused_why;  // the first address the guard refused, and why
    int refused = 0;
    int opened = 0;

    Request() = default;
    Request(const Request &) = delete;
    Request &operator=(const Request &) = delete;
    ~Request() {
        if (easy)
            curl_easy_cleanup(easy);
    }
};

class SqsDriver final : public Driver {
  public:
    explicit SqsDriver(const SqsDriverOptions &options);
    ~SqsDriver() override;

    bool Init(std::string *error);

    void Submit(std::vector<Message> batch) override;
    void Poll(std::vector<Outcome> &out) override;
    size_t InFlight() const override { return in_requests_ + waiting_.size() + ready_.size(); }
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

    Request *NewRequest(std::string *error);
    void StartWaiting();
    void CollectFinished();
    void Finish(Request *r, CURLcode result);
    void FinishAll(Request *r, OutcomeKind kind, const std::string &error);
    void Release(Request *r);
    void AddLog(std::string line);

    SqsConfig config_;
    std::string destination_;
    SqsEntryOptions entry_options_;
    std::string sigv4_;  // "aws:amz:<region>:sqs"
    size_t max_in_flight_;
    size_t max_requests_;
    int64_t timeout_ms_;
    BrokerAddressRule address_rule_;
    BrokerGuard guard_;
    std::string ca_file_;
    curl_slist *headers_ = nullptr;  // the same for every request

    // Before pool_: the easy handles are cleaned up before the multi handle.
    CurlMulti multi_;

    std::vector<std::unique_ptr<Request>> pool_;
    std::vector<Request *> free_;
    size_t active_ = 0;       // requests
    size_t in_requests_ = 0;  // messages in them
    std::deque<Entry> waiting_;
    std::vector<Outcome> ready_;
    std::vector<std::string> log_;
    std::string last_refusal_;
};

SqsDriver::SqsDriver(const SqsDriverOptions &options)
    : config_(options.config),
      destination_(options.destination),
      max_in_flight_(std::max<size_t>(1, options.max_in_flight)),
      // A request holds its connection until SQS answers, so the answers' round trip sets the
      // pace: as many requests as max_in_flight fills (at most 1,000: max_in_flight's limit).
      max_requests_((max_in_flight_ + kSqsMaxBatchEntries - 1) / kSqsMaxBatchEntries),
      timeout_ms_(std::max<int64_t>(100, options.timeout_ms)),
      address_rule_(options.address_rule) {
    entry_options_.source = options.source;
    entry_options_.type_fallback =
        config_.default_topic.empty() ? destination_ : config_.default_topic;
    entry_options_.fifo = config_.fifo;
    entry_options_.group = config_.group;
    sigv4_ = "aws:amz:" + config_.region + ":sqs";
}

bool SqsDriver::Init(std::string *error) {
    if (!guard_.Set(address_rule_, error))
        return false;
    ca_file_ = config_.ca_file.empty() ? CurlDefaultCaFile() : config_.ca_file;
    for (const std::string &line : SqsRequestHeaders(config_.session_token)) {
        curl_slist *next = curl_slist_append(headers_, line.c_str());
        if (next == nullptr) {
            *error = "out of memory";
            return false;
        }
        headers_ = next;
    }
    if (!multi_.Init(max_requests_, error))
        return false;
    Request *r = NewRequest(error);
    if (r == nullptr)
        return false;
    free_.push_back(r);
    if (!config_.tls_verify)
        AddLog("TLS verification is OFF for destination " + destination_);
    return true;
}

SqsDriver::~SqsDriver() {
    SignalsBlocked blocked;
    for (auto &r : pool_) {
        if (r->active && multi_.handle())
            multi_.Remove(r->easy);
        r->active = false;
    }
    pool_.clear();  // easy handles go before the multi handle (multi_'s destructor)
    curl_slist_free_all(headers_);
}

void SqsDriver::AddLog(std::string line) {
    if (!log_.empty() && log_.back() == line)
        return;
    log_.push_back(std::move(line));
}

// A new easy handle with every option that is the same for all requests of this destination.
// HTTP/1.1 keep-alive: SQS answers over HTTP/1.1, and a connection per request in flight.
Request *SqsDriver::NewRequest(std::string *error) {
    auto r = std::make_unique<Request>();
    r->easy = curl_easy_init();
    if (r->easy == nullptr) {
        *error = "could not create a libcurl easy handle";
        return nullptr;
    }
    CURL *e = r->easy;
    r->guard = &guard_;
    // In HttpPostOptions' order: URL, timeout, TLS, CA file, error buffer, callbacks, their data.
    // clang-format off
    HttpPostOptions options{config_.endpoint.c_str(), timeout_ms_, config_.tls_verify, &ca_file_, r->error,
                            OnHeader, OnBody, r.get(), OnOpenSocket};
    // clang-format on
    bool ok = SetHttpPostOptions(e, options) &&
              curl_easy_setopt(e, CURLOPT_HTTP_VERSION, long(CURL_HTTP_VERSION_1_1)) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers_) == CURLE_OK &&
              // libcurl's AWS Signature Version 4 (service "sqs"), over the body and the headers.
              curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4_.c_str()) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_USERNAME, config_.access_key_id.c_str()) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_PASSWORD, config_.secret_access_key.c_str()) == CURLE_OK;
    if (!ok) {
        *error = "libcurl refused an option for destination " + destination_;
        return nullptr;
    }
    pool_.push_back(std::move(r));
    return pool_.back().get();
}

// libcurl is about to connect to `address`: refused unless the guard allows it (a refused
// address is not connected to; libcurl tries the next, and fails with CURLE_COULDNT_CONNECT
// when none is left).
curl_socket_t SqsDriver::OnOpenSocket(void *clientp, curlsocktype purpose,
                                      struct curl_sockaddr *address) {
    auto *r = static_cast<Request *>(clientp);
    if (purpose == CURLSOCKTYPE_IPCXN && r->guard->guarded()) {
        try {
            std::string why;
            if (!r->guard->Allows(&address->addr, &why)) {
                if (r->refused++ == 0)
                    r->refused_why = std::move(why);
                return CURL_SOCKET_BAD;
            }
        } catch (...) {
            return CURL_SOCKET_BAD;
        }
    }
    r->opened++;
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

// Records x-amzn-query-error of the final response (it names the error in both protocols).
size_t SqsDriver::OnHeader(char *data, size_t size, size_t count, void *userp) {
    auto *r = static_cast<Request *>(userp);
    size_t len = size * count;
    std::string_view line(data, len);
    if (line.substr(0, 5) == "HTTP/") {
        r->query_error.clear();
        return len;
    }
    constexpr std::string_view kName = "x-amzn-query-error:";
    if (len > kName.size() && strncasecmp(line.data(), kName.data(), kName.size()) == 0) {
        std::string_view value = line.substr(kName.size());
        while (!value.empty() && value.front() == ' ')
            value.remove_prefix(1);
        while (!value.empty() && (value.back() == '\r' || value.back() == '\n'))
            value.remove_suffix(1);
        r->query_error.assign(value.substr(0, kQueryErrorKeepBytes));
    }
    return len;
}

size_t SqsDriver::OnBody(char *data, size_t size, size_t count, void *userp) {
    auto *r = static_cast<Request *>(userp);
    size_t len = size * count;
    if (r->response.size() < kResponseKeepBytes)
        r->response.append(data, std::min(len, kResponseKeepBytes - r->response.size()));
    return len;
}

void SqsDriver::Submit(std::vector<Message> batch) {
    int64_t now_ns = MonotonicNs();
    for (Message &m : batch) {
        SqsEntry e = EncodeSqsEntry(m, entry_options_);
        if (!e.problem.empty()) {
            ready_.push_back(Outcome{m.id, m.lease_token, OutcomeKind::Dead, e.problem, -1});
            continue;
        }
        waiting_.push_back(Entry{m.id, m.lease_token, std::move(e.members), e.sqs_bytes, now_ns});
    }
    SignalsBlocked blocked;
    StartWaiting();
    multi_.Kick();
    CollectFinished();
}

// Packs waiting entries into requests while a connection is free. Needs signals blocked.
void SqsDriver::StartWaiting() {
    int64_t now_ns = MonotonicNs();
    while (!waiting_.empty() && active_ < max_requests_) {
        std::string why;
        Request *r = nullptr;
        if (!free_.empty()) {
            r = free_.back();
            free_.pop_back();
        } else {
            r = NewRequest(&why);
        }
        // An entry that waited past the request timeout for a connection is given back
        // unsent, so that no lease lapses while it waits.
        if (r == nullptr || (now_ns - waiting_.front().submitted_ns) / 1000000 >= timeout_ms_) {
            if (r != nullptr) {
                free_.push_back(r);
                why = "not sent: waited past the request timeout for a connection";
            }
            Entry &e = waiting_.front();
            ready_.push_back(Outcome{e.id, e.lease_token,
                                     r == nullptr ? OutcomeKind::Retry : OutcomeKind::Defer, why,
                                     -1});
            waiting_.pop_front();
            continue;
        }
        r->entries.clear();
        size_t bytes = 0;
        while (!waiting_.empty() && r->entries.size() < kSqsMaxBatchEntries &&
               (r->entries.empty() || bytes + waiting_.front().sqs_bytes <= kSqsMaxMessageBytes)) {
            bytes += waiting_.front().sqs_bytes;
            r->entries.push_back(std::move(waiting_.front()));
            waiting_.pop_front();
        }
        std::vector<const std::string *> members;
        members.reserve(r->entries.size());
        for (const Entry &e : r->entries)
            members.push_back(&e.members);
        r->body = SqsBatchRequest(config_.queue_url, members);
        r->error[0] = '\0';
        r->response.clear();
        r->query_error.clear();
        r->refused_why.clear();
        r->refused = 0;
        r->opened = 0;
        curl_easy_setopt(r->easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(r->body.size()));
        curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, r->body.data());
        CURLMcode rc = multi_.Add(r->easy);
        if (rc != CURLM_OK) {
            for (const Entry &e : r->entries)
                ready_.push_back(Outcome{
                    e.id, e.lease_token, OutcomeKind::Retry,
                    std::string("could not start the request: ") + curl_multi_strerror(rc), -1});
            r->entries.clear();
            free_.push_back(r);
            continue;
        }
        r->active = true;
        ++active_;
        in_requests_ += r->entries.size();
    }
}

void SqsDriver::Poll(std::vector<Outcome> &out) {
    SignalsBlocked blocked;
    multi_.ServeReady();
    CollectFinished();
    if (!waiting_.empty() && active_ < max_requests_) {
        StartWaiting();
        multi_.Kick();
        CollectFinished();
    }
    for (Outcome &o : ready_)
        out.push_back(std::move(o));
    ready_.clear();
}

int64_t SqsDriver::PollTimeoutMs() const {
    if (!ready_.empty() || (!waiting_.empty() && active_ < max_requests_))
        return 0;
    if (int64_t deadline = multi_.TimerDeadlineNs(); deadline >= 0) {
        int64_t left = deadline - MonotonicNs();
        return left <= 0 ? 0 : (left + 999999) / 1000000;
    }
    return active_ > 0 ? 1000 : -1;
}

void SqsDriver::CollectFinished() {
    multi_.CollectFinished([this](void *request, CURLcode result) {
        auto *r = static_cast<Request *>(request);
        if (!r->active)
            return;
        Finish(r, result);
        Release(r);
    });
}

void SqsDriver::FinishAll(Request *r, OutcomeKind kind, const std::string &error) {
    for (const Entry &e : r->entries)
        ready_.push_back(Outcome{e.id, e.lease_token, kind, error, -1});
}

// The outcomes of a finished request, one per entry.
void SqsDriver::Finish(Request *r, CURLcode result) {
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    if (result == CURLE_OK && status == 200) {
        std::vector<SqsEntryResult> results;
        std::string error;
        if (!ParseSqsBatchResponse(r->response, r->entries.size(), &results, &error)) {
            FinishAll(r, OutcomeKind::Retry, error);
            return;
        }
        for (size_t i = 0; i < r->entries.size(); ++i) {
            const Entry &e = r->entries[i];
            const SqsEntryResult &x = results[i];
            Outcome o{e.id, e.lease_token, OutcomeKind::Delivered, {}, -1};
            o.http_status = 200;
            if (!x.ok) {
                o.kind = ClassifySqsEntryFailure(x.sender_fault, x.code);
                o.error = OneLine("SQS refused the message: " + x.code +
                                  (x.message.empty() ? "" : ": " + x.message));
            }
            ready_.push_back(std::move(o));
        }
        return;
    }
    if (SqsStatusDecides(status, result)) {
        auto [code, message] = SqsRequestError(r->response, r->query_error);
        OutcomeKind kind =
            status < 300 ? OutcomeKind::Retry : ClassifySqsRequestError(status, code);
        std::string text = "SQS answered HTTP " + std::to_string(status);
        if (!code.empty())
            text += ": " + code;
        if (!message.empty())
            text += ": " + message;
        for (const Entry &e : r->entries) {
            Outcome o{e.id, e.lease_token, kind, OneLine(text), -1};
            o.http_status = static_cast<int32_t>(status);
            ready_.push_back(std::move(o));
        }
        return;
    }
    if (r->refused > 0 && r->opened == 0) {
        // The guard refused every address: the destination is unreachable for this role.
        std::string text = "not connecting to SQS: " + r->refused_why;
        if (text != last_refusal_)
            AddLog(text);
        last_refusal_ = text;
        FinishAll(r, OutcomeKind::Defer, text);
        return;
    }
    CURLcode code = result == CURLE_OK ? CURLE_GOT_NOTHING : result;
    std::string text = curl_easy_strerror(code);
    r->error[sizeof r->error - 1] = '\0';
    std::string detail = OneLine(r->error);
    if (!detail.empty() && detail != text)
        text += ": " + detail;
    FinishAll(r, ClassifySqsTransport(code, CurlRequestSent(r->easy)), "cannot reach SQS: " + text);
}

void SqsDriver::Release(Request *r) {
    multi_.Remove(r->easy);
    r->active = false;
    --active_;
    in_requests_ -= r->entries.size();
    r->entries.clear();
    curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, static_cast<char *>(nullptr));
    std::string().swap(r->body);
    free_.push_back(r);
}

void SqsDriver::Abandon() {
    SignalsBlocked blocked;
    CollectFinished();
    for (auto &owned : pool_) {
        Request *r = owned.get();
        if (!r->active)
            continue;
        bool sent = CurlRequestSent(r->easy);
        FinishAll(r, sent ? OutcomeKind::Retry : OutcomeKind::Defer,
                  sent ? "abandoned after the request was sent, before an answer"
                       : "abandoned before the request was sent");
        Release(r);
    }
    for (Entry &e : waiting_)
        ready_.push_back(Outcome{e.id, e.lease_token, OutcomeKind::Defer,
                                 "abandoned before the request was sent", -1});
    waiting_.clear();
}

}  // namespace

std::unique_ptr<Driver> MakeSqsDriver(const SqsDriverOptions &options, std::string *error) {
    EnsureCurlGlobalInit();
    auto driver = std::make_unique<SqsDriver>(options);
    if (!driver->Init(error))
        return nullptr;
    return driver;
}

}  // namespace outbox
