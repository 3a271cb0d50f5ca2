// Tests of the CPU references the device checks trust (kernels/bench/reference.h).
#include "kernels/bench/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/bf16_host.h"

namespace kvgate::cuda {
namespace {

TEST(RefTest, RelErrorPoisonAndValues) {
  const std::vector<double> ref = {3.0, 4.0};
  EXPECT_EQ(ref::RelError(std::vector<float>{3.0f, 4.0f}, ref), 0.0);
  EXPECT_NEAR(ref::RelError(std::vector<float>{3.0f, 4.5f}, ref), 0.1, 1e-12);
  EXPECT_TRUE(std::isinf(ref::RelError(std::vector<float>{3.0f, NAN}, ref)));
  EXPECT_TRUE(std::isinf(ref::RelError(std::vector<float>{1.0f}, ref)));
}

TEST(RefTest, ParallelForVisitsEachIndexOnce) {
  std::vector<std::atomic<int>> hits(10007);
  ref::ParallelFor(10007, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

// Paged attention through a shuffled block table equals dense softmax attention over the same keys.
TEST(RefTest, AttendOneMatchesDenseAttention) {
  const int hkv = 2, d = 16, n_keys = 77, nb = 8;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  ref::HostPagedKv kv;
  kv.num_blocks = nb;
  kv.num_kv_heads = hkv;
  kv.head_dim = d;
  const size_t elems = static_cast<size_t>(nb) * 16 * hkv * d;
  for (size_t i = 0; i < elems; ++i) {
    kv.k16.push_back(FloatToBf16(u(rng)));
    kv.v16.push_back(FloatToBf16(u(rng)));
  }
  std::vector<int32_t> table = {6, 1, 7, 3, 0};  // 77 keys need 5 blocks
  std::vector<float> q(d);
  for (auto& x : q) x = u(rng);
  for (int h = 0; h < hkv; ++h) {
    std::vector<double> got(d);
    ref::AttendOne(kv, table.data(), n_keys, h, q.data(), 0.25, got.data());
    std::vector<long double> w(n_keys);
    long double sum = 0;
    for (int j = 0; j < n_keys; ++j) {
      const size_t slot = static_cast<size_t>(table[static_cast<size_t>(j / 16)]) * 16 + j % 16;
      long double dot = 0;
      for (int i = 0; i < d; ++i) dot += static_cast<long double>(q[i]) * Bf16ToFloat(kv.k16[(slot * hkv + h) * d + i]);
      w[j] = std::exp(0.25L * dot);
      sum += w[j];
    }
    for (int i = 0; i < d; ++i) {
      long double o = 0;
      for (int j = 0; j < n_keys; ++j) {
        const size_t slot = static_cast<size_t>(table[static_cast<size_t>(j / 16)]) * 16 + j % 16;
        o += w[j] / sum * Bf16ToFloat(kv.v16[(slot * hkv + h) * d + i]);
      }
      EXPECT_NEAR(got[i], static_cast<double>(o), 1e-12);
    }
  }
}

TEST(RefTest, AttendOneSingleKeyReturnsItsValueAndReadsFp8Scales) {
  ref::HostPagedKv kv;
  kv.num_blocks = 2;
  kv.num_kv_heads = 1;
  kv.head_dim = 8;
  kv.fp8 = true;
  kv.k8.assign(2 * 16 * 8, 0x38);  // 1.0
  kv.v8.assign(2 * 16 * 8, 0x40);  // 2.0
  kv.k_scale = {1.0f, 1.0f};
  kv.v_scale = {0.5f, 3.0f};
  const int32_t table[1] = {1};
  const float q[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  double out[8];
  ref::AttendOne(kv, table, 1, 0, q, 1.0, out);
  for (double o : out) EXPECT_DOUBLE_EQ(o, 6.0);  // 2.0 * block 1's scale
}

TEST(RefTest, RmsNormRow) {
  std::vector<uint16_t> x(8, FloatToBf16(2.0f)), w(8, FloatToBf16(0.5f));
  x[0] = FloatToBf16(-2.0f);
  double out[8];
  ref::RmsNormRow(x.data(), w.data(), 8, 0.0, out);
  EXPECT_DOUBLE_EQ(out[0], -0.5);
  EXPECT_DOUBLE_EQ(out[7], 0.5);
}

TEST(RefTest, RopePairRotates) {
  double y0, y1;
  ref::RopePair(1.0, 2.0, 5, 128, 0, 1e4, &y0, &y1);
  EXPECT_DOUBLE_EQ(y0, 1.0);
  EXPECT_DOUBLE_EQ(y1, 2.0);
  ref::RopePair(1.0, 0.0, 0, 128, 1, 1e4, &y0, &y1);  // pair 0 turns by `pos` radians
  EXPECT_NEAR(y0, std::cos(1.0), 1e-15);
  EXPECT_NEAR(y1, std::sin(1.0), 1e-15);
  ref::RopePair(0.3, -0.7, 17, 64, 99999, 1e6, &y0, &y1);
  EXPECT_NEAR(y0 * y0 + y1 * y1, 0.58, 1e-12);  // a rotation keeps the norm
  const double angle = 99999 * std::pow(1e6, -34.0 / 64);
  EXPECT_NEAR(y0, 0.3 * std::cos(angle) + 0.7 * std::sin(angle), 1e-12);
}

TEST(RefTest, SiluMul) {
  EXPECT_EQ(ref::SiluMul(0.0, 5.0), 0.0);
  EXPECT_NEAR(ref::SiluMul(1.0, 2.0), 2.0 / (1.0 + std::exp(-1.0)), 1e-15);
  EXPECT_NEAR(ref::SiluMul(-30.0, 1.0), 0.0, 1e-11);
}

}  // namespace
}  // namespace kvgate::cuda
