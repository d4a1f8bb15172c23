// The kafka kind: its row (broker_kind.hpp) and the rules of it that both processes need.
#pragma once

#include <string_view>

#include "outbox/broker_kind.hpp"

namespace outbox {

extern const BrokerKind kKafkaKind;

// A Kafka topic name: 1..249 characters of [A-Za-z0-9._-], and not "." or "..".
bool IsValidKafkaTopic(std::string_view name);

// The settings of a subscription the inbox worker reads itself ("topics", "on_error",
// "batch_size"...): every key a subscription has besides the librdkafka properties, with their
// problems, and the problems of the keys a subscription may not have (subscription_config.hpp,
// CheckKafkaSubscription). The properties are checked by outbox-driver.
void ReadKafkaSubscription(std::string_view json, SubscriptionCheck *check);

// ReadKafkaSubscription's work on a parsed config; every key that is not the subscription's own
// (the librdkafka properties) into *forwarded, for CheckKafkaSubscription.
void ReadSubscriptionKeys(const JsonObject &object, SubscriptionCheck *check,
                          JsonObject *forwarded);

}  // namespace outbox
