// The mqtt kind: turning a transport result into what the worker should do with the row.
// Design §1 "Guarantees": an outage defers without spending the retry budget, a rejection spends
// one attempt and backs off, a permanent failure goes to the dead letters at once.
#pragma once

#include <string>

#include "outbox/message.hpp"

namespace outbox {

// The MQTT 5 reason code of a PUBACK, PUBREC or PUBCOMP (section 3.4.2.1). Below 0x80: Delivered
// (0x10 "no matching subscribers" too: the broker took the message; MQTT delivers only to
// subscribers present). Dead, because sending the same message again gets the same answer:
// 0x87 not authorized (the broker's ACL), 0x90 topic name invalid, 0x95 packet too large, 0x99
// payload format invalid, 0x9A retain not supported, 0x9B QoS not supported. Retry: 0x80
// unspecified error, 0x83 implementation specific error, 0x97 quota exceeded (a rate or quota
// that passes), 0x91/0x92 packet identifier in use/not found (session state lost: the message
// may not have arrived), and any other code.
OutcomeKind ClassifyMqttReason(int reason_code);

// A libmosquitto error returned by mosquitto_publish_v5 (MOSQ_ERR_*), the message not sent:
// MOSQ_ERR_OVERSIZE_PACKET (above the broker's Maximum Packet Size), MOSQ_ERR_PAYLOAD_SIZE,
// MOSQ_ERR_INVAL (a topic it refuses), MOSQ_ERR_MALFORMED_UTF8, MOSQ_ERR_QOS_NOT_SUPPORTED
// (the broker's Maximum QoS) and MOSQ_ERR_NOT_SUPPORTED are Dead; a lost connection
// (MOSQ_ERR_NO_CONN, MOSQ_ERR_CONN_LOST, MOSQ_ERR_ERRNO) is Defer; anything else Retry.
OutcomeKind ClassifyMqttPublishError(int mosq_error);

// "0x87 Not authorized": the reason code in hex with its name from the MQTT 5 specification.
std::string MqttReasonText(int reason_code);

}  // namespace outbox
