// ops.h against straightforward scalar references, for both ISAs and 1 or 2 threads.
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <random>
#include <vector>

#include "tests/kernels/test_util.h"

namespace kvgate::kernels::cpu {
namespace {

using testing::RandomFloats;
using testing::TestedIsas;

struct Env {
  ThreadPool pool;
  std::vector<BlockQ8A> scratch;
  CpuContext ctx;
  Env(Isa isa, int threads) : pool(threads), ctx{&KernelsFor(isa), &pool, &scratch} {}
};

// out [T, N] = x [T, K] * dequant(w)^T in double, with x optionally rounded through Q8A first
// (then the Q4_1 min term uses the block's f16-rounded sum, as the kernels do).
std::vector<double> RefMatMul(const std::vector<float>& x, int64_t t, const std::vector<float>& wf,
                              int64_t n, int64_t k, bool quantize_x) {
  std::vector<float> xr(x);
  if (quantize_x) {
    std::vector<BlockQ8A> q(k / 32);
    for (int64_t i = 0; i < t; ++i) {
      QuantizeRowQ8AScalar(x.data() + i * k, k, q.data());
      DequantizeQ8A(q.data(), k, xr.data() + i * k);
    }
  }
  std::vector<double> out(t * n);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t j = 0; j < k; ++j) s += double(xr[i * k + j]) * wf[r * k + j];
      out[i * n + r] = s;
    }
  return out;
}

// The Q4_1 x Q8A math in double over the blocks themselves (min term from the stored sum).
std::vector<double> RefMatMulQ4_1Blocks(const std::vector<float>& x, int64_t t,
                                        const std::vector<BlockQ4_1>& w, int64_t n, int64_t k) {
  const int64_t nb = k / 32;
  std::vector<BlockQ8A> q(nb);
  std::vector<double> out(t * n);
  for (int64_t i = 0; i < t; ++i) {
    QuantizeRowQ8AScalar(x.data() + i * k, k, q.data());
    for (int64_t r = 0; r < n; ++r) {
      double acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ4_1& wb = w[r * nb + b];
        long isum = 0;
        for (int j = 0; j < 16; ++j) isum += (wb.qs[j] & 0x0f) * q[b].qs[j] + (wb.qs[j] >> 4) * q[b].qs[j + 16];
        acc += double(F16ToF32(wb.d)) * q[b].d * isum + double(F16ToF32(wb.m)) * q[b].s;
      }
      out[i * n + r] = acc;
    }
  }
  return out;
}

TEST(OpsTest, MatMulQ4_1AndQ8_0SeveralMatricesMatchReference) {
  std::mt19937_64 rng(21);
  const int64_t k = 192, n1 = 70, n2 = 33;
  const auto w1f = RandomFloats(rng, n1 * k, 0.1f), w2f = RandomFloats(rng, n2 * k, 0.1f);
  std::vector<BlockQ4_1> w1(n1 * k / 32);
  std::vector<BlockQ8_0> w2(n2 * k / 32);
  for (int64_t r = 0; r < n1; ++r) QuantizeRowQ4_1(w1f.data() + r * k, k, w1.data() + r * k / 32);
  for (int64_t r = 0; r < n2; ++r) QuantizeRowQ8_0(w2f.data() + r * k, k, w2.data() + r * k / 32);
  std::vector<float> w1d(n1 * k), w2d(n2 * k);
  DequantizeQ4_1(w1.data(), w1d.size(), w1d.data());
  DequantizeQ8_0(w2.data(), w2d.size(), w2d.data());
  const QMatrix m1{WeightType::kQ4_1, w1.data(), n1, k}, m2{WeightType::kQ8_0, w2.data(), n2, k};
  for (int64_t t : {1, 3, 9}) {
    const auto x = RandomFloats(rng, t * k);
    const auto ref1 = RefMatMulQ4_1Blocks(x, t, w1, n1, k), ref2 = RefMatMul(x, t, w2d, n2, k, true);
    const auto exact1 = RefMatMul(x, t, w1d, n1, k, false);
    for (Isa isa : TestedIsas()) {
      for (int threads : {1, 2}) {
        Env env(isa, threads);
        std::vector<float> o1(t * n1, NAN), o2(t * n2, NAN);
        const QMatrix* ws[] = {&m1, &m2};
        float* outs[] = {o1.data(), o2.data()};
        MatMul(env.ctx, x.data(), t, k, ws, outs);
        for (int64_t i = 0; i < t * n1; ++i) {
          // Against the same math in double: f32 rounding only.
          ASSERT_NEAR(o1[i], ref1[i], 1e-4) << IsaName(isa) << " t=" << t << " i=" << i;
          // Against unquantized activations: Q8 rounding error (~0.4% of |x| per element).
          ASSERT_NEAR(o1[i], exact1[i], 0.05) << IsaName(isa) << " t=" << t << " i=" << i;
        }
        for (int64_t i = 0; i < t * n2; ++i) ASSERT_NEAR(o2[i], ref2[i], 1e-4) << IsaName(isa);
      }
    }
  }
}

