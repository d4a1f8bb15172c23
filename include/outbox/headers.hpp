// Rules for message and destination headers, shared by the producer check (at INSERT) and the
// webhook config check, so a header that is accepted is always one that can be sent.
#pragma once

#include <cstddef>
#include <string_view>

namespace outbox {

constexpr size_t kMaxHeaderNameBytes = 256;
constexpr size_t kMaxHeaderValueBytes = 8192;
constexpr size_t kMaxHeaderCount = 64;

// An HTTP token (RFC 9110 §5.6.2), 1..kMaxHeaderNameBytes bytes.
bool IsValidHeaderName(std::string_view name);
// At most kMaxHeaderValueBytes bytes, valid UTF-8, no NUL, CR or LF (header injection).
bool IsValidHeaderValue(std::string_view value);
// Names the relay sets itself and a producer or a destination may not override, compared
// case-insensitively: webhook-id, webhook-timestamp, webhook-signature, the CloudEvents headers
// (ce-id, ce-type, ce-source, ce-time, ce-specversion, ce-traceparent, ce-tracestate and their
// ce_ forms) and HTTP framing
// headers (host, content-length, transfer-encoding, connection, keep-alive, te, trailer,
// upgrade, expect, proxy-*) and JetStream's control headers (nats-*).
bool IsReservedHeaderName(std::string_view name);
// Whether `name` is the producer header that sets the CloudEvents type: "ce_type" or "ce-type",
// in any case. Reserved for destinations' static headers, but a producer may set it (once): it
// is not forwarded as such, its value becomes the transport's type attribute instead of the
// topic.
bool IsCloudEventTypeHeader(std::string_view name);

}  // namespace outbox
