#include "kernels/cpu/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/kernels/test_util.h"

namespace kvgate::kernels::cpu {
namespace {

using testing::RandomFloats;

TEST(QuantTest, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      continue;
    }
    EXPECT_EQ(F32ToF16(f), h) << "h=" << h;
  }
}

TEST(QuantTest, F16KnownValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // halfway to the next would-be value rounds to inf
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and the smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(QuantTest, Bf16) {
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.5f, -8)), 0x3f81);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::nanf("")))));
  std::mt19937_64 rng(1);
  for (float x : RandomFloats(rng, 1000, 100.0f)) {
    EXPECT_NEAR(Bf16ToF32(F32ToBf16(x)), x, std::fabs(x) * (1.0f / 256));
  }
}

TEST(QuantTest, Q8ARoundTripWithinHalfStep) {
  std::mt19937_64 rng(2);
  const auto x = RandomFloats(rng, 256, 3.0f);
  std::vector<BlockQ8A> q(8);
  QuantizeRowQ8AScalar(x.data(), 256, q.data());
  std::vector<float> y(256);
  DequantizeQ8A(q.data(), 256, y.data());
  for (int i = 0; i < 256; ++i) {
    // Half a step, plus the f16 rounding of the scale (relative 2^-11 of |x|).
    EXPECT_LE(std::fabs(x[i] - y[i]), q[i / 32].d * 0.5f + std::fabs(x[i]) * 1e-3f);
    int sum = 0;
    if (i % 32 == 0) {
      for (int j = 0; j < 32; ++j) sum += q[i / 32].qs[j];
      EXPECT_NEAR(q[i / 32].s, q[i / 32].d * static_cast<float>(sum),
                  std::fabs(q[i / 32].d * static_cast<float>(sum)) * 2e-3f);
      EXPECT_EQ(q[i / 32].d, F16ToF32(F32ToF16(q[i / 32].d)));  // held at f16 precision
    }
  }
}

TEST(QuantTest, Q4_1AndQ8_0RoundTrip) {
  std::mt19937_64 rng(3);
  const auto x = RandomFloats(rng, 128);
  std::vector<BlockQ4_1> q4(4);
  std::vector<BlockQ8_0> q8(4);
  QuantizeRowQ4_1(x.data(), 128, q4.data());
  QuantizeRowQ8_0(x.data(), 128, q8.data());
  std::vector<float> y4(128), y8(128);
  DequantizeQ4_1(q4.data(), 128, y4.data());
  DequantizeQ8_0(q8.data(), 128, y8.data());
  for (int i = 0; i < 128; ++i) {
    EXPECT_LE(std::fabs(x[i] - y4[i]), F16ToF32(q4[i / 32].d) * 0.5f + 2e-3f) << i;
    EXPECT_LE(std::fabs(x[i] - y8[i]), F16ToF32(q8[i / 32].d) * 0.5f + 1e-3f) << i;
  }
}

TEST(QuantTest, Q4_1NibbleOrder) {
  BlockQ4_1 b{};
  b.d = F32ToF16(1.0f);
  b.m = F32ToF16(0.0f);
  b.qs[0] = 0x21;  // element 0 = 1 (low nibble), element 16 = 2 (high nibble)
  b.qs[15] = 0xf3;  // element 15 = 3, element 31 = 15
  float y[32];
  DequantizeQ4_1(&b, 32, y);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[16], 2.0f);
  EXPECT_EQ(y[15], 3.0f);
  EXPECT_EQ(y[31], 15.0f);
  EXPECT_EQ(y[1], 0.0f);
}

}  // namespace
}  // namespace kvgate::kernels::cpu
