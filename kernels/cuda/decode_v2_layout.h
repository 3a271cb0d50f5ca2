// Which bytes each lane of a decode v2 warp copies and reads (attention_decode_v2.cu). Plain C++
// usable on host and device: tests/cuda/decode_v2_layout_test.cc checks the maps on the CPU.
//
// The lane -> (token, chunk) map is v1's: D / 8 lanes share one token row, lane L holds elements
// [8 (L % (D/8)), +8) of token it * (32 / (D/8)) + L / (D/8) at iteration it (DecodeV2Iters(D)
// iterations cover the block's kBlockTokens tokens). A chunk is 8 elements: 16 bytes of a bf16/f16 cache, 8 bytes of FP8.
//
// The shared-memory ring of a warp is private per lane: lane L copies exactly the chunks it will
// read, into addresses only it uses. So cp.async.wait_group (which makes a thread's own copies
// visible to that thread) is the only synchronisation the loop needs: no __syncwarp, no barrier.
// Within a stage the chunks are [K|V][it][lane], so the 32 lanes of one iteration touch 32
// consecutive chunks (512 or 256 contiguous bytes): the minimum number of shared-memory wavefronts
// for 16- or 8-byte accesses, for the cp.async writes and for the reads alike.
#pragma once

#include <cstddef>

#include "kernels/cuda/geometry.h"

#if defined(__CUDACC__)
#define KVGATE_DECODE_V2_HD __host__ __device__
#else
#define KVGATE_DECODE_V2_HD
#endif

namespace kvgate::cuda::decode_v2 {

// Iterations of one warp over a KV block: 32 lanes cover 32 / (D / 8) token rows per iteration.
KVGATE_DECODE_V2_HD constexpr int DecodeV2Iters(int head_dim) { return kBlockTokens * (head_dim / 8) / 32; }

struct TokChunk {
  int token;  // 0..kBlockTokens-1 within the KV block
  int chunk;  // 0..D/8-1: elements [8 chunk, 8 chunk + 8)
};

// The token row and chunk lane `lane` copies and reads at iteration `it` of a block.
KVGATE_DECODE_V2_HD constexpr TokChunk LaneChunk(int head_dim, int lane, int it) {
  const int lanes_per_tok = head_dim / 8;
  return {it * (32 / lanes_per_tok) + lane / lanes_per_tok, lane % lanes_per_tok};
}

// Byte offset, within warp `warp`'s part of the ring, of the chunk lane `lane` copies for iteration
// `it` of K (kv = 0) or V (kv = 1) in stage `stage`; chunk_bytes = 8 x element size. The scales
// (FP8) follow all warps' chunks: ScaleOffset.
KVGATE_DECODE_V2_HD constexpr size_t ChunkOffset(int head_dim, int chunk_bytes, int stages, int warp,
                                                 int stage, int kv, int it, int lane) {
  const int iters = DecodeV2Iters(head_dim);
  const size_t stage_bytes = static_cast<size_t>(2) * iters * 32 * chunk_bytes;
  return (static_cast<size_t>(warp) * stages + stage) * stage_bytes +
         ((static_cast<size_t>(kv) * iters + it) * 32 + lane) * chunk_bytes;
}

// Byte offset of the (K scale, V scale) float pair lane `lane` of warp `warp` copies for `stage`
// (FP8 only), after `chunks_bytes` = all warps' chunk stages.
KVGATE_DECODE_V2_HD constexpr size_t ScaleOffset(size_t chunks_bytes, int stages, int warp, int stage,
                                                 int lane) {
  return chunks_bytes + ((static_cast<size_t>(warp) * stages + stage) * 32 + lane) * 2 * sizeof(float);
}

}  // namespace kvgate::cuda::decode_v2
