#include "common/utf8.h"

#include <gtest/gtest.h>

#include "common/redact.h"

namespace kvgate {
namespace {

TEST(Utf8Test, ValidatesPerRfc3629) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"));
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));  // U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));      // overlong, 3 bytes
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe6\x97"));          // cut
  EXPECT_FALSE(IsValidUtf8("\x80"));              // a lone continuation byte
}

TEST(Utf8Test, RepairReplacesEachBadByte) {
  EXPECT_EQ(ToValidUtf8("a\xff" "b"), "a\xef\xbf\xbd" "b");
  EXPECT_EQ(ToValidUtf8("\xe6\x97"), "\xef\xbf\xbd\xef\xbf\xbd");
  std::string valid = "caf\xc3\xa9";
  MakeValidUtf8(valid);
  EXPECT_EQ(valid, "caf\xc3\xa9");
  std::string bad = "x\xc0";
  MakeValidUtf8(bad);
  EXPECT_EQ(bad, "x\xef\xbf\xbd");
}

TEST(Utf8Test, SnippetCutsOnACharacterBoundary) {
  const std::string cjk = "\xe6\x97\xa5\xe6\x9c\xac";  // two 3-byte characters
  EXPECT_EQ(Utf8Snippet(cjk, 4), "\xe6\x97\xa5...");
  EXPECT_EQ(Utf8Snippet(cjk, 6), cjk);
  EXPECT_EQ(Utf8Snippet("abc", 2), "ab...");
  EXPECT_EQ(Utf8Snippet("ab\xff", 10), "ab\xef\xbf\xbd");
  for (size_t max = 0; max < 20; ++max) {
    std::string s = Utf8Snippet(std::string(7, 'x') + cjk + "\xff" + cjk, max);
    EXPECT_TRUE(IsValidUtf8(s)) << max;
    EXPECT_LE(s.size(), max + 3) << max;
  }
}

TEST(RedactTest, UserinfoIsReplaced) {
  EXPECT_EQ(RedactUrlCredentials("https://u:p@h/v1"), "https://***@h/v1");
  EXPECT_EQ(RedactUrlCredentials("postgres://u:p%40x@db:5432/k"), "postgres://***@db:5432/k");
  EXPECT_EQ(RedactUrlCredentials("smtp://token@mail:587"), "smtp://***@mail:587");
  EXPECT_EQ(RedactUrlCredentials("https://h/path@not-userinfo"), "https://h/path@not-userinfo");
  EXPECT_EQ(RedactUrlCredentials("https://h:443/v1"), "https://h:443/v1");
}

}  // namespace
}  // namespace kvgate
