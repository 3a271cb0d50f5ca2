#include "kernels/cuda/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bench/reference.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/geometry.h"

namespace kvgate::cuda {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Fp8E4M3Test, DecodeMatchesDefinitionForEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const double want = ref::DecodeE4M3ByDefinition(static_cast<uint8_t>(c));
    const float got = DecodeE4M3(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_EQ(c & 0x7f, 0x7f);
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << c;
    }
  }
  EXPECT_EQ(DecodeE4M3(0x7e), 448.0f);
  EXPECT_EQ(DecodeE4M3(0x01), 1.0f / 512.0f);
  EXPECT_EQ(DecodeE4M3(0x08), 1.0f / 64.0f);
}

TEST(Fp8E4M3Test, EncodeInvertsDecode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(EncodeE4M3(DecodeE4M3(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(Fp8E4M3Test, SaturationNanAndTies) {
  EXPECT_EQ(EncodeE4M3(448.0f), 0x7e);
  EXPECT_EQ(EncodeE4M3(463.9f), 0x7e);
  EXPECT_EQ(EncodeE4M3(464.0f), 0x7e);
  EXPECT_EQ(EncodeE4M3(1e9f), 0x7e);
  EXPECT_EQ(EncodeE4M3(INFINITY), 0x7e);
  EXPECT_EQ(EncodeE4M3(-INFINITY), 0xfe);
  EXPECT_EQ(EncodeE4M3(NAN), 0x7f);
  EXPECT_EQ(EncodeE4M3(-0.0f), 0x80);
  EXPECT_EQ(EncodeE4M3(0.5f / 512), 0x00);  // tie between 0 and the smallest subnormal: even (0)
  EXPECT_EQ(EncodeE4M3(1.5f / 512), 0x02);  // tie 1|2 units -> 2
  EXPECT_EQ(EncodeE4M3(2.5f / 512), 0x02);  // tie 2|3 -> 2
  EXPECT_EQ(EncodeE4M3(1.0625f), 0x38);     // tie 1.0|1.125 -> mantissa 0
  EXPECT_EQ(EncodeE4M3(1.1875f), 0x3a);     // tie 1.125|1.25 -> mantissa 2
  EXPECT_EQ(EncodeE4M3(15.5f / 1024), 0x08);  // 7.75 units rounds up into the first normal
  EXPECT_EQ(EncodeE4M3(1e-30f), 0x00);
}

TEST(Fp8E4M3Test, EncodeMatchesDefinitionOnMidpointsAndSweep) {
  std::vector<float> xs;
  for (int c = 0; c < 0x7e; ++c) {
    const float mid = (DecodeE4M3(static_cast<uint8_t>(c)) + DecodeE4M3(static_cast<uint8_t>(c + 1))) / 2;
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      xs.push_back(v);
      xs.push_back(-v);
    }
  }
  // Every 389th float from 2^-14 to 2^10, plus random floats across the whole range.
  for (uint32_t u = 0x38800000u; u < 0x44800000u; u += 389) xs.push_back(FromBits(u));
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) xs.push_back(FromBits(rng()));
  size_t bad = 0;
  for (float x : xs) bad += EncodeE4M3(x) != ref::EncodeE4M3ByDefinition(x);
  EXPECT_EQ(bad, 0u) << "of " << xs.size();
}

TEST(Fp8ScaleTest, ScaleMapsAmaxOntoMax) {
  EXPECT_EQ(Fp8BlockScale(448.0f), 1.0f);
  EXPECT_EQ(Fp8BlockScale(0.0f), 1.0f);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-10.0f, 10.0f);
  for (int i = 0; i < 10000; ++i) {
    const float amax = std::exp2(u(rng));
    const float s = Fp8BlockScale(amax);
    EXPECT_EQ(EncodeE4M3(amax / s), 0x7e);  // within rounding of 448, never above the range
  }
}

TEST(Fp8ScaleTest, RaisedScaleOnlyGrows) {
  EXPECT_EQ(Fp8RaisedScale(0.0f, 0.0f), 0.0f);  // a block of zeros: still unset
  EXPECT_EQ(Fp8RaisedScale(0.0f, 448.0f), 1.0f);
  EXPECT_EQ(Fp8RaisedScale(2.0f, 448.0f), 2.0f);
  EXPECT_EQ(Fp8RaisedScale(0.5f, 448.0f), 1.0f);
  EXPECT_EQ(Fp8RaisedScale(0.5f, 0.0f), 0.5f);
}

TEST(Fp8ScaleTest, RoundTripErrorBound) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int blk = 0; blk < 200; ++blk) {
    std::vector<float> x(256);
    float amax = 0.0f;
    const float mag = std::exp2(static_cast<float>(static_cast<int>(rng() % 20) - 10));
    for (auto& v : x) {
      v = n(rng) * mag;
      amax = std::max(amax, std::fabs(v));
    }
    const float s = Fp8BlockScale(amax);
    for (float v : x) {
      const float back = DecodeE4M3(EncodeE4M3(v / s)) * s;
      // Half an ulp of a 3-bit mantissa (2^-4 relative), or half the subnormal step.
      EXPECT_LE(std::fabs(back - v), std::max(std::fabs(v) / 16.0f, s / 1024.0f) * 1.0001f);
    }
  }
}

