// The redis kind's config check (include/outbox/brokers/redis/config.hpp).
#include "outbox/brokers/redis/config.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/brokers/redis/kind.hpp"
#include "outbox/config_json.hpp"

namespace outbox {

namespace {

constexpr int64_t kMaxMaxlen = int64_t(1) << 62;

constexpr RangeKey<RedisConfig> kRedisRangeKeys[] = {
    {"database", RangeType::Integer, 0, 65535, "", "",
     [](RedisConfig &c, int64_t v) { c.database = static_cast<int>(v); }},
    {"maxlen", RangeType::Integer, 1, kMaxMaxlen, "", "",
     [](RedisConfig &c, int64_t v) { c.maxlen = v; }},
    {"max_in_flight", RangeType::Integer, 1, 10000, "", "",
     [](RedisConfig &c, int64_t v) { c.max_in_flight = static_cast<int>(v); }},
    {"ack_timeout", RangeType::Duration, 100, 10 * kMsPerMinute, "100ms and 10min", "",
     [](RedisConfig &c, int64_t v) { c.ack_timeout_ms = v; }},
    {"connect_timeout", RangeType::Duration, 100, kMsPerMinute, "100ms and 1min", "",
     [](RedisConfig &c, int64_t v) { c.connect_timeout_ms = v; }},
};

constexpr RangeKey<RedisConfig> kWaitRangeKeys[] = {
    {"replicas", RangeType::Integer, 1, 100, "",
     "\"wait\".\"replicas\" must be an integer between 1 and 100",
     [](RedisConfig &c, int64_t v) { c.wait_replicas = static_cast<int>(v); }},
    {"timeout", RangeType::Duration, 1, kMsPerMinute, "1ms and 1min",
     "\"wait\".\"timeout\" must be a duration between 1ms and 1min (a number of milliseconds "
     "or a string such as \"500ms\" or \"5s\")",
     [](RedisConfig &c, int64_t v) { c.wait_timeout_ms = v; }},
};

}  // namespace

// Splits a "server" setting (see config.hpp).
bool ParseRedisServer(const std::string &server, std::string *host, int *port, bool *tls) {
    if (server.empty() || ContainsNul(server))
        return false;
    for (char c : server)
        if (static_cast<unsigned char>(c) <= ' ' || c == 0x7F || c == '@' || c == ',')
            return false;  // '@': credentials belong in "user" and "password"
    std::string_view rest = server;
    *tls = false;
    std::string lower = AsciiLowerCopy(server);
    size_t scheme_end = lower.find("://");
    if (scheme_end != std::string::npos) {
        std::string_view scheme = std::string_view(lower).substr(0, scheme_end);
        if (scheme == "rediss")
            *tls = true;
        else if (scheme != "redis")
            return false;
        rest = rest.substr(scheme_end + 3);
        if (!rest.empty() && rest.back() == '/')
            rest.remove_suffix(1);
    }
    if (rest.empty() || rest.find('/') != std::string_view::npos)
        return false;
    std::string_view port_text;
    if (rest.front() == '[') {
        size_t close = rest.find(']');
        if (close == std::string_view::npos || close == 1)
            return false;
        *host = std::string(rest.substr(1, close - 1));
        std::string_view after = rest.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':')
                return false;
            port_text = after.substr(1);
            if (port_text.empty())
                return false;
        }
    } else {
        size_t colon = rest.find(':');
        if (colon != std::string_view::npos && rest.find(':', colon + 1) != std::string_view::npos)
            return false;  // an IPv6 address needs brackets
        *host = std::string(rest.substr(0, colon));
        if (colon != std::string_view::npos) {
            port_text = rest.substr(colon + 1);
            if (port_text.empty())
                return false;
        }
        if (host->empty() || host->find_first_of("[]") != std::string::npos)
            return false;
    }
    *port = 6379;
    if (!port_text.empty()) {
        if (port_text.size() > 5)
            return false;
        int number = 0;
        for (char c : port_text) {
            if (c < '0' || c > '9')
                return false;
            number = number * 10 + (c - '0');
        }
        if (number < 1 || number > 65535)
            return false;
        *port = number;
    }
    return true;
}

