// The amqp kind's config check (include/outbox/brokers/amqp/config.hpp), with librabbitmq's URL
// parser: outbox-driver only.
#include "outbox/brokers/amqp/config.hpp"
#include "outbox/brokers/amqp/rabbitmq_c.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/brokers/amqp/kind.hpp"
#include "outbox/config_json.hpp"
#include "outbox/headers.hpp"

namespace outbox {

namespace {

constexpr RangeKey<AmqpConfig> kAmqpRangeKeys[] = {
    {"max_in_flight", RangeType::Integer, 1, 10000, "", "",
     [](AmqpConfig &c, int64_t v) { c.max_in_flight = static_cast<int>(v); }},
    // AMQP negotiates whole seconds; a fraction is rounded up, so 500ms is not off.
    {"heartbeat", RangeType::Duration, 0, 10 * kMsPerMinute, "0 (off) and 10min", "",
     [](AmqpConfig &c, int64_t v) {
         c.heartbeat_s = static_cast<int>((v + kMsPerSecond - 1) / kMsPerSecond);
     }},
    {"connect_timeout", RangeType::Duration, 100, kMsPerMinute, "100ms and 1min", "",
     [](AmqpConfig &c, int64_t v) { c.connect_timeout_ms = v; }},
};

// Whether `url` is an amqp:// or amqps:// URL with a host, as librabbitmq parses it. Query
// parameters are refused: librabbitmq would take them as part of the vhost.
bool IsValidAmqpUrl(const std::string &url) {
    if (ContainsNul(url) || url.find('?') != std::string::npos ||
        url.find('#') != std::string::npos) {
        return false;
    }
    std::string lower = AsciiLowerCopy(url);
    size_t rest = StartsWith(lower, "amqp://") ? 7 : StartsWith(lower, "amqps://") ? 8 : 0;
    if (rest == 0 || url.size() == rest || url[rest] == '/') {
        return false;
    }
    std::vector<char> buffer(url.begin(), url.end());
    buffer.push_back('\0');
    struct amqp_connection_info info;
    if (amqp_parse_url(buffer.data(), &info) != AMQP_STATUS_OK) {
        return false;
    }
    return info.host != nullptr && info.host[0] != '\0' && info.port > 0 && info.port <= 65535;
}

// The amqp-specific part of CheckDestinationConfig.
}  // namespace

void CheckAmqpConfig(const Json &object, const OutOfRange &out_of_range,
                     const CheckOptions &options, ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    auto settings = std::make_shared<AmqpConfig>();
    AmqpConfig &amqp = *settings;
    config->settings = settings;
    bool url_given = false;
    bool cert_given = false;
    bool key_given = false;
    for (const auto &item : object.items()) {
        const std::string &key = item.key();
        const Json &value = item.value();
        url_given = url_given || key == "url";
        if (ReportOutOfRange(out_of_range, key, problems)) {
            continue;
        }
        if (key == "topic") {
            problems->push_back("unknown key \"topic\" for an amqp destination");
            check->hints.push_back(
                "The default routing key of an amqp destination is \"routing_key\".");
            continue;
        }
        if (CheckCommonKey(key, value, config, problems) ||
            CheckRangeKey(kAmqpRangeKeys, key, value, &amqp, problems)) {
            continue;
        }
        if (key == "url") {
            // Never quoted: it carries the credentials.
            if (!value.is_string() || !IsValidAmqpUrl(value.get_ref<const std::string &>())) {
                problems->push_back(
                    "\"url\" must be an amqp:// or amqps:// URL with a host, such as "
                    "\"amqp://user:password@host:5672/vhost\" (no query parameters)");
            } else {
                amqp.url = value.get<std::string>();
            }
        } else if (key == "exchange") {
            if (!value.is_string() || value.get_ref<const std::string &>().size() > 255 ||
                ContainsNul(value.get_ref<const std::string &>()) ||
                !IsValidHeaderValue(value.get_ref<const std::string &>())) {
                problems->push_back(
                    "\"exchange\" must be a string of at most 255 bytes of valid UTF-8 without "
                    "control characters (\"\" is the default exchange)");
            } else {
                amqp.exchange = value.get<std::string>();
            }
        } else if (key == "routing_key") {
            if (!value.is_string() ||
                !IsValidAmqpRoutingKey(value.get_ref<const std::string &>())) {
                problems->push_back(
                    "\"routing_key\" must be 1 to 255 bytes of valid UTF-8 without control "
                    "characters");
            } else {
                amqp.routing_key = value.get<std::string>();
            }
        } else if (key == "ca_file") {
            CheckFileSetting(key, value, options, &amqp.ca_file, check);
        } else if (key == "cert_file") {
            cert_given = true;
            CheckFileSetting(key, value, options, &amqp.cert_file, check);
        } else if (key == "key_file") {
            key_given = true;
            CheckFileSetting(key, value, options, &amqp.key_file, check);
        } else if (key == "tls_verify") {
            CheckBoolSetting(key, value, &amqp.tls_verify, problems);
        } else {
            problems->push_back("unknown key " + Quote(key) + " for an amqp destination");
        }
    }
    if (!url_given) {
        problems->push_back("\"url\" is required for an amqp destination");
    }
    if (cert_given != key_given) {
        problems->push_back("\"cert_file\" and \"key_file\" go together: set both or neither");
    }
    bool tls_setting =
        object.contains("ca_file") || cert_given || key_given || object.contains("tls_verify");
    if (tls_setting && !amqp.url.empty() && !StartsWith(AsciiLowerCopy(amqp.url), "amqps://")) {
        problems->push_back(
            "\"ca_file\", \"cert_file\", \"key_file\" and \"tls_verify\" apply to amqps:// URLs "
            "only");
    }
}

}  // namespace outbox
