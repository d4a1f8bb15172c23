// Destination config parsing and validation: the settings every kind has, and the frame every
// kind's check runs in (the kinds' own settings: src/brokers/<kind>/config.cpp). The same check
// runs at create_destination (outbox-driver --check) and when a driver is built (outbox-driver),
// so a config that was accepted is exactly the config that runs. Every problem is collected so
// that a DBA fixes a config in one round trip, not one error at a time.
#include "outbox/config.hpp"

#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/config_json.hpp"
#include "outbox/duration.hpp"
#include "outbox/quote.hpp"
#include "outbox/subscription_config.hpp"

namespace outbox {

const char kOnlySuperuser[] = ": only a superuser may set it";
const char kOnlyFileReaders[] = ": only a superuser or a member of pg_read_server_files may set it";

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

bool StartsWith(std::string_view text, std::string_view prefix) {
    return text.size() >= prefix.size() && text.substr(0, prefix.size()) == prefix;
}

std::string RangeProblem(RangeType type, std::string_view key, int64_t min, int64_t max,
                         std::string_view range, std::string_view problem) {
    if (!problem.empty())
        return std::string(problem);
    if (type == RangeType::Integer)
        return Quote(key) + " must be an integer between " + std::to_string(min) + " and " +
               std::to_string(max);
    return Quote(key) + " must be a duration between " + std::string(range) +
           " (a number of milliseconds or a string such as \"500ms\" or \"5s\")";
}

namespace {

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
}  // namespace

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

// The problem with a file setting (`key` names a file the driver reads; the value must be a
// string), as ReadableFileProblem.
static std::optional<std::string> FileSettingProblem(const std::string &key, const Json &value,
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

// A boolean setting.
void CheckBoolSetting(const std::string &key, const Json &value, bool *target,
                      std::vector<std::string> *problems) {
    if (!value.is_boolean()) {
        problems->push_back(Quote(key) + " must be true or false");
    } else {
        *target = value.get<bool>();
    }
}

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

namespace {

// The range-checked settings every kind has.
constexpr RangeKey<DestinationConfig> kCommonRangeKeys[] = {
    {"max_attempts", RangeType::Integer, 1, 1000, "", "",
     [](DestinationConfig &c, int64_t v) { c.retry.max_attempts = static_cast<int>(v); }},
    {"retry_base", RangeType::Duration, 1, kMsPerDay, "",
     "\"retry_base\" must be a duration between 1ms and 1d (a number of milliseconds or a "
     "string such as \"500ms\", \"2s\" or \"5min\")",
     [](DestinationConfig &c, int64_t v) { c.retry.retry_base_ms = v; }},
    {"retry_max", RangeType::Duration, 1, 7 * kMsPerDay, "",
     "\"retry_max\" must be a duration between 1ms and 7d (a number of milliseconds or a "
     "string such as \"500ms\", \"2s\" or \"5min\")",
     [](DestinationConfig &c, int64_t v) { c.retry.retry_max_ms = v; }},
    {"max_pending", RangeType::Integer, 1, kMaxPendingLimit, "", "",
     [](DestinationConfig &c, int64_t v) { c.max_pending = v; }},
    // Policies (issue 26).
    {"ttl", RangeType::Duration, kMsPerSecond, 366 * kMsPerDay, "",
     "\"ttl\" must be a duration between 1s and 366d (a number of milliseconds or a string "
     "such as \"30s\", \"15min\" or \"2h\")",
     [](DestinationConfig &c, int64_t v) { c.ttl_ms = v; }},
    {"retry_budget", RangeType::Duration, kMsPerSecond, 366 * kMsPerDay, "",
     "\"retry_budget\" must be a duration between 1s and 366d (a number of milliseconds or a "
     "string such as \"30s\", \"15min\" or \"24h\")",
     [](DestinationConfig &c, int64_t v) { c.retry.retry_budget_ms = v; }},
};

}  // namespace

bool CheckCommonKey(const std::string &key, const Json &value, DestinationConfig *config,
                    std::vector<std::string> *problems) {
    if (CheckRangeKey(kCommonRangeKeys, key, value, config, problems))
        return true;
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
    if (key == "delivery") {
        if (value == "at_least_once") {
            config->delivery = Delivery::AtLeastOnce;
        } else if (value == "exactly_once") {
            config->delivery = Delivery::ExactlyOnce;
        } else {
            problems->push_back("\"delivery\" must be \"at_least_once\" or \"exactly_once\"");
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
    return false;
}

namespace {

// What stands in for a number beyond the range of a double until the problem is reported:
// a JSON string no config setting accepts (jsonb can hold U+0001, but no one writes this).
constexpr std::string_view kOutOfRangeMarker = "\x01outbox: number out of range\x01";
constexpr std::string_view kOutOfRangeLiteral = "\"\\u0001outbox: number out of range\\u0001\"";

// `text` with every number that overflows a double replaced by kOutOfRangeLiteral, or nullopt
// when there is none. nlohmann::json refuses such numbers outright ("number overflow"), which
// would hide where the number is and every other problem. Strings are copied untouched.
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
}  // namespace

std::optional<Json> ParseConfigObject(std::string_view json_text, OutOfRange *out_of_range,
                                      std::vector<std::string> *problems) {
    // With exceptions disabled the parser reports failure as a discarded value.
    Json object = Json::parse(json_text.begin(), json_text.end(), nullptr, false);
    if (object.is_discarded()) {
        if (std::optional<std::string> marked = MarkOutOfRangeNumbers(json_text)) {
            object = Json::parse(marked->begin(), marked->end(), nullptr, false);
            if (object.is_object()) {
                for (const auto &item : object.items()) {
                    FindOutOfRange(item.key(), item.value(), std::string(), out_of_range);
                }
            }
        }
    }
    if (object.is_discarded() || !object.is_object()) {
        problems->push_back("the config must be a JSON object");
        return std::nullopt;
    }
    return object;
}

namespace {

// The check itself; CheckDestinationConfig adds the catch.
void CheckConfigInto(const BrokerKind &kind, std::string_view json_text,
                     const CheckOptions &options, ConfigCheck *out) {
    ConfigCheck &check = *out;
    OutOfRange out_of_range;
    std::optional<Json> object = ParseConfigObject(json_text, &out_of_range, &check.problems);
    if (!object)
        return;
    kind.driver->check(*object, out_of_range, options, &check);
    if (check.config.delivery == Delivery::ExactlyOnce && !check.exactly_once_supported) {
        check.problems.push_back("\"delivery\": \"exactly_once\" is not available for a " +
                                 std::string(kind.title) + " destination");
        check.hints.push_back(
            "Exactly-once delivery needs broker transactions: only Kafka destinations have it. "
            "Remove \"delivery\" (at-least-once; consumers deduplicate by event_id).");
    }
    if (object->contains("on_dead") && check.config.ordering != Ordering::Key) {
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

bool IsValidSubscriptionName(std::string_view name) {
    return IsValidDestinationName(name);
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

// The one config check, for create/alter_destination and for the driver alike.
ConfigCheck CheckDestinationConfig(const BrokerKind &kind, std::string_view json_text,
                                   const CheckOptions &options) {
    ConfigCheck check;
    check.config.kind = &kind;
    if (kind.driver == nullptr) {
        check.problems.push_back("the config of a " + std::string(kind.name) +
                                 " destination is checked by outbox-driver, not here");
        return check;
    }
    // The catch is for the library's type errors, which the checks should make impossible.
    try {
        CheckConfigInto(kind, json_text, options, &check);
    } catch (const nlohmann::json::exception &) {
        check.problems.push_back("the config could not be checked because of an internal error");
    }
    return check;
}

DestinationConfig ReadDestinationSettings(const BrokerKind &kind, std::string_view json_text) {
    DestinationConfig config;
    config.kind = &kind;
    OutOfRange out_of_range;
    std::vector<std::string> ignored;
    try {
        std::optional<Json> object = ParseConfigObject(json_text, &out_of_range, &ignored);
        if (!object)
            return config;
        for (const auto &item : object->items())
            CheckCommonKey(item.key(), item.value(), &config, &ignored);
    } catch (const nlohmann::json::exception &) {
        // A config that does not check is not used: its driver is never built.
    }
    return config;
}

}  // namespace outbox
