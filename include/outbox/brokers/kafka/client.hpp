// What the Kafka producer (driver.cpp) and the inbox's consumer (consumer.cpp) share of their
// librdkafka setup: building the configuration (defaults, the user's properties, what outbox
// forces), the broker guard of outbox.broker_allowed_networks as librdkafka's connect_cb, the
// error and log callbacks, the wake-up pipe and the client itself. outbox-driver only.
#pragma once

#include <librdkafka/rdkafka.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "outbox/broker_address.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

using KafkaProperties = std::vector<std::pair<std::string, std::string>>;

// Whether `properties` set `key` (as written).
bool UserSets(const KafkaProperties &properties, const char *key);

// A librdkafka configuration being built. Set stops at the first refusal, whose words stay in
// error() (never quoting a secret setting's value); the configuration is destroyed unless
// Release()d to rd_kafka_new.
class KafkaConf {
  public:
    KafkaConf() : conf_(rd_kafka_conf_new()) {}
    ~KafkaConf() {
        if (conf_)
            rd_kafka_conf_destroy(conf_);
    }
    KafkaConf(const KafkaConf &) = delete;
    KafkaConf &operator=(const KafkaConf &) = delete;

    bool Set(const std::string &key, const std::string &value);
    // The value librdkafka has for `key` (set or default); false when it has none.
    bool Get(const char *key, std::string *value) const;
    bool ok() const { return error_.empty(); }
    const std::string &error() const { return error_; }
    rd_kafka_conf_t *get() const { return conf_; }
    rd_kafka_conf_t *Release() {
        rd_kafka_conf_t *c = conf_;
        conf_ = nullptr;
        return c;
    }

  private:
    rd_kafka_conf_t *conf_;
    std::string error_;
};

// The part of a producer or consumer that talks to librdkafka's callbacks. The owner makes its
// configuration with Configure, then the client with Create; librdkafka's error and log
// callbacks (served on the owner's loop) call OnKafkaError and OnKafkaLog, and every connection
// librdkafka makes (on its broker threads) passes the broker guard first.
class KafkaClient {
  public:
    virtual ~KafkaClient();
    KafkaClient(const KafkaClient &) = delete;
    KafkaClient &operator=(const KafkaClient &) = delete;

  protected:
    KafkaClient() = default;

    // Sets the guard (outbox.broker_allowed_networks) and checks the hosts librdkafka would
    // reach on its own; then client.id, `defaults`, the user's `properties`. False with *error.
    bool Configure(KafkaConf *conf, const BrokerAddressRule &rule, const std::string &client_id,
                   const KafkaProperties &defaults, const KafkaProperties &properties,
                   std::string *error);
    // Creates the client from `conf` (what outbox forces set by the caller meanwhile): logs to
    // the main queue, the callbacks, the connect guard when guarded, the wake-up pipe. The
    // opaque of librdkafka's callbacks is this KafkaClient (an owner's own callbacks, such as a
    // producer's delivery reports, cast it back to the owner through KafkaClient *). Every
    // signal is blocked while librdkafka starts its threads. `what` names it in the error
    // ("producer", "consumer").
    bool Create(KafkaConf *conf, rd_kafka_type_t type, const char *what, std::string *error);
    // Destroys nothing: the owner ends the client its own way (a producer purges first).

    // librdkafka's error_cb and log_cb (warnings and worse), on the thread that serves the
    // queue; never throw.
    virtual void OnKafkaError(rd_kafka_t *rk, int err, const char *reason) = 0;
    virtual void OnKafkaLog(std::string line) = 0;

    // The last connection the guard refused since the last call ("not connecting to <broker>:
    // <why>"), or "".
    std::string TakeRefusal();

    rd_kafka_t *rk_ = nullptr;
    int pipe_[2] = {-1, -1};  // written when there is something to serve (the owner's WaitFd)
    BrokerGuard guard_;

  private:
    static void ErrorCallback(rd_kafka_t *rk, int err, const char *reason, void *opaque);
    static void LogCallback(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
    static int ConnectCallback(int fd, const struct sockaddr *address, int length,
                               const char *broker, void *opaque);

    std::mutex refusal_mu_;
    std::string refusal_;
};

// The hosts a client library resolves and connects to on its own, where no callback sees the
// address (librdkafka's OIDC token endpoint, "sasl.oauthbearer.token.endpoint.url"): resolved
// and checked by `guard` before the client is made. False with *why when one is refused.
bool CheckKafkaSideHosts(const BrokerGuard &guard, const KafkaProperties &properties,
                         std::string *why);

}  // namespace outbox
