// SecretRedactor: every form of a provider key it promises to take out of upstream text, and the
// ordinary text it must leave alone.
#include "common/redact.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvgate {
namespace {

constexpr std::string_view kKey = "sk-proj-Secr3t/Key+With=Chars_0123456789";

SecretRedactor One(std::string key = std::string(kKey)) {
  return SecretRedactor(std::vector<std::string>{std::move(key)});
}

std::string Base64(std::string_view in) {
  constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 0x3F];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 0x3F];
    out += kAlphabet[(v >> 12) & 0x3F];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 0x3F] : '=';
    out += '=';
  }
  return out;
}

TEST(SecretRedactorTest, TheKeyItselfAndAsABearerToken) {
  const SecretRedactor r = One();
  const std::string key(kKey);
  EXPECT_EQ(r.Redact("Incorrect API key provided: " + key + ". You can find your API key at x"),
            "Incorrect API key provided: [redacted]. You can find your API key at x");
  EXPECT_EQ(r.Redact("Authorization: Bearer " + key), "Authorization: Bearer [redacted]");
  EXPECT_EQ(r.Redact(key + key), "[redacted]");  // touching matches merge
  EXPECT_EQ(r.Redact("no secret here"), "no secret here");
  std::string text = "x-api-key: " + key;
  EXPECT_TRUE(r.RedactInPlace(text));
  EXPECT_EQ(text, "x-api-key: [redacted]");
  std::string clean = "nothing";
  EXPECT_FALSE(r.RedactInPlace(clean));
}

TEST(SecretRedactorTest, JsonEscapedForms) {
  const SecretRedactor r = One();
  // '/' escaped as "\/" (PHP, some Java encoders); '+' as \u002B (.NET).
  EXPECT_EQ(r.Redact(R"({"message":"key sk-proj-Secr3t\/Key+With=Chars_0123456789 rejected"})"),
            R"({"message":"key [redacted] rejected"})");
  EXPECT_EQ(r.Redact(R"({"m":"sk-proj-Secr3t/Key\u002BWith=Chars_0123456789"})"),
            R"({"m":"[redacted]"})");
  // A key with characters every encoder escapes.
  const SecretRedactor quoted = One(R"(abc"def\ghij<kl>)");
  EXPECT_EQ(quoted.Redact(R"({"m":"abc\"def\\ghij<kl>"})"), R"({"m":"[redacted]"})");
  EXPECT_EQ(quoted.Redact(R"({"m":"abc\"def\\ghij\u003ckl\u003e"})"), R"({"m":"[redacted]"})");
}

TEST(SecretRedactorTest, PercentEncodedForms) {
  const SecretRedactor r = One();
  EXPECT_EQ(r.Redact("https://x/?key=sk-proj-Secr3t%2FKey%2BWith%3DChars_0123456789&a=1"),
            "https://x/?key=[redacted]&a=1");
  EXPECT_EQ(r.Redact("key=sk-proj-Secr3t%2fKey%2bWith%3dChars_0123456789"), "key=[redacted]");
}

TEST(SecretRedactorTest, Base64FormsAtEveryAlignment) {
  const SecretRedactor r = One();
  const std::string key(kKey);
  for (std::string prefix : {"", "u:", "ab:", "abc:", ":"}) {
    const std::string out = r.Redact(Base64(prefix + key));
    const size_t marker = out.find("[redacted]");
    ASSERT_NE(marker, std::string::npos) << prefix;
    // What is left of the encoding are the characters that also depend on the bytes around the
    // key: the prefix's, the one it shares with the key, and the last one and its padding.
    EXPECT_LE(marker, (8 * prefix.size() + 5) / 6) << out;
    EXPECT_LE(out.size() - marker - SecretRedactor::kMarker.size(), 3u) << out;
  }
  EXPECT_NE(r.Redact(Base64(key + ":")).find("[redacted]"), std::string::npos);
}

TEST(SecretRedactorTest, MaskedEchoesThatShowPartOfTheKey) {
  const SecretRedactor r = One();
  // OpenAI's 401: a prefix, asterisks, the last four characters.
  EXPECT_EQ(r.Redact("Incorrect API key provided: sk-proj-********************6789. You can find"),
            "Incorrect API key provided: [redacted]. You can find");
  EXPECT_EQ(r.Redact("key sk-pr...6789 rejected"), "key [redacted] rejected");
  EXPECT_EQ(r.Redact("key sk-pr\xE2\x80\xA6"
                     "6789 rejected"),
            "key [redacted] rejected");
  EXPECT_EQ(r.Redact("key ****6789"), "key [redacted]");
  EXPECT_EQ(r.Redact("key sk-***6789"), "key [redacted]");
  // A snippet cut inside the key.
  EXPECT_EQ(r.Redact("upstream said: Bearer sk-proj-Secr3t/K..."),
            "upstream said: Bearer [redacted]");
  // Too little of the key to matter, or mask characters that are just text.
  EXPECT_EQ(r.Redact("keys look like sk-..."), "keys look like sk-...");
  EXPECT_EQ(r.Redact("wait... what**"), "wait... what**");
  EXPECT_EQ(r.Redact("end of sentence. Next"), "end of sentence. Next");
}

TEST(SecretRedactorTest, OverlappingKeysOfSeveralProviders) {
  // One key a prefix of another, and two keys that overlap in the text.
  const SecretRedactor r(std::vector<std::string>{"sk-ant-api03-AAAA", "sk-ant-api03-AAAABBBB",
                                                  "BBBBCCCCDDDD", "sk-ant-api03-AAAA"});
  EXPECT_EQ(r.Redact("k=sk-ant-api03-AAAABBBB;"), "k=[redacted];");
  EXPECT_EQ(r.Redact("k=sk-ant-api03-AAAABBBBCCCCDDDD;"), "k=[redacted];");
  EXPECT_EQ(r.Redact("a sk-ant-api03-AAAA b BBBBCCCCDDDD c"), "a [redacted] b [redacted] c");
}

TEST(SecretRedactorTest, ShortKeysOnlyAsBearerTokens) {
  const SecretRedactor r(std::vector<std::string>{"EMPTY", "test", "abc"});
  EXPECT_EQ(r.Redact("EMPTY response; test failed; the latest abc"),
            "EMPTY response; test failed; the latest abc");
  EXPECT_EQ(r.Redact("Authorization: Bearer EMPTY"), "Authorization: Bearer [redacted]");
  EXPECT_EQ(r.Redact("bearer test, and bearer testing"), "bearer [redacted], and bearer testing");
  EXPECT_EQ(r.Redact("Bearer abc."), "Bearer [redacted].");
  // Nor any of the long keys' fuzzy forms: a short key has no masked echo.
  EXPECT_EQ(r.Redact("te...st"), "te...st");
}

TEST(SecretRedactorTest, NoSecretsRedactsNothing) {
  const SecretRedactor none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.Redact("sk-anything ****1234"), "sk-anything ****1234");
  const SecretRedactor blank(std::vector<std::string>{""});
  EXPECT_TRUE(blank.empty());
}

}  // namespace
}  // namespace kvgate
