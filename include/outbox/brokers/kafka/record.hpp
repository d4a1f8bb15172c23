// The kafka kind: a message made ready for rd_kafka_producev. Both Kafka drivers build a whole
// batch this way before they hand any of it to librdkafka, then produce it in one tight loop:
// librdkafka's broker thread sends what a partition holds once linger.ms (1 ms) has passed since
// its first message, and the idempotent producer sends no further request to a partition while
// five or more of its messages are in flight (librdkafka 2.0.2, rd_kafka_toppar_producer_serve),
// its broker thread waking up at once, again and again, until they are acknowledged. A batch
// built and handed over one message at a time outlasted linger.ms: it went out as two requests,
// the second a round trip later, with the broker thread spinning meanwhile.
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "outbox/brokers/cloudevents.hpp"
#include "outbox/message.hpp"

namespace outbox {

struct ReadyRecord {
    std::string value;
    bool null_value = false;  // a tombstone
    std::unique_ptr<rd_kafka_headers_t, void (*)(rd_kafka_headers_t *)> headers{
        nullptr, rd_kafka_headers_destroy};
    size_t bytes = 0;  // key, value and headers

    // rd_kafka_producev of `m` (its topic, key and timestamp) with this value and these headers
    // (copied by librdkafka), `opaque` for its delivery report. On success the headers are
    // librdkafka's; on failure they stay here, and a second call may try again.
    rd_kafka_resp_err_t Produce(rd_kafka_t *rk, const Message &m, void *opaque);
};

// The record of `m` (BuildKafkaRecord: its payload is moved out) with its headers made
// librdkafka's kind.
ReadyRecord MakeReadyRecord(Message &m, std::string_view source, CloudEventsMode mode);

}  // namespace outbox
