// The kafka kind: turning a transport result into what the worker should do with the row.
// Design §1 "Guarantees": an outage defers without spending the retry budget, a rejection spends
// one attempt and backs off, a permanent failure goes to the dead letters at once.
#pragma once

#include <cstddef>
#include <string>

#include "outbox/message.hpp"

namespace outbox {

// A librdkafka delivery report error (`err` is an rd_kafka_resp_err_t, `status` an
// rd_kafka_msg_status_t). No error and status PERSISTED: Delivered. Transport, all brokers down,
// resolve failure, message timed out (no broker answered in time), purged from the queue: Defer.
// Permanent errors (MSG_SIZE_TOO_LARGE, _MSG_SIZE_TOO_LARGE, TOPIC_AUTHORIZATION_FAILED,
// CLUSTER_AUTHORIZATION_FAILED, INVALID_RECORD, CORRUPT_MESSAGE, RECORD_LIST_TOO_LARGE,
// UNKNOWN_TOPIC_OR_PART / _UNKNOWN_TOPIC when the topic cannot exist, INVALID_TOPIC_EXCEPTION,
// _INVALID_ARG, _UNKNOWN_PARTITION): Dead. Everything else, including a success report whose
// status is not PERSISTED: Retry.
OutcomeKind ClassifyKafkaResult(int err, int status);

// The messages librdkafka purged from its queue after a fatal producer error `fatal_err` (an
// rd_kafka_resp_err_t, from rd_kafka_fatal_error). They were never sent. Authorization
// failures (CLUSTER_AUTHORIZATION_FAILED: the principal may write no topic, so the idempotent
// producer gets no producer id; TOPIC_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED) are permanent:
// Dead. Any other fatal error is the producer's own state: Defer (the producer is rebuilt).
OutcomeKind ClassifyKafkaFatal(int fatal_err);

// What a Kafka error means beyond librdkafka's own text, for last_error (a sentence in
// parentheses, or "" when there is nothing to add).
struct KafkaErrorContext {
    int err = 0;                 // rd_kafka_resp_err_t
    size_t message_bytes = 0;    // the message's key, value and headers (0: unknown)
    size_t batch_size = 0;       // the producer's batch.size
    std::string sasl_mechanism;  // the producer's sasl.mechanisms ("" when none)
    int librdkafka_version = 0;  // rd_kafka_version(): 0xMMmmrrpp
};
// - MSG_SIZE_TOO_LARGE for a message smaller than batch.size: the broker checks whole record
//   batches against the topic's max.message.bytes, so messages below it may be refused
//   together: set batch.size to at most max.message.bytes.
// - CLUSTER_AUTHORIZATION_FAILED: an idempotent producer's principal needs WRITE on the topic
//   (Kafka 3.0+ no longer needs IDEMPOTENT_WRITE on the cluster).
// - _AUTHENTICATION with SCRAM and librdkafka before 2.6.1: such versions cannot do SCRAM with
//   Apache Kafka 4.x brokers (they reject the client's nonce), whatever the password.
std::string KafkaErrorHint(const KafkaErrorContext &context);

}  // namespace outbox
