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

}  // namespace
}  // namespace outbox