TEST(Fp8CacheWriteRefTest, RescaleKeepsEarlierTokensApproximately) {
  // One block, one head, D = 8: offsets 0..1 with small values, then 2..3 four times larger.
  const int hkv = 1, d = 8;
  std::vector<uint8_t> cache(16 * d, 0xff);
  std::vector<float> scales(1, 0.0f);
  std::vector<uint16_t> first(2 * d), second(2 * d);
  for (int i = 0; i < 2 * d; ++i) {
    first[i] = FloatToBf16(0.25f * (i - 7.5f));
    second[i] = FloatToBf16(1.0f * (i - 7.5f));
  }
  std::vector<CacheSegment> s1 = {{0, 0, 0, 2}}, s2 = {{0, 2, 0, 2}};
  ref::Fp8CacheWrite(first.data(), d, s1, hkv, d, &cache, &scales);
  const float scale1 = scales[0];
  EXPECT_EQ(scale1, 0.25f * 7.5f / 448.0f);
  ref::Fp8CacheWrite(second.data(), d, s2, hkv, d, &cache, &scales);
  EXPECT_EQ(scales[0], 7.5f / 448.0f);
  for (int i = 0; i < 2 * d; ++i) {
    const float v0 = DecodeE4M3(cache[i]) * scales[0];  // re-encoded earlier token
    EXPECT_NEAR(v0, Bf16ToFloat(first[i]), std::fabs(Bf16ToFloat(first[i])) / 8 + scales[0] / 512);
    const float v1 = DecodeE4M3(cache[2 * d + i]) * scales[0];
    EXPECT_NEAR(v1, Bf16ToFloat(second[i]), std::fabs(Bf16ToFloat(second[i])) / 16 + scales[0] / 1024);
  }
  EXPECT_EQ(cache[4 * d], 0xff);  // offsets past the written ones untouched
  // A segment starting at offset 0 ignores the stale scale (a reused block).
  std::vector<CacheSegment> fresh = {{0, 0, 0, 2}};
  ref::Fp8CacheWrite(first.data(), d, fresh, hkv, d, &cache, &scales);
  EXPECT_EQ(scales[0], scale1);
}

// A block whose first segment is all zeros keeps scale 0 (unset) and codes 0; the next segment's
// small values then get their own scale and full FP8 precision, not a scale stuck at 1.0.
TEST(Fp8CacheWriteRefTest, ZeroFirstSegmentLeavesTheScaleUnset) {
  const int hkv = 1, d = 8;
  std::vector<uint8_t> cache(16 * d, 0xff);
  std::vector<float> scales(1, 5.0f);  // stale, from the block's previous owner
  std::vector<uint16_t> zeros(2 * d, FloatToBf16(0.0f)), small(2 * d);
  for (int i = 0; i < 2 * d; ++i) small[i] = FloatToBf16(0.01f * (i - 7.5f));
  std::vector<CacheSegment> s1 = {{0, 0, 0, 2}}, s2 = {{0, 2, 0, 2}};
  ref::Fp8CacheWrite(zeros.data(), d, s1, hkv, d, &cache, &scales);
  EXPECT_EQ(scales[0], 0.0f);
  for (int i = 0; i < 2 * d; ++i) EXPECT_EQ(cache[i], 0) << i;
  ref::Fp8CacheWrite(small.data(), d, s2, hkv, d, &cache, &scales);
  EXPECT_FLOAT_EQ(scales[0], std::fabs(Bf16ToFloat(small[0])) / 448.0f);
  for (int i = 0; i < 2 * d; ++i) {
    EXPECT_EQ(DecodeE4M3(cache[i]) * scales[0], 0.0f);  // the zeros stay zeros
    const float x = Bf16ToFloat(small[i]), back = DecodeE4M3(cache[2 * d + i]) * scales[0];
    EXPECT_NEAR(back, x, std::fabs(x) / 16 + scales[0] / 1024) << i;  // FP8's precision, not 1/448
  }
}

}  // namespace
}  // namespace kvgate::cuda
