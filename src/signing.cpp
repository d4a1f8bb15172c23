// Standard Webhooks signing: HMAC-SHA256 through OpenSSL 3's EVP_MAC (the HMAC_CTX API is
// deprecated), base64 encoding through OpenSSL. Decoding stays by hand: EVP_DecodeBlock skips
// whitespace, does not report how much padding it read, and accepts non-zero bits under the
// padding, and a secret must have one spelling only.
#include "outbox/signing.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

namespace {

constexpr std::string_view kSecretPrefix = "whsec_";
constexpr std::string_view kSigningKeyPrefix = "whsk_";
constexpr std::string_view kPublicKeyPrefix = "whpk_";
constexpr size_t kSha256Bytes = 32;

// The 6-bit value of a base64 character, or -1.
int Base64Value(char c) {
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    if (c == '+') {
        return 62;
    }
    if (c == '/') {
        return 63;
    }
    return -1;
}

// The HMAC implementation, fetched once per process: fetching walks the provider tables under a
// lock. An atomic pointer is trivially destructible; the object lives until the process exits.
// A failed fetch (out of memory) is not cached, so signing recovers when memory does.
EVP_MAC *HmacImplementation() {
    static std::atomic<EVP_MAC *> cached{nullptr};
    EVP_MAC *mac = cached.load(std::memory_order_acquire);
    if (mac != nullptr) {
        return mac;
    }
    mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (mac == nullptr) {
        return nullptr;
    }
    EVP_MAC *expected = nullptr;
    if (!cached.compare_exchange_strong(expected, mac, std::memory_order_acq_rel)) {
        EVP_MAC_free(mac);  // another thread won the race; use its copy
        return expected;
    }
    return mac;
}

// HMAC-SHA256 of the parts concatenated, fed in pieces so a large body is never copied.
// Returns false only when OpenSSL fails (out of memory, or no default provider).
bool HmacSha256(std::string_view key, const std::string_view *parts, size_t count,
                unsigned char out[kSha256Bytes]) {
    EVP_MAC *mac = HmacImplementation();
    if (mac == nullptr) {
        return false;
    }
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
    if (ctx == nullptr) {
        return false;
    }
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    // A zero-length key must still be a non-null pointer: a null key means "reuse the last key".
    static const unsigned char kEmpty[1] = {0};
    const unsigned char *key_bytes =
        key.empty() ? kEmpty : reinterpret_cast<const unsigned char *>(key.data());
    bool ok = EVP_MAC_init(ctx, key_bytes, key.size(), params) == 1;
    for (size_t i = 0; ok && i < count; ++i) {
        ok = EVP_MAC_update(ctx, reinterpret_cast<const unsigned char *>(parts[i].data()),
                            parts[i].size()) == 1;
    }
    size_t out_len = 0;
    ok = ok && EVP_MAC_final(ctx, out, &out_len, kSha256Bytes) == 1 && out_len == kSha256Bytes;
    EVP_MAC_CTX_free(ctx);
    return ok;
}

// An ed25519 key from raw bytes (private: the seed); nullptr when OpenSSL refuses it.
EVP_PKEY *Ed25519Key(std::string_view bytes, bool is_private) {
    if (bytes.size() != kEd25519KeyBytes) {
        return nullptr;
    }
    const auto *raw = reinterpret_cast<const unsigned char *>(bytes.data());
    return is_private ? EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, raw, bytes.size())
                      : EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, raw, bytes.size());
}

// "msg_id.timestamp.body", the content both schemes sign (ed25519 signs in one piece).
std::string SignedContent(std::string_view msg_id, int64_t timestamp_s, std::string_view body) {
    std::string timestamp = std::to_string(timestamp_s);
    std::string content;
    content.reserve(msg_id.size() + timestamp.size() + body.size() + 2);
    content.append(msg_id).append(".").append(timestamp).append(".").append(body);
    return content;
}

