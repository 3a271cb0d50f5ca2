// Replays prefill v2's per-warp fragment traffic (attention_prefill_v2.cu) on the CPU: ldmatrix.x4
// (plain and .trans) and mma.m16n8k16 are emulated from their PTX ISA definitions (restated in
// kernels/cuda/mma_sm80.cuh), fed by the lane addresses of kernels/cuda/prefill_v2_layout.h, and
// S = Q K^T and O = P V must come out in the mma C layout element for element. This checks the
// address maps and the register pairing against the documented semantics; it cannot check the
// semantics themselves (only a GPU can), but the mma A/B/C layouts it assumes are the ones v1's
// hand-built fragments already passed with on an H200.
#include "kernels/cuda/prefill_v2_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <vector>

namespace kvgate::cuda {
namespace {

using prefill_v2::RowCol;

// One .b32 register holding two 16-bit elements; lo = the lower column / lower address.
struct Pair {
  float lo = 0, hi = 0;
};
using Matrix = std::vector<std::vector<float>>;  // [rows][cols], a shared-memory tile
template <int N>
using WarpRegs = std::array<std::array<Pair, N>, 32>;  // [lane][register]
using WarpAcc = std::array<std::array<float, 4>, 32>;  // [lane][c0..c3]

Matrix Random(int rows, int cols, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(-3, 3);  // small integers: every sum below is exact in float
  Matrix m(static_cast<size_t>(rows), std::vector<float>(static_cast<size_t>(cols)));
  for (auto& r : m)
    for (auto& x : r) x = static_cast<float>(u(rng));
  return m;
}

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: lane 8m + i gives the address of row i of
// matrix m (`addr(lane)`: the row and first column of 8 consecutive elements in `smem`).
// Plain: register m of lane L = row L / 4, elements 2 (L % 4), 2 (L % 4) + 1 of matrix m.
// .trans: register m of lane L = element L / 4 of rows 2 (L % 4) and 2 (L % 4) + 1 of matrix m.
template <class Addr>
WarpRegs<4> LdMatrixX4(const Matrix& smem, Addr addr, bool trans) {
  WarpRegs<4> r{};
  auto at = [&](int lane, int offset) {
    const RowCol rc = addr(lane);
    return smem[static_cast<size_t>(rc.row)][static_cast<size_t>(rc.col + offset)];
  };
  for (int lane = 0; lane < 32; ++lane) {
    for (int m = 0; m < 4; ++m) {
      const int g = lane / 4, t = lane % 4;
      r[static_cast<size_t>(lane)][static_cast<size_t>(m)] =
          trans ? Pair{at(8 * m + 2 * t, g), at(8 * m + 2 * t + 1, g)} : Pair{at(8 * m + g, 2 * t), at(8 * m + g, 2 * t + 1)};
    }
  }
  return r;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: rebuilds A [16][16] and B [16][8] from the
// lanes' registers per the PTX fragment layouts, multiplies, adds C and scatters D the same way.
void Mma(WarpAcc& c, const WarpRegs<4>& a, const WarpRegs<2>& b) {
  float am[16][16] = {}, bm[16][8] = {}, cm[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const auto& ar = a[static_cast<size_t>(lane)];
    const auto& br = b[static_cast<size_t>(lane)];
    auto& cr = c[static_cast<size_t>(lane)];
    for (int j = 0; j < 2; ++j) {
      am[g][2 * t + j] = j ? ar[0].hi : ar[0].lo;
      am[g + 8][2 * t + j] = j ? ar[1].hi : ar[1].lo;
      am[g][2 * t + 8 + j] = j ? ar[2].hi : ar[2].lo;
      am[g + 8][2 * t + 8 + j] = j ? ar[3].hi : ar[3].lo;
      bm[2 * t + j][g] = j ? br[0].hi : br[0].lo;
      bm[2 * t + 8 + j][g] = j ? br[1].hi : br[1].lo;
      cm[g][2 * t + j] = cr[static_cast<size_t>(j)];
      cm[g + 8][2 * t + j] = cr[static_cast<size_t>(2 + j)];
    }
  }
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 16; ++k) cm[i][n] += am[i][k] * bm[k][n];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 2; ++j) {
      c[static_cast<size_t>(lane)][static_cast<size_t>(j)] = cm[g][2 * t + j];
      c[static_cast<size_t>(lane)][static_cast<size_t>(2 + j)] = cm[g + 8][2 * t + j];
    }
  }
}

