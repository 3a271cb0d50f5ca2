// The KV cache formats (kv_quant.h): codec round-trip bounds, agreement of the CPU E4M3 codec with
// the CUDA backend's, the format-specific attention loops across ISAs, and attention over an int8
// / fp8 / bf16 cache against attention over an f16 cache of the same K/V.
#include "kernels/cpu/kv_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/fp8.h"
#include "tests/kernels/test_util.h"

namespace kvgate::kernels::cpu {
namespace {

using testing::RandomFloats;
using testing::TestedIsas;

float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Rows shaped like real K/V: mostly N(0, 1), some with an outlier channel, some tiny, one zero.
std::vector<std::vector<float>> TestRows(std::mt19937_64& rng, int n) {
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < 200; ++r) {
    auto x = RandomFloats(rng, n, r % 3 == 0 ? 8.0f : 1.0f);
    if (r % 5 == 0) x[r % n] *= 40.0f;
    if (r % 7 == 0)
      for (float& v : x) v *= 1e-5f;
    rows.push_back(std::move(x));
  }
  rows.push_back(std::vector<float>(n, 0.0f));
  return rows;
}

TEST(KvQuantTest, Int8RoundTripWithinHalfAStep) {
  std::mt19937_64 rng(1);
  const int n = 64;
  for (const auto& x : TestRows(rng, n)) {
    std::vector<int8_t> q(n);
    std::vector<float> y(n);
    const uint16_t s16 = QuantizeKvRowInt8(x.data(), n, q.data());
    DequantizeKvRowInt8(q.data(), s16, n, y.data());
    const float amax = *std::max_element(x.begin(), x.end(), [](float a, float b) {
      return std::fabs(a) < std::fabs(b);
    });
    const float s = F16ToF32(s16), want = std::fabs(amax) / 127.0f;
    // The scale is max|x| / 127 rounded up to an f16 (to f16 precision in its normal range);
    // every value is within half a step of its code.
    EXPECT_GE(s, want);
    if (want >= 6.2e-5f) {
      EXPECT_LE(s, want * (1.0f + 1.0f / 1024));
    }
    for (int i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(x[i] - y[i]), 0.5f * s * (1.0f + 1e-3f)) << i << " " << x[i];
      ASSERT_LE(std::abs(q[i]), 127);
    }
  }
}

TEST(KvQuantTest, Fp8RoundTripWithinHalfAnUlp) {
  std::mt19937_64 rng(2);
  const int n = 64;
  for (const auto& x : TestRows(rng, n)) {
    std::vector<uint8_t> q(n);
    std::vector<float> y(n);
    const uint16_t s16 = QuantizeKvRowFp8(x.data(), n, q.data());
    DequantizeKvRowFp8(q.data(), s16, n, y.data());
    const float s = F16ToF32(s16);
    for (int i = 0; i < n; ++i) {
      // 3 mantissa bits: half an ulp is 2^-4 of the value among normals; the subnormal step is
      // 2^-9 (of the scaled value), so half of it bounds the error below 2^-6.
      const float bound = std::max(std::fabs(x[i]) * 0.0625f, s * 0.5f / 512.0f);
      ASSERT_LE(std::fabs(x[i] - y[i]), bound * (1.0f + 1e-3f)) << i << " " << x[i];
      ASSERT_NE(q[i] & 0x7f, 0x7f) << "never a NaN code";
    }
  }
}

TEST(KvQuantTest, Bf16AndF16RoundTripBounds) {
  std::mt19937_64 rng(3);
  for (float x : RandomFloats(rng, 10000, 5.0f)) {
    EXPECT_LE(std::fabs(Bf16ToF32(F32ToBf16(x)) - x), std::fabs(x) * 0.00390625f);  // 2^-8
    EXPECT_LE(std::fabs(F16ToF32(F32ToF16(x)) - x), std::fabs(x) * 0.00048828125f);  // 2^-11
  }
}

