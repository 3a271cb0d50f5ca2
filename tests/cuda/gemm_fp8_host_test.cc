#include "kernels/cuda/fp8_quant_math.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvgate::cuda {
namespace {

TEST(Fp8TensorScaleTest, AmaxMapsOntoLargestCode) {
  EXPECT_FLOAT_EQ(Fp8TensorScale(448.0f), 1.0f);
  EXPECT_FLOAT_EQ(Fp8TensorScale(2.0f), 2.0f / 448.0f);
  const float amax = 3.7f;
  EXPECT_EQ(QuantizeE4M3(amax, Fp8TensorInvScale(amax)), 0x7e);   // +448
  EXPECT_EQ(QuantizeE4M3(-amax, Fp8TensorInvScale(amax)), 0xfe);  // -448
}

// An all-zero tensor must not produce an infinite inverse scale (0 * inf = NaN codes).
TEST(Fp8TensorScaleTest, ZeroAmaxGetsScaleOne) {
  EXPECT_EQ(Fp8TensorScale(0.0f), 1.0f);
  EXPECT_EQ(Fp8TensorInvScale(0.0f), 1.0f);
  EXPECT_EQ(QuantizeE4M3(0.0f, Fp8TensorInvScale(0.0f)), 0x00);
}

TEST(Fp8TensorScaleTest, QuantizeSaturatesAndRoundTrips) {
  EXPECT_EQ(QuantizeE4M3(1e6f, 1.0f), 0x7e);
  EXPECT_EQ(QuantizeE4M3(-INFINITY, 1.0f), 0xfe);
  // Every finite code survives dequantize -> quantize under an arbitrary scale.
  const float scale = 0.0123f;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    const uint8_t code = static_cast<uint8_t>(c);
    const uint8_t back = QuantizeE4M3(DequantizeE4M3(code, scale), 1.0f / scale);
    if ((c & 0x7f) == 0) continue;  // +-0 compare equal either way
    EXPECT_EQ(back, code) << c;
  }
}

}  // namespace
}  // namespace kvgate::cuda
