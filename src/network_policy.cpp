// Which network addresses a webhook may connect to (see include/outbox/network_policy.hpp).
#include "outbox/network_policy.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstring>
#include <memory>

namespace outbox {

namespace {

// A network from a literal and a prefix, for the built-in tables.
Network Net(const char *address, int prefix) {
    Network n;
    n.base = *ParseIpAddress(address);
    n.prefix = prefix;
    return n;
}

struct Restricted {
    Network network;
    const char *kind;
};

// Built once, without allocating (short literals), and trivially destructible.
const std::array<Restricted, 19> &RestrictedNetworks() {
    static const std::array<Restricted, 19> table = {{
        {Net("0.0.0.0", 8), "unspecified"},
        {Net("10.0.0.0", 8), "private"},
        {Net("100.64.0.0", 10), "shared address space"},
        {Net("127.0.0.0", 8), "loopback"},
        {Net("169.254.0.0", 16), "link-local"},
        {Net("172.16.0.0", 12), "private"},
        {Net("192.168.0.0", 16), "private"},
        {Net("224.0.0.0", 4), "multicast"},
        {Net("240.0.0.0", 4), "reserved"},
        {Net("::", 128), "unspecified"},
        {Net("::1", 128), "loopback"},
        {Net("::ffff:0:0", 96), "IPv4-mapped"},
        {Net("::", 96), "IPv4-compatible"},
        {Net("64:ff9b::", 96), "NAT64"},
        {Net("64:ff9b:1::", 48), "NAT64"},
        {Net("2002::", 16), "6to4"},
        {Net("fc00::", 7), "private"},
        {Net("fe80::", 10), "link-local"},
        {Net("ff00::", 8), "multicast"},
    }};
    return table;
}

std::string_view Trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n'))
        s.remove_suffix(1);
    return s;
}

bool IsMapped(const IpAddress &a) {
    static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return a.v6 && memcmp(a.bytes, kPrefix, sizeof kPrefix) == 0;
}

}  // namespace

std::optional<IpAddress> ParseIpAddress(std::string_view text) {
    std::string s(text);
    if (s.empty() || s.size() > INET6_ADDRSTRLEN)
        return std::nullopt;
    IpAddress a;
    if (s.find(':') == std::string::npos) {
        if (inet_pton(AF_INET, s.c_str(), a.bytes) != 1)
            return std::nullopt;
        return a;
    }
    a.v6 = true;
    if (inet_pton(AF_INET6, s.c_str(), a.bytes) != 1)
        return std::nullopt;
    return a;
}

std::string FormatIpAddress(const IpAddress &address) {
    char text[INET6_ADDRSTRLEN] = {0};
    if (inet_ntop(address.v6 ? AF_INET6 : AF_INET, address.bytes, text, sizeof text) == nullptr)
        return "?";
    return text;
}

std::optional<IpAddress> AddressOfSockaddr(const struct sockaddr *sa) {
    IpAddress a;
    if (sa == nullptr)
        return std::nullopt;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in in;
        memcpy(&in, sa, sizeof in);
        memcpy(a.bytes, &in.sin_addr, 4);
        return a;
    }
    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, sa, sizeof in6);
        a.v6 = true;
        memcpy(a.bytes, &in6.sin6_addr, 16);
        return a;
    }
    return std::nullopt;
}

