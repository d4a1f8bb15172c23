// CloudEvents attributes shared by the drivers (Kafka ce_* headers, webhook ce-* headers).
#pragma once

#include <cstdint>
#include <string>

namespace outbox {

// "2026-11-29T18:03:04.123Z" for a unix time in milliseconds (CloudEvents time).
std::string FormatRfc3339Ms(int64_t unix_ms);

}  // namespace outbox
