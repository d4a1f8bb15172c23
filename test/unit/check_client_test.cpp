// A backend's definition-time config check, run as create_destination runs it: the real
// outbox-driver --check, answering with the kinds' own checks, the same words as the checks
// called directly, and nothing left behind (no helper process, no open socket).
#include "outbox/ipc/check_client.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "outbox/brokers/config_service.hpp"

namespace outbox {
namespace {

std::string HelperPath() {
    const char *env = getenv("OUTBOX_DRIVER");
    return env ? env : "./outbox-driver";
}

size_t OpenFds() {
    size_t n = 0;
    if (DIR *d = opendir("/proc/self/fd")) {
        while (readdir(d) != nullptr)
            n++;
        closedir(d);
    }
    return n;
}

CheckClientOptions Options() {
    CheckClientOptions o;
    o.program = HelperPath();
    o.timeout_ms = 10000;
    return o;
}

ConfigAnswer Ask(const ConfigQuery &query) {
    ConfigAnswer answer;
    std::string why;
    EXPECT_TRUE(CheckInHelper(Options(), query, &answer, &why)) << why;
    return answer;
}

ConfigQuery Destination(const std::string &kind, const std::string &config) {
    ConfigQuery q;
    q.kind = kind;
    q.config = config;
    return q;
}

TEST(CheckClientTest, TheHelperAnswersAsTheChecksDo) {
    size_t fds = OpenFds();
    ConfigQuery q = Destination("kafka", R"({"bootstrap.servers": "b1:9092,b2:9092",
        "no.such.property": 1, "max_attempts": 0, "sasl.kerberos.principal": "p"})");
    ConfigAnswer remote = Ask(q);
    ConfigAnswer local = AnswerConfigQuery(q);
    EXPECT_EQ(remote.config.problems, local.config.problems);
    EXPECT_EQ(remote.config.hints, local.config.hints);
    ASSERT_EQ(remote.config.problems.size(), 2u);
    EXPECT_EQ(remote.config.problems[0], "unknown librdkafka property \"no.such.property\"");
    EXPECT_EQ(remote.config.problems[1], "\"max_attempts\" must be an integer between 1 and 1000");
    ASSERT_EQ(remote.config.privileged.size(), local.config.privileged.size());
    ASSERT_FALSE(remote.config.privileged.empty());
    EXPECT_EQ(remote.config.privileged[0].key, "sasl.kerberos.principal");
    EXPECT_EQ(remote.config.privileged[0].access, ServerAccess::RunsCode);

    ConfigAnswer good = Ask(Destination("kafka", R"({"bootstrap.servers": "b1:9092,b2:9092"})"));
    EXPECT_TRUE(good.config.ok());
    EXPECT_EQ(good.config.hosts, (std::vector<std::string>{"b1", "b2"}));
    EXPECT_EQ(OpenFds(), fds) << "the check's socket is closed";
}

TEST(CheckClientTest, AnUpdateChecksTheOldConfigWithoutItsFiles) {
    ConfigQuery q = Destination("amqp", R"({"url": "amqp://new-host/"})");
    q.has_old = true;
    q.old_config = R"({"url": "amqp://old-host/", "ca_file": "/no/such/file"})";
    q.check_files = true;
    ConfigAnswer a = Ask(q);
    EXPECT_TRUE(a.config.ok());
    EXPECT_EQ(a.config.hosts, std::vector<std::string>{"new-host"});
    // The stored config's files are not looked at (a caller learns nothing about paths), and
    // its settings that need privileges are reported, to be compared with the new ones.
    EXPECT_EQ(a.old.hosts, std::vector<std::string>{"old-host"});
    ASSERT_EQ(a.old.privileged.size(), 1u);
    EXPECT_EQ(a.old.privileged[0].key, "ca_file");
}

TEST(CheckClientTest, TheServersSettingsRefuseAWebhookAtALoopbackAddress) {
    ConfigQuery q =
        Destination("webhook", R"({"url": "http://127.1:8080/hook", "timeout_ms": 20000})");
    q.server.lease_timeout_ms = 30000;
    ConfigAnswer a = Ask(q);
    EXPECT_TRUE(a.config.ok());
    EXPECT_TRUE(a.server.refused);
    EXPECT_EQ(a.server.reason,
              "its URL names address 127.0.0.1, which is not allowed by "
              "outbox.webhook_allowed_networks");
    ASSERT_EQ(a.server.problems.size(), 1u);
    EXPECT_NE(a.server.problems[0].find("at most half of outbox.lease_timeout"), std::string::npos);
    q.server.webhook_allowed_networks = "127.0.0.0/8";
    q.server.lease_timeout_ms = 40000;
    ConfigAnswer allowed = Ask(q);
    EXPECT_FALSE(allowed.server.refused);
    EXPECT_TRUE(allowed.server.problems.empty());
}

TEST(CheckClientTest, SubscriptionsAndUnknownKinds) {
    ConfigQuery q = Destination("kafka", R"({"bootstrap.servers": "b:9092", "topics": ["t"],
        "enable.auto.commit": true})");
    q.subscription = true;
    ConfigAnswer a = Ask(q);
    ASSERT_EQ(a.config.problems.size(), 1u);
    EXPECT_NE(a.config.problems[0].find("\"enable.auto.commit\" cannot be configured"),
              std::string::npos);
    EXPECT_EQ(a.config.hosts, std::vector<std::string>{"b"});
    q.kind = "webhook";
    EXPECT_EQ(Ask(q).config.problems,
              std::vector<std::string>{"this outbox-driver has no subscription kind \"webhook\""});
}

TEST(CheckClientTest, AHelperThatCannotRunIsAnErrorAndACancelEndsTheWait) {
    CheckClientOptions o = Options();
    o.program = "/nonexistent/outbox-driver";
    ConfigAnswer a;
    std::string why;
    EXPECT_FALSE(CheckInHelper(o, Destination("kafka", "{}"), &a, &why));
    EXPECT_EQ(why, "could not start /nonexistent/outbox-driver: No such file or directory");

    // The caller's cancel, thrown from check_interrupts, ends the helper on its way out.
    o = Options();
    o.check_interrupts = [] {
        throw std::runtime_error("canceling statement due to user request");
    };
    size_t fds = OpenFds();
    EXPECT_THROW(CheckInHelper(o, Destination("kafka", "{}"), &a, &why), std::runtime_error);
    EXPECT_EQ(OpenFds(), fds);
}

}  // namespace
}  // namespace outbox
