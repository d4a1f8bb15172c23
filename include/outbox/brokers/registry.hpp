// The broker kinds outbox knows: one row each (broker_kind.hpp), listed in registry.cpp. The
// only place that knows them all; everything else looks a kind up by its name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "outbox/broker_kind.hpp"

namespace outbox {

// Every kind, in the order the manual and the hints name them.
const std::vector<const BrokerKind *> &BrokerKinds();

// The kind called `name` (outbox.destinations.kind), or nullptr.
const BrokerKind *FindBrokerKind(std::string_view name);

// The kinds' names for a hint: "\"kafka\", \"webhook\", \"amqp\" or \"nats\"" (only those
// with subscriptions when `subscriptions`).
std::string BrokerKindList(bool subscriptions = false);

// outbox-driver: every kind's init_process, once, before any thread exists.
void InitBrokerKinds();

}  // namespace outbox