// The bytes after `prefix` decoded, when `text` starts with it.
std::optional<std::string> DecodePrefixed(std::string_view text, std::string_view prefix) {
    if (text.substr(0, prefix.size()) != prefix) {
        return std::nullopt;
    }
    return Base64Decode(text.substr(prefix.size()));
}

}  // namespace

// Standard base64 with padding, as the Standard Webhooks signature and secret use: OpenSSL's
// EVP_EncodeBlock (no line breaks, NUL-terminated).
std::string Base64Encode(std::string_view bytes) {
    std::string out((bytes.size() + 2) / 3 * 4 + 1, '\0');
    int n = EVP_EncodeBlock(reinterpret_cast<unsigned char *>(out.data()),
                            reinterpret_cast<const unsigned char *>(bytes.data()),
                            static_cast<int>(bytes.size()));
    out.resize(n < 0 ? 0 : static_cast<size_t>(n));
    return out;
}

// Strict decoding: one spelling per byte string (no whitespace, padding required, unused bits
// zero), so a mistyped secret is refused at definition time instead of signing with a wrong key.
std::optional<std::string> Base64Decode(std::string_view text) {
    if (text.size() % 4 != 0) {
        return std::nullopt;
    }
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (size_t i = 0; i < text.size(); i += 4) {
        bool last = i + 4 == text.size();
        size_t padding = 0;
        if (last && text[i + 3] == '=') {
            padding = text[i + 2] == '=' ? 2 : 1;
        }
        uint32_t v = 0;
        for (size_t j = 0; j < 4; ++j) {
            if (j >= 4 - padding) {
                v <<= 6;
                continue;
            }
            int d = Base64Value(text[i + j]);
            if (d < 0) {
                return std::nullopt;
            }
            v = v << 6 | static_cast<uint32_t>(d);
        }
        // Bits that padding leaves unused must be zero, or two texts would decode alike.
        if ((padding == 1 && (v & 0xFF) != 0) || (padding == 2 && (v & 0xFFFF) != 0)) {
            return std::nullopt;
        }
        out.push_back(static_cast<char>(v >> 16 & 0xFF));
        if (padding < 2) {
            out.push_back(static_cast<char>(v >> 8 & 0xFF));
        }
        if (padding < 1) {
            out.push_back(static_cast<char>(v & 0xFF));
        }
    }
    return out;
}

// The HMAC key of a Standard Webhooks secret.
std::optional<std::string> DecodeWebhookSecret(std::string_view secret) {
    if (secret.substr(0, kSecretPrefix.size()) != kSecretPrefix) {
        return std::nullopt;
    }
    std::optional<std::string> key = Base64Decode(secret.substr(kSecretPrefix.size()));
    if (!key || key->empty()) {
        return std::nullopt;
    }
    return key;
}

std::optional<std::string> DecodeSigningKey(std::string_view secret) {
    std::optional<std::string> key = DecodePrefixed(secret, kSigningKeyPrefix);
    if (!key) {
        return std::nullopt;
    }
    if (key->size() == 2 * kEd25519KeyBytes) {
        // libsodium's layout: the seed, then its public key, which must be the seed's.
        std::string seed = key->substr(0, kEd25519KeyBytes);
        std::string derived = Ed25519PublicKey(seed);
        if (derived.empty() ||
            CRYPTO_memcmp(derived.data(), key->data() + kEd25519KeyBytes, kEd25519KeyBytes) != 0) {
            return std::nullopt;
        }
        return seed;
    }
    if (key->size() != kEd25519KeyBytes || Ed25519PublicKey(*key).empty()) {
        return std::nullopt;
    }
    return key;
}

std::optional<std::string> DecodePublicKey(std::string_view public_key) {
    std::optional<std::string> key = DecodePrefixed(public_key, kPublicKeyPrefix);
    if (!key || key->size() != kEd25519KeyBytes) {
        return std::nullopt;
    }
    EVP_PKEY *pkey = Ed25519Key(*key, /*is_private=*/false);
    if (pkey == nullptr) {
        return std::nullopt;
    }
    EVP_PKEY_free(pkey);
    return key;
}

