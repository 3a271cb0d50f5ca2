// The single-precision RoPE tables CudaBackend's rope kernel reads (kernels/cuda/rope_table.h).
#include "kernels/cuda/rope_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kvgate::cuda {
namespace {

// The composed rotation equals cos/sin of pos * f_i (reduced in double) to within a few f32 ulps, at
// every position class: low part only, high part only, both, the tables' last position.
TEST(RopeTableTest, ComposedRotationMatchesTheDoubleAngle) {
  for (const auto& [theta, d] : {std::pair{1e4f, 64}, std::pair{1e5f, 64}, std::pair{1e6f, 128}}) {
    RopeTable t;
    ASSERT_TRUE(BuildRopeTable(theta, d, &t).ok());
    ASSERT_EQ(t.low.size(), static_cast<size_t>(kRopeLowPositions) * d);
    ASSERT_EQ(t.high.size(), static_cast<size_t>(kRopeMaxPositions / kRopeLowPositions) * d);
    std::mt19937 rng(3);
    std::vector<int32_t> positions = {0, 1, 255, 256, 257, 100000, 131071, kRopeMaxPositions - 1};
    for (int k = 0; k < 2000; ++k) positions.push_back(static_cast<int32_t>(rng() % kRopeMaxPositions));
    double worst = 0;
    for (int32_t p : positions)
      for (int i = 0; i < d / 2; ++i) {
        double a = static_cast<double>(p) * RopeFrequency(theta, d, i);
        a -= 6.283185307179586 * std::nearbyint(a / 6.283185307179586);
        float c, s;
        RopeTableRotation(t, p, i, &c, &s);
        worst = std::max({worst, std::fabs(c - std::cos(a)), std::fabs(s - std::sin(a))});
      }
    EXPECT_LT(worst, 4e-7) << "theta " << theta << " D " << d;
  }
}

TEST(RopeTableTest, RejectsBadShapes) {
  RopeTable t;
  EXPECT_FALSE(BuildRopeTable(1e4f, 63, &t).ok());
  EXPECT_FALSE(BuildRopeTable(1e4f, 0, &t).ok());
  EXPECT_FALSE(BuildRopeTable(0.0f, 64, &t).ok());
}

}  // namespace
}  // namespace kvgate::cuda
