// See include/outbox/inbox_record.hpp.
#include "outbox/inbox_record.hpp"

#include <cstdint>
#include <map>
#include <vector>

#include "outbox/utf8.hpp"

namespace outbox {

namespace {

constexpr int kMaxDepth = 1000;

class JsonChecker {
  public:
    explicit JsonChecker(std::string_view s) : s_(s) {}

    bool Check() {
        Space();
        if (!Value(0))
            return false;
        Space();
        return i_ == s_.size();
    }

  private:
    bool At(char c) const { return i_ < s_.size() && s_[i_] == c; }
    void Space() {
        while (i_ < s_.size() &&
               (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
            i_++;
    }
    bool Literal(std::string_view word) {
        if (s_.substr(i_, word.size()) != word)
            return false;
        i_ += word.size();
        return true;
    }
    bool Digits() {
        size_t start = i_;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9')
            i_++;
        return i_ > start;
    }
    bool Number() {
        if (At('-'))
            i_++;
        if (At('0'))
            i_++;
        else if (!Digits())
            return false;
        if (At('.')) {
            i_++;
            if (!Digits())
                return false;
        }
        if (At('e') || At('E')) {
            i_++;
            if (At('+') || At('-'))
                i_++;
            if (!Digits())
                return false;
        }
        return true;
    }
    bool Hex4(uint32_t *v) {
        if (i_ + 4 > s_.size())
            return false;
        *v = 0;
        for (int k = 0; k < 4; k++) {
            char c = s_[i_++];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0)
                return false;
            *v = *v << 4 | uint32_t(d);
        }
        return true;
    }
    bool String() {
        i_++;  // the opening quote
        while (i_ < s_.size()) {
            unsigned char c = static_cast<unsigned char>(s_[i_]);
            if (c == '"') {
                i_++;
                return true;
            }
            if (c < 0x20)
                return false;
            if (c == '\\') {
                i_++;
                if (i_ >= s_.size())
                    return false;
                char e = s_[i_++];
                if (e == 'u') {
                    uint32_t v;
                    if (!Hex4(&v) || v == 0)
                        return false;  // jsonb refuses \u0000
                    if (v >= 0xDC00 && v <= 0xDFFF)
                        return false;  // a low surrogate alone
                    if (v >= 0xD800 && v <= 0xDBFF) {
                        uint32_t low;
                        if (!Literal("\\u") || !Hex4(&low) || low < 0xDC00 || low > 0xDFFF)
                            return false;
                    }
                } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
                    return false;
                }
                continue;
            }
            size_t n = Utf8SequenceLength(s_, i_);
            if (n == 0)
                return false;
            i_ += n;
        }
        return false;
    }
    bool Value(int depth) {
        if (depth > kMaxDepth || i_ >= s_.size())
            return false;
        char c = s_[i_];
        if (c == '"')
            return String();
        if (c == '{' || c == '[') {
            char close = c == '{' ? '}' : ']';
            i_++;
            Space();
            if (At(close)) {
                i_++;
                return true;
            }
            for (;;) {
                if (c == '{') {
                    if (!At('"') || !String())
                        return false;
                    Space();
                    if (!At(':'))
                        return false;
                    i_++;
                    Space();
                }
                if (!Value(depth + 1))
                    return false;
                Space();
                if (At(close)) {
                    i_++;
                    return true;
                }
                if (!At(','))
                    return false;
                i_++;
                Space();
            }
        }
        if (c == 't')
            return Literal("true");
        if (c == 'f')
            return Literal("false");
        if (c == 'n')
            return Literal("null");
        return Number();
    }

    std::string_view s_;
    size_t i_ = 0;
};

char Lower(char c) {
    return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
    if (a.size() != b.size())
        return false;
    for (size_t i = 0; i < a.size(); i++)
        if (Lower(a[i]) != Lower(b[i]))
            return false;
    return true;
}

// application/json, application/x+json, with or without parameters (; charset=utf-8).
bool IsJsonMediaType(std::string_view type) {
    size_t semi = type.find(';');
    if (semi != std::string_view::npos)
        type = type.substr(0, semi);
    while (!type.empty() && (type.back() == ' ' || type.back() == '\t'))
        type.remove_suffix(1);
    while (!type.empty() && (type.front() == ' ' || type.front() == '\t'))
        type.remove_prefix(1);
    if (EqualsIgnoreCase(type, "application/json"))
        return true;
    return type.size() > 5 && EqualsIgnoreCase(type.substr(type.size() - 5), "+json") &&
           type.find('/') != std::string_view::npos;
}

void AppendJsonString(std::string_view s, std::string *out) {
    static const char kHex[] = "0123456789abcdef";
    out->push_back('"');
    for (size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out->push_back('\\');
            out->push_back(char(c));
            i++;
        } else if (c < 0x20) {
            if (c == '\n') {
                out->append("\\n");
            } else if (c == '\t') {
                out->append("\\t");
            } else if (c == '\r') {
                out->append("\\r");
            } else if (c == 0) {
                out->append("\\ufffd");  // jsonb has no \u0000
            } else {
                out->append("\\u00");
                out->push_back(kHex[c >> 4]);
                out->push_back(kHex[c & 15]);
            }
            i++;
        } else {
            size_t n = Utf8SequenceLength(s, i);
            if (n == 0) {
                out->append("\xEF\xBF\xBD");  // U+FFFD
                i++;
            } else {
                out->append(s.substr(i, n));
                i += n;
            }
        }
    }
    out->push_back('"');
}

}  // namespace

bool IsJsonbText(std::string_view text) {
    return JsonChecker(text).Check();
}

PayloadKind ClassifyPayload(const std::optional<std::string> &value, const Headers &headers) {
    if (!value)
        return PayloadKind::Null;
    for (const auto &[name, v] : headers) {
        if (EqualsIgnoreCase(name, "content-type")) {
            if (!IsJsonMediaType(v))
                return PayloadKind::Bytes;
            break;
        }
    }
    return IsJsonbText(*value) ? PayloadKind::Json : PayloadKind::Bytes;
}

std::string HeadersJson(const Headers &headers) {
    // Names in first-seen order, each with its values.
    std::vector<std::string_view> order;
    std::map<std::string_view, std::vector<std::string_view>> values;
    for (const auto &[name, v] : headers) {
        auto &list = values[name];
        if (list.empty())
            order.push_back(name);
        list.push_back(v);
    }
    std::string out = "{";
    for (size_t k = 0; k < order.size(); k++) {
        if (k > 0)
            out.push_back(',');
        AppendJsonString(order[k], &out);
        out.push_back(':');
        const auto &list = values[order[k]];
        if (list.size() == 1) {
            AppendJsonString(list[0], &out);
        } else {
            out.push_back('[');
            for (size_t j = 0; j < list.size(); j++) {
                if (j > 0)
                    out.push_back(',');
                AppendJsonString(list[j], &out);
            }
            out.push_back(']');
        }
    }
    out.push_back('}');
    return out;
}

}  // namespace outbox
