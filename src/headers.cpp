// Header rules. One definition for both Kafka and HTTP: a header accepted at INSERT must be
// sendable on either transport, and must never let a value start a new HTTP header line.
#include "outbox/headers.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace outbox {

namespace {

// tchar of RFC 9110 §5.6.2.
bool IsTokenChar(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
        return true;
    }
    switch (c) {
        case '!':
        case '#':
        case '$':
        case '%':
        case '&':
        case '\'':
        case '*':
        case '+':
        case '-':
        case '.':
        case '^':
        case '_':
        case '`':
        case '|':
        case '~':
            return true;
        default:
            return false;
    }
}

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF. Kafka
// consumers and HTTP receivers decode headers as text; a lenient check would pass bytes that
// they reject or, worse, decode differently.
bool IsValidUtf8(std::string_view text) {
    size_t i = 0;
    const size_t n = text.size();
    while (i < n) {
        unsigned char c = static_cast<unsigned char>(text[i]);
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t length;
        uint32_t code_point;
        uint32_t min_code_point;
        if (c >= 0xC2 && c <= 0xDF) {
            length = 2;
            code_point = c & 0x1F;
            min_code_point = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            length = 3;
            code_point = c & 0x0F;
            min_code_point = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            length = 4;
            code_point = c & 0x07;
            min_code_point = 0x10000;
        } else {
            // Continuation byte without a lead, or a lead byte that only overlong or
            // out-of-range sequences use (C0, C1, F5..FF).
            return false;
        }
        if (n - i < length) {
            return false;
        }
        for (size_t k = 1; k < length; ++k) {
            unsigned char cc = static_cast<unsigned char>(text[i + k]);
            if ((cc & 0xC0) != 0x80) {
                return false;
            }
            code_point = code_point << 6 | (cc & 0x3F);
        }
        if (code_point < min_code_point || code_point > 0x10FFFF ||
            (code_point >= 0xD800 && code_point <= 0xDFFF)) {
            return false;
        }
        i += length;
    }
    return true;
}

// Lower-cases ASCII only: header names are ASCII tokens, and the locale must not matter.
char AsciiLower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// Case-insensitive comparison of a header name with a lower-case literal.
bool NameEquals(std::string_view name, std::string_view lower) {
    if (name.size() != lower.size()) {
        return false;
    }
    for (size_t i = 0; i < name.size(); ++i) {
        if (AsciiLower(name[i]) != lower[i]) {
            return false;
        }
    }
    return true;
}

}  // namespace

// Whether a producer- or config-supplied name can go on the wire as an HTTP field name.
bool IsValidHeaderName(std::string_view name) {
    if (name.empty() || name.size() > kMaxHeaderNameBytes) {
        return false;
    }
    for (char c : name) {
        if (!IsTokenChar(static_cast<unsigned char>(c))) {
            return false;
        }
    }
    return true;
}

// Whether a value can be sent without breaking HTTP framing or a consumer's text decoding:
// UTF-8 without control characters other than tab (RFC 9110 field-value).
bool IsValidHeaderValue(std::string_view value) {
    if (value.size() > kMaxHeaderValueBytes) {
        return false;
    }
    for (char c : value) {
        unsigned char u = static_cast<unsigned char>(c);
        if ((u < 0x20 && c != '\t') || u == 0x7F) {
            return false;
        }
    }
    return IsValidUtf8(value);
}

// Whether the relay owns this header: letting a producer set it would forge an id or a
// signature, or corrupt the HTTP framing.
bool IsReservedHeaderName(std::string_view name) {
    static constexpr std::string_view kReserved[] = {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "ce-id",
        "ce-type",
        "ce-source",
        "ce-time",
        "ce-specversion",
        "ce_id",
        "ce_type",
        "ce_source",
        "ce_time",
        "ce_specversion",
        // The distributed-tracing extension: sent from the traceparent/tracestate headers.
        "ce_traceparent",
        "ce_tracestate",
        "ce-traceparent",
        "ce-tracestate",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
    };
    for (std::string_view reserved : kReserved) {
        if (NameEquals(name, reserved)) {
            return true;
        }
    }
    // proxy-*: HTTP proxies; nats-*: JetStream's control headers (Nats-Msg-Id, Nats-Rollup,
    // Nats-Expected-...), which would let a producer purge or fence a stream.
    for (std::string_view prefix : {std::string_view("proxy-"), std::string_view("nats-")}) {
        if (name.size() >= prefix.size() && NameEquals(name.substr(0, prefix.size()), prefix)) {
            return true;
        }
    }
    return false;
}

// The producer's way to set the CloudEvents type.
bool IsCloudEventTypeHeader(std::string_view name) {
    return NameEquals(name, "ce_type") || NameEquals(name, "ce-type");
}

}  // namespace outbox