// The redis-specific part of CheckDestinationConfig.
void CheckRedisConfig(const Json &object, const OutOfRange &out_of_range,
                      const CheckOptions &options, ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    auto settings = std::make_shared<RedisConfig>();
    RedisConfig &redis = *settings;
    config->settings = settings;
    bool server_given = false;
    bool url_tls = false;
    bool cert_given = false;
    bool key_given = false;
    auto plain_string = [&](const std::string &key, const Json &value, std::string *target,
                            bool secret) {
        if (!value.is_string() || value.get_ref<const std::string &>().empty() ||
            ContainsNul(value.get_ref<const std::string &>()) ||
            value.get_ref<const std::string &>().size() > 1024) {
            problems->push_back(Quote(key) + " must be a non-empty string" +
                                (secret ? "" : " of at most 1024 bytes"));
        } else {
            *target = value.get<std::string>();
        }
    };
    for (const auto &item : object.items()) {
        const std::string &key = item.key();
        const Json &value = item.value();
        server_given = server_given || key == "server";
        if (ReportOutOfRange(out_of_range, key, problems))
            continue;
        if (key == "topic") {
            problems->push_back("unknown key \"topic\" for a redis destination");
            check->hints.push_back("The default stream of a redis destination is \"stream\".");
            continue;
        }
        if (CheckCommonKey(key, value, config, problems) ||
            CheckRangeKey(kRedisRangeKeys, key, value, &redis, problems))
            continue;
        if (key == "server") {
            if (!value.is_string() ||
                !ParseRedisServer(value.get<std::string>(), &redis.host, &redis.port, &url_tls)) {
                // Not quoted: a mistyped password may have landed in it.
                problems->push_back(
                    "\"server\" must be one Redis server as host, host:port, [ipv6]:port, "
                    "redis://host:port or rediss://host:port (TLS), without credentials (use "
                    "\"user\" and \"password\")");
                redis.host.clear();
            }
        } else if (key == "stream") {
            if (!value.is_string() || !IsValidRedisStream(value.get_ref<const std::string &>()))
                problems->push_back(
                    "\"stream\" must be a Redis stream name: 1 to 512 bytes without control "
                    "characters");
            else
                redis.stream = value.get<std::string>();
        } else if (key == "user") {
            plain_string(key, value, &redis.user, false);
        } else if (key == "password") {
            plain_string(key, value, &redis.password, true);
        } else if (key == "ca_file") {
            CheckFileSetting(key, value, options, &redis.ca_file, check);
        } else if (key == "cert_file") {
            cert_given = true;
            CheckFileSetting(key, value, options, &redis.cert_file, check);
        } else if (key == "key_file") {
            key_given = true;
            CheckFileSetting(key, value, options, &redis.key_file, check);
        } else if (key == "tls") {
            CheckBoolSetting(key, value, &redis.tls, problems);
        } else if (key == "tls_verify") {
            CheckBoolSetting(key, value, &redis.tls_verify, problems);
        } else if (key == "create_stream") {
            CheckBoolSetting(key, value, &redis.create_stream, problems);
        } else if (key == "wait") {
            if (!value.is_object() || !value.contains("replicas")) {
                problems->push_back(
                    "\"wait\" must be an object {\"replicas\": N, \"timeout\": duration} "
                    "(\"replicas\" required)");
                continue;
            }
            for (const auto &w : value.items()) {
                if (!CheckRangeKey(kWaitRangeKeys, w.key(), w.value(), &redis, problems))
                    problems->push_back("unknown key " + Quote(w.key()) +
                                        " in \"wait\" (\"replicas\", \"timeout\")");
            }
        } else {
            problems->push_back("unknown key " + Quote(key) + " for a redis destination");
        }
    }
    if (!server_given)
        problems->push_back("\"server\" is required for a redis destination");
    if (cert_given != key_given)
        problems->push_back("\"cert_file\" and \"key_file\" go together: set both or neither");
    if (object.contains("user") && !object.contains("password"))
        problems->push_back("\"user\" needs \"password\"");
    redis.tls = redis.tls || url_tls || !redis.ca_file.empty() || !redis.cert_file.empty();
    if (!redis.tls && (object.contains("tls_verify")))
        problems->push_back("\"tls_verify\" needs TLS (\"tls\": true or a rediss:// server)");
    if (object.contains("tls") && object["tls"].is_boolean() && !object["tls"].get<bool>() &&
        (url_tls || object.contains("ca_file") || object.contains("cert_file")))
        problems->push_back(
            "\"tls\": false contradicts a rediss:// server, \"ca_file\" or \"cert_file\"");
}

}  // namespace outbox
