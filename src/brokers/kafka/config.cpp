// The kafka kind's config check (include/outbox/brokers/kafka/config.hpp): every librdkafka
// property is checked with librdkafka itself, so this runs in outbox-driver only.
#include "outbox/brokers/kafka/config.hpp"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/broker_address.hpp"
#include "outbox/brokers/kafka/kind.hpp"
#include "outbox/config_json.hpp"
#include "outbox/quote.hpp"

namespace outbox {

// The name librdkafka looks a property up by in the default topic config: rd_kafka_conf_set
// hands a name it does not know globally to the topic config, which drops a "topic." prefix,
// so "topic.acks" and "topic.request.required.acks" are "acks" under other spellings.
std::string_view BareKafkaName(std::string_view key) {
    constexpr std::string_view kTopicPrefix = "topic.";
    if (key.size() > kTopicPrefix.size() && key.substr(0, kTopicPrefix.size()) == kTopicPrefix) {
        return key.substr(kTopicPrefix.size());
    }
    return key;
}

std::vector<std::string> KafkaHosts(
    const std::vector<std::pair<std::string, std::string>> &properties) {
    std::vector<std::string> hosts;
    for (const auto &[key, value] : properties) {
        if (key == "bootstrap.servers" || key == "metadata.broker.list") {
            for (std::string &h : KafkaBootstrapHosts(value))
                hosts.push_back(std::move(h));
        } else if (key == "sasl.oauthbearer.token.endpoint.url") {
            hosts.push_back(BrokerUrlHost(value));
        }
    }
    return hosts;
}

namespace {

constexpr RangeKey<KafkaConfig> kKafkaRangeKeys[] = {
    // ours, not librdkafka's "max.in.flight"
    {"max_in_flight", RangeType::Integer, 1, kMaxKafkaInFlight, "", "",
     [](KafkaConfig &c, int64_t v) { c.max_in_flight = static_cast<int>(v); }},
};

// Owners for the C handles, so that an early return (or a bad_alloc) cannot leak them.
struct KafkaConfDeleter {
    void operator()(rd_kafka_conf_t *conf) const { rd_kafka_conf_destroy(conf); }
};
using KafkaConfPtr = std::unique_ptr<rd_kafka_conf_t, KafkaConfDeleter>;

// The text librdkafka receives for a JSON scalar: strings as they are, integers in decimal
// ("5", never "5.0": librdkafka's integer parser would stop at the dot), booleans as words.
std::optional<std::string> ScalarText(const Json &value) {
    if (value.is_string()) {
        return value.get<std::string>();
    }
    if (value.is_boolean()) {
        return std::string(value.get<bool>() ? "true" : "false");
    }
    if (value.is_number()) {
        if (std::optional<int64_t> integer = AsInteger(value)) {
            return std::to_string(*integer);
        }
        if (value.is_number_unsigned()) {
            return std::to_string(value.get<uint64_t>());
        }
        return value.dump();  // a fraction or an exponent; dump() does not throw for numbers
    }
    return std::nullopt;
}

// Properties whose librdkafka value is a callback, an opaque pointer or an object: they cannot
// be expressed in JSON, and the ones outbox sets (log.queue, log_cb, dr_msg_cb) keep
// librdkafka's threads away from PostgreSQL.
bool IsOutboxOwnedKafkaProperty(std::string_view key) {
    std::string lower = AsciiLowerCopy(key);
    static constexpr std::string_view kOwned[] = {
        "opaque",
        "default_topic_conf",
        "interceptors",
        "ssl_key",
        "ssl_certificate",
        "ssl_ca",
        "ssl_engine_callback_data",
        "msg_order_cmp",
        "log.queue",
        "log_cb",
        "dr_msg_cb",
        "dr_cb",
    };
    for (std::string_view owned : kOwned) {
        if (lower == owned) {
            return true;
        }
    }
    // Callbacks: "error_cb", "ssl.certificate.verify_cb", and any future "*.cb".
    std::string_view view = lower;
    return view == "cb" || (view.size() > 3 && view.substr(view.size() - 2) == "cb" &&
                            (view[view.size() - 3] == '_' || view[view.size() - 3] == '.'));
}

// Removes the trailing newline and period librdkafka leaves in errstr and lower-cases the first
// word, so that the text reads like the rest of the problems.
std::string TidyLibraryMessage(std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' ||
                             text.back() == '.')) {
        text.pop_back();
    }
    if (text.size() >= 2 && text[0] >= 'A' && text[0] <= 'Z' && text[1] >= 'a' && text[1] <= 'z') {
        text[0] = AsciiLower(text[0]);
    }
    return text;
}