// The CPU cache and the CUDA backend's FP8 cache encode the same way (kernels/cuda/fp8.h), but
// for NaN, which the CPU cache never stores as a NaN code.
TEST(KvQuantTest, E4M3CodecAgreesWithCudaCodec) {
  for (uint32_t u = 0; u < 0xffffffffu - 9973u; u += 9973u) {
    const float x = FloatFromBits(u);
    if (std::isnan(x)) {
      EXPECT_EQ(EncodeE4M3(x), 0);
      continue;
    }
    ASSERT_EQ(EncodeE4M3(x), cuda::EncodeE4M3(x)) << std::hex << u;
  }
  for (float x : {0.0f, -0.0f, 448.0f, 449.0f, 464.0f, 1e9f, -1e9f, 1.0f / 512, 1.0f / 1024,
                  3.0f / 2048, INFINITY, -INFINITY, 0.0625f, 240.0f, 1e-30f}) {
    EXPECT_EQ(EncodeE4M3(x), cuda::EncodeE4M3(x)) << x;
  }
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN codes
    EXPECT_EQ(DecodeE4M3(static_cast<uint8_t>(c)), cuda::DecodeE4M3(static_cast<uint8_t>(c))) << c;
    EXPECT_EQ(EncodeE4M3(DecodeE4M3(static_cast<uint8_t>(c))), c == 0x80 ? 0x80 : c) << c;
  }
}

// The format loops of every ISA against the scalar definition (odd lengths cover the tails).
TEST(KvQuantTest, VectorLoopsMatchScalarDefinition) {
  std::mt19937_64 rng(4);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int n : {64, 7, 40, 128}) {
    const auto a = RandomFloats(rng, n);
    std::vector<uint16_t> bf(n);
    std::vector<int8_t> i8(n);
    std::vector<uint8_t> e4(n);
    std::vector<float> bf_f(n), i8_f(n), e4_f(n);
    for (int i = 0; i < n; ++i) {
      bf[i] = F32ToBf16(RandomFloats(rng, 1)[0]);
      i8[i] = static_cast<int8_t>(byte(rng) - 128);
      do {
        e4[i] = static_cast<uint8_t>(byte(rng));
      } while ((e4[i] & 0x7f) == 0x7f);
      bf_f[i] = Bf16ToF32(bf[i]), i8_f[i] = i8[i], e4_f[i] = DecodeE4M3(e4[i]);
    }
    auto dot = [&](const std::vector<float>& b) {
      double s = 0;
      for (int i = 0; i < n; ++i) s += double(a[i]) * b[i];
      return s;
    };
    for (Isa isa : TestedIsas()) {
      const VecKernels& k = KernelsFor(isa);
      EXPECT_NEAR(k.dot_f32_bf16(a.data(), bf.data(), n), dot(bf_f), 1e-4) << IsaName(isa);
      EXPECT_NEAR(k.dot_f32_i8(a.data(), i8.data(), n), dot(i8_f), 1e-2) << IsaName(isa);
      EXPECT_NEAR(k.dot_f32_e4m3(a.data(), e4.data(), n), dot(e4_f), 1e-1) << IsaName(isa);
      for (auto [run, ref] : {std::pair{0, &bf_f}, {1, &i8_f}, {2, &e4_f}}) {
        std::vector<float> y(a);
        if (run == 0) k.axpy_bf16(0.75f, bf.data(), y.data(), n);
        if (run == 1) k.axpy_i8(0.75f, i8.data(), y.data(), n);
        if (run == 2) k.axpy_e4m3(0.75f, e4.data(), y.data(), n);
        for (int i = 0; i < n; ++i) {
          ASSERT_NEAR(y[i], a[i] + 0.75f * (*ref)[i], 1e-4f * (1 + std::fabs((*ref)[i])))
              << IsaName(isa) << " " << run << " " << i;
        }
      }
    }
  }
}

struct Env {
  ThreadPool pool;
  std::vector<BlockQ8A> scratch;
  CpuContext ctx;
  Env(Isa isa, int threads) : pool(threads), ctx{&KernelsFor(isa), &pool, &scratch} {}
};

