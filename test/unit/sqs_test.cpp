// The sqs kind's pure parts: the config check with every bad input, the classification of
// SQS's answers, and the SendMessageBatch encoding (entries, sizes, answers, errors).
#include <gtest/gtest.h>

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "outbox/brokers/registry.hpp"
#include "outbox/brokers/sqs/classify.hpp"
#include "outbox/brokers/sqs/config.hpp"
#include "outbox/brokers/sqs/kind.hpp"
#include "outbox/brokers/sqs/request.hpp"
#include "outbox/config.hpp"

namespace outbox {
namespace {

using Json = nlohmann::ordered_json;

std::string JoinProblems(const ConfigCheck &check) {
    std::string all;
    for (const std::string &problem : check.problems)
        all += problem + "\n";
    return all;
}

ConfigCheck Sqs(const std::string &json) {
    return CheckDestinationConfig(kSqsKind, json);
}

const char *kGood =
    R"({"queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
        "access_key_id": "AKIDEXAMPLE", "secret_access_key": "wJalrXUtnFEMI/K7MDENG"})";

TEST(SqsConfigTest, TheRowIsRegistered) {
    EXPECT_EQ(FindBrokerKind("sqs"), &kSqsKind);
    EXPECT_EQ(kSqsKind.network, NetworkRule::Broker);
    EXPECT_FALSE(kSqsKind.topic.required);
    EXPECT_TRUE(IsValidSqsTopic("orders.created"));
    EXPECT_FALSE(IsValidSqsTopic(""));
    EXPECT_FALSE(IsValidSqsTopic("a\nb"));
}

TEST(SqsConfigTest, AnAwsQueueUrlGivesEndpointAndRegion) {
    ConfigCheck check = Sqs(kGood);
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    const SqsConfig &c = check.config.Settings<SqsConfig>();
    EXPECT_EQ(c.endpoint, "https://sqs.eu-west-1.amazonaws.com/");
    EXPECT_EQ(c.region, "eu-west-1");
    EXPECT_FALSE(c.fifo);
    EXPECT_TRUE(c.tls_verify);
    EXPECT_EQ(kSqsKind.driver->hosts(check.config),
              std::vector<std::string>{"sqs.eu-west-1.amazonaws.com"});
}

TEST(SqsConfigTest, EveryKeyParses) {
    ConfigCheck check = Sqs(
        R"({"queue_url": "http://127.0.0.1:9324/000000000000/events.fifo", "region": "elasticmq",
            "endpoint": "http://10.0.0.5:9324", "access_key_id": "A", "secret_access_key": "s",
            "session_token": "tok", "group": "all", "topic": "t", "tls_verify": false,
            "max_in_flight": 50, "timeout": "2s", "ordering": "key"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    const SqsConfig &c = check.config.Settings<SqsConfig>();
    EXPECT_TRUE(c.fifo);
    EXPECT_EQ(c.endpoint, "http://10.0.0.5:9324");
    EXPECT_EQ(c.region, "elasticmq");
    EXPECT_EQ(c.session_token, "tok");
    EXPECT_EQ(c.group, "all");
    EXPECT_EQ(c.default_topic, "t");
    EXPECT_FALSE(c.tls_verify);
    EXPECT_EQ(c.max_in_flight, 50);
    EXPECT_EQ(c.timeout_ms, 2000);
    EXPECT_EQ(check.config.ordering, Ordering::Key);
    // The endpoint's host is the one connected to.
    EXPECT_EQ(kSqsKind.driver->hosts(check.config), std::vector<std::string>{"10.0.0.5"});
}

TEST(SqsConfigTest, RegionFromTheEndpointOrLegacyHost) {
    EXPECT_EQ(SqsRegionOfHost("sqs.us-east-2.amazonaws.com"), "us-east-2");
    EXPECT_EQ(SqsRegionOfHost("us-west-1.queue.amazonaws.com"), "us-west-1");
    EXPECT_EQ(SqsRegionOfHost("vpce-1a2b.sqs.eu-central-1.vpce.amazonaws.com"), "eu-central-1");
    EXPECT_EQ(SqsRegionOfHost("sqs.amazonaws.com"), "");
    EXPECT_EQ(SqsRegionOfHost("sqs.cn-north-1.amazonaws.com.cn"), "cn-north-1");
    EXPECT_EQ(SqsRegionOfHost("localhost"), "");
    ConfigCheck check = Sqs(
        R"({"queue_url": "http://127.0.0.1/1/q", "endpoint": "https://sqs.ap-south-1.amazonaws.com",
            "access_key_id": "A", "secret_access_key": "s"})");
    ASSERT_TRUE(check.ok()) << JoinProblems(check);
    EXPECT_EQ(check.config.Settings<SqsConfig>().region, "ap-south-1");
}

