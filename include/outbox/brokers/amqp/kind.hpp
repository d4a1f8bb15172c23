// The amqp kind: its row (broker_kind.hpp) and the rules of it that both processes need.
#pragma once

#include <string_view>

#include "outbox/broker_kind.hpp"

namespace outbox {

extern const BrokerKind kAmqpKind;

// An AMQP routing key as outbox sends it: 1..255 bytes (an AMQP short string) of valid UTF-8
// without control characters (it is also the CloudEvents type).
bool IsValidAmqpRoutingKey(std::string_view key);

}  // namespace outbox
