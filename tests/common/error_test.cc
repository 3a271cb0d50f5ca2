#include "common/error.h"

#include <gtest/gtest.h>

namespace kvgate {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return MakeError(ErrorCode::kInvalidArgument, "odd: " + std::to_string(x));
  return x / 2;
}

TEST(ErrorTest, ResultCarriesValueOrError) {
  ASSERT_TRUE(Half(4).has_value());
  EXPECT_EQ(*Half(4), 2);
  auto odd = Half(3);
  ASSERT_FALSE(odd.has_value());
  EXPECT_EQ(odd.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(odd.error().ToString(), "invalid_argument: odd: 3");
}

}  // namespace
}  // namespace kvgate
