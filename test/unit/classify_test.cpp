// Classification: an outage defers, a rejection retries, a permanent failure is dead.
#include "outbox/brokers/kafka/classify.hpp"
#include "outbox/brokers/webhook/classify.hpp"

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include "outbox/message.hpp"

namespace outbox {
namespace {

TEST(ClassifyTest, HttpSuccessIsDelivered) {
    for (long status : {200L, 201L, 202L, 204L, 250L, 299L}) {
        EXPECT_EQ(ClassifyHttpStatus(status), OutcomeKind::Delivered) << status;
    }
}

TEST(ClassifyTest, HttpTransientRejectionsRetry) {
    for (long status : {408L, 425L, 429L, 500L, 502L, 503L, 504L, 599L}) {
        EXPECT_EQ(ClassifyHttpStatus(status), OutcomeKind::Retry) << status;
    }
}

TEST(ClassifyTest, HttpPermanentAndNonsenseStatusesAreDead) {
    for (long status : {0L,   -1L,  100L, 101L, 199L, 300L, 301L, 304L, 400L, 401L,       403L,
                        404L, 405L, 409L, 413L, 422L, 426L, 499L, 600L, 999L, 2147483647L}) {
        EXPECT_EQ(ClassifyHttpStatus(status), OutcomeKind::Dead) << status;
    }
}

// Standard Webhooks: "410 Gone ... Sender should disable the webhook endpoint".
TEST(ClassifyTest, HttpGoneDisablesTheEndpoint) {
    EXPECT_EQ(ClassifyHttpStatus(410), OutcomeKind::Gone);
    EXPECT_STREQ(OutcomeKindName(OutcomeKind::Gone), "gone");
}

TEST(ClassifyTest, CurlFailuresBeforeTheRequestDefer) {
    for (CURLcode code :
         {CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_CONNECT,
          CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION}) {
        EXPECT_EQ(ClassifyCurlResult(code, false), OutcomeKind::Defer) << code;
    }
    // A connect timeout: nothing was sent.
    EXPECT_EQ(ClassifyCurlResult(CURLE_OPERATION_TIMEDOUT, false), OutcomeKind::Defer);
    EXPECT_EQ(ClassifyCurlResult(CURLE_SEND_ERROR, false), OutcomeKind::Defer);
}

TEST(ClassifyTest, CurlFailuresAfterTheRequestRetry) {
    for (CURLcode code : {CURLE_OPERATION_TIMEDOUT, CURLE_SEND_ERROR, CURLE_RECV_ERROR,
                          CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE, CURLE_HTTP2_STREAM}) {
        EXPECT_EQ(ClassifyCurlResult(code, true), OutcomeKind::Retry) << code;
    }
}

TEST(ClassifyTest, CurlLocalMisuseIsDead) {
    for (CURLcode code : {CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL, CURLE_SSL_CACERT_BADFILE,
                          CURLE_SSL_CERTPROBLEM, CURLE_NOT_BUILT_IN, CURLE_BAD_FUNCTION_ARGUMENT,
                          CURLE_UNKNOWN_OPTION}) {
        EXPECT_EQ(ClassifyCurlResult(code, false), OutcomeKind::Dead) << code;
        EXPECT_EQ(ClassifyCurlResult(code, true), OutcomeKind::Dead) << code;
    }
}

TEST(ClassifyTest, CurlUnknownCodesSpendAnAttempt) {
    // Neither deferred forever nor dropped at once.
    EXPECT_EQ(ClassifyCurlResult(CURLE_OUT_OF_MEMORY, false), OutcomeKind::Retry);
    EXPECT_EQ(ClassifyCurlResult(9999, false), OutcomeKind::Retry);
    EXPECT_EQ(ClassifyCurlResult(-1, true), OutcomeKind::Retry);
}

TEST(ClassifyTest, KafkaPersistedIsDelivered) {
    EXPECT_EQ(ClassifyKafkaResult(RD_KAFKA_RESP_ERR_NO_ERROR, RD_KAFKA_MSG_STATUS_PERSISTED),
              OutcomeKind::Delivered);
}

TEST(ClassifyTest, KafkaSuccessWithoutPersistenceRetries) {
    EXPECT_EQ(ClassifyKafkaResult(RD_KAFKA_RESP_ERR_NO_ERROR, RD_KAFKA_MSG_STATUS_NOT_PERSISTED),
              OutcomeKind::Retry);
    EXPECT_EQ(
        ClassifyKafkaResult(RD_KAFKA_RESP_ERR_NO_ERROR, RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED),
        OutcomeKind::Retry);
}

TEST(ClassifyTest, KafkaOutagesDefer) {
    for (rd_kafka_resp_err_t err :
         {RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN,
          RD_KAFKA_RESP_ERR__RESOLVE, RD_KAFKA_RESP_ERR__PURGE_QUEUE}) {
        EXPECT_EQ(ClassifyKafkaResult(err, RD_KAFKA_MSG_STATUS_NOT_PERSISTED), OutcomeKind::Defer)
            << rd_kafka_err2name(err);
    }
    EXPECT_EQ(
        ClassifyKafkaResult(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, RD_KAFKA_MSG_STATUS_NOT_PERSISTED),
        OutcomeKind::Defer);
}

TEST(ClassifyTest, KafkaTimeoutIsAnOutageEvenIfTheRequestWentOut) {
    // The broker vanished mid-request: no attempt is spent (a duplicate is possible later).
    EXPECT_EQ(ClassifyKafkaResult(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT,
                                  RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED),
              OutcomeKind::Defer);
}

TEST(ClassifyTest, KafkaPurgedInFlightMayHaveBeenPersisted) {
    EXPECT_EQ(ClassifyKafkaResult(RD_KAFKA_RESP_ERR__PURGE_INFLIGHT,
                                  RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED),
              OutcomeKind::Retry);
}

TEST(ClassifyTest, KafkaPermanentErrorsAreDead) {
    for (rd_kafka_resp_err_t err :
         {RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
          RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR_INVALID_RECORD,
          RD_KAFKA_RESP_ERR_INVALID_MSG, RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE,
          RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC,
          RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION, RD_KAFKA_RESP_ERR__INVALID_ARG,
          RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION}) {
        EXPECT_EQ(ClassifyKafkaResult(err, RD_KAFKA_MSG_STATUS_NOT_PERSISTED), OutcomeKind::Dead)
            << rd_kafka_err2name(err);
    }
}

TEST(ClassifyTest, KafkaOtherBrokerErrorsRetry) {
    for (rd_kafka_resp_err_t err :
         {RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
          RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR__FATAL,
          RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER}) {
        EXPECT_EQ(ClassifyKafkaResult(err, RD_KAFKA_MSG_STATUS_NOT_PERSISTED), OutcomeKind::Retry)
            << rd_kafka_err2name(err);
    }
}

// Seen with Apache Kafka 4.4 (test/t/113): a principal that may write no topic gets no
// producer id, a fatal error after which librdkafka purges the queued messages.
TEST(ClassifyTest, KafkaPurgedAfterAFatalAuthorizationFailureIsDead) {
    for (rd_kafka_resp_err_t err : {RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED,
                                    RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
                                    RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED}) {
        EXPECT_EQ(ClassifyKafkaFatal(err), OutcomeKind::Dead) << rd_kafka_err2name(err);
    }
}

TEST(ClassifyTest, KafkaPurgedAfterOtherFatalErrorsDefers) {
    // The producer's own idempotence state broke: the message was never sent, and goes out
    // again on the rebuilt producer without spending an attempt.
    for (rd_kafka_resp_err_t err :
         {RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID,
          RD_KAFKA_RESP_ERR__FENCED, RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH,
          RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE, RD_KAFKA_RESP_ERR__INCONSISTENT}) {
        EXPECT_EQ(ClassifyKafkaFatal(err), OutcomeKind::Defer) << rd_kafka_err2name(err);
    }
}

TEST(ClassifyTest, KafkaHintForSmallMessagesRefusedAsABatch) {
    KafkaErrorContext c;
    c.err = RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE;
    c.message_bytes = 380;
    c.batch_size = 1000000;
    EXPECT_EQ(KafkaErrorHint(c),
              "(the message is 380 bytes: the broker checks whole batches against the topic's "
              "max.message.bytes; if that is below batch.size (1000000), set \"batch.size\" to "
              "at most that)");
    // A message as large as a batch is too large by itself: nothing to add.
    c.message_bytes = 1000000;
    EXPECT_EQ(KafkaErrorHint(c), "");
    c.message_bytes = 0;  // size unknown
    EXPECT_EQ(KafkaErrorHint(c), "");
}

TEST(ClassifyTest, KafkaHintForAPrincipalThatMayNotWrite) {
    KafkaErrorContext c;
    c.err = RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED;
    EXPECT_EQ(KafkaErrorHint(c), "(an idempotent producer's principal needs WRITE on the topic)");
    c.err = RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED;  // librdkafka's text says it all
    EXPECT_EQ(KafkaErrorHint(c), "");
}

// librdkafka before 2.6.1 sends the client nonce twice in SCRAM's final message; Apache Kafka
// 4.x checks it strictly and answers "invalid credentials" (seen in test/t/114).
TEST(ClassifyTest, KafkaHintForScramWithAnOldLibrdkafka) {
    KafkaErrorContext c;
    c.err = RD_KAFKA_RESP_ERR__AUTHENTICATION;
    c.sasl_mechanism = "scram-sha-512";
    c.librdkafka_version = 0x020002ff;  // 2.0.2, Debian 12
    EXPECT_EQ(KafkaErrorHint(c),
              "(librdkafka 2.0.2 cannot do SCRAM with Kafka 4.x brokers, whatever the password: "
              "it needs 2.6.1; use PLAIN over SASL_SSL or OAUTHBEARER)");
    c.librdkafka_version = 0x020600ff;  // 2.6.0 still has the bug
    EXPECT_NE(KafkaErrorHint(c), "");
    c.librdkafka_version = 0x020601ff;  // fixed
    EXPECT_EQ(KafkaErrorHint(c), "");
    c.librdkafka_version = 0x020800ff;
    EXPECT_EQ(KafkaErrorHint(c), "");
    c.librdkafka_version = 0x020002ff;
    c.sasl_mechanism = "PLAIN";  // a wrong password is just that
    EXPECT_EQ(KafkaErrorHint(c), "");
    c.sasl_mechanism = "";
    EXPECT_EQ(KafkaErrorHint(c), "");
}

TEST(ClassifyTest, KafkaNoHintForOtherErrors) {
    KafkaErrorContext c;
    c.message_bytes = 10;
    c.batch_size = 1000000;
    c.sasl_mechanism = "SCRAM-SHA-512";
    c.librdkafka_version = 0x020002ff;
    for (rd_kafka_resp_err_t err :
         {RD_KAFKA_RESP_ERR_NO_ERROR, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
          RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, RD_KAFKA_RESP_ERR__TRANSPORT}) {
        c.err = err;
        EXPECT_EQ(KafkaErrorHint(c), "") << rd_kafka_err2name(err);
    }
}

TEST(ClassifyTest, OutcomeKindNames) {
    EXPECT_STREQ(OutcomeKindName(OutcomeKind::Delivered), "delivered");
    EXPECT_STREQ(OutcomeKindName(OutcomeKind::Retry), "retry");
    EXPECT_STREQ(OutcomeKindName(OutcomeKind::Dead), "dead");
    EXPECT_STREQ(OutcomeKindName(OutcomeKind::Defer), "defer");
}

}  // namespace
}  // namespace outbox
