// Agreement of the CUDA dequantizers' reference and bf16/f16 conversions with the CPU backend's
// (kernels/cpu/quant.h), the format oracle. Built only when kernels/cpu provides quant.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quant.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/quant_format.h"

namespace kvgate::cuda {
namespace {

TEST(QuantCpuAgreementTest, HalfAndBf16ConversionsMatchCpuBackend) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = HalfToFloat(static_cast<uint16_t>(h));
    const float b = kernels::cpu::F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << h;
    } else {
      EXPECT_EQ(a, b) << h;
    }
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), kernels::cpu::F32ToBf16(f)) << u;
  }
}

// The CUDA dequantizer's reference equals the CPU backend's dequantizer rounded to bf16, bit for
// bit: q * d is exact in float for 4- and 8-bit q, so fma(q, d, m) and q * d + m round the same.
TEST(QuantCpuAgreementTest, AgreesWithCpuBackendDequant) {
  std::mt19937 rng(2);
  auto rand_half = [&] {
    return static_cast<uint16_t>(((rng() & 1) << 15) | ((5 + rng() % 16) << 10) | (rng() & 0x3ff));
  };
  const size_t n = 32 * 4096;
  std::vector<kernels::cpu::BlockQ4_1> q4(n / 32);
  std::vector<kernels::cpu::BlockQ8_0> q8(n / 32);
  for (auto& b : q4) {
    b.d = rand_half();
    b.m = rand_half();
    for (auto& q : b.qs) q = static_cast<uint8_t>(rng());
  }
  for (auto& b : q8) {
    b.d = rand_half();
    for (auto& q : b.qs) q = static_cast<int8_t>(rng());
  }
  std::vector<float> cpu(n);
  std::vector<uint16_t> mine(n);
  kernels::cpu::DequantizeQ4_1(q4.data(), n, cpu.data());
  DequantQ4_1Reference(reinterpret_cast<const uint8_t*>(q4.data()), n, mine.data());
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += mine[i] != FloatToBf16(cpu[i]);
  EXPECT_EQ(bad, 0u) << "Q4_1";
  kernels::cpu::DequantizeQ8_0(q8.data(), n, cpu.data());
  DequantQ8_0Reference(reinterpret_cast<const uint8_t*>(q8.data()), n, mine.data());
  bad = 0;
  for (size_t i = 0; i < n; ++i) bad += mine[i] != FloatToBf16(cpu[i]);
  EXPECT_EQ(bad, 0u) << "Q8_0";
}

}  // namespace
}  // namespace kvgate::cuda
