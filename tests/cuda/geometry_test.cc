#include "kernels/cuda/geometry.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace kvgate::cuda {
namespace {

constexpr int kH200Sms = 132;

TEST(DecodeGeometryTest, LongSingleSequenceSplitsToFillTheChip) {
  DecodeGeometry g;
  ASSERT_TRUE(ChooseDecodeGeometry({1, 32, 8, 128, 100001}, kH200Sms, &g).ok());
  const int blocks = (100001 + 15) / 16;
  EXPECT_EQ(g.grid_x, 8);
  EXPECT_EQ(g.grid_y, 1);
  EXPECT_EQ(g.grid_z, g.splits);
  // One wave of 3 CTAs per SM, and not one CTA into a second wave.
  EXPECT_LE(8 * g.splits, 3 * kH200Sms);
  EXPECT_GT(8 * (g.splits + 1), 3 * kH200Sms);
  EXPECT_GE(g.splits * g.blocks_per_split, blocks);
  EXPECT_LT((g.splits - 1) * g.blocks_per_split, blocks);  // no empty split
  EXPECT_EQ(g.workspace_floats, size_t{1} * 32 * g.splits * 129);
}

TEST(DecodeGeometryTest, Batch64ModerateContext) {
  DecodeGeometry g;
  ASSERT_TRUE(ChooseDecodeGeometry({64, 32, 8, 128, 4097}, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 2);  // 512 CTAs without split, target 528
  EXPECT_EQ(g.blocks_per_split, 129);
}

TEST(DecodeGeometryTest, LargeBatchDoesNotSplit) {
  DecodeGeometry g;
  ASSERT_TRUE(ChooseDecodeGeometry({256, 32, 8, 128, 4096}, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 1);
  EXPECT_EQ(g.blocks_per_split, 256);
  EXPECT_EQ(g.workspace_floats, 0u);
}

TEST(DecodeGeometryTest, ShortContextKeepsOneBlockPerWarp) {
  DecodeGeometry g;
  ASSERT_TRUE(ChooseDecodeGeometry({1, 9, 3, 64, 20}, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 1);
  ASSERT_TRUE(ChooseDecodeGeometry({1, 9, 3, 64, 16 * 40}, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 10);
  EXPECT_EQ(g.blocks_per_split, 4);
}

TEST(DecodeGeometryTest, RejectsUnsupportedShapes) {
  DecodeGeometry g;
  EXPECT_EQ(ChooseDecodeGeometry({1, 30, 8, 128, 10}, kH200Sms, &g).kind, CudaStatusKind::kInvalidArgument);
  EXPECT_EQ(ChooseDecodeGeometry({1, 72, 8, 128, 10}, kH200Sms, &g).kind, CudaStatusKind::kInvalidArgument);
  EXPECT_EQ(ChooseDecodeGeometry({1, 32, 8, 96, 10}, kH200Sms, &g).kind, CudaStatusKind::kInvalidArgument);
  EXPECT_EQ(ChooseDecodeGeometry({0, 32, 8, 128, 10}, kH200Sms, &g).kind, CudaStatusKind::kInvalidArgument);
  EXPECT_EQ(ChooseDecodeGeometry({1, 32, 8, 128, 0}, kH200Sms, &g).kind, CudaStatusKind::kInvalidArgument);
  EXPECT_EQ(ChooseDecodeGeometry({1, 32, 8, 128, 10}, 0, &g).kind, CudaStatusKind::kInvalidArgument);
}

TEST(DecodeGeometryTest, InvariantsOnRandomShapes) {
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const int hkv = 1 << (rng() % 4), g_ = 1 + static_cast<int>(rng() % 8);
    DecodeShape s{1 + static_cast<int>(rng() % 300), hkv * g_, hkv, rng() % 2 ? 64 : 128,
                  1 + static_cast<int>(rng() % 200000)};
    const int sms = 1 + static_cast<int>(rng() % 200);
    DecodeGeometry g;
    ASSERT_TRUE(ChooseDecodeGeometry(s, sms, &g).ok());
    const int blocks = (s.max_context_tokens + 15) / 16;
    ASSERT_GE(g.splits, 1);
    ASSERT_LE(g.splits, kMaxSplits);
    ASSERT_GE(g.splits * g.blocks_per_split, blocks);
    ASSERT_LT((g.splits - 1) * g.blocks_per_split, blocks);
    if (g.splits > 1) {
      ASSERT_GE(g.blocks_per_split, kAttnWarps);
    }
    ASSERT_EQ(g.workspace_floats, SplitWorkspaceFloats(s.num_seqs, s.num_q_heads, g.splits, s.head_dim));
  }
}

TEST(PrefillGeometryTest, FullChunkHasNoSplitAndWarmTailSplits) {
  PrefillGeometry g;
  ASSERT_TRUE(ChoosePrefillGeometry({1, 8192, 32, 8, 128, 8192}, 128, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 1);
  EXPECT_EQ(g.grid_x, 32);
  EXPECT_EQ(g.grid_y, 128);
  EXPECT_EQ(g.workspace_floats, 0u);
  ASSERT_TRUE(ChoosePrefillGeometry({1, 16, 32, 8, 128, 100000}, 1, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 17);  // ceil(528 / 32)
  EXPECT_EQ(g.num_q_tokens, 16);
  EXPECT_EQ(g.workspace_floats, size_t{16} * 32 * 17 * 129);
  // A short context caps the split at a quarter of its key tiles.
  ASSERT_TRUE(ChoosePrefillGeometry({1, 16, 32, 8, 128, 512}, 1, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 2);
}

TEST(PrefillTilesTest, TilesPerSequence) {
  std::vector<int32_t> tiles;
  const std::vector<int32_t> q_lens = {130, 0, 64, 1};
  ASSERT_TRUE(BuildPrefillTiles(q_lens, &tiles).ok());
  EXPECT_EQ(tiles, (std::vector<int32_t>{0, 0, 0, 64, 0, 128, 2, 0, 3, 0}));
  const std::vector<int32_t> bad = {3, -1};
  EXPECT_FALSE(BuildPrefillTiles(bad, &tiles).ok());
}

TEST(SlotMappingTest, MapsPositionsThroughBlocks) {
  const std::vector<int32_t> blocks = {7, 2, 9};
  std::vector<int32_t> slots;
  ASSERT_TRUE(AppendSlotMapping(blocks, 14, 4, 10, &slots).ok());
  EXPECT_EQ(slots, (std::vector<int32_t>{7 * 16 + 14, 7 * 16 + 15, 2 * 16, 2 * 16 + 1}));
  ASSERT_TRUE(AppendSlotMapping(blocks, 47, 1, 10, &slots).ok());
  EXPECT_EQ(slots.back(), 9 * 16 + 15);
  EXPECT_FALSE(AppendSlotMapping(blocks, 47, 2, 10, &slots).ok());  // past the last block
  EXPECT_FALSE(AppendSlotMapping(blocks, 0, 1, 5, &slots).ok());    // block 7 not in a 5-block pool
  EXPECT_FALSE(AppendSlotMapping(blocks, -1, 1, 10, &slots).ok());
}

TEST(BlockTableTest, PadsWithMinusOne) {
  const std::vector<std::vector<int32_t>> seqs = {{3, 1}, {}, {5, 6, 7}};
  std::vector<int32_t> table;
  ASSERT_TRUE(BuildBlockTable(seqs, 3, &table).ok());
  EXPECT_EQ(table, (std::vector<int32_t>{3, 1, -1, -1, -1, -1, 5, 6, 7}));
  EXPECT_FALSE(BuildBlockTable(seqs, 2, &table).ok());
}

TEST(CacheSegmentsTest, GroupsTokensByBlock) {
  // Sequence A: positions 14..17 in blocks 4, 9; a padding token; sequence B: block 2 offsets 0..2.
  const std::vector<int32_t> slots = {4 * 16 + 14, 4 * 16 + 15, 9 * 16, 9 * 16 + 1, -1, 32, 33, 34};
  std::vector<CacheSegment> segs;
  ASSERT_TRUE(BuildCacheSegments(slots, &segs).ok());
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[0].block, 4);
  EXPECT_EQ(segs[0].first_offset, 14);
  EXPECT_EQ(segs[0].count, 2);
  EXPECT_EQ(segs[1].block, 9);
  EXPECT_EQ(segs[1].token_begin, 2);
  EXPECT_EQ(segs[2].block, 2);
  EXPECT_EQ(segs[2].token_begin, 5);
  EXPECT_EQ(segs[2].count, 3);
}

TEST(CacheSegmentsTest, RejectsRacesAndGaps) {
  std::vector<CacheSegment> segs;
  const std::vector<int32_t> twice = {32, 33, 64, 34};  // block 2 in two segments
  EXPECT_FALSE(BuildCacheSegments(twice, &segs).ok());
  const std::vector<int32_t> gap = {32, 34};  // offsets 0 then 2 of one block
  EXPECT_FALSE(BuildCacheSegments(gap, &segs).ok());
}

TEST(ElementwiseGridTest, ClampsBlocks) {
  EXPECT_EQ(ElementwiseGrid(0, 132).blocks, 1);
  EXPECT_EQ(ElementwiseGrid(1000, 132).blocks, 4);
  EXPECT_EQ(ElementwiseGrid(int64_t{1} << 40, 132).blocks, 132 * 32);
}

}  // namespace
}  // namespace kvgate::cuda
