// Which network addresses a webhook may connect to (outbox.webhook_allowed_networks), and
// a broker configured by a role that is not a superuser (outbox.broker_allowed_networks).
//
// A webhook's URL is chosen by whoever may create destinations, but the connection is made by
// the database server, from inside its network: without a rule, that role could reach the
// server's loopback services, the cloud metadata endpoint, or anything on the private network.
// So the addresses that name such places are refused unless a superuser lists a network that
// contains them; public addresses are always allowed. The driver checks every address a
// connection actually uses, when it opens the socket (a name may resolve to several addresses,
// and to other ones later); the definition-time check can only look at literal addresses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct sockaddr;

namespace outbox {

// An IPv4 or IPv6 address. IPv4 uses bytes[0..3].
struct IpAddress {
    bool v6 = false;
    uint8_t bytes[16] = {0};
};

// A network in CIDR notation: the address with every bit right of `prefix` zero.
struct Network {
    IpAddress base;
    int prefix = 0;
};

// "192.0.2.1", "2001:db8::1" (no brackets, no zone, no port); nullopt otherwise. IPv4 only in
// dotted decimal without leading zeros (inet_pton), never the other forms some parsers take.
std::optional<IpAddress> ParseIpAddress(std::string_view text);

// The address as inet_ntop writes it ("127.0.0.1", "::1", "::ffff:127.0.0.1").
std::string FormatIpAddress(const IpAddress &address);

// The address of a socket address (AF_INET or AF_INET6); nullopt for any other family.
std::optional<IpAddress> AddressOfSockaddr(const struct sockaddr *sa);

// A comma-separated list of networks ("127.0.0.0/8, ::1/128, 10.1.2.3"; a bare address is a
// network of one, spaces around entries are ignored, the empty list is empty). On a bad entry
// returns false and says which and why in *error: not an address, a prefix out of range, or
// bits set right of the prefix (as PostgreSQL's cidr type refuses them).
bool ParseNetworkList(std::string_view text, std::vector<Network> *out, std::string *error);

// Whether `network` contains `address` (never across address families).
bool NetworkContains(const Network &network, const IpAddress &address);

// Why an address may be used only when listed: "loopback", "private" (RFC 1918, IPv6
// unique-local fc00::/7), "shared address space" (CGNAT 100.64.0.0/10), "link-local"
// (169.254.0.0/16, fe80::/10: cloud metadata services live there), "unspecified" (0.0.0.0/8,
// ::, which connect to the local host), "multicast", "reserved" (240.0.0.0/4 with the
// broadcast address), "IPv4-mapped" (::ffff:0:0/96), "IPv4-compatible" (::/96), "NAT64"
// (64:ff9b::/96, 64:ff9b:1::/48) and "6to4" (2002::/16), the last ones because they reach an
// IPv4 address of any kind through the IPv6 stack or a translator. nullptr for every other
// (public) address.
const char *RestrictedKind(const IpAddress &address);

// Whether a connection to `address` is allowed: a public address always, a restricted one only
// when a network of `allowed` contains it (an IPv4-mapped address also when its IPv4 address
// is in a listed IPv4 network).
bool AddressAllowed(const IpAddress &address, const std::vector<Network> &allowed);

// The literal address a host as written is (IPv6 with or without brackets; IPv4 also in the
// other spellings the resolver takes as an address, "127.1", "2130706433", "0x7f000001"), or
// nullopt when it is a name. A webhook URL's host: brokers/http_url.hpp.
std::optional<IpAddress> LiteralAddressOfHost(std::string host);

// The host names the local host without DNS: "localhost" and names under ".localhost"
// (RFC 6761), any case, trailing dot ignored.
bool IsLocalhostHost(std::string host);

// Why a host written in a config is refused before anything is resolved: a literal address
// that `allowed` does not allow, or a localhost name when neither loopback address is allowed.
// `what` reads "address 10.1.2.3" or "host localhost (127.0.0.1, ::1)"; `kind` is
// RestrictedKind's. A name is checked only when connecting (it may resolve to anything).
struct HostRefusal {
    std::string what;
    std::string kind;
};

// "a loopback", "an unspecified", "an IPv4-mapped": a kind of RestrictedKind's for a sentence.
std::string WithArticle(const std::string &kind);
std::optional<HostRefusal> RefusedLiteralHost(const std::string &host,
                                              const std::vector<Network> &allowed);

// What a broker driver is told (broker_address.hpp): whether its config's brokers are guarded,
// and the networks outbox.broker_allowed_networks allows.
struct BrokerAddressRule {
    bool guarded = false;          // the config was written by a role that is not a superuser
    std::string allowed_networks;  // outbox.broker_allowed_networks
};

}  // namespace outbox
