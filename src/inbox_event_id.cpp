// The inbox's event id of a consumed record (see include/outbox/inbox_event_id.hpp).
#include "outbox/inbox_event_id.hpp"

#include <openssl/evp.h>

#include <new>
#include <string>

namespace outbox {

namespace {

// The namespace of outbox's name-based inbox ids (a fixed random UUID; changing it would make
// every derived id new, so that redelivered records were applied again).
constexpr Uuid kInboxNamespace = {0x6f, 0x3e, 0x1c, 0x2a, 0x9b, 0x47, 0x4d, 0x1e,
                                  0x8a, 0x55, 0x0c, 0x7d, 0xe2, 0x19, 0x64, 0xb3};

int HexValue(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

// The value of the first header called `name`, or empty.
std::string_view HeaderValue(const std::vector<std::pair<std::string, std::string>> &headers,
                             std::string_view name) {
    for (const auto &[key, value] : headers) {
        if (key == name) {
            return value;
        }
    }
    return std::string_view();
}

Uuid FromHeader(std::string_view value) {
    Uuid id;
    if (ParseUuid(value, &id)) {
        return id;
    }
    return NameBasedUuid("header:" + std::string(value));
}

}  // namespace

bool ParseUuid(std::string_view text, Uuid *out) {
    if (text.size() != 36) {
        return false;
    }
    Uuid id{};
    size_t byte = 0;
    for (size_t i = 0; i < text.size();) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (text[i] != '-') {
                return false;
            }
            ++i;
            continue;
        }
        int high = HexValue(text[i]);
        int low = HexValue(text[i + 1]);
        if (high < 0 || low < 0) {
            return false;
        }
        id[byte++] = static_cast<uint8_t>(high * 16 + low);
        i += 2;
    }
    *out = id;
    return true;
}

Uuid NameBasedUuidIn(const Uuid &name_space, std::string_view name) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha1(), nullptr) == 1 &&
              EVP_DigestUpdate(ctx, name_space.data(), name_space.size()) == 1 &&
              EVP_DigestUpdate(ctx, name.data(), name.size()) == 1 &&
              EVP_DigestFinal_ex(ctx, digest, &length) == 1 && length >= 16;
    EVP_MD_CTX_free(ctx);
    Uuid id{};
    if (!ok) {
        throw std::bad_alloc();  // OpenSSL fails here only when it cannot allocate
    }
    for (size_t i = 0; i < id.size(); ++i) {
        id[i] = digest[i];
    }
    id[6] = static_cast<uint8_t>((id[6] & 0x0F) | 0x50);  // version 5
    id[8] = static_cast<uint8_t>((id[8] & 0x3F) | 0x80);  // RFC 9562 variant
    return id;
}

Uuid NameBasedUuid(std::string_view name) {
    return NameBasedUuidIn(kInboxNamespace, name);
}

InboxEventId RecordEventId(const std::vector<std::pair<std::string, std::string>> &headers,
                           std::string_view event_id_header, std::string_view topic,
                           int32_t partition, int64_t offset) {
    InboxEventId result;
    std::string_view ce_id = HeaderValue(headers, "ce_id");
    if (!ce_id.empty()) {
        result.id = FromHeader(ce_id);
        result.source = EventIdSource::CeId;
        return result;
    }
    if (!event_id_header.empty()) {
        std::string_view value = HeaderValue(headers, event_id_header);
        if (!value.empty()) {
            result.id = FromHeader(value);
            result.source = EventIdSource::Header;
            return result;
        }
    }
    result.id = NameBasedUuid("position:" + std::string(topic) + "/" + std::to_string(partition) +
                              "/" + std::to_string(offset));
    result.source = EventIdSource::Position;
    return result;
}

}  // namespace outbox