TEST(OpsTest, EmbedRowsDequantizesTheRequestedRows) {
  std::mt19937_64 rng(22);
  const int64_t k = 64, n = 10;
  const auto wf = RandomFloats(rng, n * k);
  std::vector<BlockQ8_0> w(n * k / 32);
  QuantizeRowQ8_0(wf.data(), wf.size(), w.data());
  std::vector<float> all(n * k), out(2 * k);
  DequantizeQ8_0(w.data(), all.size(), all.data());
  const int32_t ids[] = {7, 2};
  EmbedRows(QMatrix{WeightType::kQ8_0, w.data(), n, k}, ids, out.data());
  for (int64_t j = 0; j < k; ++j) {
    EXPECT_EQ(out[j], all[7 * k + j]);
    EXPECT_EQ(out[k + j], all[2 * k + j]);
  }
}

TEST(OpsTest, RmsNorm) {
  std::mt19937_64 rng(23);
  for (int64_t t : {1, 100}) {
    const int64_t d = 96;
    const auto x = RandomFloats(rng, t * d, 3.0f), w = RandomFloats(rng, d);
    Env env(Isa::kScalar, 2);
    std::vector<float> out(t * d);
    RmsNorm(env.ctx, x.data(), w.data(), t, d, 1e-5f, out.data());
    for (int64_t i = 0; i < t; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < d; ++j) ss += double(x[i * d + j]) * x[i * d + j];
      const double inv = 1.0 / std::sqrt(ss / d + 1e-5);
      for (int64_t j = 0; j < d; ++j) ASSERT_NEAR(out[i * d + j], x[i * d + j] * inv * w[j], 1e-5);
    }
  }
}

TEST(OpsTest, RopeRotatesInterleavedPairs) {
  std::mt19937_64 rng(24);
  const int64_t t = 3, h = 2, dh = 8;
  const float theta = 10000.0f;
  auto x = RandomFloats(rng, t * h * dh);
  const auto orig = x;
  const int32_t pos[] = {0, 1, 37};
  RopeInterleaved(x.data(), t, h, dh, pos, theta);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t j = 0; j < dh / 2; ++j) {
        const double ang = pos[i] * std::pow(double(theta), -2.0 * j / dh);
        const int64_t base = (i * h + hh) * dh + 2 * j;
        const double a = orig[base], b = orig[base + 1];
        // 1e-4: the angle is built in float by repeated multiplication, as ggml does.
        EXPECT_NEAR(x[base], a * std::cos(ang) - b * std::sin(ang), 1e-4);
        EXPECT_NEAR(x[base + 1], a * std::sin(ang) + b * std::cos(ang), 1e-4);
      }
  for (int64_t j = 0; j < h * dh; ++j) EXPECT_EQ(x[j], orig[j]);  // position 0 is the identity
}

TEST(OpsTest, SwiGluAndAdd) {
  const float g[] = {-2.0f, 0.0f, 1.5f}, u[] = {3.0f, 4.0f, -1.0f};
  float out[3];
  SwiGlu(g, u, 3, out);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
  float x[] = {1, 2, 3};
  AddInPlace(x, u, 3);
  EXPECT_EQ(x[0], 4.0f);
  EXPECT_EQ(x[2], 2.0f);
}

