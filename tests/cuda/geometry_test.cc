#include "kernels/cuda/geometry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <tuple>
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

// DecodeShape::ctas_per_sm (the occupancy API's answer for the kernel launched) sizes the one-wave
// split of a small group <= 4, D = 128 launch; 0 keeps v1's measured 3; other shapes ignore it.
TEST(DecodeGeometryTest, OneWaveSplitFollowsTheKernelsOccupancy) {
  DecodeGeometry g;
  DecodeShape s{1, 32, 8, 128, 100000};
  ASSERT_TRUE(ChooseDecodeGeometry(s, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 49);  // 3 x 132 / 8
  s.ctas_per_sm = 3;
  ASSERT_TRUE(ChooseDecodeGeometry(s, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 49);
  s.ctas_per_sm = 4;  // e.g. decode v2 on an FP8 cache
  ASSERT_TRUE(ChooseDecodeGeometry(s, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 66);  // 4 x 132 / 8
  DecodeShape small_d{16, 9, 3, 64, 2000};
  DecodeGeometry a, b;
  ASSERT_TRUE(ChooseDecodeGeometry(small_d, kH200Sms, &a).ok());
  small_d.ctas_per_sm = 4;
  ASSERT_TRUE(ChooseDecodeGeometry(small_d, kH200Sms, &b).ok());
  EXPECT_EQ(a.splits, b.splits);  // D = 64: v1's 4-CTAs-per-SM target, as measured best
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

TEST(DecodeGeometryTest, V1IsTheDefault) {
  DecodeGeometry g;
  ASSERT_TRUE(ChooseDecodeGeometry({64, 32, 8, 128, 4097}, kH200Sms, &g).ok());
  EXPECT_EQ(g.variant, DecodeVariant::kV1);
}

// v2 changes only how a warp streams its blocks: the grid, split plan and workspace must be v1's,
// so the split merge and the device checks' v1/v2 comparison hold split for split.
TEST(DecodeGeometryTest, V2PlansExactlyAsV1) {
  std::mt19937 rng(11);
  for (int i = 0; i < 5000; ++i) {
    const int hkv = 1 << (rng() % 4), g_ = 1 + static_cast<int>(rng() % 8);
    DecodeShape s{1 + static_cast<int>(rng() % 300), hkv * g_, hkv, rng() % 2 ? 64 : 128,
                  1 + static_cast<int>(rng() % 200000)};
    const int sms = 1 + static_cast<int>(rng() % 200);
    DecodeGeometry g1, g2;
    ASSERT_TRUE(ChooseDecodeGeometry(s, sms, &g1).ok());
    s.variant = DecodeVariant::kV2;
    ASSERT_TRUE(ChooseDecodeGeometry(s, sms, &g2).ok());
    EXPECT_EQ(g2.variant, DecodeVariant::kV2);
    ASSERT_EQ(g2.splits, g1.splits);
    ASSERT_EQ(g2.blocks_per_split, g1.blocks_per_split);
    ASSERT_EQ(g2.grid_x, g1.grid_x);
    ASSERT_EQ(g2.grid_y, g1.grid_y);
    ASSERT_EQ(g2.grid_z, g1.grid_z);
    ASSERT_EQ(g2.threads, g1.threads);
    ASSERT_EQ(g2.workspace_floats, g1.workspace_floats);
  }
}

// The ring per CTA: 4 warps x 2 stages x (K + V of one 16-token block) [+ FP8 scales]. A bf16 / f16
// D=128 CTA (64 KB + v1's 8 KB merge arrays) fits 3 per SM on an H200 (228 KB, 1 KB reserved per
// CTA), FP8 D=128 and D=64 fit the 4 the register cap allows.
TEST(DecodeGeometryTest, V2SharedMemory) {
  EXPECT_EQ(DecodeV2SmemBytes(128, 2), size_t{4} * 2 * 2 * 16 * 128 * 2);  // 65,536
  EXPECT_EQ(DecodeV2SmemBytes(64, 2), size_t{32768});
  EXPECT_EQ(DecodeV2SmemBytes(128, 1), size_t{32768} + 4 * 2 * 32 * 8);
  EXPECT_EQ(DecodeV2SmemBytes(64, 1), size_t{16384} + 4 * 2 * 32 * 8);
  constexpr size_t kSm = 228 * 1024, kReserved = 1024, kMergeG4D128 = 4 * 4 * 128 * 4 + 2 * 4 * 4 * 4;
  EXPECT_EQ(kSm / (DecodeV2SmemBytes(128, 2) + kMergeG4D128 + kReserved), 3u);
  EXPECT_GE(kSm / (DecodeV2SmemBytes(128, 1) + kMergeG4D128 + kReserved), 4u);
  EXPECT_GE(kSm / (DecodeV2SmemBytes(64, 2) + kMergeG4D128 / 2 + kReserved), 4u);
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

TEST(PrefillGeometryTest, V2ServesTheGroupOfAKvHeadPerCta) {
  EXPECT_EQ(PrefillTileTokens(PrefillVariant::kV1, 4), kPrefillQTile);
  EXPECT_EQ(PrefillTileTokens(PrefillVariant::kV2, 4), 32);   // 32 tokens x 4 heads = 128 rows
  EXPECT_EQ(PrefillTileTokens(PrefillVariant::kV2, 3), 42);   // 126 rows, 2 idle
  EXPECT_EQ(PrefillTileTokens(PrefillVariant::kV2, 1), 128);
  EXPECT_EQ(PrefillTileTokens(PrefillVariant::kV2, 8), 16);
  EXPECT_EQ(PrefillTileTokens(PrefillVariant::kV2, 9), 0);
  for (int g = 1; g <= 8; ++g) EXPECT_LE(PrefillTileTokens(PrefillVariant::kV2, g) * g, kPrefillV2Rows);

  // The cold chunk: 8192 tokens / 32 per tile = 256 tiles x 8 kv heads, no split.
  PrefillShape chunk{1, 8192, 32, 8, 128, 8192};
  chunk.variant = PrefillVariant::kV2;
  PrefillGeometry g;
  ASSERT_TRUE(ChoosePrefillGeometry(chunk, 256, kH200Sms, &g).ok());
  EXPECT_EQ(g.variant, PrefillVariant::kV2);
  EXPECT_EQ(g.tile_tokens, 32);
  EXPECT_EQ(g.grid_x, 8);
  EXPECT_EQ(g.grid_y, 256);
  EXPECT_EQ(g.grid_z, 1);
  EXPECT_EQ(g.threads, kPrefillV2Threads);
  EXPECT_EQ(g.workspace_floats, 0u);

  // The warm tail: 16 tokens fit one tile per kv head (8 CTAs); splits fill exactly one wave of
  // kPrefillV2CtasPerSm CTAs per SM and not one CTA more.
  PrefillShape tail{1, 16, 32, 8, 128, 100000};
  tail.variant = PrefillVariant::kV2;
  ASSERT_TRUE(ChoosePrefillGeometry(tail, 1, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, kH200Sms * kPrefillV2CtasPerSm / 8);
  EXPECT_LE(g.grid_x * g.grid_y * g.grid_z, kH200Sms * kPrefillV2CtasPerSm);
  EXPECT_EQ(g.workspace_floats, size_t{16} * 32 * static_cast<size_t>(g.splits) * 129);  // same layout as v1
  // A short context still keeps 4 key tiles per split.
  tail.max_context_tokens = 512;
  ASSERT_TRUE(ChoosePrefillGeometry(tail, 1, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 2);
  // A launch of a wave or more is never split.
  PrefillShape wide{1, 16, 32, 8, 128, 100000};
  wide.variant = PrefillVariant::kV2;
  ASSERT_TRUE(ChoosePrefillGeometry(wide, kH200Sms, kH200Sms, &g).ok());
  EXPECT_EQ(g.splits, 1);

  // The default stays v1.
  ASSERT_TRUE(ChoosePrefillGeometry({1, 8192, 32, 8, 128, 8192}, 128, kH200Sms, &g).ok());
  EXPECT_EQ(g.variant, PrefillVariant::kV1);
  EXPECT_EQ(g.tile_tokens, kPrefillQTile);
  EXPECT_EQ(g.threads, kAttnThreads);
}

TEST(PrefillGeometryTest, V2SharedMemoryFitsAnSm) {
  constexpr size_t kSmemPerBlockOptin = 227 * 1024;  // sm_90
  // bf16 D=128: kPrefillV2Stages pairs of [64][136] bf16 tiles.
  EXPECT_EQ(PrefillV2SmemBytes(128, 2, true), size_t{kPrefillV2Stages} * 2 * 64 * 136 * 2);
  EXPECT_EQ(PrefillV2SmemBytes(64, 2, true), size_t{kPrefillV2Stages} * 2 * 64 * 72 * 2);
  // f16: one bf16 pair + raw stages; FP8: raw stages + one float scale per (K|V, pass, thread).
  EXPECT_EQ(PrefillV2SmemBytes(128, 2, false), size_t{2} * 64 * 136 * 2 + size_t{kPrefillV2Stages} * 2 * 64 * 256);
  EXPECT_EQ(PrefillV2SmemBytes(128, 1, false),
            size_t{2} * 64 * 136 * 2 + size_t{kPrefillV2Stages} * (2 * 64 * 128 + 2 * 2 * 256 * 4));
  EXPECT_EQ(PrefillV2SmemBytes(64, 1, false),
            size_t{2} * 64 * 72 * 2 + size_t{kPrefillV2Stages} * (2 * 64 * 64 + 2 * 1 * 256 * 4));
  for (int d : {64, 128}) {
    for (auto [bytes, bf16] : {std::pair{2, true}, std::pair{2, false}, std::pair{1, false}}) {
      const size_t smem = PrefillV2SmemBytes(d, bytes, bf16);
      EXPECT_LE(smem * kPrefillV2CtasPerSm, kSmemPerBlockOptin) << "D=" << d << " bytes=" << bytes;
      // The Q tile [128][D + 8] is staged in the space of one K/V tile pair.
      EXPECT_EQ(size_t{kPrefillV2Rows} * (d + 8) * 2, size_t{2} * 64 * (d + 8) * 2);
    }
  }
  // The padded row pitch is 16 bytes past a multiple of 128: an ldmatrix's 8 rows hit 8 bank groups.
  EXPECT_EQ((128 + 8) * 2 % 128, 16);
  EXPECT_EQ((64 + 8) * 2 % 128, 16);
  // kV2Fp8Qk: raw FP8 rows padded to D + 16 bytes; the quantized Q [128][D + 16] fills one raw pair
  // exactly, its 128 row scales fit that pair's scale slots.
  for (int d : {64, 128}) {
    const size_t raw_pair = size_t{2} * 64 * (d + 16), scales = size_t{2} * (d / 64) * 256 * 4;
    EXPECT_EQ(PrefillV2SmemBytes(d, 1, false, true),
              size_t{2} * 64 * (d + 8) * 2 + size_t{kPrefillV2Stages} * (raw_pair + scales));
    EXPECT_LE(PrefillV2SmemBytes(d, 1, false, true) * kPrefillV2CtasPerSm, kSmemPerBlockOptin);
    EXPECT_EQ(size_t{kPrefillV2Rows} * (d + 16), raw_pair);
    EXPECT_LE(size_t{kPrefillV2Rows} * 4, scales);
  }
}

TEST(PrefillGeometryTest, V3HasV2sTilesAndThreeWarpgroups) {
  EXPECT_TRUE(PrefillPacksHeads(PrefillVariant::kV3));
  EXPECT_EQ(PrefillThreads(PrefillVariant::kV3), 384);
  EXPECT_EQ(PrefillThreads(PrefillVariant::kV2), kPrefillV2Threads);
  EXPECT_EQ(PrefillThreads(PrefillVariant::kV1), kAttnThreads);
  PrefillShape shape{1, 16, 32, 8, 128, 100000};
  PrefillGeometry v2, v3;
  shape.variant = PrefillVariant::kV2;
  ASSERT_TRUE(ChoosePrefillGeometry(shape, 1, kH200Sms, &v2).ok());
  shape.variant = PrefillVariant::kV3;
  ASSERT_TRUE(ChoosePrefillGeometry(shape, 1, kH200Sms, &v3).ok());
  EXPECT_EQ(v3.threads, kPrefillV3Threads);
  EXPECT_EQ(std::tuple(v3.tile_tokens, v3.splits, v3.grid_x, v3.grid_y, v3.grid_z, v3.workspace_floats),
            std::tuple(v2.tile_tokens, v2.splits, v2.grid_x, v2.grid_y, v2.grid_z, v2.workspace_floats));
}

TEST(PrefillGeometryTest, Fp8QkIsV2sGeometry) {
  EXPECT_TRUE(PrefillPacksHeads(PrefillVariant::kV2Fp8Qk));
  EXPECT_TRUE(PrefillPacksHeads(PrefillVariant::kV2));
  EXPECT_FALSE(PrefillPacksHeads(PrefillVariant::kV1));
  for (int g = 1; g <= 8; ++g) EXPECT_EQ(PrefillTileTokens(PrefillVariant::kV2Fp8Qk, g), PrefillTileTokens(PrefillVariant::kV2, g));
  for (const int tiles : {1, 256}) {
    PrefillShape shape{1, 8192, 32, 8, 128, 100000};
    PrefillGeometry v2, q8;
    shape.variant = PrefillVariant::kV2;
    ASSERT_TRUE(ChoosePrefillGeometry(shape, tiles, kH200Sms, &v2).ok());
    shape.variant = PrefillVariant::kV2Fp8Qk;
    ASSERT_TRUE(ChoosePrefillGeometry(shape, tiles, kH200Sms, &q8).ok());
    EXPECT_EQ(q8.variant, PrefillVariant::kV2Fp8Qk);
    EXPECT_EQ(std::tuple(q8.tile_tokens, q8.splits, q8.grid_x, q8.grid_y, q8.grid_z, q8.threads, q8.workspace_floats),
              std::tuple(v2.tile_tokens, v2.splits, v2.grid_x, v2.grid_y, v2.grid_z, v2.threads, v2.workspace_floats));
  }
}

TEST(PrefillTilesTest, TilesPerSequence) {
  std::vector<int32_t> tiles;
  const std::vector<int32_t> q_lens = {130, 0, 64, 1};
  ASSERT_TRUE(BuildPrefillTiles(q_lens, PrefillTileTokens(PrefillVariant::kV1, 4), &tiles).ok());
  EXPECT_EQ(tiles, (std::vector<int32_t>{0, 0, 0, 64, 0, 128, 2, 0, 3, 0}));
  EXPECT_EQ(PrefillTileCount(q_lens, 64), 5);
  const std::vector<int32_t> bad = {3, -1};
  EXPECT_FALSE(BuildPrefillTiles(bad, 64, &tiles).ok());
  EXPECT_EQ(PrefillTileCount(bad, 64), -1);
  // v2 tiles for G = 3: 42 tokens each.
  ASSERT_TRUE(BuildPrefillTiles(q_lens, PrefillTileTokens(PrefillVariant::kV2, 3), &tiles).ok());
  EXPECT_EQ(tiles, (std::vector<int32_t>{0, 0, 0, 42, 0, 84, 0, 126, 2, 0, 2, 42, 3, 0}));
  EXPECT_EQ(PrefillTileCount(q_lens, 42), 7);
  EXPECT_FALSE(BuildPrefillTiles(q_lens, 0, &tiles).ok());
  EXPECT_EQ(PrefillTileCount(q_lens, 0), -1);
}

// Every tile size the variants use: the count is the vector's, and the tiles cover each sequence's
// rows exactly once (a v2 CTA given v1's tiles would not: its rows past 128 / G stay unwritten).
TEST(PrefillTilesTest, TilesCoverEveryRowOnceForEveryVariant) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> q_lens(1 + rng() % 6);
    for (auto& q : q_lens) q = static_cast<int32_t>(rng() % 300);
    for (PrefillVariant v : {PrefillVariant::kV1, PrefillVariant::kV2})
      for (int g = 1; g <= 8; ++g) {
        const int tt = PrefillTileTokens(v, g);
        std::vector<int32_t> tiles;
        ASSERT_TRUE(BuildPrefillTiles(q_lens, tt, &tiles).ok());
        ASSERT_EQ(static_cast<int64_t>(tiles.size() / 2), PrefillTileCount(q_lens, tt));
        std::vector<std::vector<int>> covered(q_lens.size());
        for (size_t s = 0; s < q_lens.size(); ++s) covered[s].assign(static_cast<size_t>(q_lens[s]), 0);
        for (size_t i = 0; i < tiles.size(); i += 2)
          for (int r = tiles[i + 1]; r < std::min(tiles[i + 1] + tt, q_lens[static_cast<size_t>(tiles[i])]); ++r)
            ++covered[static_cast<size_t>(tiles[i])][static_cast<size_t>(r)];
        for (const auto& c : covered)
          for (int n : c) ASSERT_EQ(n, 1) << "variant " << static_cast<int>(v) << " G " << g;
      }
  }
}

// A mixed step: the leading one-token sequences go to the decode kernel, every other row to
// exactly one prefill tile, and no row to both (a one-token sequence after a prefill stays in
// prefill: the decode launch takes rows [0, decode_seqs) only).
TEST(AttentionRowSplitTest, LeadingDecodesGoToTheDecodeKernelEveryOtherRowToOneTile) {
  const std::vector<int32_t> mixed = {0, 1, 2, 3, 40, 41, 105};  // q_lens 1 1 1 37 1 64
  AttentionRowSplit split = SplitAttentionRows(mixed, true);
  EXPECT_EQ(split.decode_seqs, 3);
  EXPECT_EQ(split.prefill_q_lens, (std::vector<int32_t>{0, 0, 0, 37, 1, 64}));
  std::vector<int32_t> tiles;
  ASSERT_TRUE(BuildPrefillTiles(split.prefill_q_lens, 64, &tiles).ok());
  EXPECT_EQ(tiles, (std::vector<int32_t>{3, 0, 4, 0, 5, 0}));
  // The old rule: a mixed step is all prefill.
  split = SplitAttentionRows(mixed, false);
  EXPECT_EQ(split.decode_seqs, 0);
  EXPECT_EQ(split.prefill_q_lens, (std::vector<int32_t>{1, 1, 1, 37, 1, 64}));
  // A pure decode step is all decode under both rules: no tile.
  const std::vector<int32_t> decode = {0, 1, 2, 3};
  for (bool apart : {true, false}) {
    split = SplitAttentionRows(decode, apart);
    EXPECT_EQ(split.decode_seqs, 3);
    EXPECT_EQ(PrefillTileCount(split.prefill_q_lens, 64), 0);
  }
  // A prefill first: nothing goes to the decode kernel.
  split = SplitAttentionRows(std::vector<int32_t>{0, 5, 6}, true);
  EXPECT_EQ(split.decode_seqs, 0);
  EXPECT_EQ(SplitAttentionRows(std::vector<int32_t>{}, true).decode_seqs, 0);
  EXPECT_EQ(SplitAttentionRows(std::vector<int32_t>{0}, true).prefill_q_lens.size(), 0u);
}

// Random batches: the decode rows and the tiles' rows partition [0, T) exactly.
TEST(AttentionRowSplitTest, DecodeRowsAndTilesPartitionTheBatch) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> q_start = {0};
    const int seqs = 1 + static_cast<int>(rng() % 7);
    for (int s = 0; s < seqs; ++s) q_start.push_back(q_start.back() + (rng() % 2 ? 1 : 1 + static_cast<int>(rng() % 150)));
    const AttentionRowSplit split = SplitAttentionRows(q_start, trial % 3 != 0);
    std::vector<int> covered(static_cast<size_t>(q_start.back()), 0);
    for (int s = 0; s < split.decode_seqs; ++s) {
      ASSERT_EQ(q_start[static_cast<size_t>(s) + 1] - q_start[static_cast<size_t>(s)], 1);
      ++covered[static_cast<size_t>(q_start[static_cast<size_t>(s)])];
    }
    for (int tt : {64, 42, 16}) {
      std::vector<int> rows = covered;
      std::vector<int32_t> tiles;
      ASSERT_TRUE(BuildPrefillTiles(split.prefill_q_lens, tt, &tiles).ok());
      for (size_t i = 0; i < tiles.size(); i += 2) {
        const auto seq = static_cast<size_t>(tiles[i]);
        for (int r = tiles[i + 1]; r < std::min(tiles[i + 1] + tt, split.prefill_q_lens[seq]); ++r)
          ++rows[static_cast<size_t>(q_start[seq] + r)];
      }
      for (int n : rows) ASSERT_EQ(n, 1) << "trial " << trial;
    }
  }
}

// The last split runs to the sequence's end, so a plan made for a shorter context still covers
// every block exactly once; the other splits are unchanged.
TEST(DecodeGeometryTest, SplitsCoverEveryBlockOnceEvenPastThePlannedContext) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const int planned = 1 + static_cast<int>(rng() % 20000);
    DecodeGeometry geo;
    ASSERT_TRUE(ChooseDecodeGeometry({1 + static_cast<int>(rng() % 8), 32, 8, 128, planned}, 132, &geo).ok());
    const int planned_blocks = (planned + kBlockTokens - 1) / kBlockTokens;
    for (int nblocks : {1, planned_blocks, planned_blocks + 1, 3 * planned_blocks + 7}) {
      std::vector<int> seen(static_cast<size_t>(nblocks), 0);
      for (int sp = 0; sp < geo.splits; ++sp) {
        const BlockRange r = DecodeSplitBlocks(sp, geo.splits, geo.blocks_per_split, nblocks);
        ASSERT_LE(r.begin, r.end);
        if (sp < geo.splits - 1 && nblocks >= (sp + 1) * geo.blocks_per_split) {
          ASSERT_EQ(r.end - r.begin, geo.blocks_per_split);
        }
        for (int b = r.begin; b < r.end; ++b) ++seen[static_cast<size_t>(b)];
      }
      for (int n : seen) ASSERT_EQ(n, 1) << "planned " << planned << " blocks " << nblocks;
    }
  }
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
