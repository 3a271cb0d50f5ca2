#include "local_engine/kv_blocks.h"

#include <gtest/gtest.h>

#include <set>

namespace kvgate::engine {
namespace {

TEST(SimpleBlockAllocatorTest, HandsOutEachBlockOnceUntilFreed) {
  SimpleBlockAllocator a(4);
  EXPECT_EQ(a.num_blocks(), 4);
  std::set<int32_t> got;
  for (int i = 0; i < 4; ++i) {
    auto b = a.Allocate();
    ASSERT_TRUE(b);
    EXPECT_GE(*b, 0);
    EXPECT_LT(*b, 4);
    got.insert(*b);
  }
  EXPECT_EQ(got.size(), 4u);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_FALSE(a.Allocate());
  a.Free(2);
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_EQ(a.Allocate(), 2);
}

}  // namespace
}  // namespace kvgate::engine