// Writes random K/V for sequences of `ctx_lens` into a paged cache with scattered block tables,
// runs PagedAttention for query chunks of `qlens` on every tested ISA and thread count, and
// compares it with attention over the logical (unpaged) K/V, read back as the cache holds them
// (rounded to f16 or bf16, or quantized), computed in double.
void ExpectPagedAttentionMatchesDense(uint64_t seed, const std::vector<int32_t>& ctx_lens,
                                      const std::vector<int32_t>& qlens,
                                      std::initializer_list<int> thread_counts,
                                      KvFormat format = KvFormat::kF16) {
  std::mt19937_64 rng(seed);
  const int64_t h = 6, hkv = 2, dh = 64, bs = 16, kv_dim = hkv * dh;
  const KvLayout layout{format, bs, hkv, dh};
  const size_t block_bytes = KvBlockBytes(layout);
  const auto s = static_cast<int64_t>(ctx_lens.size());
  int64_t max_blocks = 0, num_blocks = 0;
  for (int32_t c : ctx_lens) {
    max_blocks = std::max<int64_t>(max_blocks, (c + bs - 1) / bs);
    num_blocks += (c + bs - 1) / bs;
  }
  std::vector<int32_t> qstart = {0};
  for (int32_t q : qlens) qstart.push_back(qstart.back() + q);
  const int64_t t = qstart.back();
  // Scattered block tables (a permutation of the pool).
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(s * max_blocks, -1);
  for (int64_t i = 0, next = 0; i < s; ++i)
    for (int64_t b = 0; b * bs < ctx_lens[i]; ++b) tables[i * max_blocks + b] = perm[next++];
  std::vector<std::vector<float>> kd(s), vd(s);
  std::vector<std::byte> kc(num_blocks * block_bytes), vc(kc.size());
  for (int64_t i = 0; i < s; ++i) {
    kd[i] = RandomFloats(rng, ctx_lens[i] * kv_dim);
    vd[i] = RandomFloats(rng, ctx_lens[i] * kv_dim);
    std::vector<int64_t> slots(ctx_lens[i]);
    for (int64_t p = 0; p < ctx_lens[i]; ++p) slots[p] = tables[i * max_blocks + p / bs] * bs + p % bs;
    Env env(Isa::kScalar, 1);
    WriteKv(env.ctx, kd[i].data(), vd[i].data(), ctx_lens[i], slots, layout, kc.data(), vc.data());
    for (int64_t p = 0; p < ctx_lens[i]; ++p) {
      const size_t block = static_cast<size_t>(slots[p] / bs);
      for (int64_t g = 0; g < hkv; ++g) {
        ReadKvRow(layout, kc.data() + block * block_bytes, p % bs, g, &kd[i][p * kv_dim + g * dh]);
        ReadKvRow(layout, vc.data() + block * block_bytes, p % bs, g, &vd[i][p * kv_dim + g * dh]);
      }
    }
  }
  const auto q = RandomFloats(rng, t * h * dh);
  std::vector<float> qr(q);  // the kernel rounds queries to f16 before Q.K
  for (float& x : qr) x = F16ToF32(F32ToF16(x));
  const float scale = 1.0f / 8.0f;
  std::vector<double> ref(t * h * dh);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t qi = 0; qi < qlens[i]; ++qi)
      for (int64_t hh = 0; hh < h; ++hh) {
        const int64_t tok = qstart[i] + qi, last = ctx_lens[i] - qlens[i] + qi, g = hh / (h / hkv);
        std::vector<double> sc(last + 1);
        double mx = -1e30, sum = 0;
        for (int64_t p = 0; p <= last; ++p) {
          double d = 0;
          for (int64_t j = 0; j < dh; ++j) d += double(qr[(tok * h + hh) * dh + j]) * kd[i][p * kv_dim + g * dh + j];
          sc[p] = d * scale;
          mx = std::max(mx, sc[p]);
        }
        for (double& v : sc) sum += (v = std::exp(v - mx));
        for (int64_t j = 0; j < dh; ++j) {
          double o = 0;
          for (int64_t p = 0; p <= last; ++p) o += sc[p] / sum * vd[i][p * kv_dim + g * dh + j];
          ref[(tok * h + hh) * dh + j] = o;
        }
      }
  for (Isa isa : TestedIsas()) {
    for (int threads : thread_counts) {
      Env env(isa, threads);
      std::vector<float> out(t * h * dh, NAN);
      PagedAttentionArgs a{q.data(), kc.data(), vc.data(), t, h, hkv, dh, bs, qstart, ctx_lens,
                           tables, max_blocks, scale, out.data(), format};
      PagedAttention(env.ctx, a);
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], ref[i], 2e-5)
            << IsaName(isa) << " threads " << threads << " format " << int(format) << " " << i;
    }
  }
}

// Sequence 0: a prefill chunk of 20 queries after 13 cached tokens; 1: decode at context 40;
// 2: a first chunk of 5 tokens. 16 threads: fewer work items than threads, so each item takes
// one head (the short-context decode split).
TEST(OpsTest, PagedAttentionMatchesDenseCausalReference) {
  ExpectPagedAttentionMatchesDense(25, {33, 40, 5}, {20, 1, 5}, {1, 2, 16});
}

// Every cache format reads back what WriteKv stored: the same kernel result as attention over the
// values the cache holds (tests/kernels/kv_quant_test.cc compares those with the f32 inputs).
TEST(OpsTest, PagedAttentionMatchesDenseReferenceForEveryFormat) {
  for (KvFormat f : {KvFormat::kBf16, KvFormat::kInt8, KvFormat::kFp8}) {
    ExpectPagedAttentionMatchesDense(27, {33, 40, 5}, {20, 1, 5}, {1, 2}, f);
    ExpectPagedAttentionMatchesDense(28, {700, 600}, {1, 3}, {16}, f);
  }
}

// Long contexts with few sequences split their keys over the threads (parts merged after): one
// sequence decoding at 700 positions and one with a 3-token chunk at 600, whose rows see
// different key ranges in the last part. 1 thread: no split; 16: two parts per unit.
TEST(OpsTest, PagedAttentionSplitOverKeysMatchesDenseReference) {
  ExpectPagedAttentionMatchesDense(26, {700, 600}, {1, 3}, {1, 2, 16});
}

TEST(OpsTest, WriteKvSkipsNegativeSlots) {
  Env env(Isa::kScalar, 1);
  const float k[] = {1, 2, 3, 4}, v[] = {5, 6, 7, 8};
  std::vector<uint16_t> kc(6, 0), vc(6, 0);
  const int64_t slots[] = {2, -1};
  WriteKv(env.ctx, k, v, 2, slots, KvLayout{KvFormat::kF16, 3, 1, 2}, kc.data(), vc.data());
  EXPECT_EQ(F16ToF32(kc[4]), 1.0f);
  EXPECT_EQ(F16ToF32(vc[5]), 6.0f);
  EXPECT_EQ(kc[0], 0);
  EXPECT_EQ(kc[2], 0);
}

}  // namespace
}  // namespace kvgate::kernels::cpu
