// The sqs kind's SendMessageBatch requests and answers (include/outbox/brokers/sqs/request.hpp).
#include "outbox/brokers/sqs/request.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/brokers/cloudevents.hpp"
#include "outbox/signing.hpp"
#include "outbox/utf8.hpp"

namespace outbox {

namespace {

using Json = nlohmann::ordered_json;

// JSON text of a string (UTF-8 kept as it is; IsSqsText has made sure it is valid).
std::string JsonText(const std::string &s) {
    return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool NameIs(std::string_view a, std::string_view b) {
    if (a.size() != b.size())
        return false;
    for (size_t i = 0; i < a.size(); ++i) {
        char x = a[i] >= 'A' && a[i] <= 'Z' ? char(a[i] - 'A' + 'a') : a[i];
        if (x != b[i])
            return false;
    }
    return true;
}

// The text of the first <name>...</name> of an XML document, its predefined entities replaced;
// "" without one. Enough for the query protocol's error answer (<ErrorResponse><Error><Code>...
// <Message>...), whose elements hold plain text.
std::string XmlElementText(std::string_view xml, std::string_view name) {
    std::string open = "<" + std::string(name) + ">";
    std::string close = "</" + std::string(name) + ">";
    size_t start = xml.find(open);
    if (start == std::string_view::npos)
        return std::string();
    start += open.size();
    size_t end = xml.find(close, start);
    if (end == std::string_view::npos)
        return std::string();
    std::string_view raw = xml.substr(start, end - start);
    static constexpr std::pair<std::string_view, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    std::string out;
    out.reserve(raw.size());
    for (size_t i = 0; i < raw.size();) {
        bool replaced = false;
        if (raw[i] == '&') {
            for (const auto &[entity, c] : kEntities) {
                if (raw.substr(i, entity.size()) == entity) {
                    out += c;
                    i += entity.size();
                    replaced = true;
                    break;
                }
            }
        }
        if (!replaced)
            out += raw[i++];
    }
    return out;
}

}  // namespace

bool IsSqsText(std::string_view s) {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    for (size_t i = 0; i < s.size();) {
        unsigned char c = byte(i);
        if (c < 0x80) {
            if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
                return false;
            ++i;
            continue;
        }
        size_t len = Utf8SequenceLength(s, i);
        if (len == 0)
            return false;
        // U+FFFE and U+FFFF (EF BF BE, EF BF BF) are outside SQS's character set.
        if (len == 3 && c == 0xEF && byte(i + 1) == 0xBF && byte(i + 2) >= 0xBE)
            return false;
        i += len;
    }
    return true;
}

SqsEntry EncodeSqsEntry(const Message &m, const SqsEntryOptions &options) {
    SqsEntry entry;
    CloudEventAttributes a = AttributesOf(m, options.source, options.type_fallback);
    std::vector<std::pair<const char *, std::string>> attributes;
    attributes.reserve(10);
    attributes.emplace_back("ce-id", std::move(a.id));
    attributes.emplace_back("ce-type", std::move(a.type));
    attributes.emplace_back("ce-source", std::move(a.source));
    attributes.emplace_back("ce-time", std::move(a.time));
    attributes.emplace_back("ce-specversion", "1.0");
    if (!a.datacontenttype.empty())
        attributes.emplace_back("content-type", std::move(a.datacontenttype));
    if (!a.traceparent.empty())
        attributes.emplace_back("ce-traceparent", std::move(a.traceparent));
    if (!a.tracestate.empty())
        attributes.emplace_back("ce-tracestate", std::move(a.tracestate));
    // SQS bodies are XML text: bytes go as base64, and say so.
    const std::string body = m.payload_is_json ? m.payload : Base64Encode(m.payload);
    if (!m.payload_is_json)
        attributes.emplace_back("body-encoding", "base64");
    Json headers = Json::object();
    for (const auto &[name, value] : m.headers)
        if (!NameIs(name, "content-type") && !NameIs(name, "ce_type") && !NameIs(name, "ce-type"))
            headers[name] = value;
    if (!headers.empty())
        attributes.emplace_back("headers",
                                headers.dump(-1, ' ', false, Json::error_handler_t::replace));

    entry.sqs_bytes = body.size();
    for (const auto &[name, value] : attributes) {
        entry.sqs_bytes += strlen(name) + 6 + value.size();  // 6: "String"
        if (!IsSqsText(value)) {
            entry.problem = std::string("SQS refuses the message: its \"") + name +
                            "\" attribute holds a character SQS does not accept";
            return entry;
        }
    }
    if (entry.sqs_bytes > kSqsMaxMessageBytes) {
        entry.problem = "message too large for SQS: " + std::to_string(entry.sqs_bytes) +
                        " bytes with its attributes, SQS takes at most " +
                        std::to_string(kSqsMaxMessageBytes);
        return entry;
    }
    if (!IsSqsText(body)) {
        entry.problem =
            "SQS refuses the message: its payload holds a character SQS does not accept "
            "(control characters, U+FFFE, U+FFFF)";
        return entry;
    }
    std::string group;
    if (options.fifo) {
        group = m.key ? *m.key : options.group;
        if (group.empty()) {
            entry.problem =
                "a FIFO queue needs a MessageGroupId: give the message a key, or the "
                "destination a \"group\"";
            return entry;
        }
        bool ok = group.size() <= 128;
        for (char c : group)
            ok = ok && c >= '!' && c <= '~';
        if (!ok) {
            entry.problem =
                "the message's key is not a MessageGroupId (1 to 128 characters of printable "
                "ASCII), which a FIFO queue needs";
            return entry;
        }
    }
    std::string &out = entry.members;
    out.reserve(body.size() + 512);
    out += ",\"MessageBody\":";
    out += JsonText(body);
    out += ",\"MessageAttributes\":{";
    bool first = true;
    for (const auto &[name, value] : attributes) {
        out += first ? "\"" : ",\"";
        first = false;
        out += name;
        out += "\":{\"DataType\":\"String\",\"StringValue\":";
        out += JsonText(value);
        out += '}';
    }
    out += '}';
    if (options.fifo) {
        out += ",\"MessageGroupId\":";
        out += JsonText(group);
        out += ",\"MessageDeduplicationId\":";
        out += JsonText(m.event_id);
    }
    return entry;
}

std::string SqsBatchRequest(const std::string &queue_url,
                            const std::vector<const std::string *> &members) {
    size_t total = queue_url.size() + 64;
    for (const std::string *m : members)
        total += m->size() + 16;
    std::string out;
    out.reserve(total);
    out += "{\"QueueUrl\":";
    out += JsonText(queue_url);
    out += ",\"Entries\":[";
    for (size_t i = 0; i < members.size(); ++i) {
        out += i == 0 ? "{\"Id\":\"" : ",{\"Id\":\"";
        out += std::to_string(i);
        out += '"';
        out += *members[i];
        out += '}';
    }
    out += "]}";
    return out;
}

std::vector<std::string> SqsRequestHeaders(const std::string &session_token) {
    std::vector<std::string> lines = {"Content-Type: application/x-amz-json-1.0",
                                      "X-Amz-Target: AmazonSQS.SendMessageBatch"};
    if (!session_token.empty())
        lines.push_back("X-Amz-Security-Token: " + session_token);
    return lines;
}

bool ParseSqsBatchResponse(std::string_view body, size_t count, std::vector<SqsEntryResult> *out,
                           std::string *error) {
    Json doc = Json::parse(body.begin(), body.end(), nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) {
        *error = "SQS answered SendMessageBatch with something that is not JSON";
        return false;
    }
    out->assign(count, SqsEntryResult{});
    std::vector<bool> answered(count, false);
    auto index_of = [&](const Json &entry) -> long {
        if (!entry.is_object() || !entry.contains("Id") || !entry["Id"].is_string())
            return -1;
        const std::string &id = entry["Id"].get_ref<const std::string &>();
        if (id.empty() || id.size() > 3 || id.find_first_not_of("0123456789") != std::string::npos)
            return -1;
        long i = std::stol(id);
        return i < static_cast<long>(count) ? i : -1;
    };
    for (const char *list : {"Successful", "Failed"}) {
        auto it = doc.find(list);
        if (it == doc.end() || !it->is_array())
            continue;
        for (const Json &entry : *it) {
            long i = index_of(entry);
            if (i < 0)
                continue;
            SqsEntryResult &r = (*out)[i];
            answered[i] = true;
            r.ok = list[0] == 'S';
            if (r.ok)
                continue;
            auto text = [&](const char *key) {
                auto v = entry.find(key);
                return v != entry.end() && v->is_string() ? v->get<std::string>() : std::string();
            };
            r.code = text("Code");
            r.message = text("Message");
            auto fault = entry.find("SenderFault");
            r.sender_fault = fault != entry.end() &&
                             ((fault->is_boolean() && fault->get<bool>()) ||
                              (fault->is_string() && fault->get<std::string>() == "true"));
        }
    }
    for (size_t i = 0; i < count; ++i) {
        if (!answered[i]) {
            *error = "SQS left entry " + std::to_string(i) + " of SendMessageBatch unanswered";
            return false;
        }
    }
    return true;
}

std::pair<std::string, std::string> SqsRequestError(std::string_view body,
                                                    std::string_view query_error_header) {
    std::string code, message;
    Json doc = Json::parse(body.begin(), body.end(), nullptr, false);
    if (!doc.is_discarded() && doc.is_object()) {
        for (const char *key : {"__type", "code", "Code"}) {
            auto v = doc.find(key);
            if (code.empty() && v != doc.end() && v->is_string())
                code = v->get<std::string>();
        }
        for (const char *key : {"message", "Message"}) {
            auto v = doc.find(key);
            if (message.empty() && v != doc.end() && v->is_string())
                message = v->get<std::string>();
        }
    } else if (doc.is_discarded()) {
        // The query protocol's XML error, which moto answers a JSON request whose signature or
        // credentials it refuses (without x-amzn-query-error).
        code = XmlElementText(body, "Code");
        message = XmlElementText(body, "Message");
    }
    if (code.empty() && !query_error_header.empty())
        code = std::string(query_error_header.substr(0, query_error_header.find(';')));
    size_t hash = code.rfind('#');
    if (hash != std::string::npos)
        code.erase(0, hash + 1);
    size_t colon = code.find(':');  // "Code:http://internal.amazon.com/..." in some answers
    if (colon != std::string::npos)
        code.erase(colon);
    return {code, message};
}

}  // namespace outbox
