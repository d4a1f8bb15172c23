// The nats kind: turning a transport result into what the worker should do with the row.
// Design §1 "Guarantees": an outage defers without spending the retry budget, a rejection spends
// one attempt and backs off, a permanent failure goes to the dead letters at once.
#pragma once

#include "outbox/message.hpp"

namespace outbox {

// A JetStream publish outcome from cnats: `nats_status` a natsStatus, `js_error` a jsErrCode
// (0 when the server sent none), `connection_lost` whether the connection was down at some
// point while the PubAck was awaited. NATS_OK: Delivered (a duplicate acknowledged as such
// too: the stream has the message). NATS_NO_RESPONDERS (no stream listens on the subject),
// NATS_MAX_PAYLOAD, NATS_NOT_PERMITTED, and JetStream errors that repeat for this message
// (stream not found or not matching, message over the stream's maximum size, wrong expected
// sequence or id): Dead. Connection errors, and a timeout while the connection was lost:
// Defer. A timeout on a live connection, storage and resource limits, cluster unavailable and
// everything else: Retry. `just_connected`: the connection (re)started moments ago, when a
// restarted server's JetStream may not answer yet — no responders and "JetStream not enabled"
// are then an outage (Defer), not a missing stream.
OutcomeKind ClassifyNatsPublish(int nats_status, int js_error, bool connection_lost,
                                bool just_connected = false);

}  // namespace outbox