TEST(SqsConfigTest, EveryProblemAtOnceWithoutSecrets) {
    ConfigCheck check = Sqs(
        R"({"queue_url": "ftp://h/1/q", "endpoint": "https://h/?a=b", "region": "EU West",
            "access_key_id": "a:b", "secret_access_key": "top secret", "session_token": "",
            "group": "", "topic": "", "tls_verify": "no", "max_in_flight": 0, "timeout": "1h",
            "ca_file": "/nonexistent/ca.pem", "colour": "blue"})");
    std::string all = JoinProblems(check);
    EXPECT_EQ(all,
              "\"endpoint\" must be an http or https URL without a query, such as "
              "\"https://sqs.eu-west-1.amazonaws.com\"\n"
              "\"region\" must be an AWS region such as \"eu-west-1\" (lower-case letters, "
              "digits and \"-\", at most 32)\n"
              "\"access_key_id\" must be an AWS access key id (printable ASCII, no spaces or "
              "\":\", at most 128)\n"
              "\"secret_access_key\" must be a non-empty string of printable ASCII without "
              "spaces\n"
              "\"session_token\" must be a non-empty string of printable ASCII without spaces\n"
              "\"group\" must be a MessageGroupId: 1 to 128 characters of printable ASCII\n"
              "\"topic\" must be 1 to 249 bytes of UTF-8 without control characters\n"
              "\"tls_verify\" must be true or false\n"
              "\"max_in_flight\" must be an integer between 1 and 10000\n"
              "\"timeout\" must be a duration between 100ms and 10min (a number of milliseconds "
              "or a string such as \"500ms\" or \"5s\")\n"
              "\"ca_file\" must name a readable file (\"/nonexistent/ca.pem\": no such file)\n"
              "unknown key \"colour\" for an sqs destination\n"
              "\"queue_url\" must be the queue's URL, "
              "https://sqs.<region>.amazonaws.com/<account>/<queue name> (http only for a test "
              "server)\n");
    EXPECT_EQ(all.find("top secret"), std::string::npos);
}

TEST(SqsConfigTest, RequiredKeysAndCombinations) {
    std::string all = JoinProblems(Sqs("{}"));
    EXPECT_NE(all.find("\"queue_url\" is required for an sqs destination"), std::string::npos);
    EXPECT_NE(all.find("\"access_key_id\" and \"secret_access_key\" are required"),
              std::string::npos);
    all = JoinProblems(Sqs(R"({"queue_url": "http://127.0.0.1:9324/1/q", "access_key_id": "a",
                               "secret_access_key": "b", "group": "g"})"));
    EXPECT_NE(all.find("\"region\" is required when neither"), std::string::npos);
    EXPECT_NE(all.find("\"group\" is for FIFO queues only"), std::string::npos);
    all = JoinProblems(Sqs(R"({"queue_url": "https://sqs.eu-west-1.amazonaws.com/", 
                               "access_key_id": "a", "secret_access_key": "b"})"));
    EXPECT_NE(all.find("\"queue_url\" must be the queue's URL"), std::string::npos);
    EXPECT_TRUE(IsSecretSetting("secret_access_key"));
    EXPECT_TRUE(IsSecretSetting("session_token"));
}

