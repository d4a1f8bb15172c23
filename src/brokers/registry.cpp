// The broker kinds (include/outbox/brokers/registry.hpp). A new kind is a folder
// src/brokers/<kind>/ with its row in kind.cpp, and one line here (docs/architecture.md,
// "Adding a broker kind").
#include "outbox/brokers/registry.hpp"

#include <string>
#include <string_view>
#include <vector>

#include "outbox/brokers/amqp/kind.hpp"
#include "outbox/brokers/kafka/kind.hpp"
// mqtt kind
#include "outbox/brokers/mqtt/kind.hpp"
#include "outbox/brokers/nats/kind.hpp"
// redis (issue 42)
#include "outbox/brokers/redis/kind.hpp"
// sqs kind (issue 42)
#include "outbox/brokers/sqs/kind.hpp"
#include "outbox/brokers/webhook/kind.hpp"

namespace outbox {

const std::vector<const BrokerKind *> &BrokerKinds() {
    // Built on first use, never destroyed: no global with a destructor (a static vector's would
    // run at exit, after a helper's threads may still look a kind up).
    static const std::vector<const BrokerKind *> *const kinds = new std::vector<const BrokerKind *>{
        &kKafkaKind, &kWebhookKind, &kAmqpKind, &kNatsKind,
        &kRedisKind,  // redis (issue 42)
        &kMqttKind,   // mqtt kind
        &kSqsKind,    // sqs kind (issue 42)
    };
    return *kinds;
}

const BrokerKind *FindBrokerKind(std::string_view name) {
    for (const BrokerKind *kind : BrokerKinds())
        if (name == kind->name)
            return kind;
    return nullptr;
}

std::string BrokerKindList(bool subscriptions) {
    std::vector<std::string> names;
    for (const BrokerKind *kind : BrokerKinds())
        if (!subscriptions || kind->read_subscription != nullptr)
            names.push_back("\"" + std::string(kind->name) + "\"");
    std::string list;
    for (size_t i = 0; i < names.size(); i++)
        list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return list;
}

void InitBrokerKinds() {
    for (const BrokerKind *kind : BrokerKinds())
        if (kind->driver != nullptr && kind->driver->init_process != nullptr)
            kind->driver->init_process();
}

}  // namespace outbox
