// Host-side launch planning for the CUDA kernels: grid shapes, split-K factors and workspace sizes,
// plus the small integer tables (block tables, slot mappings, FP8 write segments) the kernels read.
// Plain C++20, no CUDA include: unit-tested by g++ on machines without a GPU.
//
// Dimension letters (used in every kernels/cuda file): S sequences, T tokens in a batch, Hq query
// heads, Hkv key/value heads, G = Hq / Hkv query heads per kv head, D head dim, NB blocks in the KV
// pool, B = 16 tokens per KV block, H hidden size, F FFN size.
//
// KV cache layout (per layer, K and V separate): [NB][B][Hkv][D], i.e. slot = block * 16 + offset,
// row [Hkv][D] per slot — the CPU backend's [P slots][Hkv][Dh] layout. Elements are bf16, or FP8
// E4M3 with one float scale per (block, kv head): scales [NB][Hkv].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cuda/cuda_status.h"

namespace kvgate::cuda {

inline constexpr int kBlockTokens = 16;    // B
inline constexpr int kAttnThreads = 128;   // 4 warps per attention CTA
inline constexpr int kAttnWarps = 4;
inline constexpr int kPrefillQTile = 64;   // query rows per prefill CTA (16 per warp)
inline constexpr int kPrefillKvTile = 64;  // keys per prefill smem tile (4 KV blocks)
inline constexpr int kMaxSplits = 128;     // upper bound on split-K partitions
// Decode CTAs per SM the group <= 4, D=128 kernel is built for (its launch bounds); the decode
// geometry sizes one wave from it. Measured on an H200 in kernels/NOTES.md ("decode v1.1").
inline constexpr int kDecodeG4D128CtasPerSm = 3;

struct DecodeShape {
  int num_seqs = 0;            // S (one new token each)
  int num_q_heads = 0;         // Hq
  int num_kv_heads = 0;        // Hkv
  int head_dim = 0;            // D: 64 or 128
  int max_context_tokens = 0;  // the longest context in the batch, new token included
};

// One CTA per (kv head, sequence, split); each processes all G query heads of its kv head over
// `blocks_per_split` consecutive KV blocks. With splits > 1 the CTAs write partial results
// (o [S][Hq][splits][D] f32, lse [S][Hq][splits] f32) to a workspace merged by a reduction kernel.
struct DecodeGeometry {
  int splits = 1;
  int blocks_per_split = 0;
  int grid_x = 0, grid_y = 0, grid_z = 0;  // (Hkv, S, splits)
  int threads = kAttnThreads;
  size_t workspace_floats = 0;  // 0 when splits == 1
};

// Picks the split so that about 4 CTAs per SM are in flight (enough loads in flight to saturate
// HBM) while every split keeps at least 4 KV blocks (one per warp). Invalid shapes (non-positive
// sizes, Hq not a multiple of Hkv, G > 8, D not 64/128) are errors.
CudaStatus ChooseDecodeGeometry(const DecodeShape& shape, int num_sms, DecodeGeometry* out);

struct PrefillShape {
  int num_seqs = 0;            // S
  int num_q_tokens = 0;        // T: new tokens of all sequences, concatenated
  int num_q_heads = 0;         // Hq
  int num_kv_heads = 0;        // Hkv
  int head_dim = 0;            // D: 64 or 128
  int max_context_tokens = 0;  // the longest context (cached prefix + new tokens)
};

// One CTA per (query head, query tile of 64 rows, split). Tiles come from BuildPrefillTiles.
// splits > 1 only when there are too few tiles to fill the chip (a short chunk over a long cached
// prefix: the warm prefix-cache hit); the workspace is then o [T][Hq][splits][D] + lse [T][Hq][splits].
struct PrefillGeometry {
  int num_tiles = 0;
  int num_q_tokens = 0;  // T (rows of the split workspace)
  int splits = 1;
  int grid_x = 0, grid_y = 0, grid_z = 0;  // (Hq, tiles, splits): heads fastest so the G heads of a
                                           // kv head run together and share K/V through L2
  int threads = kAttnThreads;
  size_t workspace_floats = 0;
};

CudaStatus ChoosePrefillGeometry(const PrefillShape& shape, int num_tiles, int num_sms,
                                 PrefillGeometry* out);

// tiles [num_tiles][2] = {sequence, first query row within the sequence} for q_lens [S].
// Sequences with q_len 0 get no tile. Negative lengths are an error.
CudaStatus BuildPrefillTiles(std::span<const int32_t> q_lens, std::vector<int32_t>* tiles);

// Workspace floats for a split-K result over `rows` (sequence or token) x Hq x splits.
size_t SplitWorkspaceFloats(size_t rows, int num_q_heads, int splits, int head_dim);

// Slot of every token at positions [start_pos, start_pos + n) of a sequence whose KV blocks, in
// order, are `blocks` (block i holds positions [16 i, 16 i + 16)). Appends n slots to `slots`.
// Errors: a position past the blocks given, or a block id outside [0, num_pool_blocks).
CudaStatus AppendSlotMapping(std::span<const int32_t> blocks, int64_t start_pos, int64_t n,
                             int32_t num_pool_blocks, std::vector<int32_t>* slots);

// table [S][max_blocks] row-major: sequence s's blocks then -1 padding. Error when a sequence has
// more than max_blocks blocks.
CudaStatus BuildBlockTable(std::span<const std::vector<int32_t>> seq_blocks, int max_blocks,
                           std::vector<int32_t>* table);

// A run of consecutive batch tokens that land in one KV block, in increasing slot order. The FP8
// cache writer gives each segment to one CTA, which owns the block's scale while it rescales.
struct CacheSegment {
  int32_t block = 0;         // physical block id
  int32_t first_offset = 0;  // slot offset (0..15) of the first token in the block
  int32_t token_begin = 0;   // index of the first token in the batch
  int32_t count = 0;         // tokens in the segment (1..16)
};

// Segments of `slots` [T] (negative = skip the token). Errors: two segments writing one block (a
// data race between CTAs), or tokens of one segment not at consecutive offsets.
CudaStatus BuildCacheSegments(std::span<const int32_t> slots, std::vector<CacheSegment>* segments);

// Blocks x threads for a grid-stride elementwise kernel over n items (capped at 32 waves of 1024).
struct Grid1D {
  int blocks = 0;
  int threads = 256;
};
Grid1D ElementwiseGrid(int64_t n, int num_sms);

}  // namespace kvgate::cuda
