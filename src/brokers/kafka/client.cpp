// What the Kafka producer and consumer share of their librdkafka setup (see
// include/outbox/brokers/kafka/client.hpp).
#include "outbox/brokers/kafka/client.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "outbox/brokers/signals.hpp"
#include "outbox/config.hpp"

namespace outbox {

bool UserSets(const KafkaProperties &properties, const char *key) {
    return std::any_of(properties.begin(), properties.end(),
                       [&](const auto &p) { return p.first == key; });
}

bool KafkaConf::Set(const std::string &key, const std::string &value) {
    if (!ok() || conf_ == nullptr)
        return false;
    char errstr[512];
    if (rd_kafka_conf_set(conf_, key.c_str(), value.c_str(), errstr, sizeof errstr) ==
        RD_KAFKA_CONF_OK)
        return true;
    error_ = "librdkafka refused \"" + key + "\"";
    if (!IsSecretSetting(key))
        error_ += std::string(": ") + errstr;
    return false;
}

bool KafkaConf::Get(const char *key, std::string *value) const {
    char buffer[512];
    size_t size = sizeof buffer;
    if (rd_kafka_conf_get(conf_, key, buffer, &size) != RD_KAFKA_CONF_OK || size > sizeof buffer)
        return false;
    *value = buffer;
    return true;
}

KafkaClient::~KafkaClient() {
    for (int fd : pipe_)
        if (fd >= 0)
            close(fd);
}

bool KafkaClient::Configure(KafkaConf *conf, const BrokerAddressRule &rule,
                            const std::string &client_id, const KafkaProperties &defaults,
                            const KafkaProperties &properties, std::string *error) {
    if (!guard_.Set(rule, error) || !CheckKafkaSideHosts(guard_, properties, error))
        return false;
    bool ok = conf->get() != nullptr && conf->Set("client.id", client_id);
    for (const auto &[key, value] : defaults)
        ok = ok && conf->Set(key, value);
    for (const auto &[key, value] : properties)
        ok = ok && conf->Set(key, value);
    if (!ok)
        *error = conf->get() ? conf->error() : "could not allocate a librdkafka configuration";
    return ok;
}

bool KafkaClient::Create(KafkaConf *conf, rd_kafka_type_t type, const char *what,
                         std::string *error) {
    // Logs go to the main queue, served by the owner's loop, never to stderr from a thread.
    if (!conf->Set("log.queue", "true")) {
        *error = conf->error();
        return false;
    }
    rd_kafka_conf_set_opaque(conf->get(), this);
    rd_kafka_conf_set_error_cb(conf->get(), ErrorCallback);
    rd_kafka_conf_set_log_cb(conf->get(), LogCallback);
    if (guard_.guarded())
        rd_kafka_conf_set_connect_cb(conf->get(), ConnectCallback);
    if (pipe2(pipe_, O_NONBLOCK | O_CLOEXEC) != 0) {
        *error = std::string("could not create a pipe: ") + strerror(errno);
        return false;
    }
    char errstr[512];
    {
        SignalsBlocked blocked;  // librdkafka's threads start with every signal blocked
        rk_ = rd_kafka_new(type, conf->get(), errstr, sizeof errstr);
    }
    if (rk_ == nullptr) {
        *error = std::string("could not create the Kafka ") + what + ": " + errstr;
        return false;  // the configuration is not taken over on failure
    }
    conf->Release();
    rd_kafka_set_log_queue(rk_, nullptr);  // logs to the main queue, served by the owner
    return true;
}

std::string KafkaClient::TakeRefusal() {
    std::lock_guard<std::mutex> lock(refusal_mu_);
    std::string refusal = std::move(refusal_);
    refusal_.clear();
    return refusal;
}

void KafkaClient::ErrorCallback(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    static_cast<KafkaClient *>(opaque)->OnKafkaError(rk, err, reason);
}

void KafkaClient::LogCallback(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    if (level > 4)
        return;  // warnings and worse only (syslog levels)
    auto *self = static_cast<KafkaClient *>(rd_kafka_opaque(rk));
    try {
        self->OnKafkaLog(std::string(fac) + ": " + buf);
    } catch (...) {
        // out of memory: the line is lost, nothing else is
    }
}

// On a broker thread of librdkafka's: the bootstrap brokers and every broker the cluster
// advertises pass through here.
int KafkaClient::ConnectCallback(int fd, const struct sockaddr *address, int length,
                                 const char *broker, void *opaque) {
    auto *self = static_cast<KafkaClient *>(opaque);
    try {
        std::string why;
        int rc = self->guard_.Connect(fd, address, unsigned(length), &why);
        if (rc == EACCES) {
            std::lock_guard<std::mutex> lock(self->refusal_mu_);
            self->refusal_ = std::string("not connecting to ") + broker + ": " + why;
        }
        return rc;
    } catch (...) {
        return ENOMEM;
    }
}

bool CheckKafkaSideHosts(const BrokerGuard &guard, const KafkaProperties &properties,
                         std::string *why) {
    if (!guard.guarded())
        return true;
    for (const auto &[key, value] : properties) {
        if (key != "sasl.oauthbearer.token.endpoint.url")
            continue;
        std::vector<std::string> addresses;
        if (!guard.Resolve(BrokerUrlHost(value), &addresses, why)) {
            *why = "\"" + key + "\": " + *why;
            return false;
        }
    }
    return true;
}

}  // namespace outbox
