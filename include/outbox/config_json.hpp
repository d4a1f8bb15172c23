// What a kind's config check is written with (src/brokers/<kind>/config.cpp): the JSON type,
// the problem sentences every check shares, and the checks of the settings every kind has.
// Pure code.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/config.hpp"

namespace outbox {

// ordered_json keeps the keys in document order, which the checks report problems in and
// which librdkafka properties are set in.
using Json = nlohmann::ordered_json;

constexpr int64_t kMsPerSecond = 1000;
constexpr int64_t kMsPerMinute = 60 * kMsPerSecond;
constexpr int64_t kMsPerDay = 24 * 60 * kMsPerMinute;

// The end of a refusal of a privileged setting (PrivilegedSetting::problem).
extern const char kOnlySuperuser[];
extern const char kOnlyFileReaders[];

// ASCII lower case only: setting names are ASCII, and the locale must not matter.
char AsciiLower(char c);
std::string AsciiLowerCopy(std::string_view text);
bool StartsWith(std::string_view text, std::string_view prefix);
// JSON strings may hold U+0000, but C APIs would silently cut the text there.
bool ContainsNul(std::string_view text);
// `text` quoted for a problem line (quote.hpp).
std::string Quote(std::string_view text);
// Replaces every occurrence of `from` in `text` with `to`.
void ReplaceAll(std::string *text, std::string_view from, std::string_view to);

// An integral JSON number as int64 (5 and 5.0 alike: jsonb keeps the "5.0" a user typed).
std::optional<int64_t> AsInteger(const Json &value);
// A duration setting: a JSON number of milliseconds (fractions rounded down, like the string
// form) or a string that ParseDurationMs accepts.
std::optional<int64_t> AsDurationMs(const Json &value);

// A setting whose value must lie in a range, checked from a table (CheckRangeKey).
enum class RangeType {
    Integer,   // AsInteger
    Duration,  // AsDurationMs, in milliseconds
};
template <typename Target>
struct RangeKey {
    std::string_view key;
    RangeType type;
    int64_t min, max;
    // The problem when the value is not one: `problem` when given, else "<key> must be an
    // integer between <min> and <max>", or for a duration "<key> must be a duration between
    // <range> (a number of milliseconds or a string such as "500ms" or "5s")".
    std::string_view range;
    std::string_view problem;
    void (*set)(Target &target, int64_t value);
};

// The problem for a value of `row` out of its range.
std::string RangeProblem(RangeType type, std::string_view key, int64_t min, int64_t max,
                         std::string_view range, std::string_view problem);

// Whether `key` is a key of `table`; if so its value is checked and set on `target`, or its
// problem reported.
template <typename Target, size_t N>
bool CheckRangeKey(const RangeKey<Target> (&table)[N], const std::string &key, const Json &value,
                   Target *target, std::vector<std::string> *problems) {
    for (const RangeKey<Target> &row : table) {
        if (row.key != key)
            continue;
        std::optional<int64_t> n =
            row.type == RangeType::Integer ? AsInteger(value) : AsDurationMs(value);
        if (!n || *n < row.min || *n > row.max)
            problems->push_back(
                RangeProblem(row.type, row.key, row.min, row.max, row.range, row.problem));
        else
            row.set(*target, *n);
        return true;
    }
    return false;
}

// The problem with a file setting `key` naming `path`, or nullopt when the database server can
// read the file (or, without `check_files`, when it is a path at all). The check runs as the
// server's OS user, the same user the drivers run as.
std::optional<std::string> ReadableFileProblem(const std::string &key, const std::string &path,
                                               bool check_files);
// A file setting (the value must be a string naming a readable file): recorded as privileged
// (the server reads the file) and checked; `*target` gets the path when it is good.
void CheckFileSetting(const std::string &key, const Json &value, const CheckOptions &options,
                      std::string *target, ConfigCheck *check);
// A boolean setting.
void CheckBoolSetting(const std::string &key, const Json &value, bool *target,
                      std::vector<std::string> *problems);

// Reports the out-of-range problems of `key` and returns true when it has any: such a key is
// not checked further (its value is not what the user wrote).
bool ReportOutOfRange(const OutOfRange &out_of_range, const std::string &key,
                      std::vector<std::string> *problems);

// The keys every kind accepts (config.hpp, CheckDestinationConfig). Returns false when `key`
// is not one of them.
bool CheckCommonKey(const std::string &key, const Json &value, DestinationConfig *config,
                    std::vector<std::string> *problems);

// The config as a JSON object, or nullopt with the problem when it is not one (numbers beyond
// a double's range are replaced by a marker and reported per key in *out_of_range).
std::optional<Json> ParseConfigObject(std::string_view json_text, OutOfRange *out_of_range,
                                      std::vector<std::string> *problems);

}  // namespace outbox
