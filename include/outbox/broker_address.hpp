// Where the brokers of a destination or subscription may be (outbox.broker_allowed_networks).
//
// A Kafka, RabbitMQ or NATS address is chosen by whoever may create destinations or
// subscriptions, but the connection is made by the database server from inside its network,
// like a webhook's (network_policy.hpp). For a config that a role other than a superuser wrote,
// a broker may be at a loopback, private, link-local or other restricted address only inside a
// network a superuser listed; a superuser's brokers may be anywhere. The literal hosts of a
// config are checked when it is set (BrokerHosts, RefusedLiteralHost); every address a client
// library actually connects to is checked again then (BrokerGuard), so that a name resolving to
// an internal address, or a Kafka broker advertising one, is refused too.
#pragma once

#include <string>
#include <vector>

#include "outbox/config.hpp"
#include "outbox/network_policy.hpp"

struct sockaddr;

namespace outbox {

// The hosts of a Kafka broker list ("host:port,[v6]:port,SASL_SSL://host:port"), as written.
std::vector<std::string> KafkaBootstrapHosts(std::string_view servers);

// The host of a broker URL ("amqp://user:pw@host:5672/vhost", "nats://[::1]:4222",
// "tls://host", "host:4222"), as written; "" when there is none.
std::string BrokerUrlHost(std::string_view url);

// `url` with its host replaced by `host` (an IPv6 address gets brackets); the rest as written.
std::string ReplaceBrokerUrlHost(std::string_view url, const std::string &host);

// Every host librdkafka properties name for it to connect to: the broker list
// ("bootstrap.servers", "metadata.broker.list") and the OIDC token endpoint.
std::vector<std::string> KafkaHosts(
    const std::vector<std::pair<std::string, std::string>> &properties);

// Every host a destination config names for its brokers (none for a webhook).
std::vector<std::string> BrokerHosts(const DestinationConfig &config);

// The first of `hosts` that is not in `old_hosts` (a host kept as it was is not checked again:
// the rule applies when an address is chosen) and that `allowed` refuses before anything is
// resolved (RefusedLiteralHost).
std::optional<HostRefusal> RefusedNewBrokerHost(const std::vector<std::string> &hosts,
                                                const std::vector<std::string> &old_hosts,
                                                const std::vector<Network> &allowed);

// The connect-time check, for the driver of one destination or subscription.
class BrokerGuard {
  public:
    // An unguarded guard allows everything. False with *error when the networks do not parse
    // (the setting's check hook makes that impossible in the server).
    bool Set(const BrokerAddressRule &rule, std::string *error);
    bool guarded() const { return guarded_; }

    // Whether a connection to `address` is allowed; else why, e.g. "127.0.0.1 is a loopback
    // address, which outbox.broker_allowed_networks does not allow".
    bool Allows(const struct sockaddr *address, std::string *why) const;

    // Resolves `host` (a name or a literal address) and checks every address it has; the
    // allowed ones in *addresses, formatted. False with *why when the name does not resolve or
    // any of its addresses is refused (a name with one internal address is refused whole).
    bool Resolve(const std::string &host, std::vector<std::string> *addresses,
                 std::string *why) const;

    // librdkafka's connect_cb: checks the address, then connects the (non-blocking) socket as
    // librdkafka would. Returns 0 (connected or in progress) or an errno: EACCES when refused,
    // with the reason in *why.
    int Connect(int fd, const struct sockaddr *address, unsigned length, std::string *why) const;

    // The hosts a client library resolves and connects to on its own, where no callback sees
    // the address (librdkafka's OIDC token endpoint, "sasl.oauthbearer.token.endpoint.url"):
    // resolved and checked before the client is made. False with *why when one is refused.
    bool CheckKafkaSideHosts(const std::vector<std::pair<std::string, std::string>> &properties,
                             std::string *why) const;

  private:
    bool guarded_ = false;
    std::vector<Network> allowed_;
};

// What a role other than a superuser is told instead of why its broker cannot be reached: never
// what answered (a refused connection, a timeout and a stranger's protocol would tell what
// listens at an address). The server log keeps the driver's words.
extern const char *const kWhyHidden;

}  // namespace outbox
