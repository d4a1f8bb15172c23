// outbox.webhook_allowed_networks: the CIDR list parser, what counts as a restricted address,
// and the allow decision, for IPv4, IPv6 and IPv4-mapped addresses, with every kind of bad
// input the setting's check hook reports.
#include "outbox/brokers/http_url.hpp"
#include "outbox/network_policy.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <string>
#include <vector>

namespace outbox {
namespace {

IpAddress Ip(const char *text) {
    std::optional<IpAddress> a = ParseIpAddress(text);
    EXPECT_TRUE(a.has_value()) << text;
    return a.value_or(IpAddress{});
}

std::vector<Network> List(const char *text) {
    std::vector<Network> out;
    std::string error;
    EXPECT_TRUE(ParseNetworkList(text, &out, &error)) << text << ": " << error;
    return out;
}

std::string ListError(const char *text) {
    std::vector<Network> out;
    std::string error;
    EXPECT_FALSE(ParseNetworkList(text, &out, &error)) << text;
    EXPECT_TRUE(out.empty() || !error.empty());
    return error;
}

TEST(NetworkPolicy, ParsesAddressesAsInetPtonDoes) {
    EXPECT_FALSE(Ip("127.0.0.1").v6);
    EXPECT_EQ(FormatIpAddress(Ip("127.0.0.1")), "127.0.0.1");
    EXPECT_TRUE(Ip("::1").v6);
    EXPECT_EQ(FormatIpAddress(Ip("0:0:0:0:0:0:0:1")), "::1");
    EXPECT_EQ(FormatIpAddress(Ip("::FFFF:127.0.0.1")), "::ffff:127.0.0.1");
    // Only dotted decimal: the other IPv4 spellings are ambiguous between parsers.
    for (const char *bad : {"2130706433", "0x7f000001", "127.1", "0177.0.0.1", "127.0.0.1.",
                            "[::1]", "::1%lo", "1.2.3.4:80", "", " 1.2.3.4", "256.0.0.1", "a::g"})
        EXPECT_FALSE(ParseIpAddress(bad).has_value()) << bad;
}

TEST(NetworkPolicy, ParsesNetworkLists) {
    std::vector<Network> l = List(" 127.0.0.0/8 , ::1/128,10.1.2.3,fc00::/7 ");
    ASSERT_EQ(l.size(), 4u);
    EXPECT_EQ(l[0].prefix, 8);
    EXPECT_EQ(l[1].prefix, 128);
    EXPECT_EQ(l[2].prefix, 32);  // a bare address is one host
    EXPECT_EQ(l[3].prefix, 7);
    EXPECT_TRUE(List("").empty());
    EXPECT_TRUE(List("   ").empty());
    EXPECT_EQ(List("0.0.0.0/0").size(), 1u);
    EXPECT_EQ(List("::/0").size(), 1u);
}

TEST(NetworkPolicy, RefusesBadListsSayingWhichEntry) {
    EXPECT_EQ(ListError("127.0.0.0/8,,::1"), "an entry of the list is empty");
    EXPECT_EQ(ListError("127.0.0.0/8,"), "an entry of the list is empty");
    EXPECT_EQ(ListError("localhost"),
              "\"localhost\" is not an IPv4 or IPv6 address or network (CIDR)");
    EXPECT_EQ(ListError("10.0.0.0/33"), "\"10.0.0.0/33\" has a prefix length above 32");
    EXPECT_EQ(ListError("::/129"), "\"::/129\" has a prefix length above 128");
    EXPECT_EQ(ListError("10.0.0.0/"),
              "\"10.0.0.0/\" has no prefix length (0 to 32, or 0 to 128 for IPv6) after the \"/\"");
    EXPECT_EQ(
        ListError("10.0.0.0/-1"),
        "\"10.0.0.0/-1\" has no prefix length (0 to 32, or 0 to 128 for IPv6) after the \"/\"");
    EXPECT_EQ(
        ListError("10.0.0.0/8x"),
        "\"10.0.0.0/8x\" has no prefix length (0 to 32, or 0 to 128 for IPv6) after the \"/\"");
    EXPECT_EQ(ListError("/8"), "\"/8\" is not an IPv4 or IPv6 address or network (CIDR)");
    EXPECT_NE(ListError("10.0.0.1/8").find("has bits set right of its prefix length"),
              std::string::npos);
    EXPECT_NE(ListError("fe80::1/10").find("has bits set right of its prefix length"),
              std::string::npos);
    EXPECT_EQ(ListError("127.0.0.0/8 ::1"),
              "\"127.0.0.0/8 ::1\" is not one network: separate the entries with commas");
}

TEST(NetworkPolicy, ContainsWithinOneFamilyOnly) {
    Network n = List("10.0.0.0/8")[0];
    EXPECT_TRUE(NetworkContains(n, Ip("10.255.1.2")));
    EXPECT_FALSE(NetworkContains(n, Ip("11.0.0.0")));
    EXPECT_FALSE(NetworkContains(n, Ip("::ffff:10.0.0.1")));
    Network odd = List("100.64.0.0/10")[0];
    EXPECT_TRUE(NetworkContains(odd, Ip("100.127.255.255")));
    EXPECT_FALSE(NetworkContains(odd, Ip("100.128.0.0")));
    EXPECT_TRUE(NetworkContains(List("0.0.0.0/0")[0], Ip("8.8.8.8")));
    EXPECT_FALSE(NetworkContains(List("0.0.0.0/0")[0], Ip("::1")));
}

TEST(NetworkPolicy, RestrictedKinds) {
    struct Case {
        const char *address;
        const char *kind;
    };
    for (const Case &c : std::vector<Case>{
             {"127.0.0.1", "loopback"},
             {"127.255.255.254", "loopback"},
             {"0.0.0.0", "unspecified"},
             {"0.1.2.3", "unspecified"},
             {"10.0.0.1", "private"},
             {"172.16.0.1", "private"},
             {"172.31.255.255", "private"},
             {"192.168.1.1", "private"},
             {"100.64.0.1", "shared address space"},
             {"169.254.169.254", "link-local"},
             {"224.0.0.1", "multicast"},
             {"239.255.255.255", "multicast"},
             {"255.255.255.255", "reserved"},
             {"::", "unspecified"},
             {"::1", "loopback"},
             {"::ffff:8.8.8.8", "IPv4-mapped"},
             {"::ffff:127.0.0.1", "IPv4-mapped"},
             {"::127.0.0.1", "IPv4-compatible"},
             {"64:ff9b::a00:1", "NAT64"},
             {"2002:a00:1::", "6to4"},
             {"fc00::1", "private"},
             {"fd12:3456::1", "private"},
             {"fe80::1", "link-local"},
             {"ff02::1", "multicast"},
         }) {
        const char *kind = RestrictedKind(Ip(c.address));
        EXPECT_STREQ(kind, c.kind) << c.address;
    }
    for (const char *open :
         {"8.8.8.8", "1.1.1.1", "172.32.0.1", "172.15.255.255", "100.128.0.1", "169.253.255.255",
          "192.169.0.1", "2001:4860:4860::8888", "2a00:1450::1"})
        EXPECT_EQ(RestrictedKind(Ip(open)), nullptr) << open;
}

TEST(NetworkPolicy, AllowsPublicAlwaysAndRestrictedOnlyWhenListed) {
    std::vector<Network> none;
    EXPECT_TRUE(AddressAllowed(Ip("8.8.8.8"), none));
    EXPECT_TRUE(AddressAllowed(Ip("2001:4860:4860::8888"), none));
    for (const char *refused : {"127.0.0.1", "0.0.0.0", "::1", "169.254.169.254", "10.1.1.1",
                                "::ffff:127.0.0.1", "fe80::1"})
        EXPECT_FALSE(AddressAllowed(Ip(refused), none)) << refused;

    std::vector<Network> loopback = List("127.0.0.0/8, ::1");
    EXPECT_TRUE(AddressAllowed(Ip("127.0.0.1"), loopback));
    EXPECT_TRUE(AddressAllowed(Ip("127.9.9.9"), loopback));
    EXPECT_TRUE(AddressAllowed(Ip("::1"), loopback));
    EXPECT_FALSE(AddressAllowed(Ip("0.0.0.0"), loopback)) << "0.0.0.0 is not loopback";
    EXPECT_FALSE(AddressAllowed(Ip("169.254.169.254"), loopback));
    EXPECT_FALSE(AddressAllowed(Ip("10.0.0.1"), loopback));
    // A mapped address goes where its IPv4 address does.
    EXPECT_TRUE(AddressAllowed(Ip("::ffff:127.0.0.1"), loopback));
    EXPECT_FALSE(AddressAllowed(Ip("::ffff:10.0.0.1"), loopback));
    EXPECT_FALSE(AddressAllowed(Ip("::ffff:8.8.8.8"), loopback));
    EXPECT_TRUE(AddressAllowed(Ip("::ffff:8.8.8.8"), List("::ffff:0:0/96")));
    // A host of its own.
    std::vector<Network> one = List("10.1.2.3");
    EXPECT_TRUE(AddressAllowed(Ip("10.1.2.3"), one));
    EXPECT_FALSE(AddressAllowed(Ip("10.1.2.4"), one));
}

TEST(NetworkPolicy, ReadsSocketAddresses) {
    struct sockaddr_in in;
    memset(&in, 0, sizeof in);
    in.sin_family = AF_INET;
    inet_pton(AF_INET, "169.254.169.254", &in.sin_addr);
    EXPECT_EQ(FormatIpAddress(*AddressOfSockaddr(reinterpret_cast<sockaddr *>(&in))),
              "169.254.169.254");
    struct sockaddr_in6 in6;
    memset(&in6, 0, sizeof in6);
    in6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::ffff:127.0.0.1", &in6.sin6_addr);
    EXPECT_EQ(FormatIpAddress(*AddressOfSockaddr(reinterpret_cast<sockaddr *>(&in6))),
              "::ffff:127.0.0.1");
    struct sockaddr unix_sa;
    memset(&unix_sa, 0, sizeof unix_sa);
    unix_sa.sa_family = AF_UNIX;
    EXPECT_FALSE(AddressOfSockaddr(&unix_sa).has_value());
    EXPECT_FALSE(AddressOfSockaddr(nullptr).has_value());
}

TEST(NetworkPolicy, LiteralAddressesOfUrlsInEverySpellingLibcurlTakes) {
    struct Case {
        const char *url;
        const char *address;  // nullptr: a name
    };
    for (const Case &c : std::vector<Case>{
             {"http://127.0.0.1:8080/hook", "127.0.0.1"},
             {"http://2130706433/", "127.0.0.1"},
             {"http://0x7f000001/", "127.0.0.1"},
             {"http://127.1/", "127.0.0.1"},
             {"http://0177.0.0.1/", "127.0.0.1"},
             {"http://0/", "0.0.0.0"},
             {"http://127.0.0.1./", "127.0.0.1"},
             {"https://[::1]:8443/", "::1"},
             {"http://[0:0:0:0:0:0:0:1]/", "::1"},
             {"http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1"},
             {"http://169.254.169.254/latest/meta-data/", "169.254.169.254"},
             {"http://user:pw@10.0.0.1/", "10.0.0.1"},
             {"https://example.com/hook", nullptr},
             {"http://localhost/", nullptr},
             {"not a url", nullptr},
         }) {
        std::optional<IpAddress> a = LiteralAddressOfUrl(c.url);
        if (c.address == nullptr) {
            EXPECT_FALSE(a.has_value()) << c.url;
            continue;
        }
        ASSERT_TRUE(a.has_value()) << c.url;
        EXPECT_EQ(FormatIpAddress(*a), c.address) << c.url;
    }
}

TEST(NetworkPolicy, LocalhostNames) {
    for (const char *url : {"http://localhost/", "http://LOCALHOST:80/", "http://localhost./x",
                            "http://api.localhost/", "http://a.b.LocalHost/"})
        EXPECT_TRUE(IsLocalhostName(url)) << url;
    for (const char *url : {"http://localhost.example.com/", "http://notlocalhost/",
                            "http://127.0.0.1/", "https://example.com/"})
        EXPECT_FALSE(IsLocalhostName(url)) << url;
}

}  // namespace
}  // namespace outbox