TEST(SqsClassifyTest, EntryFailures) {
    EXPECT_EQ(ClassifySqsEntryFailure(true, "InvalidMessageContents"), OutcomeKind::Dead);
    EXPECT_EQ(ClassifySqsEntryFailure(false, "InternalError"), OutcomeKind::Retry);
}

TEST(SqsClassifyTest, RequestErrors) {
    EXPECT_EQ(ClassifySqsRequestError(400, "QueueDoesNotExist"), OutcomeKind::Dead);
    EXPECT_EQ(ClassifySqsRequestError(400, "AWS.SimpleQueueService.NonExistentQueue"),
              OutcomeKind::Dead);
    EXPECT_EQ(ClassifySqsRequestError(403, "AccessDenied"), OutcomeKind::Dead);
    EXPECT_EQ(ClassifySqsRequestError(400, "KmsAccessDenied"), OutcomeKind::Dead);
    EXPECT_EQ(ClassifySqsRequestError(400, "BatchRequestTooLong"), OutcomeKind::Dead);
    EXPECT_EQ(ClassifySqsRequestError(403, "InvalidClientTokenId"), OutcomeKind::Retry);
    EXPECT_EQ(ClassifySqsRequestError(403, "SignatureDoesNotMatch"), OutcomeKind::Retry);
    EXPECT_EQ(ClassifySqsRequestError(400, "ExpiredToken"), OutcomeKind::Retry);
    EXPECT_EQ(ClassifySqsRequestError(400, "ThrottlingException"), OutcomeKind::Retry);
    EXPECT_EQ(ClassifySqsRequestError(400, "RequestThrottled"), OutcomeKind::Retry);
    EXPECT_EQ(ClassifySqsRequestError(500, "InternalError"), OutcomeKind::Retry);
    EXPECT_EQ(ClassifySqsRequestError(503, ""), OutcomeKind::Retry);
    EXPECT_EQ(ClassifySqsRequestError(418, "SomethingNew"), OutcomeKind::Retry);
}

// A server going away mid-answer (an outage) cut off a 200's body: no attempt is spent.
TEST(SqsClassifyTest, StatusDecides) {
    EXPECT_TRUE(SqsStatusDecides(200, CURLE_OK));
    EXPECT_TRUE(SqsStatusDecides(400, CURLE_OK));
    EXPECT_TRUE(SqsStatusDecides(500, CURLE_PARTIAL_FILE));
    EXPECT_FALSE(SqsStatusDecides(200, CURLE_PARTIAL_FILE));
    EXPECT_FALSE(SqsStatusDecides(200, CURLE_RECV_ERROR));
    EXPECT_FALSE(SqsStatusDecides(0, CURLE_COULDNT_CONNECT));
    EXPECT_FALSE(SqsStatusDecides(0, CURLE_OK));
    EXPECT_EQ(ClassifySqsTransport(CURLE_PARTIAL_FILE, true), OutcomeKind::Defer);
}

TEST(SqsClassifyTest, Transport) {
    EXPECT_EQ(ClassifySqsTransport(CURLE_COULDNT_CONNECT, false), OutcomeKind::Defer);
    EXPECT_EQ(ClassifySqsTransport(CURLE_COULDNT_RESOLVE_HOST, false), OutcomeKind::Defer);
    EXPECT_EQ(ClassifySqsTransport(CURLE_RECV_ERROR, true), OutcomeKind::Defer);
    EXPECT_EQ(ClassifySqsTransport(CURLE_GOT_NOTHING, true), OutcomeKind::Defer);
    EXPECT_EQ(ClassifySqsTransport(CURLE_OPERATION_TIMEDOUT, false), OutcomeKind::Defer);
    EXPECT_EQ(ClassifySqsTransport(CURLE_OPERATION_TIMEDOUT, true), OutcomeKind::Retry);
    EXPECT_EQ(ClassifySqsTransport(CURLE_SSL_CACERT_BADFILE, false), OutcomeKind::Dead);
    EXPECT_EQ(ClassifySqsTransport(CURLE_TOO_MANY_REDIRECTS, true), OutcomeKind::Retry);
}

