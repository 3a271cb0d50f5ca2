#include "kernels/cuda/quant_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cuda/bf16_host.h"

namespace kvgate::cuda {
namespace {

TEST(QuantFormatTest, Q4_1HandBuiltBlock) {
  uint8_t blk[kQ4_1BlockBytes];
  const uint16_t d = 0x3800, m = 0xBC00;  // 0.5, -1.0
  std::memcpy(blk, &d, 2);
  std::memcpy(blk + 2, &m, 2);
  for (int j = 0; j < 16; ++j) blk[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  uint16_t out[32];
  DequantQ4_1Reference(blk, 32, out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(Bf16ToFloat(out[j]), 0.5f * j - 1.0f) << j;
    EXPECT_EQ(Bf16ToFloat(out[j + 16]), 0.5f * (15 - j) - 1.0f) << j;
  }
}

TEST(QuantFormatTest, Q8_0HandBuiltBlock) {
  uint8_t blk[kQ8_0BlockBytes];
  const uint16_t d = 0x3400;  // 0.25
  std::memcpy(blk, &d, 2);
  for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  uint16_t out[32];
  DequantQ8_0Reference(blk, 32, out);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(Bf16ToFloat(out[j]), 0.25f * (j * 8 - 128)) << j;
}

}  // namespace
}  // namespace kvgate::cuda