// The problem line for a value librdkafka refused. librdkafka quotes the value in its errstr
// ('Invalid value "x" for configuration property "k"'), so for a secret setting the value is cut
// out, and if it still shows anywhere the library's wording is dropped altogether. librdkafka
// also names the canonical property rather than the alias the user wrote ("linger.ms" is
// reported as "queue.buffering.max.ms"), so the key as written is always named.
std::string KafkaValueProblem(const std::string &key, const std::string &value,
                              const char *errstr) {
    const std::string quoted_key = Quote(key);
    constexpr std::string_view kBareInvalid = "invalid value for configuration property";
    std::string reason = errstr;
    if (IsSecretSetting(key)) {
        ReplaceAll(&reason, "\"" + value + "\" ", "");
        ReplaceAll(&reason, "\"" + value + "\"", "");
        reason = TidyLibraryMessage(reason);
        bool leaks = !value.empty() && reason.find(value) != std::string::npos;
        if (leaks || reason.empty() || reason.rfind("invalid value", 0) == 0) {
            return "invalid value for " + quoted_key;
        }
        return "invalid value for " + quoted_key + ": " + reason;
    }
    if (value.size() > kMaxQuotedBytes) {
        ReplaceAll(&reason, "\"" + value + "\"", Quote(value));
    }
    reason = TidyLibraryMessage(reason);
    // A long value that librdkafka's buffer cut short cannot be found to shorten.
    if (reason.empty() || reason.size() > 512 || reason.rfind(kBareInvalid, 0) == 0) {
        return "invalid value " + Quote(value) + " for " + quoted_key;
    }
    if (reason.find(quoted_key) == std::string::npos) {
        return quoted_key + ": " + reason;
    }
    return reason;
}

// What rd_kafka_conf_get reports for a property (set or default), whatever its length;
// empty when it cannot tell.
std::string KafkaConfValue(rd_kafka_conf_t *conf, const std::string &key) {
    size_t size = 0;
    if (rd_kafka_conf_get(conf, key.c_str(), nullptr, &size) != RD_KAFKA_CONF_OK || size == 0) {
        return std::string();
    }
    std::string buffer(size, '\0');
    if (rd_kafka_conf_get(conf, key.c_str(), buffer.data(), &size) != RD_KAFKA_CONF_OK) {
        return std::string();
    }
    buffer.resize(std::strlen(buffer.c_str()));
    return buffer;
}

// The privileged setting a librdkafka property is, if any (GSSAPI chosen through
// "sasl.mechanism(s)" or by default is found once every property is set; see
// CheckKafkaConfig). Names are compared lower-cased and without a "topic." prefix: librdkafka
// is stricter, and a spelling it does not know is refused anyway.
std::optional<PrivilegedSetting> ClassifyKafkaProperty(const std::string &key, const Json &value) {
    const std::string name = AsciiLowerCopy(BareKafkaName(key));
    const std::string quoted = Quote(key);
    PrivilegedSetting setting{key, value.dump(), ServerAccess::RunsCode, std::string()};
    if (name == "sasl.kerberos.kinit.cmd") {
        setting.problem = quoted + " runs a command on the database server" + kOnlySuperuser;
    } else if (name == "sasl.kerberos.principal" || name == "sasl.kerberos.keytab") {
        setting.problem = quoted +
                          " is substituted into the kinit command librdkafka runs on the database "
                          "server" +
                          kOnlySuperuser;
    } else if (StartsWith(name, "sasl.kerberos.")) {
        setting.problem = quoted +
                          " configures Kerberos (GSSAPI), which runs kinit on the database "
                          "server" +
                          kOnlySuperuser;
    } else if (name == "ssl.engine.location") {
        setting.problem = quoted +
                          " loads a shared library (an OpenSSL engine) into the database server" +
                          kOnlySuperuser;
    } else if (name == "ssl.engine.id") {
        setting.problem =
            quoted + " chooses an OpenSSL engine to load into the database server" + kOnlySuperuser;
    } else if (name == "ssl.providers") {
        setting.problem = quoted +
                          " loads OpenSSL providers (shared libraries) into the database "
                          "server" +
                          kOnlySuperuser;
    } else if (name == "ssl.ca.location" || name == "ssl.certificate.location" ||
               name == "ssl.key.location" || name == "ssl.keystore.location" ||
               name == "ssl.crl.location") {
        // "probe" names no path: librdkafka looks in the usual system CA locations.
        if (name == "ssl.ca.location" && value.is_string() &&
            value.get_ref<const std::string &>() == "probe") {
            return std::nullopt;
        }
        setting.access = ServerAccess::ReadsFiles;
        setting.problem = quoted + " has the database server read a file" + kOnlyFileReaders;
    } else {
        return std::nullopt;
    }
    return setting;
}