Message Msg() {
    Message m;
    m.id = 7;
    m.event_id = "0190a0e0-0000-7000-8000-000000000001";
    m.payload = R"({"n": 1})";
    m.created_at_ms = 1700000000123;
    m.headers = {{"x-a", "1"}, {"content-type", "application/vnd.x+json"}, {"ce_type", "t.x"}};
    return m;
}

// The entry's members as a JSON object (Id added).
Json Parse(const SqsEntry &e) {
    return Json::parse("{\"Id\":\"0\"" + e.members + "}");
}

TEST(SqsRequestTest, StandardEntry) {
    SqsEntryOptions o{"/outbox/db", "dest", false, ""};
    SqsEntry e = EncodeSqsEntry(Msg(), o);
    ASSERT_EQ(e.problem, "");
    Json j = Parse(e);
    EXPECT_EQ(j["MessageBody"], R"({"n": 1})");
    Json &a = j["MessageAttributes"];
    EXPECT_EQ(a["ce-id"]["StringValue"], "0190a0e0-0000-7000-8000-000000000001");
    EXPECT_EQ(a["ce-id"]["DataType"], "String");
    EXPECT_EQ(a["ce-type"]["StringValue"], "t.x");
    EXPECT_EQ(a["ce-source"]["StringValue"], "/outbox/db");
    EXPECT_EQ(a["ce-time"]["StringValue"], "2023-11-14T22:13:20.123Z");
    EXPECT_EQ(a["ce-specversion"]["StringValue"], "1.0");
    EXPECT_EQ(a["content-type"]["StringValue"], "application/vnd.x+json");
    EXPECT_EQ(a["headers"]["StringValue"], R"({"x-a":"1"})");
    EXPECT_EQ(a.size(), 7u);
    EXPECT_FALSE(j.contains("MessageGroupId"));
    size_t expected = std::string(R"({"n": 1})").size();
    for (auto &[name, value] : a.items())
        expected += name.size() + 6 + value["StringValue"].get<std::string>().size();
    EXPECT_EQ(e.sqs_bytes, expected);
}

