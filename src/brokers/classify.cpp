// Outcome classification. Design §1 "Guarantees": a Defer must only be returned when the
// destination certainly did not act on the message, because a Defer never spends the retry
// budget; anything doubtful is a Retry, which does.
#include "outbox/brokers/classify.hpp"
#include "outbox/brokers/amqp/rabbitmq_c.hpp"

#include <cctype>

#include <curl/curl.h>
#include <librdkafka/rdkafka.h>
#include <nats/nats.h>

namespace outbox {

// What to do after an HTTP response.
OutcomeKind ClassifyHttpStatus(long status) {
    if (status >= 200 && status <= 299) {
        return OutcomeKind::Delivered;
    }
    if (status == 410) {
        return OutcomeKind::Gone;
    }
    if (status == 408 || status == 425 || status == 429 || (status >= 500 && status <= 599)) {
        return OutcomeKind::Retry;
    }
    return OutcomeKind::Dead;
}

// What to do after a libcurl transfer that ended without an HTTP response.
OutcomeKind ClassifyCurlResult(int curl_code, bool request_sent) {
    switch (curl_code) {
        // The endpoint cannot have seen the request: no connection or no TLS session.
        case CURLE_COULDNT_RESOLVE_PROXY:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_INVALIDCERTSTATUS:
        case CURLE_QUIC_CONNECT_ERROR:
            return OutcomeKind::Defer;

        // Local configuration that no retry can fix.
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_FAILED_INIT:
        case CURLE_URL_MALFORMAT:
        case CURLE_NOT_BUILT_IN:
        case CURLE_FUNCTION_NOT_FOUND:
        case CURLE_BAD_FUNCTION_ARGUMENT:
        case CURLE_UNKNOWN_OPTION:
        case CURLE_SETOPT_OPTION_SYNTAX:
        case CURLE_SSL_ENGINE_NOTFOUND:
        case CURLE_SSL_ENGINE_SETFAILED:
        case CURLE_SSL_ENGINE_INITFAILED:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CRL_BADFILE:
        case CURLE_SSL_ISSUER_ERROR:
            return OutcomeKind::Dead;

        // Transport failures: harmless before the request went out, ambiguous after.
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_WEIRD_SERVER_REPLY:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
        case CURLE_HTTP3:
        case CURLE_PROXY:
        case CURLE_SSL_SHUTDOWN_FAILED:
        case CURLE_AGAIN:
            return request_sent ? OutcomeKind::Retry : OutcomeKind::Defer;

        default:
            // Unknown or unexpected codes spend an attempt, so a failure that never heals ends
            // in the dead letters instead of deferring forever.
            return OutcomeKind::Retry;
    }
}

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

// The AMQP 0-9-1 name of a reply code.
const char *AmqpReplyCodeName(int reply_code) {
    switch (reply_code) {
        case AMQP_REPLY_SUCCESS:
            return "REPLY_SUCCESS";
        case AMQP_CONTENT_TOO_LARGE:
            return "CONTENT_TOO_LARGE";
        case AMQP_NO_ROUTE:
            return "NO_ROUTE";
        case AMQP_NO_CONSUMERS:
            return "NO_CONSUMERS";
        case AMQP_ACCESS_REFUSED:
            return "ACCESS_REFUSED";
        case AMQP_NOT_FOUND:
            return "NOT_FOUND";
        case AMQP_RESOURCE_LOCKED:
            return "RESOURCE_LOCKED";
        case AMQP_PRECONDITION_FAILED:
            return "PRECONDITION_FAILED";
        case AMQP_CONNECTION_FORCED:
            return "CONNECTION_FORCED";
        case AMQP_INVALID_PATH:
            return "INVALID_PATH";
        case AMQP_FRAME_ERROR:
            return "FRAME_ERROR";
        case AMQP_SYNTAX_ERROR:
            return "SYNTAX_ERROR";
        case AMQP_COMMAND_INVALID:
            return "COMMAND_INVALID";
        case AMQP_CHANNEL_ERROR:
            return "CHANNEL_ERROR";
        case AMQP_UNEXPECTED_FRAME:
            return "UNEXPECTED_FRAME";
        case AMQP_RESOURCE_ERROR:
            return "RESOURCE_ERROR";
        case AMQP_NOT_ALLOWED:
            return "NOT_ALLOWED";
        case AMQP_NOT_IMPLEMENTED:
            return "NOT_IMPLEMENTED";
        case AMQP_INTERNAL_ERROR:
            return "INTERNAL_ERROR";
        default:
            return "";
    }
}

// What to do with a message the broker returned.
OutcomeKind ClassifyAmqpReturn(int reply_code) {
    return reply_code == AMQP_NO_ROUTE || reply_code == AMQP_NO_CONSUMERS ? OutcomeKind::Dead
                                                                          : OutcomeKind::Retry;
}

// What to do with the unconfirmed messages of a channel the broker closed.
OutcomeKind ClassifyAmqpChannelClose(int reply_code) {
    switch (reply_code) {
        case AMQP_NOT_FOUND:
        case AMQP_ACCESS_REFUSED:
        case AMQP_NOT_ALLOWED:
        case AMQP_NOT_IMPLEMENTED:
            return OutcomeKind::Dead;
        case AMQP_CONNECTION_FORCED:
            return OutcomeKind::Defer;
        default:
            return OutcomeKind::Retry;
    }
}

// What to do with the unconfirmed messages of a connection that ended.
OutcomeKind ClassifyAmqpConnectionEnd(int reply_code) {
    return reply_code == 0 || reply_code == AMQP_CONNECTION_FORCED ? OutcomeKind::Defer
                                                                   : OutcomeKind::Retry;
}

// What to do with a JetStream publish outcome.
OutcomeKind ClassifyNatsPublish(int nats_status, int js_error, bool connection_lost,
                                bool just_connected) {
    switch (nats_status) {
        case NATS_OK:
            return OutcomeKind::Delivered;
        case NATS_NO_RESPONDERS:
            // Also what a server answers while its JetStream is still restoring the streams
            // after a (re)start: only a connection that has settled can trust it.
            return connection_lost || just_connected ? OutcomeKind::Defer : OutcomeKind::Dead;
        case NATS_MAX_PAYLOAD:
        case NATS_NOT_PERMITTED:
            return OutcomeKind::Dead;
        case NATS_CONNECTION_CLOSED:
        case NATS_CONNECTION_DISCONNECTED:
        case NATS_NO_SERVER:
        case NATS_NOT_YET_CONNECTED:
        case NATS_IO_ERROR:
        case NATS_STALE_CONNECTION:
        case NATS_SSL_ERROR:
        case NATS_CONNECTION_AUTH_FAILED:
        case NATS_INSUFFICIENT_BUFFER:
            return OutcomeKind::Defer;
        case NATS_TIMEOUT:
            return connection_lost ? OutcomeKind::Defer : OutcomeKind::Retry;
        default:
            break;
    }
    switch (js_error) {
        case JSStreamNotFoundErr:
        case JSStreamNotMatchErr:
        case JSStreamMessageExceedsMaximumErr:
        case JSStreamWrongLastMsgIDErr:
        case JSStreamWrongLastSequenceErr:
            return OutcomeKind::Dead;
        case JSNotEnabledErr:
        case JSNotEnabledForAccountErr:
            return just_connected ? OutcomeKind::Defer : OutcomeKind::Dead;
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
