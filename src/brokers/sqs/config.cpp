// The sqs kind's config check (include/outbox/brokers/sqs/config.hpp).
#include "outbox/brokers/sqs/config.hpp"

#include <curl/curl.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/brokers/sqs/kind.hpp"
#include "outbox/config_json.hpp"

namespace outbox {

namespace {

constexpr RangeKey<SqsConfig> kSqsRangeKeys[] = {
    {"max_in_flight", RangeType::Integer, 1, 10000, "", "",
     [](SqsConfig &c, int64_t v) { c.max_in_flight = static_cast<int>(v); }},
    {"timeout", RangeType::Duration, 100, 10 * kMsPerMinute, "100ms and 10min", "",
     [](SqsConfig &c, int64_t v) { c.timeout_ms = v; }},
};

struct CurlUrlDeleter {
    void operator()(CURLU *url) const { curl_url_cleanup(url); }
};

// The parts of an http(s) URL that libcurl's parser finds, or nullopt when it is not one.
struct UrlParts {
    std::string scheme, host, port, path, query;
};

std::optional<UrlParts> ParseHttpUrl(const std::string &url) {
    if (url.empty() || ContainsNul(url))
        return std::nullopt;
    std::unique_ptr<CURLU, CurlUrlDeleter> u(curl_url());
    if (!u || curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK)
        return std::nullopt;
    UrlParts parts;
    auto get = [&](CURLUPart part, std::string *out) {
        char *raw = nullptr;
        bool ok = curl_url_get(u.get(), part, &raw, 0) == CURLUE_OK && raw != nullptr;
        if (ok)
            *out = raw;
        curl_free(raw);
        return ok;
    };
    if (!get(CURLUPART_SCHEME, &parts.scheme) || !get(CURLUPART_HOST, &parts.host))
        return std::nullopt;
    get(CURLUPART_PORT, &parts.port);
    get(CURLUPART_PATH, &parts.path);
    get(CURLUPART_QUERY, &parts.query);
    std::string lower = AsciiLowerCopy(parts.scheme);
    // libcurl repairs "https:///q" into "https://q/": only what was written counts.
    if ((lower != "http" && lower != "https") || !StartsWith(AsciiLowerCopy(url), lower + "://") ||
        parts.host.empty())
        return std::nullopt;
    return parts;
}

// 1..128 characters of printable ASCII: what SQS takes as a MessageGroupId.
bool IsValidGroupId(std::string_view id) {
    if (id.empty() || id.size() > 128)
        return false;
    for (char c : id)
        if (c < '!' || c > '~')
            return false;
    return true;
}

bool IsValidRegion(std::string_view region) {
    if (region.empty() || region.size() > 32)
        return false;
    for (char c : region)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return false;
    return true;
}

bool IsPlainToken(std::string_view text, size_t max) {
    if (text.empty() || text.size() > max)
        return false;
    for (char c : text)
        if (static_cast<unsigned char>(c) <= ' ' || static_cast<unsigned char>(c) >= 0x7F)
            return false;
    return true;
}

// The queue URL's checks; the URL itself is never quoted (it names the account).
void CheckQueueUrl(const Json &value, SqsConfig *sqs, std::vector<std::string> *problems) {
    std::optional<UrlParts> parts;
    if (value.is_string())
        parts = ParseHttpUrl(value.get_ref<const std::string &>());
    std::string name;
    if (parts) {
        std::string_view path = parts->path;
        while (!path.empty() && path.back() == '/')
            path.remove_suffix(1);
        size_t slash = path.rfind('/');
        name = std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
    }
    if (!parts || name.empty() || !parts->query.empty()) {
        problems->push_back(
            "\"queue_url\" must be the queue's URL, "
            "https://sqs.<region>.amazonaws.com/<account>/<queue name> (http only for a test "
            "server)");
        return;
    }
    sqs->queue_url = value.get<std::string>();
    sqs->fifo = name.size() > 5 && name.compare(name.size() - 5, 5, ".fifo") == 0;
    if (sqs->endpoint.empty())
        sqs->endpoint = parts->scheme + "://" + parts->host +
                        (parts->port.empty() ? "" : ":" + parts->port) + "/";
    if (sqs->region.empty())
        sqs->region = SqsRegionOfHost(parts->host);
}

}  // namespace

std::string SqsRegionOfHost(const std::string &host) {
    std::string h = AsciiLowerCopy(host);
    for (std::string_view suffix : {".amazonaws.com", ".amazonaws.com.cn"}) {
        if (h.size() <= suffix.size() ||
            h.compare(h.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) != 0)
            continue;
        // The labels before the suffix: sqs.<region>, sqs-fips.<region>,
        // vpce-....sqs.<region>.vpce (a VPC endpoint), or the legacy <region>.queue.
        std::vector<std::string> labels;
        std::string rest = h.substr(0, h.size() - suffix.size());
        for (size_t start = 0;;) {
            size_t dot = rest.find('.', start);
            labels.push_back(rest.substr(start, dot == std::string::npos ? dot : dot - start));
            if (dot == std::string::npos)
                break;
            start = dot + 1;
        }
        for (size_t i = 0; i + 1 < labels.size(); ++i)
            if ((labels[i] == "sqs" || labels[i] == "sqs-fips") && IsValidRegion(labels[i + 1]))
                return labels[i + 1];
        if (labels.size() >= 2 && labels.back() == "queue" &&
            IsValidRegion(labels[labels.size() - 2]))
            return labels[labels.size() - 2];
    }
    return std::string();
}

void CheckSqsConfig(const Json &object, const OutOfRange &out_of_range, const CheckOptions &options,
                    ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    auto settings = std::make_shared<SqsConfig>();
    SqsConfig &sqs = *settings;
    config->settings = settings;
    bool region_given = false;
    const Json *queue_url = nullptr;
    // Secrets: never quoted, whatever is wrong with them.
    auto secret_string = [&](const std::string &key, const Json &value, std::string *target) {
        if (!value.is_string() || !IsPlainToken(value.get_ref<const std::string &>(), 4096))
            problems->push_back(Quote(key) +
                                " must be a non-empty string of printable ASCII without spaces");
        else
            *target = value.get<std::string>();
    };
    for (const auto &item : object.items()) {
        const std::string &key = item.key();
        const Json &value = item.value();
        if (ReportOutOfRange(out_of_range, key, problems))
            continue;
        if (CheckCommonKey(key, value, config, problems) ||
            CheckRangeKey(kSqsRangeKeys, key, value, &sqs, problems))
            continue;
        if (key == "queue_url") {
            queue_url = &value;  // checked last: "endpoint" and "region" come first
        } else if (key == "endpoint") {
            std::optional<UrlParts> parts;
            if (value.is_string())
                parts = ParseHttpUrl(value.get_ref<const std::string &>());
            if (!parts || !parts->query.empty())
                problems->push_back(
                    "\"endpoint\" must be an http or https URL without a query, such as "
                    "\"https://sqs.eu-west-1.amazonaws.com\"");
            else
                sqs.endpoint = value.get<std::string>();
        } else if (key == "region") {
            region_given = true;
            if (!value.is_string() || !IsValidRegion(value.get_ref<const std::string &>()))
                problems->push_back(
                    "\"region\" must be an AWS region such as \"eu-west-1\" (lower-case letters, "
                    "digits and \"-\", at most 32)");
            else
                sqs.region = value.get<std::string>();
        } else if (key == "access_key_id") {
            if (!value.is_string() || !IsPlainToken(value.get_ref<const std::string &>(), 128) ||
                value.get_ref<const std::string &>().find(':') != std::string::npos)
                problems->push_back(
                    "\"access_key_id\" must be an AWS access key id (printable ASCII, no spaces "
                    "or \":\", at most 128)");
            else
                sqs.access_key_id = value.get<std::string>();
        } else if (key == "secret_access_key") {
            secret_string(key, value, &sqs.secret_access_key);
        } else if (key == "session_token") {
            secret_string(key, value, &sqs.session_token);
        } else if (key == "group") {
            if (!value.is_string() || !IsValidGroupId(value.get_ref<const std::string &>()))
                problems->push_back(
                    "\"group\" must be a MessageGroupId: 1 to 128 characters of printable ASCII");
            else
                sqs.group = value.get<std::string>();
        } else if (key == "topic") {
            if (!value.is_string() || !IsValidSqsTopic(value.get_ref<const std::string &>()))
                problems->push_back(
                    "\"topic\" must be 1 to 249 bytes of UTF-8 without control characters");
            else
                sqs.default_topic = value.get<std::string>();
        } else if (key == "ca_file") {
            CheckFileSetting(key, value, options, &sqs.ca_file, check);
        } else if (key == "tls_verify") {
            CheckBoolSetting(key, value, &sqs.tls_verify, problems);
        } else {
            problems->push_back("unknown key " + Quote(key) + " for an sqs destination");
        }
    }
    if (queue_url == nullptr)
        problems->push_back("\"queue_url\" is required for an sqs destination");
    else
        CheckQueueUrl(*queue_url, &sqs, problems);
    if (!region_given && queue_url != nullptr && !sqs.queue_url.empty() && sqs.region.empty()) {
        // Neither given nor in an amazonaws.com host: the signature needs it.
        std::optional<UrlParts> parts = ParseHttpUrl(sqs.endpoint);
        if (parts)
            sqs.region = SqsRegionOfHost(parts->host);
        if (sqs.region.empty())
            problems->push_back(
                "\"region\" is required when neither \"queue_url\" nor \"endpoint\" is an "
                "amazonaws.com address");
    }
    if (!object.contains("access_key_id") || !object.contains("secret_access_key"))
        problems->push_back(
            "\"access_key_id\" and \"secret_access_key\" are required for an sqs destination");
    if (object.contains("group") && !sqs.queue_url.empty() && !sqs.fifo)
        problems->push_back(
            "\"group\" is for FIFO queues only (a queue whose name ends in \".fifo\")");
}

}  // namespace outbox
