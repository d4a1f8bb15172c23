// The mqtt kind's config check (include/outbox/brokers/mqtt/config.hpp).
#include "outbox/brokers/mqtt/config.hpp"

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/brokers/mqtt/kind.hpp"
#include "outbox/config_json.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

namespace {

constexpr RangeKey<MqttConfig> kMqttRangeKeys[] = {
    {"port", RangeType::Integer, 1, 65535, "", "",
     [](MqttConfig &c, int64_t v) { c.port = static_cast<int>(v); }},
    {"max_in_flight", RangeType::Integer, 1, 65535, "", "",
     [](MqttConfig &c, int64_t v) { c.max_in_flight = static_cast<int>(v); }},
    {"ack_timeout", RangeType::Duration, 100, 10 * kMsPerMinute, "100ms and 10min", "",
     [](MqttConfig &c, int64_t v) { c.ack_timeout_ms = v; }},
    // The keep alive is a 16-bit number of seconds; libmosquitto wants at least 5.
    {"keepalive", RangeType::Duration, 5000, 65535000, "5s and 18h", "",
     [](MqttConfig &c, int64_t v) { c.keepalive_ms = v; }},
    // The session expiry interval is a 32-bit number of seconds; a week is plenty.
    {"session_expiry", RangeType::Duration, 0, 7 * 24 * 60 * kMsPerMinute, "0 and 7d", "",
     [](MqttConfig &c, int64_t v) { c.session_expiry_ms = v; }},
};

// A host as libmosquitto connects to it: a name of letters, digits, '-', '_' and '.', or an IP
// address literal (IPv6 without brackets).
bool IsValidMqttHost(const std::string &host) {
    if (host.empty() || host.size() > 253)
        return false;
    if (LiteralAddressOfHost(host))
        return true;
    for (char c : host) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || c == '.';
        if (!ok)
            return false;
    }
    return host.front() != '.' && host.front() != '-';
}

}  // namespace

// The client identifier of a destination's connection (see config.hpp).
std::string MqttClientId(const std::string &client_name, int64_t worker_index) {
    std::string id = client_name;
    if (worker_index > 0)
        id += "-w" + std::to_string(worker_index + 1);
    if (id.size() > 200) {
        // FNV-1a of the whole, so that two long names stay apart.
        uint64_t h = 1469598103934665603ull;
        for (char c : id)
            h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
        id = id.substr(0, 183) + "-" + hex;
    }
    return id;
}

// The mqtt-specific part of CheckDestinationConfig.
void CheckMqttConfig(const Json &object, const OutOfRange &out_of_range,
                     const CheckOptions &options, ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    auto settings = std::make_shared<MqttConfig>();
    MqttConfig &mqtt = *settings;
    config->settings = settings;
    bool cert_given = false;
    bool key_given = false;
    for (const auto &item : object.items()) {
        const std::string &key = item.key();
        const Json &value = item.value();
        if (ReportOutOfRange(out_of_range, key, problems))
            continue;
        if (key == "subject" || key == "url" || key == "servers") {
            problems->push_back("unknown key " + Quote(key) + " for an mqtt destination");
            check->hints.push_back(key == "subject"
                                       ? "The default topic of an mqtt destination is \"topic\"."
                                       : "An mqtt destination names its broker with \"host\" and "
                                         "\"port\".");
            continue;
        }
        if (CheckCommonKey(key, value, config, problems) ||
            CheckRangeKey(kMqttRangeKeys, key, value, &mqtt, problems))
            continue;
        if (key == "host") {
            if (!value.is_string() || !IsValidMqttHost(value.get_ref<const std::string &>()))
                problems->push_back(
                    "\"host\" must be a host name or an IP address (no scheme, no port: the port "
                    "is \"port\")");
            else
                mqtt.host = value.get<std::string>();
        } else if (key == "topic") {
            if (!value.is_string() || !IsValidMqttTopic(value.get_ref<const std::string &>()))
                problems->push_back(
                    "\"topic\" must be an MQTT topic name to publish to: UTF-8 without control "
                    "characters or wildcards (\"+\", \"#\"), not starting with \"$\", at most "
                    "65535 bytes");
            else
                mqtt.topic = value.get<std::string>();
        } else if (key == "qos") {
            std::optional<int64_t> n = AsInteger(value);
            if (!n || (*n != 1 && *n != 2))
                problems->push_back(
                    "\"qos\" must be 1 (acknowledged by PUBACK) or 2 (PUBCOMP): QoS 0 has no "
                    "acknowledgement to delete a message on");
            else
                mqtt.qos = static_cast<int>(*n);
        } else if (key == "username") {
            if (!value.is_string() || value.get_ref<const std::string &>().empty() ||
                ContainsNul(value.get_ref<const std::string &>()) ||
                value.get_ref<const std::string &>().size() > 65535)
                problems->push_back("\"username\" must be a non-empty string");
            else
                mqtt.username = value.get<std::string>();
        } else if (key == "password") {
            // Never quoted.
            if (!value.is_string() || value.get_ref<const std::string &>().empty() ||
                ContainsNul(value.get_ref<const std::string &>()) ||
                value.get_ref<const std::string &>().size() > 65535)
                problems->push_back("\"password\" must be a non-empty string");
            else
                mqtt.password = value.get<std::string>();
        } else if (key == "retain") {
            CheckBoolSetting(key, value, &mqtt.retain, problems);
        } else if (key == "tls") {
            CheckBoolSetting(key, value, &mqtt.tls, problems);
        } else if (key == "tls_verify") {
            CheckBoolSetting(key, value, &mqtt.tls_verify, problems);
        } else if (key == "ca_file") {
            CheckFileSetting(key, value, options, &mqtt.ca_file, check);
        } else if (key == "cert_file") {
            cert_given = true;
            CheckFileSetting(key, value, options, &mqtt.cert_file, check);
        } else if (key == "key_file") {
            key_given = true;
            CheckFileSetting(key, value, options, &mqtt.key_file, check);
        } else {
            problems->push_back("unknown key " + Quote(key) + " for an mqtt destination");
        }
    }
    if (!object.contains("host"))
        problems->push_back("\"host\" is required for an mqtt destination");
    if (cert_given != key_given)
        problems->push_back("\"cert_file\" and \"key_file\" go together: set both or neither");
    if (object.contains("password") && !object.contains("username"))
        problems->push_back("\"password\" needs \"username\"");
    if (!mqtt.ca_file.empty() || !mqtt.cert_file.empty())
        mqtt.tls = true;
    if (mqtt.port == 0)
        mqtt.port = mqtt.tls ? 8883 : 1883;
}

}  // namespace outbox
