// The sqs kind's row (broker_kind.hpp) and the topic rule of the producer's INSERT check.
#include "outbox/brokers/sqs/kind.hpp"

#include <string_view>

#include "outbox/headers.hpp"

namespace outbox {

bool IsValidSqsTopic(std::string_view topic) {
    return !topic.empty() && topic.size() <= 249 && IsValidHeaderValue(topic);
}

extern const DriverSide kSqsDriverSide;

const BrokerKind kSqsKind = {
    "sqs",
    "SQS",
    "docs/destinations.md#sqs",
    NetworkRule::Broker,
    {"topic", "topic", false, IsValidSqsTopic,
     "A topic is 1 to 249 bytes of UTF-8 without control characters (it is sent as the ce-type "
     "message attribute)."},
    // SQS's own limit (256 KiB with the attributes) is checked by the driver per message: it
    // cannot be raised, so there is no setting to name in the producer's check.
    {},
    /*tombstones=*/false,
    /*read_subscription=*/nullptr,
    OUTBOX_DRIVER_SIDE(kSqsDriverSide),
};

}  // namespace outbox
