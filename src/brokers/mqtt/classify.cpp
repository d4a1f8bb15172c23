// The mqtt kind's outcome classification. Design §1 "Guarantees": a Defer must only be returned
// when the destination certainly did not act on the message, because a Defer never spends the
// retry budget; anything doubtful is a Retry, which does.
#include "outbox/brokers/mqtt/classify.hpp"

#include <mosquitto.h>
#include "outbox/brokers/mqtt/protocol.hpp"

#include <cstdio>
#include <string>

namespace outbox {

// What to do with a message the broker answered with `reason_code`.
OutcomeKind ClassifyMqttReason(int reason_code) {
    if (reason_code >= 0 && reason_code < 0x80)
        return OutcomeKind::Delivered;
    switch (reason_code) {
        case MQTT_RC_NOT_AUTHORIZED:
        case MQTT_RC_TOPIC_NAME_INVALID:
        case MQTT_RC_PACKET_TOO_LARGE:
        case MQTT_RC_PAYLOAD_FORMAT_INVALID:
        case MQTT_RC_RETAIN_NOT_SUPPORTED:
        case MQTT_RC_QOS_NOT_SUPPORTED:
            return OutcomeKind::Dead;
        default:
            return OutcomeKind::Retry;
    }
}

// What to do with a message libmosquitto refused to send.
OutcomeKind ClassifyMqttPublishError(int mosq_error) {
    switch (mosq_error) {
        case MOSQ_ERR_SUCCESS:
            return OutcomeKind::Delivered;
        case MOSQ_ERR_OVERSIZE_PACKET:
        case MOSQ_ERR_PAYLOAD_SIZE:
        case MOSQ_ERR_INVAL:
        case MOSQ_ERR_MALFORMED_UTF8:
        case MOSQ_ERR_QOS_NOT_SUPPORTED:
        case MOSQ_ERR_NOT_SUPPORTED:
        case MOSQ_ERR_DUPLICATE_PROPERTY:
            return OutcomeKind::Dead;
        case MOSQ_ERR_NO_CONN:
        case MOSQ_ERR_CONN_LOST:
        case MOSQ_ERR_ERRNO:
            return OutcomeKind::Defer;
        default:
            return OutcomeKind::Retry;
    }
}

// The reason code in hex and its name (mosquitto_reason_string knows the MQTT 5 names).
std::string MqttReasonText(int reason_code) {
    char hex[8];
    snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(reason_code) & 0xFFu);
    return std::string(hex) + " " + mosquitto_reason_string(reason_code);
}

}  // namespace outbox