std::string Ed25519PublicKey(std::string_view seed) {
    EVP_PKEY *pkey = Ed25519Key(seed, /*is_private=*/true);
    if (pkey == nullptr) {
        return std::string();
    }
    std::string out(kEd25519KeyBytes, '\0');
    size_t len = out.size();
    bool ok = EVP_PKEY_get_raw_public_key(pkey, reinterpret_cast<unsigned char *>(out.data()),
                                          &len) == 1 &&
              len == kEd25519KeyBytes;
    EVP_PKEY_free(pkey);
    return ok ? out : std::string();
}

// One v1a signature; empty only if OpenSSL fails (the caller then sends nothing).
std::string SignatureV1a(std::string_view seed, std::string_view msg_id, int64_t timestamp_s,
                         std::string_view body) {
    EVP_PKEY *pkey = Ed25519Key(seed, /*is_private=*/true);
    if (pkey == nullptr) {
        return std::string();
    }
    std::string content = SignedContent(msg_id, timestamp_s, body);
    unsigned char sig[kEd25519SignatureBytes];
    size_t sig_len = sizeof sig;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    // Ed25519 signs the message itself (no separate digest: the digest argument is null).
    bool ok =
        ctx != nullptr && EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, pkey) == 1 &&
        EVP_DigestSign(ctx, sig, &sig_len, reinterpret_cast<const unsigned char *>(content.data()),
                       content.size()) == 1 &&
        sig_len == kEd25519SignatureBytes;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(pkey);
    if (!ok) {
        return std::string();
    }
    return "v1a," + Base64Encode(std::string_view(reinterpret_cast<const char *>(sig), sig_len));
}

bool VerifyEd25519(std::string_view public_key, std::string_view signature,
                   std::string_view message) {
    if (signature.size() != kEd25519SignatureBytes) {
        return false;
    }
    EVP_PKEY *pkey = Ed25519Key(public_key, /*is_private=*/false);
    if (pkey == nullptr) {
        return false;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    bool ok = ctx != nullptr && EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, pkey) == 1 &&
              EVP_DigestVerify(
                  ctx, reinterpret_cast<const unsigned char *>(signature.data()), signature.size(),
                  reinterpret_cast<const unsigned char *>(message.data()), message.size()) == 1;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(pkey);
    return ok;
}

// One v1 signature. Returns an empty string only if OpenSSL itself fails, which the caller
// treats as "cannot sign" rather than sending a wrong signature.
std::string SignatureV1(std::string_view key, std::string_view msg_id, int64_t timestamp_s,
                        std::string_view body) {
    std::string timestamp = std::to_string(timestamp_s);
    const std::string_view parts[] = {msg_id, ".", timestamp, ".", body};
    unsigned char mac[kSha256Bytes];
    if (!HmacSha256(key, parts, sizeof(parts) / sizeof(parts[0]), mac)) {
        return std::string();
    }
    std::string signature = "v1,";
    signature += Base64Encode(std::string_view(reinterpret_cast<const char *>(mac), sizeof(mac)));
    return signature;
}

// The webhook-signature header: during a key rotation the receiver accepts either signature.
// Empty if any signature could not be computed, so a partial header is never sent.
std::string SignatureHeader(const std::vector<std::string> &keys, std::string_view msg_id,
                            int64_t timestamp_s, std::string_view body,
                            const std::vector<std::string> &ed25519_seeds) {
    std::string header;
    auto add = [&](const std::string &signature) {
        if (!header.empty()) {
            header.push_back(' ');
        }
        header += signature;
        return !signature.empty();
    };
    for (const std::string &key : keys) {
        if (!add(SignatureV1(key, msg_id, timestamp_s, body))) {
            return std::string();
        }
    }
    for (const std::string &seed : ed25519_seeds) {
        if (!add(SignatureV1a(seed, msg_id, timestamp_s, body))) {
            return std::string();
        }
    }
    return header;
}

}  // namespace outbox
