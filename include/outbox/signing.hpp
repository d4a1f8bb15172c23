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

// Asymmetric keys (v1a, ed25519): "whsk_" + base64 of the 32-byte RFC 8032 private key (the
// seed), or of the 64 bytes libsodium calls a secret key (seed, then the public key, which must
// match); "whpk_" + base64 of the 32-byte public key. nullopt when the prefix, the base64, the
// length or (64 bytes) the public half is wrong. The private key decodes to the 32-byte seed.
constexpr size_t kEd25519KeyBytes = 32;
constexpr size_t kEd25519SignatureBytes = 64;
std::optional<std::string> DecodeSigningKey(std::string_view secret);
std::optional<std::string> DecodePublicKey(std::string_view public_key);

// The 32-byte public key of a 32-byte seed; empty if OpenSSL fails.
std::string Ed25519PublicKey(std::string_view seed);

// "v1,<base64 HMAC-SHA256(key, msg_id + "." + timestamp + "." + body)>"
std::string SignatureV1(std::string_view key, std::string_view msg_id, int64_t timestamp_s,
                        std::string_view body);

// "v1a,<base64 ed25519 signature (seed's key) of msg_id + "." + timestamp + "." + body>"
std::string SignatureV1a(std::string_view seed, std::string_view msg_id, int64_t timestamp_s,
                         std::string_view body);

// Whether `signature` (64 bytes) is the ed25519 signature of `message` by `public_key`.
bool VerifyEd25519(std::string_view public_key, std::string_view signature,
                   std::string_view message);

// The webhook-signature header value: one SignatureV1 per HMAC key, then one SignatureV1a per
// ed25519 seed, space separated (key rotation, and both schemes during a migration).
std::string SignatureHeader(const std::vector<std::string> &keys, std::string_view msg_id,
                            int64_t timestamp_s, std::string_view body,
                            const std::vector<std::string> &ed25519_seeds = {});

}  // namespace outbox
