// Decode v2's per-lane ring addresses (kernels/cuda/decode_v2_layout.h), checked on the CPU: the
// kernel's correctness without barriers rests on every lane copying and reading only its own bytes,
// and its speed on each iteration's 32 lanes touching one contiguous span of shared memory.
#include "kernels/cuda/decode_v2_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "kernels/cuda/geometry.h"

namespace kvgate::cuda {
namespace {

using decode_v2::ChunkOffset;
using decode_v2::LaneChunk;
using decode_v2::ScaleOffset;

// The (token, chunk) pairs of all lanes and iterations cover a block's 16 x D elements exactly once
// (v1's map, which the kernel's masks and the merge assume).
TEST(DecodeV2LayoutTest, LanesCoverTheBlockOnce) {
  for (int d : {64, 128}) {
    std::set<std::pair<int, int>> seen;
    for (int it = 0; it < decode_v2::DecodeV2Iters(d); ++it)
      for (int lane = 0; lane < 32; ++lane) {
        const auto tc = LaneChunk(d, lane, it);
        ASSERT_GE(tc.token, 0);
        ASSERT_LT(tc.token, kBlockTokens);
        ASSERT_GE(tc.chunk, 0);
        ASSERT_LT(tc.chunk, d / 8);
        EXPECT_EQ(tc.chunk, lane % (d / 8));  // the chunk the merge assumes (DecodeMergeAndStore)
        // The kernel's masks use token = it * tokens-per-iteration + the lane's token at it = 0.
        EXPECT_EQ(tc.token, it * (32 / (d / 8)) + LaneChunk(d, lane, 0).token);
        EXPECT_TRUE(seen.insert({tc.token, tc.chunk}).second) << d << " " << it << " " << lane;
      }
    EXPECT_EQ(seen.size(), static_cast<size_t>(kBlockTokens * d / 8));
  }
}

// Every (warp, stage, K|V, iteration, lane) has its own chunk inside DecodeV2SmemBytes, scales
// included: no two lanes (and no two stages) share a byte, which is what lets the loop skip every
// barrier. The 32 lanes of one (warp, stage, K|V, iteration) are contiguous and in lane order:
// 512 bytes (bf16) or 256 (FP8) per access, the fewest shared-memory wavefronts there are.
TEST(DecodeV2LayoutTest, ChunksArePrivateContiguousAndFit) {
  for (int d : {64, 128})
    for (int elem : {1, 2}) {
      const int cb = 8 * elem, iters = decode_v2::DecodeV2Iters(d), stages = kDecodeV2Stages;
      const size_t total = DecodeV2SmemBytes(d, elem);
      std::vector<int> owner(total, -1);
      size_t chunks_bytes = 0;
      int id = 0;
      for (int w = 0; w < kAttnWarps; ++w)
        for (int st = 0; st < stages; ++st)
          for (int kv = 0; kv < 2; ++kv)
            for (int it = 0; it < iters; ++it) {
              const size_t lane0 = ChunkOffset(d, cb, stages, w, st, kv, it, 0);
              ASSERT_EQ(lane0 % 16, 0u);  // cp.async / 16-byte loads need natural alignment
              for (int lane = 0; lane < 32; ++lane, ++id) {
                const size_t off = ChunkOffset(d, cb, stages, w, st, kv, it, lane);
                ASSERT_EQ(off, lane0 + static_cast<size_t>(lane) * cb);
                ASSERT_LE(off + cb, total);
                chunks_bytes = std::max(chunks_bytes, off + cb);
                for (int b = 0; b < cb; ++b) {
                  ASSERT_EQ(owner[off + b], -1) << "overlap at " << off + b;
                  owner[off + b] = id;
                }
              }
            }
      EXPECT_EQ(chunks_bytes, static_cast<size_t>(kAttnWarps) * stages * 2 * kBlockTokens * d * elem);
      if (elem == 1) {
        for (int w = 0; w < kAttnWarps; ++w)
          for (int st = 0; st < stages; ++st)
            for (int lane = 0; lane < 32; ++lane, ++id) {
              const size_t off = ScaleOffset(chunks_bytes, stages, w, st, lane);
              ASSERT_EQ(off % 8, 0u);  // read back as one float2
              ASSERT_LE(off + 8, total);
              for (int b = 0; b < 8; ++b) {
                ASSERT_EQ(owner[off + b], -1);
                owner[off + b] = id;
              }
            }
      }
      for (size_t b = 0; b < total; ++b) ASSERT_NE(owner[b], -1) << "unused byte " << b;
    }
}

}  // namespace
}  // namespace kvgate::cuda