TEST(SqsRequestTest, BinaryTraceAndAtMostTenAttributes) {
    Message m = Msg();
    m.payload = std::string("\x00\xff\x10", 3);
    m.payload_is_json = false;
    m.headers.push_back({"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
    m.headers.push_back({"tracestate", "a=b"});
    SqsEntry e = EncodeSqsEntry(m, SqsEntryOptions{"/s", "d", false, ""});
    ASSERT_EQ(e.problem, "");
    Json j = Parse(e);
    EXPECT_EQ(j["MessageBody"], "AP8Q");
    EXPECT_EQ(j["MessageAttributes"]["body-encoding"]["StringValue"], "base64");
    EXPECT_EQ(j["MessageAttributes"]["ce-traceparent"]["StringValue"],
              "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    EXPECT_EQ(j["MessageAttributes"]["ce-tracestate"]["StringValue"], "a=b");
    EXPECT_EQ(j["MessageAttributes"].size(), 10u);  // SQS's limit, never more
}

TEST(SqsRequestTest, FifoGroupsAndDedup) {
    Message m = Msg();
    m.key = "customer-1";
    Json j = Parse(EncodeSqsEntry(m, SqsEntryOptions{"/s", "d", true, ""}));
    EXPECT_EQ(j["MessageGroupId"], "customer-1");
    EXPECT_EQ(j["MessageDeduplicationId"], m.event_id);
    m.key.reset();
    EXPECT_EQ(Parse(EncodeSqsEntry(m, SqsEntryOptions{"/s", "d", true, "all"}))["MessageGroupId"],
              "all");
    EXPECT_EQ(EncodeSqsEntry(m, SqsEntryOptions{"/s", "d", true, ""}).problem,
              "a FIFO queue needs a MessageGroupId: give the message a key, or the destination "
              "a \"group\"");
    m.key = "with space";
    EXPECT_NE(EncodeSqsEntry(m, SqsEntryOptions{"/s", "d", true, ""}).problem, "");
}

TEST(SqsRequestTest, WhatSqsCannotTakeIsAProblem) {
    Message m = Msg();
    m.payload = "\"" + std::string(262144, 'x') + "\"";
    EXPECT_EQ(EncodeSqsEntry(m, SqsEntryOptions{"/s", "d", false, ""})
                  .problem.rfind("message too large for SQS: ", 0),
              0u);
    m.payload = "\"\xef\xbf\xbe\"";  // U+FFFE
    EXPECT_NE(EncodeSqsEntry(m, SqsEntryOptions{"/s", "d", false, ""}).problem, "");
    EXPECT_TRUE(IsSqsText("tab\there, line\nand \xf0\x9f\x98\x80"));
    EXPECT_FALSE(IsSqsText(std::string("nul\0", 4)));
    EXPECT_FALSE(IsSqsText("\x01"));
    EXPECT_FALSE(IsSqsText("\xc3"));
    EXPECT_FALSE(IsSqsText("\xed\xa0\x80"));  // a surrogate
    EXPECT_FALSE(IsSqsText("\xef\xbf\xbe"));  // U+FFFE and U+FFFF: not in SQS's set
    EXPECT_FALSE(IsSqsText("\xef\xbf\xbf"));
    EXPECT_TRUE(IsSqsText("\xef\xbf\xbd"));  // U+FFFD is
}

TEST(SqsRequestTest, BatchRequestAndAnswer) {
    std::string a = ",\"MessageBody\":\"a\"", b = ",\"MessageBody\":\"b\"";
    Json j = Json::parse(SqsBatchRequest("http://h/1/q", {&a, &b}));
    EXPECT_EQ(j["QueueUrl"], "http://h/1/q");
    EXPECT_EQ(j["Entries"][1]["Id"], "1");
    EXPECT_EQ(j["Entries"][1]["MessageBody"], "b");

    std::vector<SqsEntryResult> r;
    std::string error;
    ASSERT_TRUE(ParseSqsBatchResponse(
        R"({"Successful":[{"Id":"1","MessageId":"m"}],
            "Failed":[{"Id":"0","SenderFault":true,"Code":"InvalidMessageContents","Message":"bad"}]})",
        2, &r, &error));
    EXPECT_TRUE(r[1].ok);
    EXPECT_FALSE(r[0].ok);
    EXPECT_TRUE(r[0].sender_fault);
    EXPECT_EQ(r[0].code, "InvalidMessageContents");
    EXPECT_EQ(r[0].message, "bad");
    EXPECT_FALSE(ParseSqsBatchResponse(R"({"Successful":[{"Id":"0"}]})", 2, &r, &error));
    EXPECT_EQ(error, "SQS left entry 1 of SendMessageBatch unanswered");
    EXPECT_FALSE(ParseSqsBatchResponse("<xml/>", 1, &r, &error));
}

// Every header line has a value: libcurl signs each line of the list, and one without a value
// ("Expect:") is signed but not sent, which a server that checks signatures refuses (moto:
// SignatureDoesNotMatch, test/t/266).
TEST(SqsRequestTest, HeadersAreAllSent) {
    std::vector<std::string> plain = SqsRequestHeaders("");
    EXPECT_EQ(plain, (std::vector<std::string>{"Content-Type: application/x-amz-json-1.0",
                                               "X-Amz-Target: AmazonSQS.SendMessageBatch"}));
    std::vector<std::string> temporary = SqsRequestHeaders("FwoGZXIvYXdzE/tok+en==");
    ASSERT_EQ(temporary.size(), 3u);
    EXPECT_EQ(temporary[2], "X-Amz-Security-Token: FwoGZXIvYXdzE/tok+en==");
    for (const std::string &line : temporary) {
        size_t colon = line.find(':');
        ASSERT_NE(colon, std::string::npos) << line;
        EXPECT_NE(line.find_first_not_of(' ', colon + 1), std::string::npos) << line;
    }
}

// Without an "Expect:" line, libcurl would add "Expect: 100-continue" (and wait for the server's
// 100) to a body above 1 MiB: the largest batch, a message at SQS's limit made of characters
// JSON escapes, stays below it.
TEST(SqsRequestTest, LargestBatchStaysBelowCurlsExpectThreshold) {
    Message m = Msg();
    m.payload = "\"" + std::string(261000, '\\') + "\"";  // each \ is escaped again in the body
    SqsEntry e = EncodeSqsEntry(m, SqsEntryOptions{"/outbox/db", "dest", false, ""});
    ASSERT_EQ(e.problem, "");
    EXPECT_LE(e.sqs_bytes, kSqsMaxMessageBytes);
    std::string body = SqsBatchRequest(
        "https://sqs.eu-west-1.amazonaws.com/123456789012/" + std::string(80, 'q'), {&e.members});
    EXPECT_GT(body.size(), 2 * 261000u);
    EXPECT_LT(body.size(), kCurlExpect100Threshold);
}

TEST(SqsRequestTest, RequestErrors) {
    auto e = SqsRequestError(
        R"({"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."})",
        "");
    EXPECT_EQ(e.first, "QueueDoesNotExist");
    EXPECT_EQ(e.second, "The specified queue does not exist.");
    e = SqsRequestError("", "AWS.SimpleQueueService.NonExistentQueue;Sender");
    EXPECT_EQ(e.first, "AWS.SimpleQueueService.NonExistentQueue");
    e = SqsRequestError(R"({"Message":"m","__type":"com.amazonaws.sqs#X"})", "");
    EXPECT_EQ(e.first, "X");
    EXPECT_EQ(e.second, "m");
}

// The query protocol's XML error form: moto answers a JSON request whose signature it refuses
// with it (test/t/266), and without x-amzn-query-error; the code and message must still reach
// last_error.
TEST(SqsRequestTest, XmlRequestErrors) {
    auto e = SqsRequestError(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<ErrorResponse><Errors><Error>"
        "<Code>SignatureDoesNotMatch</Code><Message>The signature &amp; the &quot;key&quot; "
        "&lt;do not&gt; match.</Message><Type>Sender</Type></Error></Errors></ErrorResponse>",
        "");
    EXPECT_EQ(e.first, "SignatureDoesNotMatch");
    EXPECT_EQ(e.second, "The signature & the \"key\" <do not> match.");
    e = SqsRequestError(
        "<ErrorResponse><Error><Type>Sender</Type><Code>AWS.SimpleQueueService.NonExistentQueue"
        "</Code><Message>The specified queue does not exist.</Message></Error></ErrorResponse>",
        "");
    EXPECT_EQ(e.first, "AWS.SimpleQueueService.NonExistentQueue");
    EXPECT_EQ(e.second, "The specified queue does not exist.");
    // An unknown entity is kept as it is; an element left open is no text.
    e = SqsRequestError("<Code>A&nbsp;B</Code><Message>cut off", "");
    EXPECT_EQ(e.first, "A&nbsp;B");
    EXPECT_EQ(e.second, "");
    // Not XML of an error at all (a proxy's page): the header, else nothing.
    e = SqsRequestError("<html><body>502 Bad Gateway</body></html>", "Throttling;Sender");
    EXPECT_EQ(e.first, "Throttling");
    EXPECT_EQ(e.second, "");
    e = SqsRequestError("<html><body>502 Bad Gateway</body></html>", "");
    EXPECT_EQ(e.first, "");
}

}  // namespace
}  // namespace outbox
