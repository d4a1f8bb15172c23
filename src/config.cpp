// Destination config parsing and validation. The same function runs at create_destination and
// in the worker, so a config that was accepted is exactly the config that runs. Every problem
// is collected so that a DBA fixes a config in one round trip, not one error at a time.
#include "outbox/config.hpp"
#include "outbox/brokers/amqp/rabbitmq_c.hpp"

#include <curl/curl.h>
#include <librdkafka/rdkafka.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/duration.hpp"
#include "outbox/headers.hpp"
#include "outbox/quote.hpp"
#include "outbox/signing.hpp"

namespace outbox {

namespace {

// ordered_json keeps the keys in document order, which KafkaConfig::properties promises.
using Json = nlohmann::ordered_json;

constexpr int64_t kMsPerSecond = 1000;
constexpr int64_t kMsPerMinute = 60 * kMsPerSecond;
constexpr int64_t kMsPerDay = 24 * 60 * kMsPerMinute;
constexpr size_t kMaxTopicBytes = 249;

// Owners for the C handles, so that an early return (or a bad_alloc) cannot leak them.
struct KafkaConfDeleter {
    void operator()(rd_kafka_conf_t *conf) const { rd_kafka_conf_destroy(conf); }
};
using KafkaConfPtr = std::unique_ptr<rd_kafka_conf_t, KafkaConfDeleter>;

struct CurlUrlDeleter {
    void operator()(CURLU *url) const { curl_url_cleanup(url); }
};
using CurlUrlPtr = std::unique_ptr<CURLU, CurlUrlDeleter>;

struct CurlStringDeleter {
    void operator()(char *text) const { curl_free(text); }
};
using CurlStringPtr = std::unique_ptr<char, CurlStringDeleter>;

// Lower-cases ASCII only: property names are ASCII, and the locale must not matter.
char AsciiLower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// An ASCII-lower-cased copy, for case-insensitive name checks.
std::string AsciiLowerCopy(std::string_view text) {
    std::string out(text);
    for (char &c : out) {
        c = AsciiLower(c);
    }
    return out;
}

// JSON strings may hold U+0000, but C APIs would silently cut the text there.
bool ContainsNul(std::string_view text) {
    return text.find('\0') != std::string_view::npos;
}

// `text` quoted for a problem line (see quote.hpp).
std::string Quote(std::string_view text) {
    char shown[kQuotedBufferSize];
    QuoteText(text, shown);
    return shown;
}

// An integral JSON number as int64 (5 and 5.0 alike: jsonb keeps the "5.0" a user typed).
std::optional<int64_t> AsInteger(const Json &value) {
    if (value.is_number_unsigned()) {
        uint64_t v = value.get<uint64_t>();
        if (v > static_cast<uint64_t>(INT64_MAX)) {
            return std::nullopt;
        }
        return static_cast<int64_t>(v);
    }
    if (value.is_number_integer()) {
        return value.get<int64_t>();
    }
    if (value.is_number_float()) {
        double v = value.get<double>();
        // 2^63 is exactly representable; anything at or above it does not fit.
        if (std::isfinite(v) && v == std::floor(v) && v >= -9223372036854775808.0 &&
            v < 9223372036854775808.0) {
            return static_cast<int64_t>(v);
        }
    }
    return std::nullopt;
}

// A duration setting: a JSON number of milliseconds (fractions rounded down, like the string
// form) or a string that ParseDurationMs accepts.
std::optional<int64_t> AsDurationMs(const Json &value) {
    if (value.is_string()) {
        const std::string &text = value.get_ref<const std::string &>();
        if (ContainsNul(text)) {
            return std::nullopt;
        }
        return ParseDurationMs(text);
    }
    if (value.is_number_float()) {
        double v = value.get<double>();
        if (!std::isfinite(v) || v < 0 || v >= 9223372036854775808.0) {
            return std::nullopt;
        }
        return static_cast<int64_t>(std::floor(v));
    }
    std::optional<int64_t> ms = AsInteger(value);
    if (!ms || *ms < 0) {
        return std::nullopt;
    }
    return ms;
}

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

// Replaces every occurrence of `from` in `text` with `to`.
void ReplaceAll(std::string *text, std::string_view from, std::string_view to) {
    if (from.empty()) {
        return;
    }
    size_t pos = 0;
    while ((pos = text->find(from, pos)) != std::string::npos) {
        text->replace(pos, from.size(), to);
        pos += to.size();
    }
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

bool StartsWith(std::string_view text, std::string_view prefix) {
    return text.size() >= prefix.size() && text.substr(0, prefix.size()) == prefix;
}

const char kOnlySuperuser[] = ": only a superuser may set it";
const char kOnlyFileReaders[] = ": only a superuser or a member of pg_read_server_files may set it";

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
                        bool *has_bootstrap, ConfigCheck *check) {
    KafkaConfig *kafka = &check->config.kafka;
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
            "\"transactional.id\" cannot be configured (outbox uses the idempotent producer, not "
            "transactions)");
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

// A one-line explanation of why access()/stat() refused a path.
const char *FileErrorText(int error) {
    switch (error) {
        case ENOENT:
            return "no such file";
        case EACCES:
            return "permission denied";
        case ENOTDIR:
            return "a component of the path is not a directory";
        case ELOOP:
            return "too many symbolic links";
        case ENAMETOOLONG:
            return "path too long";
        default:
            return "cannot be read";
    }
}

// The problem with a file setting `key` naming `path`, or nullopt when the database server can
// read the file (or, without `check_files`, when it is a path at all). The check runs as the
// server's OS user, the same user the worker runs as.
std::optional<std::string> ReadableFileProblem(const std::string &key, const std::string &path,
                                               bool check_files) {
    const std::string expected = Quote(key) + " must name a readable file";
    if (path.empty() || ContainsNul(path)) {
        return expected;
    }
    if (!check_files) {
        return std::nullopt;
    }
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
        return expected + " (" + Quote(path) + ": " + FileErrorText(errno) + ")";
    }
    if (!S_ISREG(st.st_mode)) {
        return expected + " (" + Quote(path) + " is not a regular file)";
    }
    if (access(path.c_str(), R_OK) != 0) {
        return expected + " (" + Quote(path) + ": " + FileErrorText(errno) + ")";
    }
    return std::nullopt;
}

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

// Checks the keys every kind accepts. Returns false when `key` is not one of them.
bool CheckCommonKey(DestinationKind kind, const std::string &key, const Json &value,
                    DestinationConfig *config, std::vector<std::string> *problems) {
    if (key == "max_attempts") {
        std::optional<int64_t> n = AsInteger(value);
        if (!n || *n < 1 || *n > 1000) {
            problems->push_back("\"max_attempts\" must be an integer between 1 and 1000");
        } else {
            config->retry.max_attempts = static_cast<int>(*n);
        }
        return true;
    }
    if (key == "retry_base") {
        std::optional<int64_t> ms = AsDurationMs(value);
        if (!ms || *ms < 1 || *ms > kMsPerDay) {
            problems->push_back(
                "\"retry_base\" must be a duration between 1ms and 1d (a number of milliseconds "
                "or a string such as \"500ms\", \"2s\" or \"5min\")");
        } else {
            config->retry.retry_base_ms = *ms;
        }
        return true;
    }
    if (key == "retry_max") {
        std::optional<int64_t> ms = AsDurationMs(value);
        if (!ms || *ms < 1 || *ms > 7 * kMsPerDay) {
            problems->push_back(
                "\"retry_max\" must be a duration between 1ms and 7d (a number of milliseconds "
                "or a string such as \"500ms\", \"2s\" or \"5min\")");
        } else {
            config->retry.retry_max_ms = *ms;
        }
        return true;
    }
    if (key == "max_pending") {
        std::optional<int64_t> n = AsInteger(value);
        if (!n || *n < 1 || *n > kMaxPendingLimit) {
            problems->push_back("\"max_pending\" must be an integer between 1 and " +
                                std::to_string(kMaxPendingLimit));
        } else {
            config->max_pending = *n;
        }
        return true;
    }
    // Policies (issue 26).
    if (key == "ttl") {
        std::optional<int64_t> ms = AsDurationMs(value);
        if (!ms || *ms < kMsPerSecond || *ms > 366 * kMsPerDay) {
            problems->push_back(
                "\"ttl\" must be a duration between 1s and 366d (a number of milliseconds or a "
                "string such as \"30s\", \"15min\" or \"2h\")");
        } else {
            config->ttl_ms = *ms;
        }
        return true;
    }
    if (key == "retry_budget") {
        std::optional<int64_t> ms = AsDurationMs(value);
        if (!ms || *ms < kMsPerSecond || *ms > 366 * kMsPerDay) {
            problems->push_back(
                "\"retry_budget\" must be a duration between 1s and 366d (a number of "
                "milliseconds or a string such as \"30s\", \"15min\" or \"24h\")");
        } else {
            config->retry.retry_budget_ms = *ms;
        }
        return true;
    }
    // Compaction by key (issue 26): "key" or "none" (the default).
    if (key == "compaction") {
        if (value == "none") {
            config->compaction = Compaction::None;
        } else if (value == "key") {
            config->compaction = Compaction::Key;
        } else {
            problems->push_back(
                "\"compaction\" must be \"key\" (a newer message of a key supersedes its older "
                "undelivered one) or \"none\"");
        }
        return true;
    }
    if (key == "ordering") {
        if (value == "none") {
            config->ordering = Ordering::None;
        } else if (value == "key") {
            config->ordering = Ordering::Key;
        } else {
            problems->push_back("\"ordering\" must be \"none\" or \"key\"");
        }
        return true;
    }
    if (key == "on_dead") {
        if (value == "block") {
            config->on_dead = OnDead::Block;
        } else if (value == "skip") {
            config->on_dead = OnDead::Skip;
        } else {
            problems->push_back("\"on_dead\" must be \"block\" or \"skip\"");
        }
        return true;
    }
    if (key == "cloudevents" &&
        (kind == DestinationKind::Kafka || kind == DestinationKind::Webhook)) {
        std::optional<CloudEventsMode> mode;
        if (value == "binary") {
            mode = CloudEventsMode::Binary;
        } else if (value == "structured") {
            mode = CloudEventsMode::Structured;
        }
        if (!mode) {
            problems->push_back("\"cloudevents\" must be \"binary\" or \"structured\"");
        } else if (kind == DestinationKind::Kafka) {
            config->kafka.cloudevents = *mode;
        } else {
            config->webhook.cloudevents = *mode;
        }
        return true;
    }
    if (key == "topic") {
        if (kind == DestinationKind::Kafka) {
            if (!value.is_string() || !IsValidKafkaTopic(value.get_ref<const std::string &>())) {
                problems->push_back(
                    "\"topic\" must be a Kafka topic name: 1 to 249 characters of A-Z, a-z, 0-9, "
                    "\".\", \"_\" and \"-\", other than \".\" and \"..\"");
            } else {
                config->kafka.default_topic = value.get<std::string>();
            }
        } else {
            // It becomes the ce-type header, so it must also be a valid header value.
            if (!value.is_string() || value.get_ref<const std::string &>().empty() ||
                value.get_ref<const std::string &>().size() > kMaxTopicBytes ||
                !IsValidHeaderValue(value.get_ref<const std::string &>())) {
                problems->push_back(
                    "\"topic\" must be a non-empty string of at most 249 bytes of valid UTF-8 "
                    "without CR, LF or NUL");
            } else {
                config->webhook.default_topic = value.get<std::string>();
            }
        }
        return true;
    }
    return false;
}

// Records the GSSAPI (Kerberos) SASL mechanism as a privileged setting when it is chosen,
// explicitly or as librdkafka's default for a SASL "security.protocol": librdkafka then runs
// "sasl.kerberos.kinit.cmd" through /bin/sh, with the principal and keytab substituted into it
// even when the command is the default one.
void CheckKerberos(rd_kafka_conf_t *conf, ConfigCheck *check) {
    const KafkaConfig &kafka = check->config.kafka;
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

// Top-level keys whose value holds a number beyond the range of a double, with the problem
// to report for each (see CheckDestinationConfig).
using OutOfRange = std::vector<std::pair<std::string, std::string>>;

// Reports the out-of-range problems of `key` and returns true when it has any: such a key is
// not checked further (its value is not what the user wrote).
bool ReportOutOfRange(const OutOfRange &out_of_range, const std::string &key,
                      std::vector<std::string> *problems) {
    bool found = false;
    for (const auto &[bad_key, problem] : out_of_range) {
        if (bad_key == key) {
            problems->push_back(problem);
            found = true;
        }
    }
    return found;
}

// "max_in_flight" of the kafka, amqp and nats kinds.
void CheckMaxInFlight(const Json &value, int *target, std::vector<std::string> *problems,
                      int64_t max = 10000) {
    std::optional<int64_t> n = AsInteger(value);
    if (!n || *n < 1 || *n > max) {
        problems->push_back("\"max_in_flight\" must be an integer between 1 and " +
                            std::to_string(max));
    } else {
        *target = static_cast<int>(*n);
    }
}

// The kafka-specific part of CheckDestinationConfig.
void CheckKafkaConfig(const Json &object, const OutOfRange &out_of_range, ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
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
        if (CheckCommonKey(DestinationKind::Kafka, key, item.value(), config, problems)) {
            continue;
        }
        if (key == "max_in_flight") {  // ours, not librdkafka's "max.in.flight"
            CheckMaxInFlight(item.value(), &config->kafka.max_in_flight, problems,
                             kMaxKafkaInFlight);
            continue;
        }
        CheckKafkaProperty(conf.get(), key, item.value(), &has_bootstrap, check);
    }
    if (!has_bootstrap && !bootstrap_given) {
        problems->push_back("\"bootstrap.servers\" is required for a kafka destination");
    }
    CheckKerberos(conf.get(), check);
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
    for (const auto &[key, value] : config->kafka.properties)
        in_flight_given = in_flight_given || key == "max.in.flight" ||
                          key == "max.in.flight.requests.per.connection";
    if (in_flight_given && number("max.in.flight.requests.per.connection") > 5) {
        problems->push_back(
            "\"max.in.flight.requests.per.connection\" (\"max.in.flight\") must be at most 5 for "
            "the idempotent producer");
    }
}

// The webhook-specific part of CheckDestinationConfig.
void CheckWebhookConfig(const Json &object, const OutOfRange &out_of_range,
                        const CheckOptions &options, ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    WebhookConfig &webhook = config->webhook;
    bool url_given = false;
    for (const auto &item : object.items()) {
        const std::string &key = item.key();
        const Json &value = item.value();
        url_given = url_given || key == "url";
        if (ReportOutOfRange(out_of_range, key, problems)) {
            continue;
        }
        if (CheckCommonKey(DestinationKind::Webhook, key, value, config, problems)) {
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
        } else if (key == "timeout_ms") {
            std::optional<int64_t> ms = AsDurationMs(value);
            if (!ms || *ms < 1 || *ms > 10 * kMsPerMinute) {
                problems->push_back(
                    "\"timeout_ms\" must be a duration between 1ms and 10min (a number of "
                    "milliseconds or a string such as \"500ms\" or \"30s\")");
            } else {
                webhook.timeout_ms = *ms;
                webhook.timeout_set = true;
            }
        } else if (key == "max_in_flight") {
            std::optional<int64_t> n = AsInteger(value);
            if (!n || *n < 1 || *n > 1024) {
                problems->push_back("\"max_in_flight\" must be an integer between 1 and 1024");
            } else {
                webhook.max_in_flight = static_cast<int>(*n);
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

// The problem with a file setting (`key` names a file the driver reads; the value must be a
// string), as ReadableFileProblem.
std::optional<std::string> FileSettingProblem(const std::string &key, const Json &value,
                                              bool check_files) {
    if (!value.is_string()) {
        return Quote(key) + " must name a readable file";
    }
    return ReadableFileProblem(key, value.get_ref<const std::string &>(), check_files);
}

// A file setting of the amqp and nats kinds: recorded as privileged (the server reads the
// file) and checked; `*target` gets the path when it is good.
void CheckFileSetting(const std::string &key, const Json &value, const CheckOptions &options,
                      std::string *target, ConfigCheck *check) {
    check->privileged.push_back(
        {key, value.dump(), ServerAccess::ReadsFiles,
         Quote(key) + " has the database server read a file" + std::string(kOnlyFileReaders)});
    if (std::optional<std::string> problem = FileSettingProblem(key, value, options.check_files)) {
        check->problems.push_back(std::move(*problem));
    } else {
        *target = value.get<std::string>();
    }
}

// A duration setting between `min_ms` and `max_ms`; `range` is how the problem states them.
void CheckDurationSetting(const std::string &key, const Json &value, int64_t min_ms, int64_t max_ms,
                          const char *range, int64_t *target, std::vector<std::string> *problems) {
    std::optional<int64_t> ms = AsDurationMs(value);
    if (!ms || *ms < min_ms || *ms > max_ms) {
        problems->push_back(Quote(key) + " must be a duration between " + range +
                            " (a number of milliseconds or a string such as \"500ms\" or "
                            "\"5s\")");
    } else {
        *target = *ms;
    }
}

// A boolean setting.
void CheckBoolSetting(const std::string &key, const Json &value, bool *target,
                      std::vector<std::string> *problems) {
    if (!value.is_boolean()) {
        problems->push_back(Quote(key) + " must be true or false");
    } else {
        *target = value.get<bool>();
    }
}

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
void CheckAmqpConfig(const Json &object, const OutOfRange &out_of_range,
                     const CheckOptions &options, ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    AmqpConfig &amqp = config->amqp;
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
        if (CheckCommonKey(DestinationKind::Amqp, key, value, config, problems)) {
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
        } else if (key == "max_in_flight") {
            CheckMaxInFlight(value, &amqp.max_in_flight, problems);
        } else if (key == "heartbeat") {
            int64_t ms = 0;
            CheckDurationSetting(key, value, 0, 10 * kMsPerMinute, "0 (off) and 10min", &ms,
                                 problems);
            // AMQP negotiates whole seconds; a fraction is rounded up, so 500ms is not off.
            amqp.heartbeat_s = static_cast<int>((ms + kMsPerSecond - 1) / kMsPerSecond);
        } else if (key == "connect_timeout") {
            CheckDurationSetting(key, value, 100, kMsPerMinute, "100ms and 1min",
                                 &amqp.connect_timeout_ms, problems);
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

// The nats-specific part of CheckDestinationConfig.
void CheckNatsConfig(const Json &object, const OutOfRange &out_of_range,
                     const CheckOptions &options, ConfigCheck *check) {
    DestinationConfig *config = &check->config;
    std::vector<std::string> *problems = &check->problems;
    NatsConfig &nats = config->nats;
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
        if (CheckCommonKey(DestinationKind::Nats, key, value, config, problems)) {
            continue;
        }
        if (key == "servers") {
            std::vector<std::string> servers;
            bool ok = true;
            if (value.is_string()) {
                const std::string &text = value.get_ref<const std::string &>();
                size_t start = 0;
                while (start <= text.size()) {
                    size_t comma = text.find(',', start);
                    std::string part = text.substr(
                        start, comma == std::string::npos ? std::string::npos : comma - start);
                    size_t b = part.find_first_not_of(' ');
                    size_t e = part.find_last_not_of(' ');
                    part = b == std::string::npos ? std::string() : part.substr(b, e - b + 1);
                    ok = ok && IsValidNatsServer(part);
                    servers.push_back(std::move(part));
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
                        servers.push_back(element.get<std::string>());
                    }
                }
            } else {
                ok = false;
            }
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
            // An NKey public user key: "U" and 55 more base32 characters.
            bool ok = value.is_string() && value.get_ref<const std::string &>().size() == 56 &&
                      value.get_ref<const std::string &>()[0] == 'U';
            if (ok) {
                for (char c : value.get_ref<const std::string &>()) {
                    ok = ok && ((c >= 'A' && c <= 'Z') || (c >= '2' && c <= '7'));
                }
            }
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
        } else if (key == "max_in_flight") {
            CheckMaxInFlight(value, &nats.max_in_flight, problems);
        } else if (key == "ack_timeout") {
            CheckDurationSetting(key, value, 100, 10 * kMsPerMinute, "100ms and 10min",
                                 &nats.ack_timeout_ms, problems);
        } else if (key == "connect_timeout") {
            CheckDurationSetting(key, value, 100, kMsPerMinute, "100ms and 1min",
                                 &nats.connect_timeout_ms, problems);
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

// What stands in for a number beyond the range of a double until the problem is reported:
// a JSON string no config setting accepts (jsonb can hold U+0001, but no one writes this).
constexpr std::string_view kOutOfRangeMarker = "\x01outbox: number out of range\x01";
constexpr std::string_view kOutOfRangeLiteral = "\"\\u0001outbox: number out of range\\u0001\"";

// `text` with every number that overflows a double replaced by kOutOfRangeLiteral, or nullopt
// when there is none. nlohmann::json refuses such numbers outright ("number overflow"), which
// would hide where the number is and every other problem. Strings are copied untouched.
std::optional<std::string> MarkOutOfRangeNumbers(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    bool marked = false;
    size_t i = 0;
    while (i < text.size()) {
        char c = text[i];
        if (c == '"') {
            size_t end = i + 1;
            while (end < text.size() && text[end] != '"') {
                end += text[end] == '\\' ? 2 : 1;
            }
            end = std::min(end + 1, text.size());
            out.append(text.substr(i, end - i));
            i = end;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t end = i + 1;
            while (end < text.size() &&
                   std::string_view("0123456789+-.eE").find(text[end]) != std::string_view::npos) {
                ++end;
            }
            const std::string token(text.substr(i, end - i));
            char *parsed_to = nullptr;
            // The server's LC_NUMERIC is always C, and so is the unit tests'.
            double number = std::strtod(token.c_str(), &parsed_to);
            if (parsed_to == token.c_str() + token.size() && std::isinf(number)) {
                out.append(kOutOfRangeLiteral);
                marked = true;
            } else {
                out.append(token);
            }
            i = end;
        } else {
            out.push_back(c);
            ++i;
        }
    }
    if (!marked) {
        return std::nullopt;
    }
    return out;
}

// Appends to `out` one (top-level key, problem) pair for every out-of-range marker in `value`,
// `pointer` being where `value` is inside the top-level key's value (a JSON pointer).
void FindOutOfRange(const std::string &key, const Json &value, const std::string &pointer,
                    OutOfRange *out) {
    if (value.is_string() && value.get_ref<const std::string &>() == kOutOfRangeMarker) {
        std::string where = Quote(key);
        if (!pointer.empty()) {
            where += " at " + Quote(pointer);
        }
        out->emplace_back(key,
                          "number out of range in " + where +
                              " (numbers must be within the range of a double, about +/-1.8e308)");
    } else if (value.is_array()) {
        size_t index = 0;
        for (const Json &element : value) {
            FindOutOfRange(key, element, pointer + "/" + std::to_string(index++), out);
        }
    } else if (value.is_object()) {
        for (const auto &item : value.items()) {
            std::string member = item.key();
            ReplaceAll(&member, "~", "~0");
            ReplaceAll(&member, "/", "~1");
            FindOutOfRange(key, item.value(), pointer + "/" + member, out);
        }
    }
}

// The check itself; CheckDestinationConfig adds the catch.
void CheckConfigInto(DestinationKind kind, std::string_view json_text, const CheckOptions &options,
                     ConfigCheck *out) {
    ConfigCheck &check = *out;
    // With exceptions disabled the parser reports failure as a discarded value.
    Json object = Json::parse(json_text.begin(), json_text.end(), nullptr, false);
    OutOfRange out_of_range;
    if (object.is_discarded()) {
        if (std::optional<std::string> marked = MarkOutOfRangeNumbers(json_text)) {
            object = Json::parse(marked->begin(), marked->end(), nullptr, false);
            if (object.is_object()) {
                for (const auto &item : object.items()) {
                    FindOutOfRange(item.key(), item.value(), std::string(), &out_of_range);
                }
            }
        }
    }
    if (object.is_discarded() || !object.is_object()) {
        check.problems.push_back("the config must be a JSON object");
        return;
    }
    switch (kind) {
        case DestinationKind::Kafka:
            CheckKafkaConfig(object, out_of_range, &check);
            break;
        case DestinationKind::Webhook:
            CheckWebhookConfig(object, out_of_range, options, &check);
            break;
        case DestinationKind::Amqp:
            CheckAmqpConfig(object, out_of_range, options, &check);
            break;
        case DestinationKind::Nats:
            CheckNatsConfig(object, out_of_range, options, &check);
            break;
    }
    if (check.config.ordering == Ordering::Key) {
        for (const auto &[key, value] : check.config.kafka.properties) {
            if (BareKafkaName(key) == "partitioner" && value == "random") {
                check.problems.push_back(
                    "\"partitioner\" must map a key to one partition with \"ordering\": "
                    "\"key\" (\"random\" spreads a key's messages over partitions)");
            }
        }
    }
    if (object.contains("on_dead") && check.config.ordering != Ordering::Key) {
        check.problems.push_back(
            "\"on_dead\" applies only with \"ordering\": \"key\" (without ordering a dead "
            "letter never holds back other messages)");
    }
    const RetryPolicy &retry = check.config.retry;
    if (retry.retry_base_ms > 0 && retry.retry_max_ms > 0 &&
        retry.retry_max_ms < retry.retry_base_ms) {
        check.problems.push_back("\"retry_max\" must not be less than \"retry_base\"");
    }
}
}  // namespace

// The privileged settings an UPDATE adds or changes: those of `after` with no equal in `before`.
std::vector<PrivilegedSetting> AddedOrChangedSettings(const std::vector<PrivilegedSetting> &before,
                                                      const std::vector<PrivilegedSetting> &after) {
    std::vector<PrivilegedSetting> changed;
    for (const PrivilegedSetting &setting : after) {
        bool kept = false;
        for (const PrivilegedSetting &old : before) {
            kept = kept || (old.key == setting.key && old.value == setting.value &&
                            old.access == setting.access);
        }
        if (!kept) {
            changed.push_back(setting);
        }
    }
    return changed;
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

// A Kafka topic name as the broker accepts it (Kafka's Topic.validate).
bool IsValidKafkaTopic(std::string_view topic) {
    if (topic.empty() || topic.size() > kMaxTopicBytes || topic == "." || topic == "..") {
        return false;
    }
    for (char c : topic) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok) {
            return false;
        }
    }
    return true;
}

// An AMQP routing key as outbox sends it (see config.hpp).
bool IsValidAmqpRoutingKey(std::string_view key) {
    if (key.empty() || key.size() > 255 || !IsValidHeaderValue(key)) {
        return false;
    }
    for (char c : key) {
        unsigned char u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7F) {
            return false;
        }
    }
    return true;
}

// A NATS subject a message may be published to (see config.hpp).
bool IsValidNatsSubject(std::string_view subject) {
    if (subject.empty() || subject.size() > 255 || subject.front() == '.' ||
        subject.back() == '.' || subject.front() == '$' || StartsWith(subject, "_INBOX.") ||
        subject == "_INBOX") {
        return false;
    }
    char previous = '.';
    for (char c : subject) {
        unsigned char u = static_cast<unsigned char>(c);
        if (u <= 0x20 || u >= 0x7F || c == '*' || c == '>' || (c == '.' && previous == '.')) {
            return false;
        }
        previous = c;
    }
    return true;
}

// A destination name: also a key in shared memory and a metrics label.
bool IsValidDestinationName(std::string_view name) {
    if (name.empty() || name.size() > 63) {
        return false;
    }
    for (size_t i = 0; i < name.size(); i++) {
        char c = name[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-'))) {
            return false;
        }
    }
    return true;
}

// The kind named in outbox.destinations.kind.
std::optional<DestinationKind> ParseDestinationKind(std::string_view text) {
    if (text == "kafka") {
        return DestinationKind::Kafka;
    }
    if (text == "webhook") {
        return DestinationKind::Webhook;
    }
    if (text == "amqp") {
        return DestinationKind::Amqp;
    }
    if (text == "nats") {
        return DestinationKind::Nats;
    }
    return std::nullopt;
}

// The name stored in outbox.destinations.kind and shown by outbox.stats().
const char *DestinationKindName(DestinationKind kind) {
    switch (kind) {
        case DestinationKind::Kafka:
            return "kafka";
        case DestinationKind::Webhook:
            return "webhook";
        case DestinationKind::Amqp:
            return "amqp";
        case DestinationKind::Nats:
            return "nats";
    }
    return "unknown";
}

// Whether a setting's value must never appear in a message, a log line or a problem.
bool IsSecretSetting(std::string_view key) {
    std::string lower = AsciiLowerCopy(key);
    static constexpr std::string_view kMarkers[] = {"password", "secret", "token",
                                                    "sasl.oauthbearer.config", "ssl.key"};
    for (std::string_view marker : kMarkers) {
        if (lower.find(marker) != std::string::npos) {
            return true;
        }
    }
    return false;
}

// The one config check, for create/alter_destination and for the worker alike.
ConfigCheck CheckDestinationConfig(DestinationKind kind, std::string_view json_text,
                                   const CheckOptions &options) {
    ConfigCheck check;
    check.config.kind = kind;
    // The catch is for the library's type errors, which the checks should make impossible.
    try {
        CheckConfigInto(kind, json_text, options, &check);
    } catch (const nlohmann::json::exception &) {
        check.problems.push_back("the config could not be checked because of an internal error");
    }
    return check;
}

}  // namespace outbox
