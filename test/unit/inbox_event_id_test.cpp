// The inbox's event id of a consumed record: ce_id, else the configured header, else the
// record's position; stable, and never confusing a derived id with a sent one.
#include "outbox/inbox_event_id.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace outbox {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

Uuid Parsed(const char *text) {
    Uuid id{};
    EXPECT_TRUE(ParseUuid(text, &id)) << text;
    return id;
}

TEST(InboxEventId, ParsesCanonicalUuids) {
    Uuid id{};
    ASSERT_TRUE(ParseUuid("0190A8C0-0000-7000-8000-00000000abcd", &id));
    EXPECT_EQ(UuidToString(id), "0190a8c0-0000-7000-8000-00000000abcd");
    for (const char *bad :
         {"", "0190a8c0000070008000000000000abcd", "0190a8c0-0000-7000-8000-00000000abc",
          "0190a8c0-0000-7000-8000-00000000abcde", "0190a8c0-0000-7000-8000_00000000abcd",
          "0190a8c0-0000-7000-8000-00000000abcg", "{0190a8c0-0000-7000-8000-00000000abc}"}) {
        EXPECT_FALSE(ParseUuid(bad, &id)) << bad;
    }
}

// RFC 9562 appendix A.4: version 5 of "www.example.com" in the DNS namespace.
TEST(InboxEventId, NameBasedUuidMatchesTheRfcVector) {
    Uuid dns = Parsed("6ba7b810-9dad-11d1-80b4-00c04fd430c8");
    EXPECT_EQ(UuidToString(NameBasedUuidIn(dns, "www.example.com")),
              "2ed6657d-e927-568b-95e1-2665a8aea6a2");
}

TEST(InboxEventId, CeIdComesFirst) {
    Headers headers = {{"x-id", "0190a8c0-0000-7000-8000-000000000002"},
                       {"ce_id", "0190a8c0-0000-7000-8000-000000000001"},
                       {"ce_id", "0190a8c0-0000-7000-8000-000000000003"}};
    InboxEventId id = RecordEventId(headers, "x-id", "orders", 3, 42);
    EXPECT_EQ(id.source, EventIdSource::CeId);
    EXPECT_EQ(UuidToString(id.id), "0190a8c0-0000-7000-8000-000000000001");
}

TEST(InboxEventId, ThenTheConfiguredHeader) {
    Headers headers = {{"x-id", "0190a8c0-0000-7000-8000-000000000002"}, {"ce_id", ""}};
    InboxEventId id = RecordEventId(headers, "x-id", "orders", 3, 42);
    EXPECT_EQ(id.source, EventIdSource::Header);
    EXPECT_EQ(UuidToString(id.id), "0190a8c0-0000-7000-8000-000000000002");
    // Header names are exact (Kafka headers are case-sensitive).
    EXPECT_EQ(RecordEventId(headers, "X-Id", "orders", 3, 42).source, EventIdSource::Position);
}

TEST(InboxEventId, ThenThePosition) {
    InboxEventId a = RecordEventId({}, "", "orders", 3, 42);
    EXPECT_EQ(a.source, EventIdSource::Position);
    EXPECT_EQ(a.id, NameBasedUuid("position:orders/3/42"));
    EXPECT_EQ(a.id, RecordEventId({{"other", "x"}}, "x-id", "orders", 3, 42).id)
        << "the same record is the same event";
    EXPECT_NE(a.id, RecordEventId({}, "", "orders", 3, 43).id);
    EXPECT_NE(a.id, RecordEventId({}, "", "orders", 4, 42).id);
    EXPECT_NE(a.id, RecordEventId({}, "", "orders2", 3, 42).id);
    EXPECT_EQ(a.id[6] >> 4, 5) << "version 5";
    EXPECT_EQ(a.id[8] >> 6, 2) << "RFC 9562 variant";
}

TEST(InboxEventId, AnIdThatIsNoUuidIsDerivedStably) {
    InboxEventId a = RecordEventId({{"ce_id", "order-17"}}, "", "orders", 0, 1);
    InboxEventId b = RecordEventId({{"ce_id", "order-17"}}, "", "refunds", 5, 99);
    InboxEventId c = RecordEventId({{"x-id", "order-17"}}, "x-id", "orders", 0, 2);
    EXPECT_EQ(a.id, NameBasedUuid("header:order-17"));
    EXPECT_EQ(a.id, b.id) << "the same ce_id is the same event wherever it is read";
    EXPECT_EQ(a.id, c.id) << "and whichever header carries it";
    EXPECT_NE(a.id, RecordEventId({{"ce_id", "order-18"}}, "", "orders", 0, 1).id);
    EXPECT_NE(a.id, RecordEventId({}, "", "orders", 0, 1).id);
}

}  // namespace
}  // namespace outbox