// Attention output of one decode query and one 24-token prefill chunk over K/V of the real
// model's shape (3 kv heads of 64, 9 query heads), with the cache in `format`.
std::vector<float> AttentionOver(KvFormat format, Isa isa, const std::vector<float>& k,
                                 const std::vector<float>& v, const std::vector<float>& q,
                                 const std::vector<int32_t>& ctx_lens,
                                 const std::vector<int32_t>& qstart) {
  const int64_t h = 9, hkv = 3, dh = 64, bs = 16;
  const KvLayout layout{format, bs, hkv, dh};
  const int64_t max_blocks = 40, seqs = static_cast<int64_t>(ctx_lens.size());
  std::vector<int32_t> tables(seqs * max_blocks, -1);
  std::vector<int64_t> slots;
  int32_t next = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t p = 0; p < ctx_lens[s]; ++p) {
      if (p % bs == 0) tables[s * max_blocks + p / bs] = next++;
      slots.push_back(tables[s * max_blocks + p / bs] * bs + p % bs);
    }
  }
  std::vector<std::byte> kc(next * KvBlockBytes(layout)), vc(kc.size());
  Env env(isa, 2);
  WriteKv(env.ctx, k.data(), v.data(), static_cast<int64_t>(slots.size()), slots, layout, kc.data(),
          vc.data());
  const int64_t t = qstart.back();
  std::vector<float> out(t * h * dh);
  PagedAttentionArgs a{q.data(), kc.data(), vc.data(), t, h, hkv, dh, bs, qstart, ctx_lens,
                       tables, max_blocks, 0.125f, out.data(), format};
  PagedAttention(env.ctx, a);
  return out;
}

// Quantizing the cache moves the attention output by a small fraction of its size. K/V rows are
// N(0, 1) with a 20x outlier channel in every fourth key row (as RoPE'd keys have: it takes the
// row's scale, coarsening the rest); the bounds are the measured errors (relative RMS: bf16
// 0.0037, int8 0.030, fp8 0.033) with about 2x margin.
TEST(KvQuantTest, QuantizedAttentionCloseToF16Attention) {
  std::mt19937_64 rng(5);
  const std::vector<int32_t> ctx_lens = {300, 150};
  const std::vector<int32_t> qstart = {0, 1, 25};  // seq 0 decodes, seq 1 a 24-token chunk
  const int64_t kv_dim = 3 * 64, tokens = 450;
  auto k = RandomFloats(rng, tokens * kv_dim), v = RandomFloats(rng, tokens * kv_dim);
  for (int64_t t = 0; t < tokens; t += 4) k[t * kv_dim + (t % kv_dim)] *= 20.0f;
  // Queries aligned with the keys, so the softmax is peaked as in a real model.
  auto q = RandomFloats(rng, 25 * 9 * 64, 2.0f);
  for (Isa isa : TestedIsas()) {
    const auto ref = AttentionOver(KvFormat::kF16, isa, k, v, q, ctx_lens, qstart);
    double rms = 0;
    for (float x : ref) rms += double(x) * x;
    rms = std::sqrt(rms / ref.size());
    for (auto [format, bound] : {std::pair{KvFormat::kBf16, 0.008}, {KvFormat::kInt8, 0.06},
                                 {KvFormat::kFp8, 0.065}}) {
      const auto out = AttentionOver(format, isa, k, v, q, ctx_lens, qstart);
      double err = 0;
      for (size_t i = 0; i < out.size(); ++i) err += (double(out[i]) - ref[i]) * (out[i] - ref[i]);
      err = std::sqrt(err / out.size());
      EXPECT_LT(err / rms, bound) << IsaName(isa) << " format " << int(format);
    }
  }
}

TEST(KvQuantTest, BlockBytesCountScalesBesideTheBlock) {
  EXPECT_EQ(KvBlockBytes({KvFormat::kF16, 16, 3, 64}), 16u * 3 * 64 * 2);
  EXPECT_EQ(KvBlockBytes({KvFormat::kBf16, 16, 3, 64}), 16u * 3 * 64 * 2);
  EXPECT_EQ(KvBlockBytes({KvFormat::kInt8, 16, 3, 64}), 16u * 3 * (64 + 2));
  EXPECT_EQ(KvBlockBytes({KvFormat::kFp8, 16, 3, 64}), 16u * 3 * (64 + 2));
}

}  // namespace
}  // namespace kvgate::kernels::cpu
