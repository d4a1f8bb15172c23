// Where the brokers of a destination or subscription may be (outbox.broker_allowed_networks):
// the hosts a config names, the definition-time refusal, and the connect-time guard.
#include "outbox/broker_address.hpp"
#include "outbox/brokers/amqp/kind.hpp"
#include "outbox/brokers/kafka/config.hpp"
#include "outbox/brokers/kafka/kind.hpp"
#include "outbox/brokers/nats/kind.hpp"
#include "outbox/brokers/webhook/kind.hpp"
#include "outbox/config.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

namespace outbox {
namespace {

using Strings = std::vector<std::string>;

TEST(BrokerAddress, KafkaBootstrapHosts) {
    EXPECT_EQ(KafkaBootstrapHosts("b1:9092,b2:9093"), (Strings{"b1", "b2"}));
    EXPECT_EQ(KafkaBootstrapHosts(" b1:9092 , SASL_SSL://b2:9093,"), (Strings{"b1", "b2"}));
    EXPECT_EQ(KafkaBootstrapHosts("[::1]:9092,10.0.0.1"), (Strings{"[::1]", "10.0.0.1"}));
    EXPECT_EQ(KafkaBootstrapHosts("PLAINTEXT://127.0.0.1:9092"), (Strings{"127.0.0.1"}));
    EXPECT_EQ(KafkaBootstrapHosts(""), Strings{});
}

TEST(BrokerAddress, UrlHosts) {
    EXPECT_EQ(BrokerUrlHost("amqp://user:p@ss@rabbit:5672/vhost"), "rabbit");
    EXPECT_EQ(BrokerUrlHost("amqps://rabbit.example.com"), "rabbit.example.com");
    EXPECT_EQ(BrokerUrlHost("nats://[::1]:4222"), "[::1]");
    EXPECT_EQ(BrokerUrlHost("tls://u:p@10.1.2.3:4222"), "10.1.2.3");
    EXPECT_EQ(BrokerUrlHost("nats.example.com:4222"), "nats.example.com");
    EXPECT_EQ(BrokerUrlHost("https://idp.example.com/oauth2/token"), "idp.example.com");
    EXPECT_EQ(ReplaceBrokerUrlHost("nats://u:p@nats.example.com:4222", "192.0.2.7"),
              "nats://u:p@192.0.2.7:4222");
    EXPECT_EQ(ReplaceBrokerUrlHost("tls://nats.example.com", "2001:db8::7"), "tls://[2001:db8::7]");
    EXPECT_EQ(ReplaceBrokerUrlHost("nats.example.com:4222", "192.0.2.7"), "192.0.2.7:4222");
}

TEST(BrokerAddress, HostsOfEachKind) {
    // The hosts a valid config names (each row's DriverSide::hosts).
    auto hosts = [](const BrokerKind &kind, const char *json) {
        ConfigCheck check = CheckDestinationConfig(kind, json);
        EXPECT_TRUE(check.ok()) << json;
        return kind.driver->hosts(check.config);
    };
    EXPECT_EQ(hosts(kKafkaKind, R"({"bootstrap.servers": "b1:9092,b2:9092", "linger.ms": 1})"),
              (Strings{"b1", "b2"}));
    // The OIDC token endpoint too (a property this librdkafka may not know yet).
    EXPECT_EQ(KafkaHosts({{"bootstrap.servers", "b1:9092,b2:9092"},
                          {"linger.ms", "1"},
                          {"sasl.oauthbearer.token.endpoint.url", "https://idp:8443/token"}}),
              (Strings{"b1", "b2", "idp"}));
    EXPECT_EQ(hosts(kAmqpKind, R"({"url": "amqp://guest:guest@127.0.0.1:5672/"})"),
              (Strings{"127.0.0.1"}));
    EXPECT_EQ(hosts(kNatsKind, R"({"servers": ["nats://n1:4222", "tls://n2:4222"]})"),
              (Strings{"n1", "n2"}));
    // outbox.webhook_allowed_networks' rule
    EXPECT_EQ(hosts(kWebhookKind, R"({"url": "http://127.0.0.1/"})"), Strings{});
}

TEST(BrokerAddress, LiteralHostsRefusedWhenChosen) {
    std::vector<Network> none;
    auto refused = [&](const Strings &hosts, const Strings &old = {}) {
        std::optional<HostRefusal> r = RefusedNewBrokerHost(hosts, old, none);
        return r ? r->what + " (" + r->kind + ")" : std::string("allowed");
    };
    EXPECT_EQ(refused({"127.0.0.1"}), "address 127.0.0.1 (loopback)");
    EXPECT_EQ(refused({"broker.example.com", "10.1.2.3"}), "address 10.1.2.3 (private)");
    // The resolver's other spellings of an IPv4 address are the address they mean.
    EXPECT_EQ(refused({"127.1"}), "address 127.0.0.1 (loopback)");
    EXPECT_EQ(refused({"2130706433"}), "address 127.0.0.1 (loopback)");
    EXPECT_EQ(refused({"0x7f000001"}), "address 127.0.0.1 (loopback)");
    EXPECT_EQ(refused({"[::1]"}), "address ::1 (loopback)");
    EXPECT_EQ(refused({"169.254.169.254"}), "address 169.254.169.254 (link-local)");
    EXPECT_EQ(refused({"LocalHost."}), "host LocalHost. (127.0.0.1, ::1) (loopback)");
    EXPECT_EQ(refused({"kafka.localhost"}), "host kafka.localhost (127.0.0.1, ::1) (loopback)");
    // Names are checked when connecting; public addresses are always allowed.
    EXPECT_EQ(refused({"broker.example.com", "192.0.2.1", "[2001:db8::1]"}), "allowed");
    // A host the config already had is not checked again (the rule applies when it is chosen).
    EXPECT_EQ(refused({"127.0.0.1", "broker.example.com"}, {"127.0.0.1"}), "allowed");
    std::vector<Network> loopback;
    std::string error;
    ASSERT_TRUE(ParseNetworkList("127.0.0.0/8", &loopback, &error)) << error;
    EXPECT_FALSE(RefusedNewBrokerHost({"127.0.0.1", "127.1"}, {}, loopback));
    EXPECT_TRUE(RefusedNewBrokerHost({"10.0.0.1"}, {}, loopback));
}

sockaddr_in V4(const char *address, int port) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(uint16_t(port));
    inet_pton(AF_INET, address, &sa.sin_addr);
    return sa;
}

TEST(BrokerAddress, GuardChecksEveryAddress) {
    BrokerGuard open;
    std::string why;
    sockaddr_in loopback = V4("127.0.0.1", 9092);
    EXPECT_TRUE(open.Allows(reinterpret_cast<sockaddr *>(&loopback), &why));  // a superuser's

    BrokerGuard guard;
    ASSERT_TRUE(guard.Set({true, ""}, &why)) << why;
    EXPECT_FALSE(guard.Allows(reinterpret_cast<sockaddr *>(&loopback), &why));
    EXPECT_EQ(why,
              "127.0.0.1 is a loopback address, which outbox.broker_allowed_networks does not "
              "allow for a broker that a role other than a superuser configured");
    sockaddr_in public_address = V4("192.0.2.1", 9092);
    EXPECT_TRUE(guard.Allows(reinterpret_cast<sockaddr *>(&public_address), &why));

    // Names are resolved and every address checked.
    std::vector<std::string> addresses;
    EXPECT_FALSE(guard.Resolve("localhost", &addresses, &why));
    EXPECT_NE(why.find("\"localhost\" resolves to "), std::string::npos) << why;
    EXPECT_FALSE(guard.Resolve("127.0.0.1", &addresses, &why));
    EXPECT_TRUE(guard.Resolve("192.0.2.1", &addresses, &why)) << why;
    EXPECT_EQ(addresses, (Strings{"192.0.2.1"}));

    BrokerGuard listed;
    ASSERT_TRUE(listed.Set({true, "127.0.0.0/8, ::1"}, &why)) << why;
    EXPECT_TRUE(listed.Resolve("127.0.0.1", &addresses, &why)) << why;
    EXPECT_TRUE(listed.Allows(reinterpret_cast<sockaddr *>(&loopback), &why));
    EXPECT_FALSE(BrokerGuard().Set({true, "not a network"}, &why));
    EXPECT_NE(why.find("outbox.broker_allowed_networks is invalid"), std::string::npos) << why;

    // The OIDC token endpoint librdkafka fetches with its own libcurl is resolved up front.
    EXPECT_FALSE(guard.CheckKafkaSideHosts(
        {{"sasl.oauthbearer.token.endpoint.url", "http://127.0.0.1:8080/token"}}, &why));
    EXPECT_NE(why.find("sasl.oauthbearer.token.endpoint.url"), std::string::npos) << why;
    EXPECT_TRUE(guard.CheckKafkaSideHosts({{"bootstrap.servers", "127.0.0.1:9092"}}, &why));
}

// librdkafka's connect_cb: a refused address is never connected to; an allowed one is.
TEST(BrokerAddress, ConnectRefusesBeforeConnecting) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(listener, 0);
    sockaddr_in any = V4("127.0.0.1", 0);
    ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr *>(&any), sizeof any), 0);
    ASSERT_EQ(listen(listener, 4), 0);
    socklen_t length = sizeof any;
    ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr *>(&any), &length), 0);
    int flags = fcntl(listener, F_GETFL);
    fcntl(listener, F_SETFL, flags | O_NONBLOCK);

    std::string why;
    BrokerGuard guard;
    ASSERT_TRUE(guard.Set({true, ""}, &why));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    EXPECT_EQ(guard.Connect(fd, reinterpret_cast<sockaddr *>(&any), sizeof any, &why), EACCES);
    EXPECT_NE(why.find("loopback"), std::string::npos) << why;
    usleep(50 * 1000);
    EXPECT_LT(accept(listener, nullptr, nullptr), 0) << "a refused address was connected to";
    close(fd);

    BrokerGuard listed;
    ASSERT_TRUE(listed.Set({true, "127.0.0.1/32"}, &why));
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    EXPECT_EQ(listed.Connect(fd, reinterpret_cast<sockaddr *>(&any), sizeof any, &why), 0);
    int accepted = -1;
    for (int i = 0; i < 100 && accepted < 0; i++) {
        accepted = accept(listener, nullptr, nullptr);
        if (accepted < 0)
            usleep(10 * 1000);
    }
    EXPECT_GE(accepted, 0) << "an allowed address was not connected to";
    if (accepted >= 0)
        close(accepted);
    close(fd);
    close(listener);
}

}  // namespace
}  // namespace outbox