// Whether a broker list names no broker at all ("", " , ").
bool IsBlank(std::string_view text) {
    for (char c : text) {
        if (c != ' ' && c != '\t' && c != ',') {
            return false;
        }
    }
    return true;
}

// Checks one librdkafka property against librdkafka itself and against outbox's guarantees;
// a property that passes is appended to check->config.kafka.properties. A property that needs
// privileges is recorded in check->privileged.
void CheckKafkaProperty(rd_kafka_conf_t *conf, const std::string &key, const Json &value,
                        bool *has_bootstrap, KafkaConfig *kafka, ConfigCheck *check) {
    std::vector<std::string> *problems = &check->problems;
    // How librdkafka will look the name up; checks below use it so that no spelling of a
    // topic-level property ("topic.acks") slips past them.
    const std::string bare(BareKafkaName(key));
    if (ContainsNul(key)) {
        problems->push_back("unknown librdkafka property " + Quote(key));
        return;
    }
    if (IsOutboxOwnedKafkaProperty(key) || IsOutboxOwnedKafkaProperty(bare)) {
        problems->push_back(Quote(key) + " is set by outbox and cannot be configured");
        return;
    }
    if (key == "plugin.library.paths" || bare == "plugin.library.paths") {
        // librdkafka loads the plugins while the property is being set: even the check would
        // run foreign code inside the database server.
        problems->push_back(
            "\"plugin.library.paths\" cannot be configured (it would load code into the database "
            "server)");
        return;
    }
    if (bare == "transactional.id") {
        problems->push_back(
            "\"transactional.id\" cannot be configured (outbox names it: with \"delivery\": "
            "\"exactly_once\" it is outbox-<database>-<destination>-<worker>)");
        return;
    }
    if (bare == "internal.termination.signal") {
        problems->push_back(
            "\"internal.termination.signal\" cannot be configured (signals belong to the database "
            "server)");
        return;
    }
    if (std::optional<PrivilegedSetting> privileged = ClassifyKafkaProperty(key, value)) {
        check->privileged.push_back(std::move(*privileged));
    }
    const bool is_bootstrap = bare == "bootstrap.servers" || bare == "metadata.broker.list";
    if (is_bootstrap && !value.is_string()) {
        // librdkafka would take 9092 as a host name.
        problems->push_back(Quote(key) +
                            " must be a string listing brokers, such as \"host1:9092,host2:9092\"");
        return;
    }
    std::optional<std::string> text = ScalarText(value);
    if (!text) {
        problems->push_back("librdkafka property " + Quote(key) +
                            " must be a string, number or boolean");
        return;
    }
    if (ContainsNul(*text)) {
        problems->push_back("value of " + Quote(key) + " must not contain a NUL character");
        return;
    }

    char errstr[512] = "";
    rd_kafka_conf_res_t res =
        rd_kafka_conf_set(conf, key.c_str(), text->c_str(), errstr, sizeof(errstr));
    if (res == RD_KAFKA_CONF_UNKNOWN) {
        problems->push_back("unknown librdkafka property " + Quote(key));
        return;
    }
    if (res != RD_KAFKA_CONF_OK) {
        problems->push_back(KafkaValueProblem(key, *text, errstr));
        return;
    }

    // Read back librdkafka's normalised value: "all", "-1" and -1 are the same acks, and
    // "t", "1" and true the same boolean.
    if (bare == "acks" || bare == "request.required.acks") {
        if (KafkaConfValue(conf, bare) != "-1") {
            problems->push_back(
                Quote(key) +
                " must be \"all\" (outbox requires acknowledgement by all in-sync replicas)");
            return;
        }
    } else if (bare == "enable.idempotence") {
        if (KafkaConfValue(conf, bare) != "true") {
            problems->push_back(
                Quote(key) +
                " must be true (outbox relies on the idempotent producer so that retries neither "
                "duplicate nor reorder messages)");
            return;
        }
    } else if (bare == "queuing.strategy") {
        if (KafkaConfValue(conf, bare) != "fifo") {
            problems->push_back(Quote(key) +
                                " must be \"fifo\" (the idempotent producer cannot start with "
                                "another queuing strategy)");
            return;
        }
    } else if (bare == "enable.sasl.oauthbearer.unsecure.jwt") {
        if (KafkaConfValue(conf, bare) == "true") {
            // Development only, says librdkafka; and 2.0.2 crashes in its own thread (taking
            // the database server through crash recovery) when it cannot parse
            // "sasl.oauthbearer.config", whose text it also logs.
            problems->push_back(
                Quote(key) +
                " must be false (librdkafka's unsecured JWT is for development only, and "
                "librdkafka 2.0.2 crashes the database server when it cannot parse "
                "\"sasl.oauthbearer.config\")");
            check->hints.push_back(
                "For SASL/OAUTHBEARER use \"sasl.oauthbearer.method\": \"oidc\" with a token "
                "endpoint.");
            return;
        }
    } else if (is_bootstrap) {
        if (IsBlank(*text)) {
            problems->push_back(Quote(key) + " must list at least one broker");
            return;
        }
        *has_bootstrap = true;
    }
    kafka->properties.emplace_back(key, std::move(*text));
}