WarpRegs<2> Half(const WarpRegs<4>& r, int first) {
  WarpRegs<2> h{};
  for (size_t lane = 0; lane < 32; ++lane) h[lane] = {r[lane][static_cast<size_t>(first)], r[lane][static_cast<size_t>(first + 1)]};
  return h;
}

// Element c of an accumulator tile holds row g (+8 for c >= 2), column 2t + (c & 1).
void ExpectTileEquals(const WarpAcc& acc, const Matrix& want, int row0, int col0, const char* what) {
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int c = 0; c < 4; ++c) {
      const int row = row0 + g + (c >= 2 ? 8 : 0), col = col0 + 2 * t + (c & 1);
      ASSERT_EQ(acc[static_cast<size_t>(lane)][static_cast<size_t>(c)], want[static_cast<size_t>(row)][static_cast<size_t>(col)])
          << what << " row " << row << " col " << col << " lane " << lane << " c " << c;
    }
  }
}

// One warp's Q K^T and P V for a 64-key tile, in the kernel's loop order and register pairing.
void ReplayWarp(int d, int warp) {
  constexpr int kKeys = 64, kNT = kKeys / 8;
  const int kKS = d / 16, kDT = d / 8;
  std::mt19937 rng(static_cast<unsigned>(d * 8 + warp));
  const Matrix q = Random(128, d, rng), k = Random(kKeys, d, rng), v = Random(kKeys, d, rng);

  std::vector<WarpRegs<4>> qf;
  for (int kk = 0; kk < kKS; ++kk)
    qf.push_back(LdMatrixX4(q, [&](int lane) { return prefill_v2::QAddr(lane, warp, kk); }, false));
  std::vector<WarpAcc> s(kNT, WarpAcc{});
  for (int kk = 0; kk < kKS; ++kk) {
    for (int np = 0; np < kNT / 2; ++np) {
      const WarpRegs<4> b = LdMatrixX4(k, [&](int lane) { return prefill_v2::KAddr(lane, np, kk); }, false);
      Mma(s[static_cast<size_t>(2 * np)], qf[static_cast<size_t>(kk)], Half(b, 0));
      Mma(s[static_cast<size_t>(2 * np + 1)], qf[static_cast<size_t>(kk)], Half(b, 2));
    }
  }
  // S = Q K^T restricted to the warp's 16 rows: want[i][key].
  Matrix s_want(16, std::vector<float>(kKeys, 0.0f));
  for (int i = 0; i < 16; ++i)
    for (int key = 0; key < kKeys; ++key)
      for (int j = 0; j < d; ++j)
        s_want[static_cast<size_t>(i)][static_cast<size_t>(key)] +=
            q[static_cast<size_t>(warp * 16 + i)][static_cast<size_t>(j)] * k[static_cast<size_t>(key)][static_cast<size_t>(j)];
  for (int n = 0; n < kNT; ++n) ExpectTileEquals(s[static_cast<size_t>(n)], s_want, 0, n * 8, "S");

  // P = S (the softmax is elementwise on the same registers), packed into A operands per k-step.
  std::vector<WarpAcc> o(static_cast<size_t>(kDT), WarpAcc{});
  for (int k2 = 0; k2 < kKeys / 16; ++k2) {
    WarpRegs<4> a{};
    for (size_t lane = 0; lane < 32; ++lane) {
      const auto& lo = s[static_cast<size_t>(2 * k2)][lane];
      const auto& hi = s[static_cast<size_t>(2 * k2 + 1)][lane];
      a[lane] = {Pair{lo[0], lo[1]}, Pair{lo[2], lo[3]}, Pair{hi[0], hi[1]}, Pair{hi[2], hi[3]}};
    }
    for (int dp = 0; dp < kDT / 2; ++dp) {
      const WarpRegs<4> b = LdMatrixX4(v, [&](int lane) { return prefill_v2::VAddr(lane, k2, dp); }, true);
      Mma(o[static_cast<size_t>(2 * dp)], a, Half(b, 0));
      Mma(o[static_cast<size_t>(2 * dp + 1)], a, Half(b, 2));
    }
  }
  Matrix o_want(16, std::vector<float>(static_cast<size_t>(d), 0.0f));
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < d; ++j)
      for (int key = 0; key < kKeys; ++key)
        o_want[static_cast<size_t>(i)][static_cast<size_t>(j)] +=
            s_want[static_cast<size_t>(i)][static_cast<size_t>(key)] * v[static_cast<size_t>(key)][static_cast<size_t>(j)];
  for (int n = 0; n < kDT; ++n) ExpectTileEquals(o[static_cast<size_t>(n)], o_want, 0, n * 8, "O");
}

