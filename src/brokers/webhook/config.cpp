// The webhook kind's config check (include/outbox/brokers/webhook/config.hpp). The URL is
// checked with libcurl's own parser, so this runs in outbox-driver only.
#include "outbox/brokers/webhook/config.hpp"

#include <curl/curl.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/brokers/webhook/kind.hpp"
#include "outbox/config_json.hpp"
#include "outbox/headers.hpp"
#include "outbox/signing.hpp"

namespace outbox {

namespace {

constexpr RangeKey<WebhookConfig> kWebhookRangeKeys[] = {
    {"timeout_ms", RangeType::Duration, 1, 10 * kMsPerMinute, "",
     "\"timeout_ms\" must be a duration between 1ms and 10min (a number of milliseconds or a "
     "string such as \"500ms\" or \"30s\")",
     [](WebhookConfig &c, int64_t v) {
         c.timeout_ms = v;
         c.timeout_set = true;
     }},
    {"max_in_flight", RangeType::Integer, 1, 1024, "", "",
     [](WebhookConfig &c, int64_t v) { c.max_in_flight = static_cast<int>(v); }},
};

struct CurlUrlDeleter {
    void operator()(CURLU *url) const { curl_url_cleanup(url); }
};
using CurlUrlPtr = std::unique_ptr<CURLU, CurlUrlDeleter>;

struct CurlStringDeleter {
    void operator()(char *text) const { curl_free(text); }
};
using CurlStringPtr = std::unique_ptr<char, CurlStringDeleter>;

// Whether `url` is an absolute http(s) URL with a host, by libcurl's own parser: the same code
// that will later send the request decides.
bool IsValidWebhookUrl(const std::string &url) {
    if (url.empty() || ContainsNul(url)) {
        return false;
    }
    CurlUrlPtr handle(curl_url());
    if (!handle) {
        return false;
    }
    // No CURLU_NON_SUPPORT_SCHEME and no CURLU_DEFAULT_SCHEME: "example.com/hook" is refused.
    if (curl_url_set(handle.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) {
        return false;
    }
    char *raw = nullptr;
    if (curl_url_get(handle.get(), CURLUPART_SCHEME, &raw, 0) != CURLUE_OK) {
        return false;
    }
    CurlStringPtr scheme(raw);
    std::string lower_scheme = AsciiLowerCopy(scheme.get());
    if (lower_scheme != "http" && lower_scheme != "https") {
        return false;
    }
    // libcurl repairs "https:///hook" into "https://hook/" and "http:/h" into "http://h/";
    // such a typo should be fixed by the DBA, not guessed at.
    std::string_view rest = std::string_view(url).substr(lower_scheme.size());
    if (rest.substr(0, 3) != "://" || rest.size() < 4 || rest[3] == '/') {
        return false;
    }
    raw = nullptr;
    if (curl_url_get(handle.get(), CURLUPART_HOST, &raw, 0) != CURLUE_OK) {
        return false;
    }
    CurlStringPtr host(raw);
    return host && host.get()[0] != '\0';
}

// One secret of "secret": a whsec_ HMAC secret (v1) or a whsk_ ed25519 private key (v1a),
// decoded into `webhook`; otherwise the problem, naming it by `what`. Never quotes the value.
std::optional<std::string> AddWebhookSecret(const Json &value, const std::string &what,
                                            WebhookConfig *webhook) {
    std::string_view text =
        value.is_string() ? std::string_view(value.get_ref<const std::string &>()) : "";
    if (text.substr(0, 5) == "whsk_") {
        std::optional<std::string> seed = DecodeSigningKey(text);
        if (!seed) {
            return what +
                   " must be \"whsk_\" followed by the base64 of a 32-byte ed25519 private key "
                   "(or of libsodium's 64-byte secret key)";
        }
        webhook->signing_keys.push_back(std::move(*seed));
        return std::nullopt;
    }
    if (text.substr(0, 5) == "whpk_") {
        return what +
               " is a public key (\"whpk_\"): sign with its private key (\"whsk_\"); the "
               "public key is what receivers verify with";
    }
    std::optional<std::string> key;
    if (value.is_string()) {
        key = DecodeWebhookSecret(text);
    }
    if (!key) {
        return what + " must be \"whsec_\" followed by base64";
    }
    webhook->secret_keys.push_back(std::move(*key));
    return std::nullopt;
}

// Parses "secret": one whsec_/whsk_ string or an array of them. Never quotes what it was given.
void CheckWebhookSecret(const Json &value, WebhookConfig *webhook,
                        std::vector<std::string> *problems) {
    const char *kShape = "\"secret\" must be a \"whsec_\" string or a non-empty array of them";
    if (value.is_string()) {
        if (auto problem = AddWebhookSecret(value, "\"secret\"", webhook)) {
            problems->push_back(std::move(*problem));
        }
        return;
    }
    if (!value.is_array() || value.empty()) {
        problems->push_back(kShape);
        return;
    }
    WebhookConfig keys;
    size_t index = 0;
    bool ok = true;
    for (const Json &element : value) {
        ++index;
        std::string what = "element " + std::to_string(index) + " of \"secret\"";
        if (auto problem = AddWebhookSecret(element, what, &keys)) {
            problems->push_back(std::move(*problem));
            ok = false;
        }
    }
    if (ok) {
        webhook->secret_keys = std::move(keys.secret_keys);
        webhook->signing_keys = std::move(keys.signing_keys);
    }
}

// Parses "headers": an object of static headers, held to the rules of every message header.
// Values are never quoted: static headers are where Authorization tokens live.
void CheckWebhookHeaders(const Json &value, WebhookConfig *webhook,
                         std::vector<std::string> *problems) {
    if (!value.is_object()) {
        problems->push_back("\"headers\" must be an object of strings");
        return;
    }
    if (value.size() > kMaxHeaderCount) {
        problems->push_back("\"headers\" must have at most " + std::to_string(kMaxHeaderCount) +
                            " entries");
        return;
    }
    for (const auto &item : value.items()) {
        const std::string &name = item.key();
        const Json &header_value = item.value();
        if (!IsValidHeaderName(name)) {
            problems->push_back("header name " + Quote(name) +
                                " in \"headers\" is not a valid HTTP header name");
            continue;
        }
        if (IsReservedHeaderName(name)) {
            problems->push_back("header " + Quote(name) +
                                " in \"headers\" is set by outbox and cannot be configured");
            continue;
        }
        if (!header_value.is_string()) {
            problems->push_back("header " + Quote(name) + " in \"headers\" must be a string");
            continue;
        }
        const std::string &text = header_value.get_ref<const std::string &>();
        if (!IsValidHeaderValue(text)) {
            problems->push_back(
                "header " + Quote(name) + " in \"headers\" must be valid UTF-8 of at most " +
                std::to_string(kMaxHeaderValueBytes) + " bytes without CR, LF or NUL");
            continue;
        }
        webhook->headers.emplace_back(name, text);
    }
}

// The webhook-specific part of CheckDestinationConfig.
}  // namespace

void CheckWebhookConfig(const Json &object, const OutOfRange &out_of_range,
                        const CheckOptions &options, ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    auto settings = std::make_shared<WebhookConfig>();
    WebhookConfig &webhook = *settings;
    config->settings = settings;
    bool url_given = false;
    for (const auto &item : object.items()) {
        const std::string &key = item.key();
        const Json &value = item.value();
        url_given = url_given || key == "url";
        if (ReportOutOfRange(out_of_range, key, problems)) {
            continue;
        }
        if (CheckCommonKey(key, value, config, problems) ||
            CheckRangeKey(kWebhookRangeKeys, key, value, &webhook, problems)) {
            continue;
        }
        if (key == "url") {
            // The URL is not quoted: it may carry credentials or a token in its query.
            if (!value.is_string() || !IsValidWebhookUrl(value.get_ref<const std::string &>())) {
                problems->push_back("\"url\" must be an http or https URL with a host");
            } else {
                webhook.url = value.get<std::string>();
            }
        } else if (key == "secret") {
            CheckWebhookSecret(value, &webhook, problems);
        } else if (key == "headers") {
            CheckWebhookHeaders(value, &webhook, problems);
        } else if (key == "cloudevents") {
            CheckCloudEventsKey(value, &webhook.cloudevents, problems);
        } else if (key == "topic") {
            // It becomes the ce-type header, so it must also be a valid header value.
            if (!value.is_string() || !IsValidWebhookTopic(value.get_ref<const std::string &>())) {
                problems->push_back(
                    "\"topic\" must be a non-empty string of at most 249 bytes of valid UTF-8 "
                    "without CR, LF or NUL");
            } else {
                webhook.default_topic = value.get<std::string>();
            }
        } else if (key == "ca_file") {
            check->privileged.push_back({key, value.dump(), ServerAccess::ReadsFiles,
                                         "\"ca_file\" has the database server read a file" +
                                             std::string(kOnlyFileReaders)});
            if (!value.is_string()) {
                problems->push_back("\"ca_file\" must be a string naming a readable file");
            } else if (std::optional<std::string> problem = ReadableFileProblem(
                           "ca_file", value.get_ref<const std::string &>(), options.check_files)) {
                problems->push_back(std::move(*problem));
            } else {
                webhook.ca_file = value.get<std::string>();
            }
        } else if (key == "tls_verify") {
            if (!value.is_boolean()) {
                problems->push_back("\"tls_verify\" must be true or false");
            } else {
                webhook.tls_verify = value.get<bool>();
            }
        } else {
            problems->push_back("unknown key " + Quote(key) + " for a webhook destination");
        }
    }
    if (!url_given) {
        problems->push_back("\"url\" is required for a webhook destination");
    }
}

std::optional<std::pair<std::string, std::string>> WebhookTimeoutProblem(
    const WebhookConfig &config, int64_t lease_timeout_ms) {
    if (!config.timeout_set || config.timeout_ms * 2 <= lease_timeout_ms)
        return std::nullopt;
    return std::make_pair(
        "\"timeout_ms\" (" + std::to_string(config.timeout_ms) +
            " ms) must be at most half of outbox.lease_timeout (" +
            std::to_string(lease_timeout_ms) +
            " ms): a request that outlasts the lease is taken over and sent again by another "
            "worker",
        "Lower \"timeout_ms\" to at most " + std::to_string(lease_timeout_ms / 2) +
            ", or raise outbox.lease_timeout to at least " + std::to_string(config.timeout_ms * 2) +
            " ms.");
}

}  // namespace outbox
