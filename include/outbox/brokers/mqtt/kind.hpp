// The mqtt kind: its row (broker_kind.hpp) and the rules of it that both processes need.
#pragma once

#include <string_view>

#include "outbox/broker_kind.hpp"

namespace outbox {

extern const BrokerKind kMqttKind;

// An MQTT topic name a message may be published to: 1..65535 bytes of valid UTF-8 without NUL
// or control characters, no wildcard ('+', '#'), and not a server topic (a first level
// starting with '$', such as $SYS): those are the broker's own.
bool IsValidMqttTopic(std::string_view topic);

}  // namespace outbox
