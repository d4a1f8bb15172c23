// Classification for the amqp and nats kinds: an outage defers, a rejection retries, a
// permanent failure is dead.
#include <gtest/gtest.h>
#include <nats/nats.h>

#include "outbox/brokers/amqp/classify.hpp"
#include "outbox/brokers/nats/classify.hpp"
#include "outbox/brokers/amqp/rabbitmq_c.hpp"
#include "outbox/message.hpp"

namespace outbox {
namespace {

TEST(ClassifyAmqpTest, ReplyCodeNames) {
    EXPECT_STREQ(AmqpReplyCodeName(312), "NO_ROUTE");
    EXPECT_STREQ(AmqpReplyCodeName(313), "NO_CONSUMERS");
    EXPECT_STREQ(AmqpReplyCodeName(404), "NOT_FOUND");
    EXPECT_STREQ(AmqpReplyCodeName(320), "CONNECTION_FORCED");
    EXPECT_STREQ(AmqpReplyCodeName(541), "INTERNAL_ERROR");
    EXPECT_STREQ(AmqpReplyCodeName(999), "");
}

TEST(ClassifyAmqpTest, UnroutableReturnsAreDead) {
    EXPECT_EQ(ClassifyAmqpReturn(AMQP_NO_ROUTE), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyAmqpReturn(AMQP_NO_CONSUMERS), OutcomeKind::Dead);
    // Anything else a broker might return a message for spends an attempt.
    EXPECT_EQ(ClassifyAmqpReturn(AMQP_INTERNAL_ERROR), OutcomeKind::Retry);
    EXPECT_EQ(ClassifyAmqpReturn(0), OutcomeKind::Retry);
}

TEST(ClassifyAmqpTest, ChannelCloses) {
    // The exchange does not exist, or the user may not write to it: every message fails so.
    for (int code : {AMQP_NOT_FOUND, AMQP_ACCESS_REFUSED, AMQP_NOT_ALLOWED, AMQP_NOT_IMPLEMENTED})
        EXPECT_EQ(ClassifyAmqpChannelClose(code), OutcomeKind::Dead) << code;
    // The broker is going away: an outage.
    EXPECT_EQ(ClassifyAmqpChannelClose(AMQP_CONNECTION_FORCED), OutcomeKind::Defer);
    // The broker saw the messages and one of them may be the cause: an attempt each.
    for (int code : {AMQP_PRECONDITION_FAILED, AMQP_RESOURCE_ERROR, AMQP_INTERNAL_ERROR,
                     AMQP_FRAME_ERROR, AMQP_RESOURCE_LOCKED, 0})
        EXPECT_EQ(ClassifyAmqpChannelClose(code), OutcomeKind::Retry) << code;
}

TEST(ClassifyAmqpTest, ConnectionEnds) {
    // Lost (refused, reset, heartbeat timeout, failed login) or the broker shutting down.
    EXPECT_EQ(ClassifyAmqpConnectionEnd(0), OutcomeKind::Defer);
    EXPECT_EQ(ClassifyAmqpConnectionEnd(AMQP_CONNECTION_FORCED), OutcomeKind::Defer);
    // The broker closed it with a protocol or internal error: the messages were seen.
    for (int code : {AMQP_INTERNAL_ERROR, AMQP_FRAME_ERROR, AMQP_UNEXPECTED_FRAME,
                     AMQP_CHANNEL_ERROR, AMQP_RESOURCE_ERROR})
        EXPECT_EQ(ClassifyAmqpConnectionEnd(code), OutcomeKind::Retry) << code;
}

TEST(ClassifyNatsTest, PubAckIsDelivered) {
    EXPECT_EQ(ClassifyNatsPublish(NATS_OK, 0, false), OutcomeKind::Delivered);
    EXPECT_EQ(ClassifyNatsPublish(NATS_OK, 0, true), OutcomeKind::Delivered);
}

TEST(ClassifyNatsTest, PermanentFailuresAreDead) {
    // No stream listens on the subject: JetStream answers 503 "no responders".
    EXPECT_EQ(ClassifyNatsPublish(NATS_NO_RESPONDERS, 0, false), OutcomeKind::Dead);
    // Right after a (re)connection, or with the connection lost meanwhile, no responders and
    // "JetStream not enabled" are a restarted server's JetStream not answering yet: an outage.
    EXPECT_EQ(ClassifyNatsPublish(NATS_NO_RESPONDERS, 0, false, true), OutcomeKind::Defer);
    EXPECT_EQ(ClassifyNatsPublish(NATS_NO_RESPONDERS, 0, true), OutcomeKind::Defer);
    EXPECT_EQ(ClassifyNatsPublish(NATS_ERR, JSNotEnabledErr, false, true), OutcomeKind::Defer);
    EXPECT_EQ(ClassifyNatsPublish(NATS_ERR, JSNotEnabledErr, false, false), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyNatsPublish(NATS_ERR, JSStreamNotFoundErr, false, true), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyNatsPublish(NATS_MAX_PAYLOAD, 0, false), OutcomeKind::Dead);
    EXPECT_EQ(ClassifyNatsPublish(NATS_NOT_PERMITTED, 0, false), OutcomeKind::Dead);
    for (int js : {JSStreamNotFoundErr, JSStreamMessageExceedsMaximumErr, JSStreamNotMatchErr,
                   JSStreamWrongLastSequenceErr, JSStreamWrongLastMsgIDErr, JSNotEnabledErr})
        EXPECT_EQ(ClassifyNatsPublish(NATS_ERR, js, false), OutcomeKind::Dead) << js;
}

TEST(ClassifyNatsTest, ConnectionProblemsDefer) {
    for (natsStatus s : {NATS_CONNECTION_CLOSED, NATS_CONNECTION_DISCONNECTED, NATS_NO_SERVER,
                         NATS_NOT_YET_CONNECTED, NATS_IO_ERROR, NATS_STALE_CONNECTION,
                         NATS_SSL_ERROR, NATS_CONNECTION_AUTH_FAILED, NATS_INSUFFICIENT_BUFFER})
        EXPECT_EQ(ClassifyNatsPublish(s, 0, false), OutcomeKind::Defer) << s;
}

TEST(ClassifyNatsTest, TimeoutDependsOnTheConnection) {
    // No PubAck while the connection was down: the server may never have seen it.
    EXPECT_EQ(ClassifyNatsPublish(NATS_TIMEOUT, 0, true), OutcomeKind::Defer);
    // No PubAck from a live connection: the server is there but does not answer.
    EXPECT_EQ(ClassifyNatsPublish(NATS_TIMEOUT, 0, false), OutcomeKind::Retry);
}

TEST(ClassifyNatsTest, LimitsAndEverythingElseRetry) {
    for (jsErrCode js : {JSStreamStoreFailedErr, JSInsufficientResourcesErr,
                         JSStorageResourcesExceededErr, JSMemoryResourcesExceededErr,
                         JSClusterNotAvailErr, JSClusterNotLeaderErr, static_cast<jsErrCode>(0)})
        EXPECT_EQ(ClassifyNatsPublish(NATS_ERR, js, false), OutcomeKind::Retry) << js;
    EXPECT_EQ(ClassifyNatsPublish(NATS_NO_MEMORY, 0, false), OutcomeKind::Retry);
}

}  // namespace
}  // namespace outbox
