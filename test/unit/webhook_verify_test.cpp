// outbox.verify_webhook's logic: the Standard Webhooks reference vector passes; a tampered body,
// a stale timestamp, a wrong secret fail; v1a with public keys; rotation; malformed secrets.
#include "outbox/webhook_verify.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "outbox/signing.hpp"

namespace outbox {
namespace {

// The Standard Webhooks reference vector (as in signing_test.cpp).
constexpr char kSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
constexpr char kId[] = "msg_p5jXN8AQM9LWM0D4loKWxJek";
constexpr char kTimestamp[] = "1614265330";
constexpr int64_t kNow = 1614265330;
constexpr char kBody[] = "{\"test\": 2432232314}";
constexpr char kSignature[] = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
// RFC 8032 TEST 1's public key, and the v1a signature of the reference message by its seed.
constexpr char kPublic[] = "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";
constexpr char kSignatureV1a[] =
    "v1a,fldxM4gAKugP6nnt1hdz3sgGfZ6d99nzrMFnZOELIxbzEHoVmAb2ADpkJK7zgPePmPsle0zV9jSeGlHFG2NVAw==";

std::vector<VerifyKey> Keys(const std::vector<std::string> &secrets) {
    std::vector<VerifyKey> keys;
    std::optional<std::string> problem = ParseVerifyKeys(secrets, &keys);
    EXPECT_EQ(problem, std::nullopt);
    return keys;
}

bool Verify(const std::vector<std::string> &secrets, const std::string &signature,
            const std::string &body = kBody, int64_t now = kNow,
            const std::string &timestamp = kTimestamp, int64_t tolerance = 300) {
    return VerifyWebhook(Keys(secrets), kId, timestamp, signature, body, now, tolerance);
}

TEST(WebhookVerifyTest, TheReferenceVectorPasses) {
    EXPECT_TRUE(Verify({kSecret}, kSignature));
    EXPECT_TRUE(Verify({kPublic}, kSignatureV1a));
    EXPECT_TRUE(Verify({kSecret, kPublic}, std::string(kSignature) + " " + kSignatureV1a));
}

TEST(WebhookVerifyTest, ATamperedBodyFails) {
    EXPECT_FALSE(Verify({kSecret}, kSignature, "{\"test\": 2432232315}"));
    EXPECT_FALSE(Verify({kPublic}, kSignatureV1a, std::string(kBody) + " "));
}

TEST(WebhookVerifyTest, AStaleOrFutureTimestampFails) {
    EXPECT_TRUE(Verify({kSecret}, kSignature, kBody, kNow + 300));   // at the tolerance
    EXPECT_FALSE(Verify({kSecret}, kSignature, kBody, kNow + 301));  // past it
    EXPECT_FALSE(Verify({kSecret}, kSignature, kBody, kNow - 301));  // from the future
    EXPECT_TRUE(Verify({kSecret}, kSignature, kBody, kNow - 300));
    EXPECT_FALSE(Verify({kPublic}, kSignatureV1a, kBody, kNow + 3600));
    // The timestamp is signed: another one does not verify even within the tolerance.
    EXPECT_FALSE(Verify({kSecret}, kSignature, kBody, kNow, "1614265331"));
    for (const char *bad : {"", " 1614265330", "+1614265330", "01614265330", "1614265330.0",
                            "16142653300000000000", "abc"}) {
        EXPECT_FALSE(Verify({kSecret}, kSignature, kBody, kNow, bad)) << bad;
    }
}

TEST(WebhookVerifyTest, AWrongSecretFails) {
    EXPECT_FALSE(Verify({"whsec_Zm9vYmFyYmF6cXV4"}, kSignature));
    EXPECT_FALSE(Verify({"whpk_" + Base64Encode(std::string(32, 'k'))}, kSignatureV1a));
    // A v1 secret does not check a v1a signature, nor a public key a v1 one.
    EXPECT_FALSE(Verify({kSecret}, kSignatureV1a));
    EXPECT_FALSE(Verify({kPublic}, kSignature));
}

TEST(WebhookVerifyTest, AnyOfSeveralSecretsAndSignatures) {
    // Rotation on the receiver's side: the old and the new secret.
    EXPECT_TRUE(Verify({"whsec_Zm9vYmFyYmF6cXV4", kSecret}, kSignature));
    // ... and on the sender's: one of several signatures, unknown versions skipped.
    EXPECT_TRUE(Verify({kSecret}, "v2,abc v1,AAAA " + std::string(kSignature)));
    EXPECT_FALSE(Verify({kSecret}, "v1,AAAA v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE"));
    EXPECT_FALSE(Verify({kSecret}, ""));
    EXPECT_FALSE(Verify({kSecret}, "v1"));
    EXPECT_FALSE(Verify({kSecret}, std::string(kSignature).substr(1)));
}

TEST(WebhookVerifyTest, MalformedSecretsAreNamedNotQuoted) {
    std::vector<VerifyKey> keys;
    EXPECT_EQ(ParseVerifyKeys({kSecret, "whsec_not base64"}, &keys),
              "secret 2 must be \"whsec_\" followed by base64");
    EXPECT_EQ(ParseVerifyKeys({"whpk_Zm9vYmFy"}, &keys),
              "secret 1 must be \"whpk_\" followed by the base64 of a 32-byte ed25519 public key");
    EXPECT_EQ(ParseVerifyKeys({"whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A="}, &keys),
              "secret 1 is a private key (\"whsk_\"): verify with its public key (\"whpk_\")");
    EXPECT_EQ(ParseVerifyKeys({"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, &keys),
              "secret 1 must be a \"whsec_\" secret or a \"whpk_\" public key");
    EXPECT_EQ(ParseVerifyKeys({}, &keys), "no secret given");
}

}  // namespace
}  // namespace outbox