TEST(PrefillV2LayoutTest, WarpFragmentsGiveQKtAndPV) {
  for (int d : {64, 128})
    for (int warp : {0, 5, 7}) ReplayWarp(d, warp);
}

// The FP8 Q K^T of kV2Fp8Qk: the same ldmatrix addresses over rows of one-byte codes (a 16-byte
// chunk holds 16 codes, so an address's bf16 column c is byte 2c and a k-step kk covers 32 dims),
// and mma.m16n8k32 (e4m3) rebuilt from the PTX fragment layout restated in mma_sm80.cuh
// (Mma16832E4M3). One register holds four consecutive bytes; the lowest address is element 0.
using Quad = std::array<float, 4>;

// ldmatrix.x4 (no .trans) over byte rows: register m of lane L = bytes 4 (L % 4) .. + 3 of row
// L / 4 of matrix m, whose row i is addressed by lane 8m + i (row, bf16 column of the chunk).
template <class Addr>
std::array<std::array<Quad, 4>, 32> LdMatrixX4Bytes(const Matrix& smem, Addr addr) {
  std::array<std::array<Quad, 4>, 32> r{};
  for (int lane = 0; lane < 32; ++lane) {
    for (int m = 0; m < 4; ++m) {
      const int g = lane / 4, t = lane % 4;
      const RowCol rc = addr(8 * m + g);
      for (int j = 0; j < 4; ++j)
        r[static_cast<size_t>(lane)][static_cast<size_t>(m)][static_cast<size_t>(j)] =
            smem[static_cast<size_t>(rc.row)][static_cast<size_t>(rc.col * 2 + 4 * t + j)];
    }
  }
  return r;
}

// mma.m16n8k32: a[0] = row g, k 4t..4t+3; a[1] = row g + 8; a[2], a[3] = the same rows, k + 16;
// b0 = k 4t..4t+3 of column g, b1 = k + 16; C as m16n8k16.
void Mma16832(WarpAcc& c, const std::array<std::array<Quad, 4>, 32>& a, const std::array<std::array<Quad, 4>, 32>& b,
              int b_first) {
  float am[16][32] = {}, bm[32][8] = {}, cm[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const auto& ar = a[static_cast<size_t>(lane)];
    const auto& br = b[static_cast<size_t>(lane)];
    for (int j = 0; j < 4; ++j) {
      am[g][4 * t + j] = ar[0][static_cast<size_t>(j)];
      am[g + 8][4 * t + j] = ar[1][static_cast<size_t>(j)];
      am[g][16 + 4 * t + j] = ar[2][static_cast<size_t>(j)];
      am[g + 8][16 + 4 * t + j] = ar[3][static_cast<size_t>(j)];
      bm[4 * t + j][g] = br[static_cast<size_t>(b_first)][static_cast<size_t>(j)];
      bm[16 + 4 * t + j][g] = br[static_cast<size_t>(b_first + 1)][static_cast<size_t>(j)];
    }
    for (int j = 0; j < 2; ++j) {
      cm[g][2 * t + j] = c[static_cast<size_t>(lane)][static_cast<size_t>(j)];
      cm[g + 8][2 * t + j] = c[static_cast<size_t>(lane)][static_cast<size_t>(2 + j)];
    }
  }
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 32; ++k) cm[i][n] += am[i][k] * bm[k][n];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 2; ++j) {
      c[static_cast<size_t>(lane)][static_cast<size_t>(j)] = cm[g][2 * t + j];
      c[static_cast<size_t>(lane)][static_cast<size_t>(2 + j)] = cm[g + 8][2 * t + j];
    }
  }
}