bool ParseNetworkList(std::string_view text, std::vector<Network> *out, std::string *error) {
    out->clear();
    if (Trim(text).empty())
        return true;
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        std::string_view entry = Trim(text.substr(
            start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
        start = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
        std::string shown(entry.substr(0, 64));
        if (entry.empty()) {
            *error = "an entry of the list is empty";
            return false;
        }
        if (entry.find_first_of(" \t\n") != std::string_view::npos) {
            *error = "\"" + shown + "\" is not one network: separate the entries with commas";
            return false;
        }
        size_t slash = entry.find('/');
        std::optional<IpAddress> base = ParseIpAddress(entry.substr(0, slash));
        if (!base) {
            *error = "\"" + shown + "\" is not an IPv4 or IPv6 address or network (CIDR)";
            return false;
        }
        int max_prefix = base->v6 ? 128 : 32;
        int prefix = max_prefix;
        if (slash != std::string_view::npos) {
            std::string_view digits = entry.substr(slash + 1);
            if (digits.empty() || digits.size() > 3 ||
                digits.find_first_not_of("0123456789") != std::string_view::npos) {
                *error = "\"" + shown +
                         "\" has no prefix length (0 to 32, or 0 to 128 for IPv6) after the \"/\"";
                return false;
            }
            prefix = std::stoi(std::string(digits));
            if (prefix > max_prefix) {
                *error =
                    "\"" + shown + "\" has a prefix length above " + std::to_string(max_prefix);
                return false;
            }
        }
        bool host_bits = false;  // bits right of the prefix must be zero
        for (int bit = prefix; bit < max_prefix; bit++)
            host_bits = host_bits || (base->bytes[bit / 8] & (0x80 >> (bit % 8))) != 0;
        if (host_bits) {
            *error = "\"" + shown + "\" has bits set right of its prefix length (write the " +
                     "network's first address, or a bare address for one host)";
            return false;
        }
        Network n;
        n.base = *base;
        n.prefix = prefix;
        out->push_back(n);
    }
    return true;
}

bool NetworkContains(const Network &network, const IpAddress &address) {
    if (network.base.v6 != address.v6)
        return false;
    int full = network.prefix / 8;
    if (memcmp(network.base.bytes, address.bytes, size_t(full)) != 0)
        return false;
    int rest = network.prefix % 8;
    if (rest == 0)
        return true;
    uint8_t mask = uint8_t(0xff << (8 - rest));
    return (network.base.bytes[full] & mask) == (address.bytes[full] & mask);
}

const char *RestrictedKind(const IpAddress &address) {
    // The most specific entry decides (::1 is loopback, not IPv4-compatible).
    const Restricted *best = nullptr;
    for (const Restricted &r : RestrictedNetworks())
        if (NetworkContains(r.network, address) &&
            (!best || r.network.prefix > best->network.prefix))
            best = &r;
    return best ? best->kind : nullptr;
}

bool AddressAllowed(const IpAddress &address, const std::vector<Network> &allowed) {
    if (RestrictedKind(address) == nullptr)
        return true;
    for (const Network &n : allowed)
        if (NetworkContains(n, address))
            return true;
    if (IsMapped(address)) {
        IpAddress v4;
        memcpy(v4.bytes, address.bytes + 12, 4);
        for (const Network &n : allowed)
            if (NetworkContains(n, v4))
                return true;
    }
    return false;
}

std::optional<IpAddress> LiteralAddressOfHost(std::string host) {
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
        return ParseIpAddress(std::string_view(host).substr(1, host.size() - 2));
    if (!host.empty() && host.back() == '.')
        host.pop_back();
    if (std::optional<IpAddress> strict = ParseIpAddress(host))
        return strict;
    // The other IPv4 spellings the resolver takes as an address ("127.1", "2130706433",
    // "0x7f000001"): getaddrinfo hands them to inet_aton.
    struct in_addr v4;
    if (!host.empty() && host.find_first_not_of("0123456789abcdefxABCDEFX.") == std::string::npos &&
        inet_aton(host.c_str(), &v4) != 0) {
        IpAddress a;
        memcpy(a.bytes, &v4.s_addr, 4);
        return a;
    }
    return std::nullopt;
}

bool IsLocalhostHost(std::string host) {
    if (!host.empty() && host.back() == '.')
        host.pop_back();
    for (char &c : host)
        c = (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
    constexpr std::string_view kName = "localhost";
    constexpr std::string_view kSuffix = ".localhost";
    return host == kName ||
           (host.size() > kSuffix.size() &&
            host.compare(host.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0);
}

std::string WithArticle(const std::string &kind) {
    bool vowel = !kind.empty() && std::string_view("aeiouAEIOU").find(kind[0]) != std::string::npos;
    return (vowel ? "an " : "a ") + kind;
}

std::optional<HostRefusal> RefusedLiteralHost(const std::string &host,
                                              const std::vector<Network> &allowed) {
    if (std::optional<IpAddress> literal = LiteralAddressOfHost(host)) {
        if (AddressAllowed(*literal, allowed))
            return std::nullopt;
        return HostRefusal{"address " + FormatIpAddress(*literal), RestrictedKind(*literal)};
    }
    if (IsLocalhostHost(host)) {
        IpAddress v4 = *ParseIpAddress("127.0.0.1"), v6 = *ParseIpAddress("::1");
        if (!AddressAllowed(v4, allowed) && !AddressAllowed(v6, allowed))
            return HostRefusal{"host " + host + " (127.0.0.1, ::1)", "loopback"};
    }
    return std::nullopt;
}

}  // namespace outbox
