#include "common/ids.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

namespace kvgate {
namespace {

TEST(IdsTest, PrefixedHexAndUnique) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) {
    std::string id = NewId("req");
    ASSERT_EQ(id.rfind("req_", 0), 0u) << id;
    ASSERT_EQ(id.size(), 4u + kTimeDigits + kRandomDigits) << id;
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef", 4), std::string::npos) << id;
    ASSERT_TRUE(seen.insert(id).second) << "duplicate id " << id;
  }
}

TEST(IdsTest, SortInCreationOrder) {
  // Ids minted at least a microsecond apart compare in creation order, as strings.
  std::string previous = NewId("req");
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(2));
    std::string next = NewId("req");
    ASSERT_LT(previous, next);
    previous = std::move(next);
  }
}

TEST(IdsTest, TimeDigitsAreTheCreationTime) {
  const auto micros = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const long long before = micros();
  const std::string id = NewId("x");
  const long long after = micros();
  const long long stamped = std::stoll(id.substr(2, kTimeDigits), nullptr, 16);
  EXPECT_LE(before, stamped);
  EXPECT_GE(after, stamped);
}

}  // namespace
}  // namespace kvgate
