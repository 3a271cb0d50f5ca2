#include "common/ids.h"

#include <gtest/gtest.h>

#include <set>

namespace kvgate {
namespace {

TEST(IdsTest, PrefixedAndUnique) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) {
    std::string id = NewId("req");
    ASSERT_EQ(id.rfind("req_", 0), 0u) << id;
    ASSERT_EQ(id.size(), 4u + 24u) << id;
    ASSERT_TRUE(seen.insert(id).second) << "duplicate id " << id;
  }
}

}  // namespace
}  // namespace kvgate
