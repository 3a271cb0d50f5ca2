// Prefill v3's plan (kernels/cuda/prefill_v3_layout.h) without a GPU: the shared-memory map, the
// 128-byte swizzle as TMA writes it and the consumers write Q, the TMA tensor map of a cache plane,
// and the wgmma descriptors, read back through a model of how wgmma addresses a swizzled operand
// (PTX ISA, "Shared Memory Matrix Layout": core matrices of 8 rows x 16 bytes, SBO between 8-row
// groups, LBO between 64-element chunks of an MN-major operand, the swizzle an XOR of address bits
// 4-6 with bits 7-9). The model is this file's reading of the ISA; a GPU is what checks it.
#include "kernels/cuda/prefill_v3_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

namespace kvgate::cuda::prefill_v3 {
namespace {

// The 128-byte swizzle on an offset from a 1024-aligned base: 16-byte chunk bits 4-6 XOR row bits 7-9.
uint32_t Sw128(uint32_t off) { return off ^ (((off >> 7) & 7u) << 4); }

uint32_t Start(uint64_t desc) { return static_cast<uint32_t>(desc & 0x3FFF) << 4; }
uint32_t Lbo(uint64_t desc) { return static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4; }
uint32_t Sbo(uint64_t desc) { return static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4; }

// Element (row, k) of a K-major operand's 16-wide k-step as wgmma reads it.
uint16_t ReadKMajor(const std::vector<uint16_t>& smem, uint64_t desc, int row, int k) {
  const uint32_t addr = Start(desc) + (row / 8) * Sbo(desc) + (row % 8) * 128 + k * 2;
  return smem[Sw128(addr) / 2];
}
// Element (k, n) of an MN-major operand (rows = k, 128 bytes = 64 n each, chunks of 64 n at LBO).
uint16_t ReadMnMajor(const std::vector<uint16_t>& smem, uint64_t desc, int k, int n) {
  const uint32_t addr = Start(desc) + (k / 8) * Sbo(desc) + (k % 8) * 128 + (n / 64) * Lbo(desc) + (n % 64) * 2;
  return smem[Sw128(addr) / 2];
}

uint16_t Value(int tile, int row, int col) { return static_cast<uint16_t>((tile * 131 + row * 257 + col * 7) & 0xffff); }

TEST(PrefillV3LayoutTest, SharedMemoryMapIsAlignedAndFitsAnSm) {
  for (int d : {64, 128}) {
    const Smem L{d};
    EXPECT_EQ(L.q(), 0);
    for (int s = 0; s < kStages; ++s) {
      EXPECT_EQ(L.k(s) % kAtomBytes, 0) << d;
      EXPECT_EQ(L.v(s) % kAtomBytes, 0) << d;
      EXPECT_EQ(L.v(s) - L.k(s), TileBytes(kKeys, d));
      if (s > 0) {
        EXPECT_EQ(L.k(s) - L.v(s - 1), TileBytes(kKeys, d));
      }
      EXPECT_EQ(L.full(s) % 8, 0);
      EXPECT_EQ(L.empty(s) % 8, 0);
    }
    EXPECT_EQ(L.k(0), TileBytes(kRows, d));
    EXPECT_EQ(L.full(0), L.v(kStages - 1) + TileBytes(kKeys, d));
    EXPECT_EQ(L.bytes(), L.empty(kStages - 1) + 8);
    EXPECT_LE(L.alloc(), 227 * 1024) << "one CTA per SM on sm_90";
    EXPECT_EQ(L.stage_tx_bytes(), 2 * kKeys * d * 2) << "what the boxes of a stage bring";
    // 4 blocks x d / 64 chunks of 2 KB boxes per plane fill the stage's two tiles exactly.
    EXPECT_EQ(2 * (kKeys / kBlockKeys) * (d / kChunkElems) * kBlockKeys * 128, L.stage_tx_bytes());
  }
  EXPECT_EQ(kThreads, 3 * 128);
  EXPECT_EQ(kConsumerThreads, 2 * 128);
  EXPECT_EQ(kRows, 2 * 64) << "one m64 wgmma row block per consumer warpgroup";
}

TEST(PrefillV3LayoutTest, SwizzledOffsetIsTheTmaPatternOfEachBox) {
  for (int d : {64, 128}) {
    std::set<int> seen;
    for (int key = 0; key < kKeys; ++key) {
      for (int col = 0; col < d; ++col) {
        const int off = SwizzledOffset(key, col, kKeys);
        ASSERT_EQ(off % 2, 0);
        ASSERT_LT(off, TileBytes(kKeys, d));
        ASSERT_TRUE(seen.insert(off).second) << "two elements at one offset";
        // TMA writes box (block, chunk) row r, element e at Sw128(box offset + r*128 + e*2).
        const int box = BoxOffset(key / kBlockKeys, col / kChunkElems);
        ASSERT_EQ(static_cast<uint32_t>(off), Sw128(box + (key % kBlockKeys) * 128 + (col % kChunkElems) * 2))
            << "key " << key << " col " << col;
      }
    }
    // 8 consecutive elements (one 16-byte chunk) stay contiguous: the Q stores are whole uint4s.
    for (int row = 0; row < kRows; ++row)
      for (int col = 0; col < d; col += 8)
        for (int e = 1; e < 8; ++e) ASSERT_EQ(SwizzledOffset(row, col + e, kRows), SwizzledOffset(row, col, kRows) + 2 * e);
  }
}

TEST(PrefillV3LayoutTest, DescriptorBitFields) {
  const uint64_t desc = Descriptor(0x1230, 16, 1024);
  EXPECT_EQ(desc & 0x3FFF, 0x123u);
  EXPECT_EQ((desc >> 16) & 0x3FFF, 1u);
  EXPECT_EQ((desc >> 32) & 0x3FFF, 64u);
  EXPECT_EQ((desc >> 49) & 0x7, 0u) << "base offset 0: every atom is 1024-aligned";
  EXPECT_EQ(desc >> 62, 1u) << "layout type 1 = 128-byte swizzle";
  EXPECT_EQ((desc >> 14) & 0x3, 0u);
  EXPECT_EQ((desc >> 30) & 0x3, 0u);
  EXPECT_EQ((desc >> 46) & 0x7, 0u);
}

// S = Q K^T and O += P V read through the descriptors give the tiles' elements: Q row wg*64 + m,
// dim kk*16 + k; K key n, dim kk*16 + k; V key k2*16 + k, dim n.
TEST(PrefillV3LayoutTest, DescriptorsReadTheTilesTheKernelWrote) {
  for (int d : {64, 128}) {
    const Smem L{d};
    const uint32_t base = 4 * kAtomBytes;  // any 1024-aligned base
    std::vector<uint16_t> smem((base + L.bytes()) / 2, 0);
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < d; ++c) smem[(base + L.q() + SwizzledOffset(r, c, kRows)) / 2] = Value(0, r, c);
    for (int key = 0; key < kKeys; ++key) {
      for (int c = 0; c < d; ++c) {
        smem[(base + L.k(1) + SwizzledOffset(key, c, kKeys)) / 2] = Value(1, key, c);
        smem[(base + L.v(1) + SwizzledOffset(key, c, kKeys)) / 2] = Value(2, key, c);
      }
    }
    for (int wg = 0; wg < 2; ++wg)
      for (int kk = 0; kk < d / 16; ++kk) {
        const uint64_t qd = QDescriptor(base + L.q(), wg, kk);
        for (int m = 0; m < 64; ++m)
          for (int k = 0; k < 16; ++k)
            ASSERT_EQ(ReadKMajor(smem, qd, m, k), Value(0, wg * 64 + m, kk * 16 + k)) << d << " wg " << wg << " kk " << kk;
      }
    for (int kk = 0; kk < d / 16; ++kk) {
      const uint64_t kd = KDescriptor(base + L.k(1), kk);
      for (int n = 0; n < kKeys; ++n)
        for (int k = 0; k < 16; ++k) ASSERT_EQ(ReadKMajor(smem, kd, n, k), Value(1, n, kk * 16 + k)) << d << " kk " << kk;
    }
    for (int k2 = 0; k2 < kKeys / 16; ++k2) {
      const uint64_t vd = VDescriptor(base + L.v(1), k2);
      for (int k = 0; k < 16; ++k)
        for (int n = 0; n < d; ++n) ASSERT_EQ(ReadMnMajor(smem, vd, k, n), Value(2, k2 * 16 + k, n)) << d << " k2 " << k2;
    }
  }
}

TEST(PrefillV3LayoutTest, TensorMapOfACachePlane) {
  const PagedKvTensorMap m = PlanPagedKvTensorMap(5000, 8, 128);
  EXPECT_TRUE(m.Ok());
  EXPECT_EQ(m.dims[0], 128u);
  EXPECT_EQ(m.dims[1], 8u);
  EXPECT_EQ(m.dims[2], 5000u * 16);
  EXPECT_EQ(m.strides[0], 256u) << "one kv head's row of D bf16";
  EXPECT_EQ(m.strides[1], 256u * 8) << "one slot: every kv head";
  EXPECT_EQ(m.box[0], 64u) << "128 bytes: the swizzle span";
  EXPECT_EQ(m.box[1], 1u);
  EXPECT_EQ(m.box[2], 16u) << "one KV block";
  EXPECT_TRUE(PlanPagedKvTensorMap(12, 3, 64).Ok()) << "the bundled model's shape";
  EXPECT_FALSE(PlanPagedKvTensorMap(int{1} << 29, 8, 128).Ok()) << "2^33 slots: beyond TMA's 2^32";
  EXPECT_FALSE(PlanPagedKvTensorMap(0, 8, 128).Ok());
}

}  // namespace
}  // namespace kvgate::cuda::prefill_v3
