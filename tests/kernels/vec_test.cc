// Each vec.h kernel, on both dispatch paths, against a double-precision reference computed from the
// dequantized operands.
#include "kernels/cpu/vec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/kernels/test_util.h"

namespace kvgate::kernels::cpu {
namespace {

using testing::RandomFloats;
using testing::TestedIsas;

constexpr int kNb = 24;  // 768 elements per row

struct Operands {
  std::vector<BlockQ4_1> w4;
  std::vector<BlockQ8_0> w8;
  std::vector<BlockQ8A> a;  // kMaxTileTokens rows of kNb blocks
};

Operands MakeOperands(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Operands o;
  const auto w = RandomFloats(rng, kNb * 32, 0.05f);
  o.w4.resize(kNb);
  o.w8.resize(kNb);
  QuantizeRowQ4_1(w.data(), w.size(), o.w4.data());
  QuantizeRowQ8_0(w.data(), w.size(), o.w8.data());
  o.w8[3].qs[5] = -128;  // the one int8 value a Q8_0 file may hold that |x| cannot express as s8
  const auto x = RandomFloats(rng, kMaxTileTokens * kNb * 32, 2.0f);
  o.a.resize(kMaxTileTokens * kNb);
  QuantizeRowQ8AScalar(x.data(), x.size(), o.a.data());
  return o;
}

// Returns (the dot in double, sum of |terms|). For Q4_1 the min term uses the block's stored s
// (d * sum(q), rounded to f16 like ggml's q8_1), exactly what the kernels are specified to use.
std::pair<double, double> RefDotQ4_1(const BlockQ4_1* w, const BlockQ8A* a) {
  double s = 0, mag = 0;
  for (int b = 0; b < kNb; ++b) {
    const double d = double(F16ToF32(w[b].d)) * a[b].d, m = F16ToF32(w[b].m);
    for (int j = 0; j < 16; ++j) {
      const double p0 = d * (w[b].qs[j] & 0x0f) * a[b].qs[j], p1 = d * (w[b].qs[j] >> 4) * a[b].qs[j + 16];
      s += p0 + p1, mag += std::fabs(p0) + std::fabs(p1);
    }
    s += m * a[b].s, mag += std::fabs(m * a[b].s);
  }
  return {s, mag};
}

std::pair<double, double> RefDotQ8_0(const BlockQ8_0* w, const BlockQ8A* a) {
  double s = 0, mag = 0;
  for (int b = 0; b < kNb; ++b) {
    const double d = double(F16ToF32(w[b].d)) * a[b].d;
    for (int j = 0; j < 32; ++j) s += d * w[b].qs[j] * a[b].qs[j], mag += std::fabs(d * w[b].qs[j] * a[b].qs[j]);
  }
  return {s, mag};
}

TEST(VecTest, DispatchPicksAvx2WhenAvailable) {
  EXPECT_EQ(BestIsa(), CpuHasAvx2() ? Isa::kAvx2 : Isa::kScalar);
  EXPECT_EQ(KernelsFor(Isa::kScalar).isa, Isa::kScalar);
  EXPECT_EQ(&KernelsFor(Isa::kScalar), &ScalarKernels());
  if (CpuHasAvx2()) {
    EXPECT_EQ(KernelsFor(Isa::kAvx2).isa, Isa::kAvx2);
  }
}

TEST(VecTest, DotRowsMatchReference) {
  const Operands o = MakeOperands(11);
  for (Isa isa : TestedIsas()) {
    const VecKernels& k = KernelsFor(isa);
    for (int ntok = 1; ntok <= kMaxTileTokens; ++ntok) {
      float out4[2 * kMaxTileTokens], out8[2 * kMaxTileTokens];
      k.dot_q4_1_rows(o.w4.data(), 1, o.a.data(), kNb, ntok, kNb, out4, 2);
      k.dot_q8_0_rows(o.w8.data(), 1, o.a.data(), kNb, ntok, kNb, out8, 2);
      for (int t = 0; t < ntok; ++t) {
        auto [r4, m4] = RefDotQ4_1(o.w4.data(), o.a.data() + t * kNb);
        auto [r8, m8] = RefDotQ8_0(o.w8.data(), o.a.data() + t * kNb);
        // f32 accumulation over 768 terms: 1e-5 of the sum of magnitudes.
        EXPECT_NEAR(out4[2 * t], r4, 1e-5 * m4) << IsaName(isa) << " ntok=" << ntok << " t=" << t;
        EXPECT_NEAR(out8[2 * t], r8, 1e-5 * m8) << IsaName(isa) << " ntok=" << ntok << " t=" << t;
      }
    }
  }
}

// 21 rows (two 8-row passes and a 5-row tail) of random weights against 4 tokens: every row
// matches the reference, and each (row, token) value is bit-identical whichever tile size and
// row range computed it, which is what keeps a sequence's logits independent of its batch.
TEST(VecTest, DotRowsAreIndependentOfTheBatchAndTheRowSplit) {
  constexpr int kRows = 21, kTok = 4;
  std::mt19937_64 rng(14);
  auto wf = RandomFloats(rng, kRows * kNb * 32, 1.0f);
  auto xf = RandomFloats(rng, kTok * kNb * 32, 3.0f);
  std::vector<BlockQ4_1> w4(kRows * kNb);
  std::vector<BlockQ8_0> w8(kRows * kNb);
  std::vector<BlockQ8A> a(kTok * kNb);
  for (int r = 0; r < kRows; ++r) {
    QuantizeRowQ4_1(wf.data() + r * kNb * 32, kNb * 32, w4.data() + r * kNb);
    QuantizeRowQ8_0(wf.data() + r * kNb * 32, kNb * 32, w8.data() + r * kNb);
  }
  for (int t = 0; t < kTok; ++t) QuantizeRowQ8AScalar(xf.data() + t * kNb * 32, kNb * 32, a.data() + t * kNb);
  for (Isa isa : TestedIsas()) {
    const VecKernels& k = KernelsFor(isa);
    float tile4[kTok * kRows], tile8[kTok * kRows];  // all 4 tokens at once
    k.dot_q4_1_rows(w4.data(), kRows, a.data(), kNb, kTok, kNb, tile4, kRows);
    k.dot_q8_0_rows(w8.data(), kRows, a.data(), kNb, kTok, kNb, tile8, kRows);
    for (int t = 0; t < kTok; ++t) {
      const BlockQ8A* at = a.data() + t * kNb;
      float alone4[kRows], alone8[kRows];  // this token alone
      k.dot_q4_1_rows(w4.data(), kRows, at, kNb, 1, kNb, alone4, 1);
      k.dot_q8_0_rows(w8.data(), kRows, at, kNb, 1, kNb, alone8, 1);
      for (int r = 0; r < kRows; ++r) {
        auto [r4, m4] = RefDotQ4_1(w4.data() + r * kNb, at);
        auto [r8, m8] = RefDotQ8_0(w8.data() + r * kNb, at);
        EXPECT_NEAR(tile4[t * kRows + r], r4, 1e-5 * m4) << IsaName(isa) << " r=" << r;
        EXPECT_NEAR(tile8[t * kRows + r], r8, 1e-5 * m8) << IsaName(isa) << " r=" << r;
        float row4, row8;  // this row alone
        k.dot_q4_1_rows(w4.data() + r * kNb, 1, at, kNb, 1, kNb, &row4, 1);
        k.dot_q8_0_rows(w8.data() + r * kNb, 1, at, kNb, 1, kNb, &row8, 1);
        EXPECT_EQ(tile4[t * kRows + r], alone4[r]) << IsaName(isa) << " r=" << r << " t=" << t;
        EXPECT_EQ(alone4[r], row4) << IsaName(isa) << " r=" << r << " t=" << t;
        EXPECT_EQ(tile8[t * kRows + r], alone8[r]) << IsaName(isa) << " r=" << r << " t=" << t;
        EXPECT_EQ(alone8[r], row8) << IsaName(isa) << " r=" << r << " t=" << t;
      }
    }
  }
}

TEST(VecTest, QuantizeRowIdenticalAcrossIsas) {
  std::mt19937_64 rng(12);
  auto x = RandomFloats(rng, 32 * 40, 5.0f);
  for (int j = 0; j < 32; ++j) x[32 * 7 + j] = 0.0f;     // an all-zero block
  x[32 * 9] = 127.0f, x[32 * 9 + 1] = 0.5f;                // an exact tie: 0.5 -> 0 (half-even)
  x[32 * 9 + 2] = 1.5f;                                    // 1.5 -> 2
  std::vector<BlockQ8A> ref(40), got(40);
  QuantizeRowQ8AScalar(x.data(), x.size(), ref.data());
  EXPECT_EQ(ref[9].qs[1], 0);
  EXPECT_EQ(ref[9].qs[2], 2);
  EXPECT_EQ(ref[7].d, 0.0f);
  for (Isa isa : TestedIsas()) {
    KernelsFor(isa).quantize_row_q8a(x.data(), x.size(), got.data());
    for (int b = 0; b < 40; ++b) {
      EXPECT_EQ(got[b].d, ref[b].d) << IsaName(isa) << " block " << b;
      EXPECT_FLOAT_EQ(got[b].s, ref[b].s) << IsaName(isa) << " block " << b;
      EXPECT_EQ(0, std::memcmp(got[b].qs, ref[b].qs, 32)) << IsaName(isa) << " block " << b;
    }
  }
}

TEST(VecTest, F16ConversionsMatchScalarReference) {
  std::mt19937_64 rng(13);
  auto x = RandomFloats(rng, 1003, 1000.0f);
  x[0] = 1e-7f, x[1] = -70000.0f, x[2] = 65519.0f;  // subnormal, overflow, just below the cutoff
  for (Isa isa : TestedIsas()) {
    const VecKernels& k = KernelsFor(isa);
    std::vector<uint16_t> h(x.size());
    std::vector<float> back(x.size());
    k.f32_to_f16(x.data(), h.data(), x.size());
    k.f16_to_f32(h.data(), back.data(), h.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(h[i], F32ToF16(x[i])) << IsaName(isa) << " " << x[i];
      EXPECT_EQ(back[i], F16ToF32(h[i])) << IsaName(isa);
    }
  }
}

TEST(VecTest, AttentionInnerLoops) {
  std::mt19937_64 rng(14);
  for (int n : {64, 128, 40, 7}) {
    const auto a = RandomFloats(rng, n), bf = RandomFloats(rng, n);
    std::vector<uint16_t> b(n);
    for (int i = 0; i < n; ++i) b[i] = F32ToF16(bf[i]);
    double ref = 0, mag = 0;
    for (int i = 0; i < n; ++i) ref += double(a[i]) * F16ToF32(b[i]), mag += std::fabs(a[i] * bf[i]);
    for (Isa isa : TestedIsas()) {
      const VecKernels& k = KernelsFor(isa);
      EXPECT_NEAR(k.dot_f32_f16(a.data(), b.data(), n), ref, 1e-6 * mag + 1e-7) << IsaName(isa);
      std::vector<float> y(a);
      k.axpy_f16(0.75f, b.data(), y.data(), n);
      for (int i = 0; i < n; ++i) {
        EXPECT_NEAR(y[i], a[i] + 0.75 * F16ToF32(b[i]), 1e-6 * (std::fabs(a[i]) + 1)) << IsaName(isa);
      }
    }
  }
}

}  // namespace
}  // namespace kvgate::kernels::cpu
