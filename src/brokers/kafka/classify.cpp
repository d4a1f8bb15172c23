// The kafka kind's outcome classification. Design §1 "Guarantees": a Defer must only be returned
// when the destination certainly did not act on the message, because a Defer never spends the retry
// budget; anything doubtful is a Retry, which does.
#include "outbox/brokers/kafka/classify.hpp"

#include <librdkafka/rdkafka.h>

#include <cctype>

namespace outbox {

// What to do with a librdkafka delivery report.
OutcomeKind ClassifyKafkaResult(int err, int status) {
    switch (err) {
        case RD_KAFKA_RESP_ERR_NO_ERROR:
            // Only PERSISTED proves acks=all acceptance; anything less may have been lost.
            return status == RD_KAFKA_MSG_STATUS_PERSISTED ? OutcomeKind::Delivered
                                                           : OutcomeKind::Retry;

        // No broker took the message: an outage, not a rejection.
        case RD_KAFKA_RESP_ERR__TRANSPORT:
        case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
        case RD_KAFKA_RESP_ERR__RESOLVE:
        case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
            return OutcomeKind::Defer;
        case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
        case RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE:
            // No broker answered within message.timeout.ms (a broker that answers with an error
            // is reported with that error): an outage. A request that went out before the
            // broker vanished may have been persisted, so this can mean a duplicate later,
            // which at-least-once allows; spending the retry budget on it would dead-letter
            // messages during a long outage instead.
            return OutcomeKind::Defer;

        // The broker will refuse this message however often it is sent.
        // (librdkafka has no local _MSG_SIZE_TOO_LARGE: it reports an oversized message with
        // the broker's code, locally as well.)
        case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_INVALID_RECORD:
        case RD_KAFKA_RESP_ERR_INVALID_MSG:  // CORRUPT_MESSAGE
        case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
        case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
        case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:  // INVALID_TOPIC_EXCEPTION
        case RD_KAFKA_RESP_ERR__INVALID_ARG:
        case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
            return OutcomeKind::Dead;

        default:
            return OutcomeKind::Retry;
    }
}

// What to do with the messages purged after a fatal producer error.
OutcomeKind ClassifyKafkaFatal(int fatal_err) {
    switch (fatal_err) {
        case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return OutcomeKind::Dead;
        default:
            return OutcomeKind::Defer;
    }
}

// The explanation an operator needs next to librdkafka's text, where it is misleading alone.
std::string KafkaErrorHint(const KafkaErrorContext &c) {
    switch (c.err) {
        case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
            if (c.message_bytes > 0 && c.message_bytes < c.batch_size)
                return "(the message is " + std::to_string(c.message_bytes) +
                       " bytes: the broker checks whole batches against the topic's "
                       "max.message.bytes; if that is below batch.size (" +
                       std::to_string(c.batch_size) + "), set \"batch.size\" to at most that)";
            return "";
        case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
            return "(an idempotent producer's principal needs WRITE on the topic)";
        case RD_KAFKA_RESP_ERR__AUTHENTICATION: {
            std::string m = c.sasl_mechanism;
            for (char &ch : m)
                ch = static_cast<char>(toupper(static_cast<unsigned char>(ch)));
            if (m.rfind("SCRAM-", 0) != 0 || c.librdkafka_version >= 0x020601ff ||
                c.librdkafka_version <= 0)
                return "";
            int v = c.librdkafka_version;
            return "(librdkafka " + std::to_string((v >> 24) & 0xff) + "." +
                   std::to_string((v >> 16) & 0xff) + "." + std::to_string((v >> 8) & 0xff) +
                   " cannot do SCRAM with Kafka 4.x brokers, whatever the password: it needs "
                   "2.6.1; use PLAIN over SASL_SSL or OAUTHBEARER)";
        }
        default:
            return "";
    }
}

}  // namespace outbox
