// Host-side launch planning for the CUDA kernels: grid shapes, split-K factors and workspace sizes,
// plus the small integer tables (block tables, slot mappings, FP8 write segments) the kernels read.
// Plain C++20, no CUDA include: unit-tested by g++ on machines without a GPU.
//
// Dimension letters (used in every kernels/cuda file): S sequences, T tokens in a batch, Hq query
// heads, Hkv key/value heads, G = Hq / Hkv query heads per kv head, D head dim, NB blocks in the KV
// pool, B = 16 tokens per KV block, H hidden size, F FFN size.
//
// KV cache layout (per layer, K and V separate): [NB][B][Hkv][D], i.e. slot = block * B + offset,
// row [Hkv][D] per slot — the CPU backend's [P slots][Hkv][Dh] layout. Elements are bf16, or FP8
// E4M3 with one float scale per (block, kv head): scales [NB][Hkv].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cuda/cuda_status.h"

// The few planning functions the kernels evaluate too (host and device).
#if defined(__CUDACC__)
#define KVGATE_GEOMETRY_HD __host__ __device__
#else
#define KVGATE_GEOMETRY_HD
#endif

namespace kvgate::cuda {

inline constexpr int kBlockTokens = 16;    // B (the engine's kBlockSize; CudaBackend asserts they agree)
inline constexpr int kAttnThreads = 128;   // 4 warps per attention CTA
inline constexpr int kAttnWarps = 4;
inline constexpr int kPrefillQTile = 64;   // query rows per prefill CTA (16 per warp)
inline constexpr int kPrefillKvTile = 64;  // keys per prefill smem tile (4 KV blocks)
// Prefill v2 (attention_prefill_v2.cu): 8 warps x 16 rows; a row is one (query token, query head)
// pair of the CTA's kv head, so a CTA holds 128 / G tokens of all G heads (see PrefillGeometry).
inline constexpr int kPrefillV2Threads = 256;
inline constexpr int kPrefillV2Rows = 128;
inline constexpr int kPrefillV2Stages = 3;     // K/V tile buffers: the one in use + 2 in flight
inline constexpr int kPrefillV2CtasPerSm = 1;  // its launch bounds; the split rule fills one wave
inline constexpr int kMaxSplits = 128;     // upper bound on split-K partitions
// Decode CTAs per SM the group <= 4, D=128 kernel is built for (its launch bounds); the decode
// geometry sizes one wave from it. Measured on an H200 in kernels/NOTES.md ("decode v1.1").
inline constexpr int kDecodeG4D128CtasPerSm = 3;

// The decode attention kernel a launch uses. kV1 is the default everywhere: kV2 (cp.async ring per
// warp, attention_decode_v2.cu) has been compiled but never run on a GPU (kernels/NOTES.md, "decode
// v2"); a caller opts in per launch.
enum class DecodeVariant { kV1, kV2 };

// Whether a v2 kernel has matched the CPU reference on a GPU (kvgate_cuda_checks' "decode v2: every
// case matches the reference" / "prefill v2: ..." lines). CudaBackend's defaults follow these: flip
// one to true, in a change of its own, once a device run has printed that line for it (and its
// [v2] rows are not slower than v1's).
inline constexpr bool kDecodeV2Verified = false;
inline constexpr bool kPrefillV2Verified = false;

struct DecodeShape {
  int num_seqs = 0;            // S (one new token each)
  int num_q_heads = 0;         // Hq
  int num_kv_heads = 0;        // Hkv
  int head_dim = 0;            // D: 64 or 128
  int max_context_tokens = 0;  // the longest context in the batch, new token included
  DecodeVariant variant = DecodeVariant::kV1;
  // CTAs of the kernel this launch runs that fit one SM (DecodeCtasPerSm: the occupancy API), which
  // sizes the one-wave split of a small group <= 4, D = 128 launch; 0: v1's measured
  // kDecodeG4D128CtasPerSm.
  int ctas_per_sm = 0;
};

// One CTA per (kv head, sequence, split); each processes all G query heads of its kv head over
// `blocks_per_split` consecutive KV blocks. With splits > 1 the CTAs write partial results
// (o [S][Hq][splits][D] f32, lse [S][Hq][splits] f32) to a workspace merged by a reduction kernel.
// Both variants use the same grid, split rule and workspace (v2 changes only how a warp streams
// its blocks), so a v2 launch is comparable with v1 split for split.
struct DecodeGeometry {
  DecodeVariant variant = DecodeVariant::kV1;
  int splits = 1;
  int blocks_per_split = 0;
  int grid_x = 0, grid_y = 0, grid_z = 0;  // (Hkv, S, splits)
  int threads = kAttnThreads;
  size_t workspace_floats = 0;  // 0 when splits == 1
};

// Picks the split so that about 4 CTAs per SM are in flight (enough loads in flight to saturate
// HBM) while every split keeps at least 4 KV blocks (one per warp); a group <= 4, D = 128 launch
// of at most a quarter wave is split into exactly one wave of shape.ctas_per_sm CTAs per SM. Invalid shapes (non-positive
// sizes, Hq not a multiple of Hkv, G > 8, D not 64/128) are errors.
CudaStatus ChooseDecodeGeometry(const DecodeShape& shape, int num_sms, DecodeGeometry* out);

// The KV blocks [begin, end) split `split` of a decode plan reads for a sequence of `nblocks`
// blocks (both decode kernels call this). Splits hold blocks_per_split blocks each, except that the
// last one runs to the sequence's end: a plan made for a shorter context than a sequence has (a
// caller's mistake the launcher cannot see, the contexts being on the device) then costs time in
// the last split but drops no key. Splits past the sequence's end are empty (begin == end).
struct BlockRange {
  int begin = 0, end = 0;
};
KVGATE_GEOMETRY_HD constexpr BlockRange DecodeSplitBlocks(int split, int splits, int blocks_per_split,
                                                          int nblocks) {
  const int begin = split * blocks_per_split < nblocks ? split * blocks_per_split : nblocks;
  const int end = split == splits - 1 ? nblocks
                                      : (begin + blocks_per_split < nblocks ? begin + blocks_per_split : nblocks);
  return {begin, end};
}

// Decode v2: K/V stages in flight per warp (the one being consumed is one of them), and the CTAs
// per SM its group <= 4 launch bounds ask for (caps registers at 65536 / (4 * 128) = 128).
inline constexpr int kDecodeV2Stages = 2;
inline constexpr int kDecodeV2G4CtasPerSm = 4;

// Dynamic shared memory of one decode v2 CTA: per warp, kDecodeV2Stages stages of one KV block's K
// and V rows of the CTA's kv head (16 x D elements each), plus for FP8 one (K, V) scale pair per
// (warp, stage, lane). Every lane copies, and later reads, only its own chunks and scales (see
// decode_v2_layout.h), which is why the loop needs no barrier. attention_decode_v2.cu
// static_asserts its layout against this.
constexpr size_t DecodeV2SmemBytes(int head_dim, int cache_elem_bytes) {
  const size_t stage = 2 * static_cast<size_t>(kBlockTokens) * head_dim * cache_elem_bytes;
  const size_t scales = cache_elem_bytes == 1 ? 2 * 32 * sizeof(float) : 0;
  return static_cast<size_t>(kAttnWarps) * kDecodeV2Stages * (stage + scales);
}

// The prefill attention kernel a launch uses. kV1 is the default everywhere: kV2 has been compiled
// but never run on a GPU (kernels/NOTES.md, "prefill v2"); a caller opts in per launch.
// kV2Fp8Qk is v2 with S = Q K^T on FP8 tensor cores (mma m16n8k32 e4m3) for an FP8 cache: K's
// codes are multiplied as stored, Q is quantized per (token, head) row in shared memory, P V stays
// bf16 (kernels/NOTES.md, "FP8 attention"; built, never run on a GPU). Same tiles and geometry as v2.
// kV3 is wgmma with TMA-fed K/V and producer / consumer warpgroups, bf16 or f16 caches
// (attention_prefill_v3.cu, prefill_v3_layout.h; built, never run on a GPU): v2's tiles and split
// rule, kPrefillV3Threads threads.
enum class PrefillVariant { kV1, kV2, kV2Fp8Qk, kV3 };

// Whether a variant's CTA holds 128 (token, head) rows of one kv head's G heads (v2's tiles, tile
// sizes and split rule): every variant but v1.
constexpr bool PrefillPacksHeads(PrefillVariant v) { return v != PrefillVariant::kV1; }
inline constexpr int kPrefillV3Threads = 384;  // 3 warpgroups: a TMA producer, two wgmma consumers
// Threads of a variant's CTA.
constexpr int PrefillThreads(PrefillVariant v) {
  return v == PrefillVariant::kV1 ? kAttnThreads : v == PrefillVariant::kV3 ? kPrefillV3Threads : kPrefillV2Threads;
}

struct PrefillShape {
  int num_seqs = 0;            // S
  int num_q_tokens = 0;        // T: new tokens of all sequences, concatenated
  int num_q_heads = 0;         // Hq
  int num_kv_heads = 0;        // Hkv
  int head_dim = 0;            // D: 64 or 128
  int max_context_tokens = 0;  // the longest context (cached prefix + new tokens)
  PrefillVariant variant = PrefillVariant::kV1;
};

// Query tokens per tile (the tile_tokens of BuildPrefillTiles): v1 64; v2 floor(128 / G), so a v2
// CTA's 128 rows hold every (token, head) pair of its tokens for the G heads of one kv head. 0 for
// a group outside 1..8.
int PrefillTileTokens(PrefillVariant variant, int group);

// v1: one CTA per (query head, tile of 64 tokens, split), 128 threads. v2: one CTA per (kv head,
// tile of PrefillTileTokens tokens, split), 256 threads, PrefillV2SmemBytes of dynamic smem.
// Tiles come from BuildPrefillTiles with tile_tokens. splits > 1 only when there are too few tiles
// to fill the chip (a short chunk over a long cached prefix: the warm prefix-cache hit); the
// workspace is then o [T][Hq][splits][D] + lse [T][Hq][splits], for both variants.
struct PrefillGeometry {
  PrefillVariant variant = PrefillVariant::kV1;
  int tile_tokens = kPrefillQTile;
  int num_tiles = 0;
  int num_q_tokens = 0;  // T (rows of the split workspace)
  int splits = 1;
  int grid_x = 0, grid_y = 0, grid_z = 0;  // v1 (Hq, tiles, splits): heads fastest so the G heads
                                           // of a kv head run together and share K/V through L2;
                                           // v2 (Hkv, tiles, splits)
  int threads = kAttnThreads;
  size_t workspace_floats = 0;
};

// The split rule: v1 aims at about 4 CTAs per SM; v2 (kPrefillV2CtasPerSm resident) at one full
// wave, without a partial second one. Both keep at least 4 key tiles per split.
CudaStatus ChoosePrefillGeometry(const PrefillShape& shape, int num_tiles, int num_sms,
                                 PrefillGeometry* out);

// tiles [num_tiles][2] = {sequence, first query row within the sequence} for q_lens [S], one tile
// per tile_tokens rows: the variant's PrefillTileTokens (v1 64, v2 128 / G), which the launch's
// geometry must carry too (PrefillAttention refuses tiles built for another size: a v2 CTA given
// v1's 64-token tiles would leave rows unwritten). Sequences with q_len 0 get no tile. Negative
// lengths or a non-positive tile_tokens are an error.
CudaStatus BuildPrefillTiles(std::span<const int32_t> q_lens, int tile_tokens,
                             std::vector<int32_t>* tiles);
// The number of tiles BuildPrefillTiles makes; -1 for a negative length or tile_tokens <= 0.
int64_t PrefillTileCount(std::span<const int32_t> q_lens, int tile_tokens);

// How one attention call's rows divide between the two kernels. A batch's rows are grouped by
// sequence, and the engine's scheduler plans its decodes first, so the leading sequences with one
// query token each form a decode batch of their own: rows [0, decode_seqs) go through the decode
// kernel (one CTA per kv head and sequence, split over the context) instead of a 64-row prefill
// tile each that holds one live row. prefill_q_lens are the query lengths with those sequences'
// set to 0: BuildPrefillTiles gives them no tile, and the tiles' sequence indices still address
// the whole batch's arrays (no offset pointers, one staged copy serves both launches).
struct AttentionRowSplit {
  int32_t decode_seqs = 0;
  std::vector<int32_t> prefill_q_lens;  // [S]
};
// `decode_rows_apart` false: the old rule, the decode kernel only when every sequence has one
// query token (decode_seqs is then S or 0). An empty or non-increasing query_start gives S = 0
// or lengths as they are (negative ones are BuildPrefillTiles' error to report).
AttentionRowSplit SplitAttentionRows(std::span<const int32_t> query_start, bool decode_rows_apart);

// Dynamic shared memory of one v2 CTA, in bytes. Every smem K or V tile is [64 keys][D + 8] bf16:
// the 8-element pad puts the 8 rows an ldmatrix reads in 8 different 16-byte bank groups. A bf16
// cache is copied straight into kPrefillV2Stages K/V tile pairs. Any other cache (f16, FP8) lands
// raw in kPrefillV2Stages raw pairs [64][D * cache_elem_bytes] and is converted into one bf16
// pair; FP8 adds each stage's block scales, one float per (K|V, copy pass, thread): D / 64 passes.
// The Q tile [128][D + 8] is staged before the key loop in a pair's place (the same size), so it
// adds nothing. attention_prefill_v2.cu static_asserts its layout against this.
// kV2Fp8Qk pads each raw FP8 row by 16 bytes (D + 16: ldmatrix reads K's codes straight from the
// stage, conflict-free) and stages the quantized Q [128][D + 16] bytes in the last raw pair, which
// that size fits exactly, with its row scales in the pair's scale slots.
constexpr size_t PrefillV2SmemBytes(int head_dim, int cache_elem_bytes, bool cache_is_bf16, bool fp8_qk = false) {
  const size_t tile = static_cast<size_t>(kPrefillKvTile) * (head_dim + 8) * 2;
  const size_t raw = static_cast<size_t>(kPrefillKvTile) * (head_dim * cache_elem_bytes + (fp8_qk ? 16 : 0));
  if (cache_is_bf16) return kPrefillV2Stages * 2 * tile;
  const size_t scales = cache_elem_bytes == 1 ? 2 * static_cast<size_t>(head_dim / 64) * kPrefillV2Threads * 4 : 0;
  return 2 * tile + kPrefillV2Stages * (2 * raw + scales);
}

// Workspace floats for a split-K result over `rows` (sequence or token) x Hq x splits.
size_t SplitWorkspaceFloats(size_t rows, int num_q_heads, int splits, int head_dim);

// Slot of every token at positions [start_pos, start_pos + n) of a sequence whose KV blocks, in
// order, are `blocks` (block i holds positions [B i, B i + B)). Appends n slots to `slots`.
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
  int32_t first_offset = 0;  // slot offset (0..B-1) of the first token in the block
  int32_t token_begin = 0;   // index of the first token in the batch
  int32_t count = 0;         // tokens in the segment (1..B)
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
