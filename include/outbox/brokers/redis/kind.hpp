// The redis kind: its row (broker_kind.hpp) and the rules of it that both processes need.
#pragma once

#include <string_view>

#include "outbox/broker_kind.hpp"

namespace outbox {

extern const BrokerKind kRedisKind;

// A Redis stream a message may be added to: 1..512 bytes without control characters (a key is
// binary-safe to Redis, but a name that a log line, XRANGE in redis-cli or an ACL key pattern
// cannot show plainly is a mistake, not a stream).
bool IsValidRedisStream(std::string_view stream);

}  // namespace outbox
