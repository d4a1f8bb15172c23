// Where the brokers of a destination or subscription may be: see
// include/outbox/broker_address.hpp.
#include "outbox/broker_address.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

namespace outbox {

const char *const kWhyHidden =
    "why is in the server log (shown here only for brokers a superuser configured)";

namespace {

std::string_view Trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
        s.remove_suffix(1);
    return s;
}

// "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 address: the host, as written.
std::string_view HostOfHostPort(std::string_view hp) {
    if (!hp.empty() && hp.front() == '[') {
        size_t close = hp.find(']');
        return close == std::string_view::npos ? hp : hp.substr(0, close + 1);
    }
    size_t colon = hp.find(':');
    if (colon != std::string_view::npos && hp.find(':', colon + 1) == std::string_view::npos)
        return hp.substr(0, colon);
    return hp;  // no port, or a bare IPv6 address
}

std::string_view AfterScheme(std::string_view s) {
    size_t scheme = s.find("://");
    return scheme == std::string_view::npos ? s : s.substr(scheme + 3);
}

struct AddrinfoDeleter {
    void operator()(struct addrinfo *ai) const { freeaddrinfo(ai); }
};

}  // namespace

std::vector<std::string> KafkaBootstrapHosts(std::string_view servers) {
    std::vector<std::string> hosts;
    while (!servers.empty()) {
        size_t comma = servers.find(',');
        std::string_view entry = Trim(servers.substr(0, comma));
        servers = comma == std::string_view::npos ? std::string_view() : servers.substr(comma + 1);
        std::string_view host = HostOfHostPort(AfterScheme(entry));
        if (!host.empty())
            hosts.emplace_back(host);
    }
    return hosts;
}

std::string BrokerUrlHost(std::string_view url) {
    std::string_view rest = AfterScheme(Trim(url));
    rest = rest.substr(0, rest.find_first_of("/?#"));
    size_t at = rest.rfind('@');
    if (at != std::string_view::npos)
        rest = rest.substr(at + 1);
    return std::string(HostOfHostPort(rest));
}

std::string ReplaceBrokerUrlHost(std::string_view url, const std::string &host) {
    std::string_view trimmed = Trim(url);
    std::string_view rest = AfterScheme(trimmed);
    size_t start = size_t(rest.data() - trimmed.data());
    std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
    size_t at = authority.rfind('@');
    if (at != std::string_view::npos)
        start += at + 1;
    std::string_view old = HostOfHostPort(trimmed.substr(start));
    std::string literal = host.find(':') != std::string::npos ? "[" + host + "]" : host;
    return std::string(trimmed.substr(0, start)) + literal +
           std::string(trimmed.substr(start + old.size()));
}

std::vector<std::string> KafkaHosts(
    const std::vector<std::pair<std::string, std::string>> &properties) {
    std::vector<std::string> hosts;
    for (const auto &[key, value] : properties) {
        if (key == "bootstrap.servers" || key == "metadata.broker.list") {
            for (std::string &h : KafkaBootstrapHosts(value))
                hosts.push_back(std::move(h));
        } else if (key == "sasl.oauthbearer.token.endpoint.url") {
            hosts.push_back(BrokerUrlHost(value));
        }
    }
    return hosts;
}

std::optional<HostRefusal> RefusedNewBrokerHost(const std::vector<std::string> &hosts,
                                                const std::vector<std::string> &old_hosts,
                                                const std::vector<Network> &allowed) {
    for (const std::string &host : hosts) {
        bool kept = false;
        for (const std::string &old : old_hosts)
            kept = kept || old == host;
        if (kept)
            continue;
        if (std::optional<HostRefusal> refused = RefusedLiteralHost(host, allowed))
            return refused;
    }
    return std::nullopt;
}

std::vector<std::string> BrokerHosts(const DestinationConfig &config) {
    std::vector<std::string> hosts;
    switch (config.kind) {
        case DestinationKind::Kafka:
            hosts = KafkaHosts(config.kafka.properties);
            break;
        case DestinationKind::Amqp:
            hosts.push_back(BrokerUrlHost(config.amqp.url));
            break;
        case DestinationKind::Nats:
            for (const std::string &server : config.nats.servers)
                hosts.push_back(BrokerUrlHost(server));
            break;
        case DestinationKind::Webhook:
            break;
    }
    return hosts;
}

bool BrokerGuard::Set(const BrokerAddressRule &rule, std::string *error) {
    guarded_ = rule.guarded;
    allowed_.clear();
    if (!guarded_)
        return true;
    if (!ParseNetworkList(rule.allowed_networks, &allowed_, error)) {
        *error = "outbox.broker_allowed_networks is invalid: " + *error;
        return false;
    }
    return true;
}

bool BrokerGuard::Allows(const struct sockaddr *address, std::string *why) const {
    if (!guarded_)
        return true;
    std::optional<IpAddress> a = AddressOfSockaddr(address);
    if (!a) {
        *why = "a connection that is not IPv4 or IPv6 is not allowed";
        return false;
    }
    if (AddressAllowed(*a, allowed_))
        return true;
    *why = FormatIpAddress(*a) + " is " + WithArticle(RestrictedKind(*a)) +
           " address, which outbox.broker_allowed_networks does not allow for a broker that a "
           "role other than a superuser configured";
    return false;
}

bool BrokerGuard::Resolve(const std::string &host, std::vector<std::string> *addresses,
                          std::string *why) const {
    std::string name = host;
    if (name.size() >= 2 && name.front() == '[' && name.back() == ']')
        name = name.substr(1, name.size() - 2);
    struct addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo *found = nullptr;
    int rc = getaddrinfo(name.c_str(), nullptr, &hints, &found);
    std::unique_ptr<struct addrinfo, AddrinfoDeleter> list(found);
    if (rc != 0) {
        *why = "cannot resolve \"" + host + "\": " + gai_strerror(rc);
        return false;
    }
    addresses->clear();
    for (struct addrinfo *ai = found; ai != nullptr; ai = ai->ai_next) {
        if (!Allows(ai->ai_addr, why)) {
            *why = "\"" + host + "\" resolves to " + *why;
            return false;
        }
        if (std::optional<IpAddress> a = AddressOfSockaddr(ai->ai_addr)) {
            std::string text = FormatIpAddress(*a);
            bool seen = false;
            for (const std::string &s : *addresses)
                seen = seen || s == text;
            if (!seen)
                addresses->push_back(text);
        }
    }
    return true;
}

int BrokerGuard::Connect(int fd, const struct sockaddr *address, unsigned length,
                         std::string *why) const {
    if (!Allows(address, why))
        return EACCES;
    if (connect(fd, address, socklen_t(length)) == 0 || errno == EINPROGRESS)
        return 0;
    return errno;
}

bool BrokerGuard::CheckKafkaSideHosts(
    const std::vector<std::pair<std::string, std::string>> &properties, std::string *why) const {
    if (!guarded_)
        return true;
    for (const auto &[key, value] : properties) {
        if (key != "sasl.oauthbearer.token.endpoint.url")
            continue;
        std::vector<std::string> addresses;
        if (!Resolve(BrokerUrlHost(value), &addresses, why)) {
            *why = "\"" + key + "\": " + *why;
            return false;
        }
    }
    return true;
}

}  // namespace outbox
