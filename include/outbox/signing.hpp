// Standard Webhooks signatures (https://www.standardwebhooks.com/) and the base64 they use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

std::string Base64Encode(std::string_view bytes);
// Strict standard-alphabet base64 with padding; nullopt on any invalid input.
std::optional<std::string> Base64Decode(std::string_view text);

// "whsec_<base64>" -> the raw key bytes; nullopt when the prefix or the base64 is wrong or the
// key is empty.
std::optional<std::string> DecodeWebhookSecret(std::string_view secret);

// "v1,<base64 HMAC-SHA256(key, msg_id + "." + timestamp + "." + body)>"
std::string SignatureV1(std::string_view key, std::string_view msg_id, int64_t timestamp_s,
                        std::string_view body);

// The webhook-signature header value: one SignatureV1 per key, space separated (key rotation).
std::string SignatureHeader(const std::vector<std::string> &keys, std::string_view msg_id,
                            int64_t timestamp_s, std::string_view body);

}  // namespace outbox
