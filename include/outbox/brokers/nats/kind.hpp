// The nats kind: its row (broker_kind.hpp) and the rules of it that both processes need.
#pragma once

#include <string_view>

#include "outbox/broker_kind.hpp"

namespace outbox {

extern const BrokerKind kNatsKind;

// A NATS subject a message may be published to: 1..255 bytes of printable ASCII without
// spaces, tokens separated by '.', none empty, no wildcard ('*', '>'), and not a system
// subject (a first token starting with '$', such as $JS.API, or _INBOX): those would let a
// producer drive JetStream's API with the destination's credentials.
bool IsValidNatsSubject(std::string_view subject);

}  // namespace outbox
