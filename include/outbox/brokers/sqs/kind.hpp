// The sqs kind: its row (broker_kind.hpp) and the rules of it that both processes need.
#pragma once

#include <string_view>

#include "outbox/broker_kind.hpp"

namespace outbox {

extern const BrokerKind kSqsKind;

// An SQS message's topic: 1..249 bytes of valid UTF-8 without control characters. SQS has no
// topics (the queue is the destination's); the topic travels as the ce-type attribute.
bool IsValidSqsTopic(std::string_view topic);

}  // namespace outbox
