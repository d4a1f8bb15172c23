// CloudEvents attributes shared by the drivers (Kafka ce_* headers, webhook ce-* headers).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace outbox {

// "2026-11-29T18:03:04.123Z" for a unix time in milliseconds (CloudEvents time).
std::string FormatRfc3339Ms(int64_t unix_ms);

// A CloudEvents attribute value as the NATS protocol binding sends it in a header: UTF-8 with
// space, '"', '%' and every byte outside printable ASCII percent-encoded (upper-case hex).
std::string PercentEncodeNatsHeaderValue(std::string_view value);

}  // namespace outbox
