#include "kernels/cuda/gemm_emulation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/fp8.h"

namespace kvgate::cuda {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

TEST(GemmEmulationTest, FormatNamesRoundTrip) {
  for (GemmFormat f : {GemmFormat::kF32, GemmFormat::kBf16, GemmFormat::kFp8Tensor, GemmFormat::kFp8Row}) {
    EXPECT_EQ(ParseGemmFormat(GemmFormatName(f)), f);
  }
  EXPECT_FALSE(ParseGemmFormat("fp16").has_value());
  EXPECT_FALSE(ParseGemmFormat("").has_value());
}

TEST(GemmEmulationTest, Bf16OperandIsTheRoundedValuesUnscaled) {
  const auto x = Random(4 * 32, 1, 3.0f);
  const GemmOperand op = MakeGemmOperand(x.data(), 4, 32, GemmFormat::kBf16);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(op.values[i], RoundBf16(x[i])) << i;
  for (float s : op.row_scale) EXPECT_EQ(s, 1.0f);
}

TEST(GemmEmulationTest, Fp8TensorOperandMapsTheTensorAmaxOntoTheLargestCode) {
  std::vector<float> x = Random(3 * 64, 2, 1.0f);
  x[70] = -5.0f;  // the tensor's amax, in row 1
  const GemmOperand op = MakeGemmOperand(x.data(), 3, 64, GemmFormat::kFp8Tensor);
  for (float s : op.row_scale) EXPECT_FLOAT_EQ(s, 5.0f / 448.0f);
  EXPECT_EQ(op.values[70], -448.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    // Every value is a decoded code, and it is within half an E4M3 step (2^-4 relative) of x.
    ASSERT_EQ(op.values[i], DecodeE4M3(EncodeE4M3(op.values[i]))) << i;
    const float back = op.values[i] * op.row_scale[0];
    ASSERT_LE(std::fabs(back - x[i]), std::fabs(x[i]) / 16 + std::ldexp(1.0f, -10) * op.row_scale[0]) << i;
  }
}

TEST(GemmEmulationTest, Fp8RowOperandScalesEachRowByItsOwnAmaxAndAZeroRowByOne) {
  std::vector<float> x = Random(3 * 32, 3, 1.0f);
  for (int c = 0; c < 32; ++c) x[32 + c] = 0.0f;  // row 1 all zero
  x[5] = 100.0f;                                  // row 0's amax
  const GemmOperand op = MakeGemmOperand(x.data(), 3, 32, GemmFormat::kFp8Row);
  EXPECT_FLOAT_EQ(op.row_scale[0], 100.0f / 448.0f);
  EXPECT_EQ(op.values[5], 448.0f);
  EXPECT_EQ(op.row_scale[1], 1.0f);
  for (int c = 0; c < 32; ++c) EXPECT_EQ(op.values[32 + c], 0.0f);
  float amax2 = 0;
  for (int c = 0; c < 32; ++c) amax2 = std::max(amax2, std::fabs(x[64 + c]));
  EXPECT_FLOAT_EQ(op.row_scale[2], amax2 / 448.0f);
}

TEST(GemmEmulationTest, GemmAppliesBothScalesToTheDotOfTheOperandValues) {
  const int64_t m = 5, n = 7, k = 77;  // k not a multiple of the 8 lanes: the tail is summed too
  const auto x = Random(m * k, 4, 1.0f), w = Random(n * k, 5, 0.1f);
  for (GemmFormat f : {GemmFormat::kF32, GemmFormat::kBf16, GemmFormat::kFp8Tensor, GemmFormat::kFp8Row}) {
    const GemmOperand ox = MakeGemmOperand(x.data(), m, k, f), ow = MakeGemmOperand(w.data(), n, k, f);
    std::vector<float> whole(m * n), split(m * n);
    EmulatedGemmColumns(ox, ow, 0, n, whole.data(), n);
    EmulatedGemmColumns(ox, ow, 0, 3, split.data(), n);
    EmulatedGemmColumns(ox, ow, 3, n, split.data(), n);
    EXPECT_EQ(whole, split) << "a column split changes nothing";
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < k; ++c) {
          const double p = double(ox.values[i * k + c]) * ox.row_scale[i] * ow.values[j * k + c] * ow.row_scale[j];
          ref += p;
          mag += std::fabs(p);
        }
        ASSERT_NEAR(whole[i * n + j], ref, 1e-5 * mag + 1e-30) << GemmFormatName(f) << " " << i << "," << j;
      }
    }
  }
}

TEST(GemmEmulationTest, Fp8ErrorAgainstF32IsSmallButNotZero) {
  const int64_t m = 16, n = 16, k = 256;
  const auto x = Random(m * k, 6, 1.0f), w = Random(n * k, 7, 0.05f);
  auto product = [&](GemmFormat f) {
    std::vector<float> y(m * n);
    EmulatedGemmColumns(MakeGemmOperand(x.data(), m, k, f), MakeGemmOperand(w.data(), n, k, f), 0, n, y.data(), n);
    return y;
  };
  const auto ref = product(GemmFormat::kF32), bf = product(GemmFormat::kBf16), f8 = product(GemmFormat::kFp8Tensor);
  auto rel = [&](const std::vector<float>& y) {
    double num = 0, den = 0;
    for (size_t i = 0; i < y.size(); ++i) num += (y[i] - ref[i]) * (y[i] - ref[i]), den += ref[i] * ref[i];
    return std::sqrt(num / den);
  };
  // bf16 keeps 8 significant bits, E4M3 4: errors near 2^-9 and 2^-5 relative, averaged down by k.
  EXPECT_GT(rel(bf), 0.0);
  EXPECT_LT(rel(bf), 0.01);
  EXPECT_GT(rel(f8), rel(bf));
  EXPECT_LT(rel(f8), 0.06);
}

}  // namespace
}  // namespace kvgate::cuda
