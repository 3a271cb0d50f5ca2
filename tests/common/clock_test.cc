#include "common/clock.h"

#include <gtest/gtest.h>

namespace kvgate {
namespace {

TEST(ClockTest, FakeClockMovesOnlyWhenTold) {
  FakeClock clock;
  int64_t wall = clock.NowUnixMicros();
  int64_t mono = clock.MonotonicNanos();
  EXPECT_EQ(clock.NowUnixMicros(), wall);
  clock.AdvanceSeconds(301);
  EXPECT_EQ(clock.NowUnixMicros() - wall, 301'000'000);
  EXPECT_EQ(clock.MonotonicNanos() - mono, 301'000'000'000);
}

TEST(ClockTest, SystemClockIsMonotonic) {
  SystemClock clock;
  int64_t a = clock.MonotonicNanos();
  int64_t b = clock.MonotonicNanos();
  EXPECT_LE(a, b);
  EXPECT_GT(clock.NowUnixMicros(), 1'700'000'000'000'000);
}

}  // namespace
}  // namespace kvgate
