// The event id the inbox deduplicates a consumed record by (issue 23; README "The inbox"): the
// record's `ce_id` header (what outbox's own producer sends: the message's event_id), else the
// header the subscription names in "event_id_header", else the record's place in the stream
// (topic, partition, offset). Pure code: the consuming worker calls it for every record.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/uuid7.hpp"

namespace outbox {

enum class EventIdSource {
    CeId,      // the "ce_id" header
    Header,    // the subscription's "event_id_header"
    Position,  // topic, partition and offset
};

struct InboxEventId {
    Uuid id{};
    EventIdSource source = EventIdSource::Position;
};

// Parses the canonical 8-4-4-4-12 hex form (either case); false otherwise.
bool ParseUuid(std::string_view text, Uuid *out);

// A name-based UUID (RFC 9562 version 5, SHA-1) of `name` in `name_space`.
Uuid NameBasedUuidIn(const Uuid &name_space, std::string_view name);

// NameBasedUuidIn outbox's inbox namespace: the same name gives the same id in every process
// and version.
Uuid NameBasedUuid(std::string_view name);

// The record's event id. A header value that is a UUID is that UUID; any other value (a
// CloudEvents id may be any string) is NameBasedUuid("header:" + value), so that equal values
// deduplicate and never collide with a UUID another producer sent. An empty value counts as
// absent. The first header of a name counts. By position: NameBasedUuid of
// "position:" + topic + "/" + partition + "/" + offset.
InboxEventId RecordEventId(const std::vector<std::pair<std::string, std::string>> &headers,
                           std::string_view event_id_header, std::string_view topic,
                           int32_t partition, int64_t offset);

}  // namespace outbox
