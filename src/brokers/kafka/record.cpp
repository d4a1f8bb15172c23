// A message made ready for rd_kafka_producev (see include/outbox/brokers/kafka/record.hpp).
#include "outbox/brokers/kafka/record.hpp"

#include <utility>

namespace outbox {

ReadyRecord MakeReadyRecord(Message &m, std::string_view source, CloudEventsMode mode) {
    KafkaRecord record = BuildKafkaRecord(m, source, mode);
    ReadyRecord r;
    r.headers.reset(rd_kafka_headers_new(record.headers.size()));
    r.bytes = record.value.size() + (m.key ? m.key->size() : 0);
    for (const auto &[name, value] : record.headers) {
        rd_kafka_header_add(r.headers.get(), name.data(), name.size(), value.data(), value.size());
        r.bytes += name.size() + value.size();
    }
    r.null_value = record.null_value;
    r.value = std::move(record.value);
    return r;
}

rd_kafka_resp_err_t ReadyRecord::Produce(rd_kafka_t *rk, const Message &m, void *opaque) {
    // A tombstone's value is null (no pointer), not empty: compaction deletes its key.
    void *v = null_value ? nullptr : value.data();
    size_t size = null_value ? 0 : value.size();
    rd_kafka_resp_err_t err =
        m.key ? rd_kafka_producev(
                    rk, RD_KAFKA_V_TOPIC(m.topic.c_str()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                    RD_KAFKA_V_KEY(m.key->data(), m.key->size()), RD_KAFKA_V_VALUE(v, size),
                    RD_KAFKA_V_TIMESTAMP(m.created_at_ms), RD_KAFKA_V_HEADERS(headers.get()),
                    RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END)
              : rd_kafka_producev(
                    rk, RD_KAFKA_V_TOPIC(m.topic.c_str()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                    RD_KAFKA_V_VALUE(v, size), RD_KAFKA_V_TIMESTAMP(m.created_at_ms),
                    RD_KAFKA_V_HEADERS(headers.get()), RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
        headers.release();  // librdkafka's now
    return err;
}

}  // namespace outbox
