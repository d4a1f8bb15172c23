// How a consumed record becomes the `outbox.inbox_message` a subscription's handler receives
// (issue 23; README "The inbox"). Pure code: the consuming worker calls it for every record.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "outbox/message.hpp"

namespace outbox {

// Where a record's value goes in outbox.inbox_message.
enum class PayloadKind {
    Null,   // a null value (tombstone): payload and payload_bytes both NULL
    Json,   // payload (jsonb); payload_bytes NULL
    Bytes,  // payload_bytes (bytea); payload NULL
};

// A record's value is JSON when its content-type header (the first, any case) is JSON
// (application/json, or a +json suffix such as application/cloudevents+json) and the value is
// JSON text jsonb accepts; with no content-type header, when the value is such JSON text.
// Anything else, a declared JSON type included, arrives as bytes: nothing is lost.
PayloadKind ClassifyPayload(const std::optional<std::string> &value, const Headers &headers);

// True when `text` is one JSON value (RFC 8259, whitespace around it allowed) that jsonb
// accepts: UTF-8, no \u0000 escape, no unpaired surrogate escape; nesting at most 1000 deep.
bool IsJsonbText(std::string_view text);

// The record's headers as a JSON object text: name -> value as a JSON string; a name that
// occurs more than once -> an array of its values in order. Bytes that are not UTF-8 become
// U+FFFD. No headers: "{}".
std::string HeadersJson(const Headers &headers);

}  // namespace outbox