// Records the GSSAPI (Kerberos) SASL mechanism as a privileged setting when it is chosen,
// explicitly or as librdkafka's default for a SASL "security.protocol": librdkafka then runs
// "sasl.kerberos.kinit.cmd" through /bin/sh, with the principal and keytab substituted into it
// even when the command is the default one.
void CheckKerberos(rd_kafka_conf_t *conf, const KafkaConfig &kafka, ConfigCheck *check) {
    const std::string *mechanism_key = nullptr;
    const std::string *protocol = nullptr;
    const std::string *kinit_cmd = nullptr;
    for (const auto &[key, value] : kafka.properties) {
        std::string_view bare = BareKafkaName(key);
        if (bare == "sasl.mechanism" || bare == "sasl.mechanisms") {
            mechanism_key = &key;
        } else if (bare == "security.protocol") {
            protocol = &value;
        } else if (bare == "sasl.kerberos.kinit.cmd") {
            kinit_cmd = &value;
        }
    }
    // librdkafka wants exactly "GSSAPI"; any case counts here.
    const std::string mechanism = KafkaConfValue(conf, "sasl.mechanisms");
    const bool gssapi = AsciiLowerCopy(mechanism).find("gssapi") != std::string::npos;
    const bool sasl = StartsWith(AsciiLowerCopy(KafkaConfValue(conf, "security.protocol")), "sasl");
    // One identity for every way of choosing it, so that respelling it changes nothing.
    PrivilegedSetting setting{"sasl.mechanisms", "gssapi", ServerAccess::RunsCode, std::string()};
    if (gssapi && mechanism_key != nullptr) {
        setting.problem = Quote(*mechanism_key) + ": " + Quote(mechanism) +
                          " (Kerberos) runs kinit, a command on the database server" +
                          kOnlySuperuser;
        check->privileged.push_back(std::move(setting));
    } else if (gssapi && sasl && protocol != nullptr) {
        setting.problem = "\"security.protocol\": " + Quote(*protocol) +
                          " without \"sasl.mechanisms\" chooses GSSAPI (Kerberos), which runs "
                          "kinit, a command on the database server" +
                          kOnlySuperuser;
        check->privileged.push_back(std::move(setting));
    }
    // A custom kinit command may substitute any property ("%{sasl.username}"): those become
    // part of a shell command too.
    if (kinit_cmd == nullptr) {
        return;
    }
    for (size_t open = kinit_cmd->find("%{"); open != std::string::npos;
         open = kinit_cmd->find("%{", open + 2)) {
        size_t close = kinit_cmd->find('}', open + 2);
        if (close == std::string::npos) {
            break;
        }
        const std::string name = kinit_cmd->substr(open + 2, close - open - 2);
        for (const auto &[key, value] : kafka.properties) {
            if (BareKafkaName(key) != name ||
                StartsWith(AsciiLowerCopy(BareKafkaName(key)), "sasl.kerberos.")) {
                continue;
            }
            check->privileged.push_back(
                {key, value, ServerAccess::RunsCode,
                 Quote(key) +
                     " is substituted into \"sasl.kerberos.kinit.cmd\", a command the "
                     "database server runs" +
                     kOnlySuperuser});
        }
    }
}

