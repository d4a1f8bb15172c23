// Standard Webhooks verification, for applications that receive our webhooks
// (outbox.verify_webhook): "whsec_" secrets check v1 (HMAC-SHA256) signatures, "whpk_" public
// keys check v1a (ed25519) ones, any of several keys (rotation), a timestamp tolerance.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

struct VerifyKey {
    enum class Kind { Hmac, Ed25519 };
    Kind kind = Kind::Hmac;
    std::string bytes;  // the HMAC key, or the 32-byte ed25519 public key
};

// The keys of `secrets`, or the problem with the first malformed one (it names the element by
// its 1-based position and never quotes it). A "whsk_" private key is refused: a receiver
// verifies with the public key.
std::optional<std::string> ParseVerifyKeys(const std::vector<std::string> &secrets,
                                           std::vector<VerifyKey> *keys);

// Whether the request is authentic: `timestamp` (decimal Unix seconds) within `tolerance_s` of
// `now_s` either way, and one signature of the space-separated `signature_header` ("v1,<b64>"
// or "v1a,<b64>") made by one of `keys` over id.timestamp.body. Comparisons of HMACs are
// constant-time. Unknown signature versions are skipped, as the spec asks.
bool VerifyWebhook(const std::vector<VerifyKey> &keys, std::string_view id,
                   std::string_view timestamp, std::string_view signature_header,
                   std::string_view body, int64_t now_s, int64_t tolerance_s);

}  // namespace outbox