TEST(PrefillV2LayoutTest, Fp8WarpFragmentsGiveQKt) {
  constexpr int kKeys = 64, kNT = kKeys / 8;
  for (int d : {64, 128}) {
    for (int warp : {0, 3, 7}) {
      std::mt19937 rng(static_cast<unsigned>(d * 16 + warp));
      const Matrix q = Random(128, d, rng), k = Random(kKeys, d, rng);  // one element per byte
      std::vector<std::array<std::array<Quad, 4>, 32>> qf;
      for (int kk = 0; kk < d / 32; ++kk)
        qf.push_back(LdMatrixX4Bytes(q, [&](int lane) { return prefill_v2::QAddr(lane, warp, kk); }));
      std::vector<WarpAcc> s(kNT, WarpAcc{});
      for (int kk = 0; kk < d / 32; ++kk) {
        for (int np = 0; np < kNT / 2; ++np) {
          const auto b = LdMatrixX4Bytes(k, [&](int lane) { return prefill_v2::KAddr(lane, np, kk); });
          Mma16832(s[static_cast<size_t>(2 * np)], qf[static_cast<size_t>(kk)], b, 0);
          Mma16832(s[static_cast<size_t>(2 * np + 1)], qf[static_cast<size_t>(kk)], b, 2);
        }
      }
      Matrix want(16, std::vector<float>(kKeys, 0.0f));
      for (int i = 0; i < 16; ++i)
        for (int key = 0; key < kKeys; ++key)
          for (int j = 0; j < d; ++j)
            want[static_cast<size_t>(i)][static_cast<size_t>(key)] +=
                q[static_cast<size_t>(warp * 16 + i)][static_cast<size_t>(j)] * k[static_cast<size_t>(key)][static_cast<size_t>(j)];
      for (int n = 0; n < kNT; ++n) ExpectTileEquals(s[static_cast<size_t>(n)], want, 0, n * 8, "S fp8");
    }
  }
}

// The FP8 stages' pitch (D + 16 bytes): the 8 rows of each matrix land in 8 distinct bank groups.
TEST(PrefillV2LayoutTest, Fp8RowPitchIsConflictFree) {
  for (int d : {64, 128}) {
    for (int m = 0; m < 4; ++m) {
      std::vector<int> banks;
      for (int i = 0; i < 8; ++i) {
        const RowCol ka = prefill_v2::KAddr(8 * m + i, 1, 1);
        banks.push_back((ka.row * (d + 16) + ka.col * 2) / 16 % 8);
      }
      std::sort(banks.begin(), banks.end());
      EXPECT_EQ(std::unique(banks.begin(), banks.end()), banks.end()) << "matrix " << m << " D=" << d;
    }
  }
}

// Each ldmatrix row address is 16-byte aligned (8 bf16 elements) and within its tile, and the 8
// rows one matrix reads are 8 distinct rows (with the D + 8 pitch: 8 distinct bank groups).
TEST(PrefillV2LayoutTest, AddressesAreAlignedRowsInsideTheTiles) {
  for (int d : {64, 128}) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int kk = 0; kk < d / 16; ++kk) {
        const RowCol qa = prefill_v2::QAddr(lane, 7, kk);
        EXPECT_EQ(qa.col % 8, 0);
        EXPECT_LT(qa.row, 128);
        EXPECT_LE(qa.col + 8, d);
        for (int np = 0; np < 4; ++np) {
          const RowCol ka = prefill_v2::KAddr(lane, np, kk);
          EXPECT_EQ(ka.col % 8, 0);
          EXPECT_LT(ka.row, 64);
          EXPECT_LE(ka.col + 8, d);
        }
      }
      for (int k2 = 0; k2 < 4; ++k2) {
        for (int dp = 0; dp < d / 16; ++dp) {
          const RowCol va = prefill_v2::VAddr(lane, k2, dp);
          EXPECT_EQ(va.col % 8, 0);
          EXPECT_LT(va.row, 64);
          EXPECT_LE(va.col + 8, d);
        }
      }
    }
    for (int m = 0; m < 4; ++m) {
      std::vector<int> banks;
      for (int i = 0; i < 8; ++i) {
        const RowCol ka = prefill_v2::KAddr(8 * m + i, 1, 2);
        banks.push_back((ka.row * (d + 8) * 2 + ka.col * 2) / 16 % 8);
      }
      std::sort(banks.begin(), banks.end());
      EXPECT_EQ(std::unique(banks.begin(), banks.end()), banks.end()) << "matrix " << m << " D=" << d;
    }
  }
}

}  // namespace
}  // namespace kvgate::cuda
