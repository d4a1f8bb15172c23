// Standard Webhooks signatures and the strict base64 behind secrets and signatures.
#include "outbox/signing.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

namespace outbox {
namespace {

// The reference vector of the Standard Webhooks specification (also used by the libraries in
// github.com/standard-webhooks/standard-webhooks).
constexpr char kVectorSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
constexpr char kVectorMsgId[] = "msg_p5jXN8AQM9LWM0D4loKWxJek";
constexpr int64_t kVectorTimestamp = 1614265330;
constexpr char kVectorBody[] = "{\"test\": 2432232314}";
constexpr char kVectorSignature[] = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

TEST(SigningTest, MatchesTheStandardWebhooksReferenceVector) {
    std::optional<std::string> key = DecodeWebhookSecret(kVectorSecret);
    ASSERT_TRUE(key.has_value());
    EXPECT_EQ(key->size(), 24u);
    EXPECT_EQ(SignatureV1(*key, kVectorMsgId, kVectorTimestamp, kVectorBody), kVectorSignature);
    EXPECT_EQ(SignatureHeader({*key}, kVectorMsgId, kVectorTimestamp, kVectorBody),
              kVectorSignature);
}

TEST(SigningTest, EveryPartOfTheSignedContentMatters) {
    std::string key = *DecodeWebhookSecret(kVectorSecret);
    EXPECT_NE(SignatureV1(key, "msg_other", kVectorTimestamp, kVectorBody), kVectorSignature);
    EXPECT_NE(SignatureV1(key, kVectorMsgId, kVectorTimestamp + 1, kVectorBody), kVectorSignature);
    EXPECT_NE(SignatureV1(key, kVectorMsgId, kVectorTimestamp, "{\"test\": 2432232315}"),
              kVectorSignature);
    std::string other_key = key;
    other_key[0] ^= 1;
    EXPECT_NE(SignatureV1(other_key, kVectorMsgId, kVectorTimestamp, kVectorBody),
              kVectorSignature);
}

TEST(SigningTest, BinaryKeysAndBodiesAreSignedAsBytes) {
    std::string key("\0\x01\xff", 3);
    std::string body("a\0b", 3);
    std::string with_nul = SignatureV1(key, "id", 1, body);
    std::string truncated = SignatureV1(key, "id", 1, "a");
    EXPECT_EQ(with_nul.rfind("v1,", 0), 0u);
    EXPECT_EQ(with_nul.size(), 3u + 44u);  // 32 bytes of HMAC-SHA256 in base64
    EXPECT_NE(with_nul, truncated);
}

TEST(SigningTest, MatchesAnIndependentHmacForUnusualInputs) {
    // Expected values from Python's hmac module. An empty key and a key longer than the
    // SHA-256 block (which HMAC hashes first) are both well defined.
    EXPECT_EQ(SignatureV1("", "id", 1, "body"), "v1,hVqtE3424D16V/T9ffboIF1HgFST8SgKcxOxwVYKGmA=");
    EXPECT_EQ(SignatureV1(std::string(100, 'k'), "id", -5, ""),
              "v1,bzL0DvLoMRrpHjWIyl0Gm63kdsJ1cn6Uqcmy+1rrL+k=");
}

TEST(SigningTest, HeaderCarriesOneSignaturePerKeyInOrder) {
    std::string key = *DecodeWebhookSecret(kVectorSecret);
    std::string other(32, 'k');
    std::string header = SignatureHeader({key, other}, kVectorMsgId, kVectorTimestamp, kVectorBody);
    std::string second = SignatureV1(other, kVectorMsgId, kVectorTimestamp, kVectorBody);
    EXPECT_EQ(header, std::string(kVectorSignature) + " " + second);
    EXPECT_EQ(SignatureHeader({}, kVectorMsgId, kVectorTimestamp, kVectorBody), "");
}

TEST(SigningTest, Base64KnownValues) {
    // RFC 4648 §10.
    EXPECT_EQ(Base64Encode(""), "");
    EXPECT_EQ(Base64Encode("f"), "Zg==");
    EXPECT_EQ(Base64Encode("fo"), "Zm8=");
    EXPECT_EQ(Base64Encode("foo"), "Zm9v");
    EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
    EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
    EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
    EXPECT_EQ(Base64Encode(std::string("\xfb\xff\xbf", 3)), "+/+/");
    EXPECT_EQ(Base64Decode("Zm9vYmE="), "fooba");
    EXPECT_EQ(Base64Decode("Zm9vYg=="), "foob");
    EXPECT_EQ(Base64Decode(""), "");
    EXPECT_EQ(Base64Decode("+/+/"), std::string("\xfb\xff\xbf", 3));
}

TEST(SigningTest, Base64RoundTripsEveryLengthAndByte) {
    std::mt19937 rng(7);
    for (size_t length = 0; length < 200; ++length) {
        std::string bytes(length, '\0');
        for (char &c : bytes) {
            c = static_cast<char>(rng() & 0xFF);
        }
        std::string text = Base64Encode(bytes);
        EXPECT_EQ(text.size() % 4, 0u);
        std::optional<std::string> back = Base64Decode(text);
        ASSERT_TRUE(back.has_value()) << text;
        EXPECT_EQ(*back, bytes);
    }
    std::string all;
    for (int i = 0; i < 256; ++i) {
        all.push_back(static_cast<char>(i));
    }
    EXPECT_EQ(Base64Decode(Base64Encode(all)), all);
}

TEST(SigningTest, Base64RejectsInvalidInput) {
    const char *invalid[] = {
        "Zg",         // padding missing
        "Zg=",        // length not a multiple of 4
        "Zm9v Zg==",  // whitespace
        "Zm9v\n",
        "Zm9-",  // URL-safe alphabet
        "Zm9_",
        "Z===",  // three pads
        "====",
        "Zg==Zg==",  // padding in the middle
        "Z=g=",
        "Zh==",  // non-zero bits under the padding
        "Zm9=",
        "Zm9v!A==",  // not in the alphabet
    };
    for (const char *text : invalid) {
        EXPECT_EQ(Base64Decode(text), std::nullopt) << "\"" << text << "\"";
    }
    EXPECT_EQ(Base64Decode(std::string("Zm9\0", 4)), std::nullopt);
}

TEST(SigningTest, WebhookSecretNeedsPrefixAndBase64AndAKey) {
    EXPECT_EQ(DecodeWebhookSecret("whsec_Zm9vYmFy"), "foobar");
    EXPECT_EQ(DecodeWebhookSecret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), std::nullopt);
    EXPECT_EQ(DecodeWebhookSecret("WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), std::nullopt);
    EXPECT_EQ(DecodeWebhookSecret("whsec_"), std::nullopt);
    EXPECT_EQ(DecodeWebhookSecret("whsec_not base64!"), std::nullopt);
    EXPECT_EQ(DecodeWebhookSecret("whsec_Zg"), std::nullopt);
    EXPECT_EQ(DecodeWebhookSecret(""), std::nullopt);
    EXPECT_EQ(DecodeWebhookSecret("whsec"), std::nullopt);
}

// v1a: RFC 8032 §7.1 TEST 1 is the key pair; the v1a signature of the Standard Webhooks
// reference message by that key was computed with Python's cryptography package (ed25519 is
// deterministic, so there is one right answer).
constexpr char kRfc8032Seed[] = "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=";
constexpr char kRfc8032SeedAndPublic[] =
    "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2DXWpgBgrEKt9VL/tPJZAc6DuFy89qmIyWvAhpo9wdRGg==";
constexpr char kRfc8032Public[] = "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";
constexpr char kVectorSignatureV1a[] =
    "v1a,fldxM4gAKugP6nnt1hdz3sgGfZ6d99nzrMFnZOELIxbzEHoVmAb2ADpkJK7zgPePmPsle0zV9jSeGlHFG2NVAw==";

std::string Hex(std::string_view bytes) {
    static const char kDigits[] = "0123456789abcdef";
    std::string out;
    for (char c : bytes) {
        out.push_back(kDigits[static_cast<unsigned char>(c) >> 4]);
        out.push_back(kDigits[static_cast<unsigned char>(c) & 15]);
    }
    return out;
}

TEST(SigningTest, Ed25519MatchesRfc8032TestOne) {
    std::optional<std::string> seed = DecodeSigningKey(kRfc8032Seed);
    ASSERT_TRUE(seed.has_value());
    EXPECT_EQ(Hex(*seed), "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
    std::optional<std::string> pub = DecodePublicKey(kRfc8032Public);
    ASSERT_TRUE(pub.has_value());
    EXPECT_EQ(Hex(*pub), "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
    EXPECT_EQ(Ed25519PublicKey(*seed), *pub);
    // The signature of the empty message, from the RFC.
    std::optional<std::string> sig = Base64Decode(
        "5VZDAMNgrHKQhuLMgG6CioSHfx645dl02HPgZSJJAVVfuIIVkKM7rMYeOXAc+bRr0lv18FlbviRlUUFDjnoQCw==");
    ASSERT_TRUE(sig.has_value());
    EXPECT_TRUE(VerifyEd25519(*pub, *sig, ""));
    EXPECT_FALSE(VerifyEd25519(*pub, *sig, "x"));
}

TEST(SigningTest, V1aMatchesTheReferenceMessageAndVerifies) {
    std::string seed = *DecodeSigningKey(kRfc8032Seed);
    std::string pub = *DecodePublicKey(kRfc8032Public);
    std::string signature = SignatureV1a(seed, kVectorMsgId, kVectorTimestamp, kVectorBody);
    EXPECT_EQ(signature, kVectorSignatureV1a);
    std::string raw = *Base64Decode(signature.substr(4));
    std::string content =
        std::string(kVectorMsgId) + "." + std::to_string(kVectorTimestamp) + "." + kVectorBody;
    EXPECT_TRUE(VerifyEd25519(pub, raw, content));
    // Every part matters.
    EXPECT_FALSE(VerifyEd25519(pub, raw, content + " "));
    EXPECT_NE(SignatureV1a(seed, kVectorMsgId, kVectorTimestamp + 1, kVectorBody),
              kVectorSignatureV1a);
    EXPECT_NE(SignatureV1a(seed, "msg_other", kVectorTimestamp, kVectorBody), kVectorSignatureV1a);
    std::string other = pub;
    other[0] ^= 1;
    EXPECT_FALSE(VerifyEd25519(other, raw, content));
}

TEST(SigningTest, HeaderCarriesV1ThenV1a) {
    std::string key = *DecodeWebhookSecret(kVectorSecret);
    std::string seed = *DecodeSigningKey(kRfc8032Seed);
    EXPECT_EQ(SignatureHeader({key}, kVectorMsgId, kVectorTimestamp, kVectorBody, {seed}),
              std::string(kVectorSignature) + " " + kVectorSignatureV1a);
    EXPECT_EQ(SignatureHeader({}, kVectorMsgId, kVectorTimestamp, kVectorBody, {seed}),
              kVectorSignatureV1a);
}

TEST(SigningTest, SigningKeysInBothLayoutsAndPublicKeys) {
    // libsodium's 64-byte secret key (seed + public key) decodes to the same seed.
    EXPECT_EQ(DecodeSigningKey(kRfc8032SeedAndPublic), DecodeSigningKey(kRfc8032Seed));
    // ... but not when its public half belongs to another key.
    std::string mismatched = *Base64Decode(std::string(kRfc8032SeedAndPublic).substr(5));
    mismatched[40] ^= 1;
    EXPECT_EQ(DecodeSigningKey("whsk_" + Base64Encode(mismatched)), std::nullopt);
    const std::string bad_private[] = {
        "",
        "whsk_",
        kRfc8032Public,                                      // a public key is not a signing key
        std::string("whsec_") + (kRfc8032Seed + 5),          // wrong prefix
        "whsk_" + Base64Encode(std::string(31, 'k')),        // 31 bytes
        "whsk_" + Base64Encode(std::string(33, 'k')),        // 33 bytes
        "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A",  // padding missing
    };
    for (const std::string &text : bad_private) {
        EXPECT_EQ(DecodeSigningKey(text), std::nullopt) << text;
    }
    const std::string bad_public[] = {
        "",
        "whpk_",
        kRfc8032Seed,
        "whpk_" + Base64Encode(std::string(31, 'k')),
        "whpk_" + Base64Encode(std::string(64, 'k')),
    };
    for (const std::string &text : bad_public) {
        EXPECT_EQ(DecodePublicKey(text), std::nullopt) << text;
    }
}

}  // namespace
}  // namespace outbox
