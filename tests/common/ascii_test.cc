#include "common/ascii.h"

#include <gtest/gtest.h>

namespace kvgate {
namespace {

TEST(AsciiTest, FoldsOnlyAToZ) {
  EXPECT_TRUE(EqualsIgnoreCase("Content-Type", "content-type"));
  EXPECT_TRUE(EqualsIgnoreCase("", ""));
  EXPECT_FALSE(EqualsIgnoreCase("content-type", "content-typ"));
  EXPECT_FALSE(EqualsIgnoreCase("a", "b"));
  // Only ASCII letters fold: '@' and '`' sit beside 'A' and 'a' but are not letters, and UTF-8
  // bytes compare as they are.
  EXPECT_FALSE(EqualsIgnoreCase("@", "`"));
  EXPECT_FALSE(EqualsIgnoreCase("\xC3\x89", "\xC3\xA9"));  // É, é
  EXPECT_EQ(AsciiLowered("X-RateLimit-Limit \xC3\x89"), "x-ratelimit-limit \xC3\x89");
}

TEST(AsciiTest, StartsWithIgnoreCase) {
  EXPECT_TRUE(StartsWithIgnoreCase("Bearer abc", "bearer "));
  EXPECT_TRUE(StartsWithIgnoreCase("X-RATELIMIT-remaining", "x-ratelimit-"));
  EXPECT_FALSE(StartsWithIgnoreCase("Bear", "bearer"));
  EXPECT_FALSE(StartsWithIgnoreCase("Basic abc", "bearer "));
}

}  // namespace
}  // namespace kvgate
