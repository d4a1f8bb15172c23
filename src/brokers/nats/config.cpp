// The nats kind's config check (include/outbox/brokers/nats/config.hpp).
#include "outbox/brokers/nats/config.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/brokers/nats/kind.hpp"
#include "outbox/config_json.hpp"
#include "outbox/headers.hpp"

namespace outbox {

namespace {

constexpr RangeKey<NatsConfig> kNatsRangeKeys[] = {
    {"max_in_flight", RangeType::Integer, 1, 10000, "", "",
     [](NatsConfig &c, int64_t v) { c.max_in_flight = static_cast<int>(v); }},
    {"ack_timeout", RangeType::Duration, 100, 10 * kMsPerMinute, "100ms and 10min", "",
     [](NatsConfig &c, int64_t v) { c.ack_timeout_ms = v; }},
    {"connect_timeout", RangeType::Duration, 100, kMsPerMinute, "100ms and 1min", "",
     [](NatsConfig &c, int64_t v) { c.connect_timeout_ms = v; }},
};

// Whether one NATS server URL is nats://, tls:// or a bare host:port that cnats accepts. The
// URL may carry credentials; it is never quoted.
bool IsValidNatsServer(const std::string &server) {
    if (server.empty() || ContainsNul(server)) {
        return false;
    }
    for (char c : server) {
        if (static_cast<unsigned char>(c) <= ' ' || c == 0x7F || c == ',') {
            return false;
        }
    }
    std::string lower = AsciiLowerCopy(server);
    size_t scheme_end = lower.find("://");
    std::string_view rest = server;
    if (scheme_end != std::string::npos) {
        std::string_view scheme = std::string_view(lower).substr(0, scheme_end);
        if (scheme != "nats" && scheme != "tls") {
            return false;
        }
        rest = rest.substr(scheme_end + 3);
    }
    size_t at = rest.rfind('@');
    if (at != std::string_view::npos) {
        rest = rest.substr(at + 1);
    }
    if (!rest.empty() && rest.back() == '/') {
        rest.remove_suffix(1);
    }
    if (rest.empty() || rest.find('/') != std::string_view::npos || rest[0] == ':') {
        return false;
    }
    size_t colon = rest.rfind(':');
    if (colon != std::string_view::npos && rest.find(']') == std::string_view::npos) {
        std::string_view port = rest.substr(colon + 1);
        if (port.empty() || port.size() > 5) {
            return false;
        }
        int number = 0;
        for (char c : port) {
            if (c < '0' || c > '9') {
                return false;
            }
            number = number * 10 + (c - '0');
        }
        return number >= 1 && number <= 65535;
    }
    return true;
}

// "servers": a comma-separated string or an array of nats:// or tls:// URLs, into *servers.
// Whether every one is valid.
bool ParseNatsServers(const Json &value, std::vector<std::string> *servers) {
    bool ok = true;
    if (value.is_string()) {
        const std::string &text = value.get_ref<const std::string &>();
        size_t start = 0;
        while (start <= text.size()) {
            size_t comma = text.find(',', start);
            std::string part =
                text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            size_t b = part.find_first_not_of(' ');
            size_t e = part.find_last_not_of(' ');
            part = b == std::string::npos ? std::string() : part.substr(b, e - b + 1);
            ok = ok && IsValidNatsServer(part);
            servers->push_back(std::move(part));
            if (comma == std::string::npos) {
                break;
            }
            start = comma + 1;
        }
    } else if (value.is_array() && !value.empty()) {
        for (const Json &element : value) {
            ok = ok && element.is_string() &&
                 IsValidNatsServer(element.get_ref<const std::string &>());
            if (element.is_string()) {
                servers->push_back(element.get<std::string>());
            }
        }
    } else {
        ok = false;
    }
    return ok;
}

bool IsNkeyPublicKey(const Json &value) {
    // An NKey public user key: "U" and 55 more base32 characters.
    bool ok = value.is_string() && value.get_ref<const std::string &>().size() == 56 &&
              value.get_ref<const std::string &>()[0] == 'U';
    if (ok) {
        for (char c : value.get_ref<const std::string &>()) {
            ok = ok && ((c >= 'A' && c <= 'Z') || (c >= '2' && c <= '7'));
        }
    }
    return ok;
}

// The authentication keys that go together, and at most one way to authenticate.
void CheckNatsAuthentication(const Json &object, std::vector<std::string> *problems) {
    if (object.contains("nkey") != object.contains("nkey_seed_file")) {
        problems->push_back("\"nkey\" and \"nkey_seed_file\" go together: set both or neither");
    }
    if (object.contains("password") && !object.contains("user")) {
        problems->push_back("\"password\" needs \"user\"");
    }
    int methods = (object.contains("user") ? 1 : 0) + (object.contains("token") ? 1 : 0) +
                  (object.contains("creds_file") ? 1 : 0) + (object.contains("nkey") ? 1 : 0);
    if (methods > 1) {
        problems->push_back(
            "choose one way to authenticate: \"user\"/\"password\", \"token\", \"creds_file\" "
            "or \"nkey\"/\"nkey_seed_file\"");
    }
}

}  // namespace

// The nats-specific part of CheckDestinationConfig.
void CheckNatsConfig(const Json &object, const OutOfRange &out_of_range,
                     const CheckOptions &options, ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    auto settings = std::make_shared<NatsConfig>();
    NatsConfig &nats = *settings;
    config->settings = settings;
    bool servers_given = false;
    bool cert_given = false;
    bool key_given = false;
    auto secret_string = [&](const std::string &key, const Json &value, std::string *target) {
        if (!value.is_string() || value.get_ref<const std::string &>().empty() ||
            ContainsNul(value.get_ref<const std::string &>())) {
            problems->push_back(Quote(key) + " must be a non-empty string");
        } else {
            *target = value.get<std::string>();
        }
    };
    for (const auto &item : object.items()) {
        const std::string &key = item.key();
        const Json &value = item.value();
        servers_given = servers_given || key == "servers";
        if (ReportOutOfRange(out_of_range, key, problems)) {
            continue;
        }
        if (key == "topic") {
            problems->push_back("unknown key \"topic\" for a nats destination");
            check->hints.push_back("The default subject of a nats destination is \"subject\".");
            continue;
        }
        if (CheckCommonKey(key, value, config, problems) ||
            CheckRangeKey(kNatsRangeKeys, key, value, &nats, problems)) {
            continue;
        }
        if (key == "servers") {
            std::vector<std::string> servers;
            bool ok = ParseNatsServers(value, &servers);
            if (!ok || servers.empty()) {
                // Never quoted: a server URL may carry credentials.
                problems->push_back(
                    "\"servers\" must list NATS servers as nats://host:port or tls://host:port "
                    "URLs, in a comma-separated string or an array of strings");
            } else {
                nats.servers = std::move(servers);
            }
        } else if (key == "subject") {
            if (!value.is_string() || !IsValidNatsSubject(value.get_ref<const std::string &>())) {
                problems->push_back(
                    "\"subject\" must be a NATS subject to publish to: tokens of printable "
                    "ASCII separated by \".\", no spaces, no wildcards (\"*\", \">\"), not a "
                    "system subject (\"$...\", \"_INBOX...\"), at most 255 bytes");
            } else {
                nats.subject = value.get<std::string>();
            }
        } else if (key == "user") {
            secret_string(key, value, &nats.user);
        } else if (key == "password") {
            secret_string(key, value, &nats.password);
        } else if (key == "token") {
            secret_string(key, value, &nats.token);
        } else if (key == "nkey") {
            bool ok = IsNkeyPublicKey(value);
            if (!ok) {
                problems->push_back(
                    "\"nkey\" must be an NKey public user key (56 characters starting with "
                    "\"U\")");
            } else {
                nats.nkey = value.get<std::string>();
            }
        } else if (key == "creds_file") {
            CheckFileSetting(key, value, options, &nats.creds_file, check);
        } else if (key == "nkey_seed_file") {
            CheckFileSetting(key, value, options, &nats.nkey_seed_file, check);
        } else if (key == "ca_file") {
            CheckFileSetting(key, value, options, &nats.ca_file, check);
        } else if (key == "cert_file") {
            cert_given = true;
            CheckFileSetting(key, value, options, &nats.cert_file, check);
        } else if (key == "key_file") {
            key_given = true;
            CheckFileSetting(key, value, options, &nats.key_file, check);
        } else if (key == "tls") {
            CheckBoolSetting(key, value, &nats.tls, problems);
        } else if (key == "tls_verify") {
            CheckBoolSetting(key, value, &nats.tls_verify, problems);
        } else {
            problems->push_back("unknown key " + Quote(key) + " for a nats destination");
        }
    }
    if (!servers_given) {
        problems->push_back("\"servers\" is required for a nats destination");
    }
    if (cert_given != key_given) {
        problems->push_back("\"cert_file\" and \"key_file\" go together: set both or neither");
    }
    CheckNatsAuthentication(object, problems);
}

}  // namespace outbox
