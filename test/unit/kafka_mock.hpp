// librdkafka's mock cluster, hosted in a unit test's process on 127.0.0.1 (run by a producer
// handle of its own, which nothing produces through), for the tests of the Kafka driver, its
// window and the consumer. Destroyed with the fixture that holds it. Its brokers' connections
// go without Nagle's algorithm, as real brokers' do: test/tools/accept_nodelay.cpp, linked into
// the unit tests.
#pragma once

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <string>

namespace outbox {

class KafkaMock {
  public:
    KafkaMock() = default;
    KafkaMock(const KafkaMock &) = delete;
    KafkaMock &operator=(const KafkaMock &) = delete;
    ~KafkaMock() {
        if (cluster_)
            rd_kafka_mock_cluster_destroy(cluster_);
        if (host_)
            rd_kafka_destroy(host_);
    }

    // Starts a one-broker cluster; a fatal test failure if librdkafka cannot (call it inside
    // ASSERT_NO_FATAL_FAILURE).
    void Start() {
        char err[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_conf_set(conf, "log_level", "0", err, sizeof err);
        host_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
        ASSERT_NE(host_, nullptr) << err;
        cluster_ = rd_kafka_mock_cluster_new(host_, 1);
        ASSERT_NE(cluster_, nullptr);
        bootstrap_ = rd_kafka_mock_cluster_bootstraps(cluster_);
    }
    rd_kafka_mock_cluster_t *cluster() const { return cluster_; }
    const std::string &bootstrap() const { return bootstrap_; }

  private:
    rd_kafka_t *host_ = nullptr;
    rd_kafka_mock_cluster_t *cluster_ = nullptr;
    std::string bootstrap_;
};

}  // namespace outbox
