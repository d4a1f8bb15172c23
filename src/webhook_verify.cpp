// Standard Webhooks verification (see webhook_verify.hpp); the signing primitives are
// signing.cpp's, so sender and receiver share one definition of the signed content.
#include "outbox/webhook_verify.hpp"

#include <openssl/crypto.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/signing.hpp"

namespace outbox {

namespace {

// Decimal Unix seconds: digits only (no sign, no spaces, no leading zero: the signed text is
// then exactly the number's), at most 18 of them.
std::optional<int64_t> ParseTimestamp(std::string_view text) {
    if (text.empty() || text.size() > 18 || (text.size() > 1 && text[0] == '0')) {
        return std::nullopt;
    }
    int64_t value = 0;
    for (char c : text) {
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        value = value * 10 + (c - '0');
    }
    return value;
}

}  // namespace

std::optional<std::string> ParseVerifyKeys(const std::vector<std::string> &secrets,
                                           std::vector<VerifyKey> *keys) {
    keys->clear();
    for (size_t i = 0; i < secrets.size(); ++i) {
        const std::string &secret = secrets[i];
        std::string what = "secret " + std::to_string(i + 1);
        VerifyKey key;
        if (secret.rfind("whsec_", 0) == 0) {
            std::optional<std::string> bytes = DecodeWebhookSecret(secret);
            if (!bytes) {
                return what + " must be \"whsec_\" followed by base64";
            }
            key.kind = VerifyKey::Kind::Hmac;
            key.bytes = std::move(*bytes);
        } else if (secret.rfind("whpk_", 0) == 0) {
            std::optional<std::string> bytes = DecodePublicKey(secret);
            if (!bytes) {
                return what +
                       " must be \"whpk_\" followed by the base64 of a 32-byte ed25519 public key";
            }
            key.kind = VerifyKey::Kind::Ed25519;
            key.bytes = std::move(*bytes);
        } else if (secret.rfind("whsk_", 0) == 0) {
            return what + " is a private key (\"whsk_\"): verify with its public key (\"whpk_\")";
        } else {
            return what + " must be a \"whsec_\" secret or a \"whpk_\" public key";
        }
        keys->push_back(std::move(key));
    }
    if (keys->empty()) {
        return std::string("no secret given");
    }
    return std::nullopt;
}

bool VerifyWebhook(const std::vector<VerifyKey> &keys, std::string_view id,
                   std::string_view timestamp, std::string_view signature_header,
                   std::string_view body, int64_t now_s, int64_t tolerance_s) {
    std::optional<int64_t> ts = ParseTimestamp(timestamp);
    if (!ts || id.empty() || tolerance_s < 0) {
        return false;
    }
    // |now - ts| <= tolerance, without overflow (ts has at most 18 digits).
    if (*ts > now_s ? *ts - now_s > tolerance_s : now_s - *ts > tolerance_s) {
        return false;
    }
    std::string content;
    content.append(id).append(".").append(timestamp).append(".").append(body);
    bool valid = false;
    size_t at = 0;
    while (at <= signature_header.size()) {
        size_t end = signature_header.find(' ', at);
        if (end == std::string_view::npos) {
            end = signature_header.size();
        }
        std::string_view one = signature_header.substr(at, end - at);
        at = end + 1;
        size_t comma = one.find(',');
        if (comma == std::string_view::npos) {
            continue;
        }
        std::string_view version = one.substr(0, comma);
        std::optional<std::string> raw = Base64Decode(one.substr(comma + 1));
        if (!raw) {
            continue;
        }
        for (const VerifyKey &key : keys) {
            if (version == "v1" && key.kind == VerifyKey::Kind::Hmac) {
                std::string expected = SignatureV1(key.bytes, id, *ts, body);
                std::optional<std::string> mac =
                    expected.size() > 3 ? Base64Decode(std::string_view(expected).substr(3))
                                        : std::nullopt;
                // Every key and signature is compared in full (no early exit on a match).
                if (mac && mac->size() == raw->size() &&
                    CRYPTO_memcmp(mac->data(), raw->data(), raw->size()) == 0) {
                    valid = true;
                }
            } else if (version == "v1a" && key.kind == VerifyKey::Kind::Ed25519) {
                if (VerifyEd25519(key.bytes, *raw, content)) {
                    valid = true;
                }
            }
        }
    }
    return valid;
}

}  // namespace outbox