// The kafka-specific part of CheckDestinationConfig.
}  // namespace

void CheckKafkaConfig(const Json &object, const OutOfRange &out_of_range, const CheckOptions &,
                      ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    auto settings = std::make_shared<KafkaConfig>();
    KafkaConfig &kafka = *settings;
    config->settings = settings;
    KafkaConfPtr conf(rd_kafka_conf_new());
    if (!conf) {
        problems->push_back("could not allocate a librdkafka configuration to check against");
        return;
    }
    bool has_bootstrap = false;
    bool bootstrap_given = false;
    for (const auto &item : object.items()) {
        const std::string &key = item.key();
        if (key == "bootstrap.servers" || key == "metadata.broker.list") {
            bootstrap_given = true;
        }
        if (ReportOutOfRange(out_of_range, key, problems)) {
            continue;
        }
        if (CheckCommonKey(key, item.value(), config, problems) ||
            CheckRangeKey(kKafkaRangeKeys, key, item.value(), &kafka, problems)) {
            continue;
        }
        if (key == "cloudevents") {
            CheckCloudEventsKey(item.value(), &kafka.cloudevents, problems);
            continue;
        }
        if (key == "topic") {
            if (!item.value().is_string() ||
                !IsValidKafkaTopic(item.value().get_ref<const std::string &>())) {
                problems->push_back(
                    "\"topic\" must be a Kafka topic name: 1 to 249 characters of A-Z, a-z, 0-9, "
                    "\".\", \"_\" and \"-\", other than \".\" and \"..\"");
            } else {
                kafka.default_topic = item.value().get<std::string>();
            }
            continue;
        }
        CheckKafkaProperty(conf.get(), key, item.value(), &has_bootstrap, &kafka, check);
    }
    if (!has_bootstrap && !bootstrap_given) {
        problems->push_back("\"bootstrap.servers\" is required for a kafka destination");
    }
    CheckKerberos(conf.get(), kafka, check);
    // librdkafka checks these only when the producer is created; the idempotent producer
    // needs them so, and a destination that would fail at 3am should fail now.
    auto number = [&](const char *name) -> int64_t {
        char buf[64];
        size_t size = sizeof buf;
        if (rd_kafka_conf_get(conf.get(), name, buf, &size) != RD_KAFKA_CONF_OK)
            return -1;
        return std::strtoll(buf, nullptr, 10);
    };
    if (number("message.send.max.retries") < 1) {
        problems->push_back(
            "\"message.send.max.retries\" (\"retries\") must be at least 1 for the idempotent "
            "producer");
    }
    // librdkafka lowers its own default to 5 for idempotence; only an explicit value can break it.
    bool in_flight_given = false;
    for (const auto &[key, value] : kafka.properties)
        in_flight_given = in_flight_given || key == "max.in.flight" ||
                          key == "max.in.flight.requests.per.connection";
    if (in_flight_given && number("max.in.flight.requests.per.connection") > 5) {
        problems->push_back(
            "\"max.in.flight.requests.per.connection\" (\"max.in.flight\") must be at most 5 for "
            "the idempotent producer");
    }
    check->exactly_once_supported = true;
    if (config->delivery == Delivery::ExactlyOnce && kafka.default_topic.empty()) {
        // The marker of each transaction is an offset committed for partition 0 of this topic
        // (driver_txn.cpp): it must be known before any message is.
        problems->push_back(
            "\"delivery\": \"exactly_once\" needs \"topic\" (the destination's topic keeps the "
            "marker of each committed batch)");
    }
    if (config->ordering == Ordering::Key) {
        for (const auto &[key, value] : kafka.properties) {
            if (BareKafkaName(key) == "partitioner" && value == "random") {
                problems->push_back(
                    "\"partitioner\" must map a key to one partition with \"ordering\": "
                    "\"key\" (\"random\" spreads a key's messages over partitions)");
            }
        }
    }
}

}  // namespace outbox
