// The webhook kind's row (broker_kind.hpp) and the topic rule of the producer's INSERT check.
#include "outbox/brokers/webhook/kind.hpp"

#include <string_view>

#include "outbox/headers.hpp"

namespace outbox {

bool IsValidWebhookTopic(std::string_view topic) {
    return !topic.empty() && topic.size() <= 249 && IsValidHeaderValue(topic);
}

extern const DriverSide kWebhookDriverSide;

const BrokerKind kWebhookKind = {
    "webhook",
    "webhook",
    "docs/destinations.md#webhook",
    NetworkRule::Webhook,
    {"topic", "topic", false, IsValidWebhookTopic,
     "A topic is 1 to 249 bytes of UTF-8 without control characters (it is sent as the ce-type "
     "header)."},
    {},
    /*tombstones=*/false,
    /*read_subscription=*/nullptr,
    OUTBOX_DRIVER_SIDE(kWebhookDriverSide),
};

}  // namespace outbox
