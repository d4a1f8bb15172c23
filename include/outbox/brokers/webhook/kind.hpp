// The webhook kind: its row (broker_kind.hpp) and the rules of it that both processes need.
#pragma once

#include <string_view>

#include "outbox/broker_kind.hpp"

namespace outbox {

extern const BrokerKind kWebhookKind;

// A webhook message's topic: 1..249 bytes of valid UTF-8 without CR, LF or NUL (it travels as
// the ce-type header).
bool IsValidWebhookTopic(std::string_view topic);

}  // namespace outbox
