// Prefill attention v2 over the paged KV cache (built; NEVER RUN ON A GPU yet: kernels/NOTES.md,
// "prefill v2"). Same arguments, outputs, split-K workspace and numerics as v1 (bf16 in, f32
// accumulate, online softmax in the log2 domain); PrefillGeometry::variant selects it.
//
// What changes against v1, and why:
// - CTA = (kv head, query tile, split), 8 warps x 16 rows = 128 rows. A row is one (token, head)
//   pair: row r holds token q0 + r / G of query head kvh * G + r % G, so a tile holds 128 / G
//   tokens of all G heads and each K/V tile in shared memory serves every head of its kv head
//   (v1 gathered it once per query head). It also fills the CTA for a short chunk: the warm
//   prefix hit's 16 tokens x 4 heads use 64 of 128 rows, where v1 used 16 of 64.
// - K/V tiles of 64 keys are gathered through the block table with cp.async into a ring of
//   kPrefillV2Stages buffers: tiles j + 1 .. j + stages - 1 are in flight while tile j is
//   multiplied. The block-table entries are read one tile earlier still, so no copy waits on an
//   index. FP8 / f16 caches land raw (FP8 block scales ride along) and are converted into one tile
//   pair (FP8: bf16 x block scale; f16: copied, for f16 mma) after the wait, by the thread that
//   copied them.
// - Fragments come from shared memory with ldmatrix.x4 (Q once, K per tile) and ldmatrix.x4.trans
//   (V): one instruction per two mma B operands instead of four 32-bit (K) or eight 16-bit (V)
//   shared loads. Tile rows are padded to D + 8 elements so an 8-row ldmatrix is conflict-free.
// - Causal skipping per warp: a warp does no math on a tile whose first key is past its last row's
//   position, and masks only tiles that reach past its first row's position. Tiles are scheduled
//   last first (the longest causal rows start first, so the short ones fill the tail).
// - Softmax exponentials use ex2.approx directly.
//
// kQk8 (PrefillVariant::kV2Fp8Qk, FP8 cache only): S = Q K^T on FP8 tensor cores, mma m16n8k32
// e4m3, which do twice the bf16 rate. K's codes are multiplied as the cache stores them, read by
// ldmatrix straight from the raw stage (rows padded to D + 16 bytes), and only V is converted to
// bf16 for P V. Q is quantized once per CTA: each (token, head) row to E4M3 under its own scale
// (amax / 448, Fp8BlockScale), so S = dot(codes) x q row scale x K block scale, applied with the
// softmax scale. What that costs against bf16 Q K^T the device check reports ("fp8 Q.K" rows).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/prefill_tile_math.cuh"
#include "kernels/cuda/prefill_v2_layout.h"

namespace kvgate::cuda {
namespace {

// Shared-memory layout of one CTA, in bytes (PrefillV2SmemBytes is the host's copy, checked below).
template <typename CacheT, int Dim, bool Qk8 = false>
struct Layout {
  static constexpr int D = Dim;
  static constexpr int kStages = kPrefillV2Stages;
  static constexpr bool kDirect = std::is_same_v<CacheT, __nv_bfloat16>;  // cp.async into bf16 tiles
  static constexpr bool kFp8 = std::is_same_v<CacheT, uint8_t>;
  static constexpr bool kQk8 = Qk8;
  static_assert(!kQk8 || kFp8, "FP8 Q.K^T reads an FP8 cache");
  static constexpr int kPitch = D + 8;  // bf16 elements per tile row (272 or 144 bytes: 16 mod 128)
  static constexpr int kTileBytes = kPrefillKvTile * kPitch * 2;
  static constexpr int kRowBytes = D * static_cast<int>(sizeof(CacheT));  // one key's head in cache
  static constexpr int kRawPitch = kRowBytes + (kQk8 ? 16 : 0);            // ... in a raw stage
  static constexpr int kChunks = kRowBytes / 16;                           // cp.async chunks per key
  // Each thread copies chunk (tid % kChunks) of key rows tid / kChunks + i * kRowsPerPass.
  static constexpr int kRowsPerPass = kPrefillV2Threads / kChunks;
  static constexpr int kPasses = kPrefillKvTile / kRowsPerPass;
  static_assert(kPrefillV2Threads % kChunks == 0 && kPasses >= 1, "chunk mapping");
  // Direct: stage s = K tile at s * kStageBytes, V tile right after. Converted: the bf16 K/V pair
  // at 0, then stage s = raw K, raw V, (FP8) scales [K|V][kPasses][threads] floats.
  static constexpr int kRawTileBytes = kPrefillKvTile * kRawPitch;
  static constexpr int kScaleBytes = kFp8 ? 2 * kPasses * kPrefillV2Threads * 4 : 0;
  static constexpr int kStageBytes = kDirect ? 2 * kTileBytes : 2 * kRawTileBytes + kScaleBytes;
  static constexpr int kStageBase = kDirect ? 0 : 2 * kTileBytes;
  static constexpr int kVOffset = kDirect ? kTileBytes : kRawTileBytes;  // V tile within a stage
  static constexpr int kStagePitch = kDirect ? kPitch * 2 : kRawPitch;   // row pitch of a stage tile
  static constexpr int kBytes = kStageBase + kStages * kStageBytes;
  // Q [128][kPitch] is staged where the last direct stage (first filled inside the key loop) or the
  // converted pair will go.
  static constexpr int kQBase = kDirect ? (kStages - 1) * kStageBytes : 0;
  static_assert(kPrefillV2Rows * kPitch * 2 == 2 * kTileBytes, "Q fits one K/V tile pair");
  static_assert(kStages >= 2, "at least one tile in flight");
  // kQk8: the quantized Q [128][D + 16] codes go to the last raw pair (not filled before the key
  // loop), its row scales [128] to that pair's scale slots.
  static constexpr int kQ8Pitch = D + 16;
  static constexpr int kQ8Base = kStageBase + (kStages - 1) * kStageBytes;
  static constexpr int kQScaleBase = kQ8Base + 2 * kRawTileBytes;
  static_assert(!kQk8 || (kPrefillV2Rows * kQ8Pitch == kQScaleBase - kQ8Base &&
                          kQScaleBase + kPrefillV2Rows * 4 <= kBytes), "quantized Q fits the last raw pair");
};

// The physical block of each key row this thread copies from tile `tile`; -1 past the context
// (or past the split), whose rows are zero-filled and never read from the table.
template <class L>
__device__ __forceinline__ void LoadTileBlocks(const PrefillParams& p, int seq, int ctx, int tile, int t_end,
                                               int32_t* phys) {
  const int r0 = static_cast<int>(threadIdx.x) / L::kChunks;
#pragma unroll
  for (int i = 0; i < L::kPasses; ++i) {
    const int key = tile * kPrefillKvTile + r0 + i * L::kRowsPerPass;
    phys[i] = tile < t_end && key < ctx
                  ? p.block_tables[static_cast<int64_t>(seq) * p.bt_stride + key / kBlockTokens]
                  : -1;
  }
}

// Issues this thread's cp.asyncs of one K/V tile into the stage at `stage` (rows with phys -1 are
// zero-filled). FP8: the rows' block scales go along into the stage's scale slots (0 when -1).
template <typename CacheT, class L>
__device__ __forceinline__ void IssueTile(const PrefillParams& p, int kvh, const int32_t* phys, uint32_t stage) {
  const int tid = static_cast<int>(threadIdx.x);
  const int r0 = tid / L::kChunks, cbytes = (tid % L::kChunks) * 16;
  const int64_t slot_bytes = static_cast<int64_t>(p.num_kv_heads) * L::kRowBytes;
  const char* kc = static_cast<const char*>(p.k);
  const char* vc = static_cast<const char*>(p.v);
#pragma unroll
  for (int i = 0; i < L::kPasses; ++i) {
    const int r = r0 + i * L::kRowsPerPass;
    const bool valid = phys[i] >= 0;
    // A 64-key tile starts on a block boundary, so row r is offset r % 16 in its block.
    const int64_t off = valid ? (static_cast<int64_t>(phys[i]) * kBlockTokens + r % kBlockTokens) * slot_bytes +
                                    static_cast<int64_t>(kvh) * L::kRowBytes + cbytes
                              : 0;
    const uint32_t dst = stage + static_cast<uint32_t>(r * L::kStagePitch + cbytes);
    CpAsync16(dst, kc + off, valid ? 16 : 0);
    CpAsync16(dst + L::kVOffset, vc + off, valid ? 16 : 0);
    if constexpr (L::kFp8) {
      const int64_t si = static_cast<int64_t>(valid ? phys[i] : 0) * p.num_kv_heads + kvh;
      const uint32_t sdst = stage + 2 * L::kRawTileBytes + (i * kPrefillV2Threads + tid) * 4;
      CpAsync4(sdst, p.k_scale + si, valid ? 4 : 0);
      CpAsync4(sdst + L::kPasses * kPrefillV2Threads * 4, p.v_scale + si, valid ? 4 : 0);
    }
  }
}

// Converts the chunks (and FP8 scales) this thread copied into `raw` (a landed stage) into the
// tiles at `tiles` (K [64][kPitch], then V): f16 copied as it is (the kernel multiplies f16 with
// f16 mma, as v1 does), FP8 decoded times its block scale into bf16. Exactly v1's conversions, so
// both kernels multiply the same values.
// kQk8: V only (K is multiplied as its codes).
template <typename CacheT, class L>
__device__ __forceinline__ void ConvertChunks(const uint8_t* raw, __nv_bfloat16* tiles) {
  const int tid = static_cast<int>(threadIdx.x);
  const int r0 = tid / L::kChunks, c = tid % L::kChunks;
#pragma unroll
  for (int kv = L::kQk8 ? 1 : 0; kv < 2; ++kv) {
    const uint8_t* src = raw + kv * L::kRawTileBytes;
    __nv_bfloat16* tile = tiles + kv * kPrefillKvTile * L::kPitch;
#pragma unroll
    for (int i = 0; i < L::kPasses; ++i) {
      const int r = r0 + i * L::kRowsPerPass;
      const uint4 in = *reinterpret_cast<const uint4*>(src + r * L::kRawPitch + c * 16);
      if constexpr (std::is_same_v<CacheT, __half>) {  // 8 elements per chunk, bits unchanged
        *reinterpret_cast<uint4*>(tile + r * L::kPitch + c * 8) = in;
      } else {  // FP8: 16 elements per chunk
        const float s = reinterpret_cast<const float*>(
            raw + 2 * L::kRawTileBytes)[(kv * L::kPasses + i) * kPrefillV2Threads + tid];
        const uint2 halves[2] = {make_uint2(in.x, in.y), make_uint2(in.z, in.w)};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float f[8];
          Fp8x8ToFloat(halves[h], f);
          *reinterpret_cast<uint4*>(tile + r * L::kPitch + c * 16 + h * 8) =
              make_uint4(PackBf16(f[0] * s, f[1] * s), PackBf16(f[2] * s, f[3] * s), PackBf16(f[4] * s, f[5] * s),
                         PackBf16(f[6] * s, f[7] * s));
        }
      }
    }
  }
}

// kQk8: the staged bf16 Q tile -> E4M3 codes at L::kQ8Base, one scale per row at L::kQScaleBase.
// Thread tid quantizes half of row tid / 2; the pair's lanes combine their amax.
template <class L>
__device__ __forceinline__ void QuantizeQRows(uint8_t* smem) {
  constexpr int kHalf = L::D / 2;
  const int tid = static_cast<int>(threadIdx.x), row = tid >> 1, half = tid & 1;
  const __nv_bfloat16* q = reinterpret_cast<const __nv_bfloat16*>(smem + L::kQBase) + row * L::kPitch + half * kHalf;
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kHalf; i += 8) {
    float f[8];
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(q + i), f);
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(f[j]));
  }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  const float scale = Fp8BlockScale(amax), inv = 1.0f / scale;
  uint8_t* dst = smem + L::kQ8Base + row * L::kQ8Pitch + half * kHalf;
#pragma unroll
  for (int i = 0; i < kHalf; i += 8) {
    float f[8];
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(q + i), f);
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j / 4] |= static_cast<uint32_t>(EncodeFp8Hw(f[j] * inv)) << (8 * (j % 4));
    *reinterpret_cast<uint2*>(dst + i) = make_uint2(w[0], w[1]);
  }
  if (half == 0) reinterpret_cast<float*>(smem + L::kQScaleBase)[row] = scale;
}

// kQk8: the block scale of key block b (keys 16 b .. 16 b + 15) of a landed raw stage: the slot
// IssueTile gave the thread that copied chunk 0 of the block's first row.
template <class L>
__device__ __forceinline__ float KBlockScale(const uint8_t* raw, int b) {
  const int r = b * kBlockTokens, pass = r / L::kRowsPerPass, tid = (r % L::kRowsPerPass) * L::kChunks;
  return reinterpret_cast<const float*>(raw + 2 * L::kRawTileBytes)[pass * kPrefillV2Threads + tid];
}

template <typename CacheT, int D, bool kQk8>
__global__ void __launch_bounds__(kPrefillV2Threads, kPrefillV2CtasPerSm) PrefillV2Kernel(const PrefillParams p) {
  using L = Layout<CacheT, D, kQk8>;
  using M = MmaOps<std::is_same_v<CacheT, __half>>;
  constexpr int kNT = kPrefillKvTile / 8;  // 8-key column tiles of S
  constexpr int kDT = D / 8;               // 8-wide column tiles of O
  constexpr int kKS = D / 16;              // k-steps of Q K^T
  constexpr int kRowPitchBytes = L::kPitch * 2;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_base = SmemAddr(smem);

  // Last tile first: in a causal chunk the later tiles have the most keys.
  const int kvh = blockIdx.x, tile = gridDim.y - 1 - blockIdx.y, split = blockIdx.z;
  const int seq = p.tiles[2 * tile], q0 = p.tiles[2 * tile + 1];
  const int qs = p.q_start[seq], q_len = p.q_start[seq + 1] - qs, ctx = p.context_lens[seq];
  const int G = p.group;
  const int tokens = min(p.tile_tokens, q_len - q0);  // valid tokens in this tile
  const int rows_valid = tokens * G;                  // rows [0, rows_valid) hold real (token, head)s
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int pos0 = ctx - q_len + q0;  // position of the tile's first token
  const int kv_end = pos0 + tokens;   // keys the tile's last token sees
  const int n_kv_tiles = (kv_end + kPrefillKvTile - 1) / kPrefillKvTile;
  const int per_split = (n_kv_tiles + p.splits - 1) / p.splits;
  const int t_begin = split * per_split, t_end = min(n_kv_tiles, t_begin + per_split);

  // This thread's two rows (g and g + 8 of the warp's 16) and the warp's position range.
  const int row_a = warp * 16 + g, row_b = row_a + 8;
  const int pos_a = pos0 + row_a / G, pos_b = pos0 + row_b / G;
  const bool warp_active = warp * 16 < rows_valid;  // warp-uniform
  const int warp_pos_lo = pos0 + (warp * 16) / G;
  const int warp_pos_hi = pos0 + (min(warp * 16 + 15, rows_valid - 1)) / G;

  float o[kDT][4];
#pragma unroll
  for (int n = 0; n < kDT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  if (t_begin < t_end) {  // CTA-uniform: an empty split only writes its empty result
    // ---- prologue: Q tile and the first K/V tile in one cp.async group -------------------------
    {
      constexpr int kQChunks = D / 8;  // 16-byte chunks per Q row
      const __nv_bfloat16* qbase = p.q + static_cast<int64_t>(qs + q0) * p.q_stride +
                                   static_cast<int64_t>(kvh) * G * D;
#pragma unroll
      for (int i = 0; i < kPrefillV2Rows * kQChunks / kPrefillV2Threads; ++i) {
        const int c = static_cast<int>(threadIdx.x) + i * kPrefillV2Threads;
        const int r = c / kQChunks, col = (c % kQChunks) * 8;
        const bool valid = r < rows_valid;
        // Row r = (token r / G, head r % G): the G heads of a token are contiguous in q.
        const __nv_bfloat16* src = valid ? qbase + static_cast<int64_t>(r / G) * p.q_stride + (r % G) * D + col : p.q;
        CpAsync16(smem_base + L::kQBase + r * kRowPitchBytes + col * 2, src, valid ? 16 : 0);
      }
    }
    // The first stages - 1 tiles, one cp.async group each (Q joins the first group; a split
    // shorter than that commits empty groups, so the group count per tile stays fixed).
    int32_t phys[L::kPasses];
#pragma unroll
    for (int s = 0; s < L::kStages - 1; ++s) {
      if (t_begin + s < t_end) {
        LoadTileBlocks<L>(p, seq, ctx, t_begin + s, t_end, phys);
        IssueTile<CacheT, L>(p, kvh, phys, smem_base + L::kStageBase + s * L::kStageBytes);
      }
      CpAsyncCommit();
    }
    LoadTileBlocks<L>(p, seq, ctx, t_begin + L::kStages - 1, t_end, phys);

    // Q A-fragments, kept in registers for the whole key loop. ldmatrix.x4 (no .trans) on
    // Q[row][dim] at prefill_v2::QAddr: lane L addresses row warp*16 + (L & 15), dims kk*16 +
    // (L >> 4) * 8, so matrix 0 = rows 0-7 x dims 0-7 of the k-step, 1 = rows 8-15 x dims 0-7,
    // 2 = rows 0-7 x dims 8-15, 3 = rows 8-15 x dims 8-15; r[m] = M_m[g][2t, 2t+1] is then
    // A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..] = a[0..3] of the mma A layout.
    // kQk8: the same ldmatrix addresses over the codes (16-byte rows of 16 codes instead of 8
    // bf16, so a k-step is 32 dims) give the m16n8k32 A registers (mma_sm80.cuh, Mma16832E4M3).
    uint32_t qf[kQk8 ? 1 : kKS][4];
    uint32_t qf8[kQk8 ? D / 32 : 1][4];
    float qs_a = 1.0f, qs_b = 1.0f;  // kQk8: the scales of rows row_a, row_b
    CpAsyncWait<L::kStages - 2>();  // the first group: Q and tile t_begin
    __syncthreads();
    if constexpr (kQk8) {
      QuantizeQRows<L>(smem);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < D / 32; ++kk) {
        const prefill_v2::RowCol a = prefill_v2::QAddr(lane, warp, kk);
        LdMatrixX4(qf8[kk], smem_base + L::kQ8Base + a.row * L::kQ8Pitch + a.col * 2);
      }
      const float* q_scale = reinterpret_cast<const float*>(smem + L::kQScaleBase);
      qs_a = q_scale[row_a];
      qs_b = q_scale[row_b];
    } else {
#pragma unroll
      for (int kk = 0; kk < kKS; ++kk) {
        const prefill_v2::RowCol a = prefill_v2::QAddr(lane, warp, kk);
        LdMatrixX4(qf[kk], smem_base + L::kQBase + a.row * kRowPitchBytes + a.col * 2);
#pragma unroll
        for (int r = 0; r < 4; ++r) qf[kk][r] = M::FromBf16x2(qf[kk][r]);  // f16 cache: Q as f16 too
      }
    }
    __syncthreads();  // the Q staging areas are free for the tiles that go there

    // The ldmatrix addresses of the K and V tiles (prefill_v2_layout.h, used in the loops below).
    // K, for S = Q K^T (B[k = dim][n = key] = K[key][dim]), ldmatrix.x4 without .trans at
    // prefill_v2::KAddr: lane L addresses key np*16 + (L >> 4) * 8 + (L & 7), dims kk*16 +
    // ((L >> 3) & 1) * 8. Matrix 0 = keys 0-7 x dims 0-7, 1 = keys 0-7 x dims 8-15, 2 = keys 8-15
    // x dims 0-7, 3 = keys 8-15 x dims 8-15 (keys relative to np*16, dims to kk*16). r[m] =
    // M_m[g][2t, 2t+1] = K[key g][dims 2t, 2t+1] = B[2t, 2t+1][g]: r[0], r[1] are b[0], b[1] of key
    // tile 2np and r[2], r[3] those of key tile 2np + 1.
    // V, for O += P V (B[k = key][n = dim] = V[key][dim]), ldmatrix.x4.trans at prefill_v2::VAddr:
    // lane L addresses key k2*16 + (L & 15), dims dp*16 + (L >> 4) * 8. Matrix 0 = keys 0-7 x dims
    // 0-7, 1 = keys 8-15 x dims 0-7, 2 = keys 0-7 x dims 8-15, 3 = keys 8-15 x dims 8-15.
    // Transposed, r[m] = M_m[2t][g], M_m[2t+1][g] = V[keys 2t, 2t+1 (+8 for m odd)][dim g] =
    // B[2t.. (+8)][g]: r[0], r[1] are b[0], b[1] of dim tile 2dp and r[2], r[3] those of dim tile
    // 2dp + 1.

    int stage = 0;  // ring slot of tile jt
    for (int jt = t_begin; jt < t_end; ++jt) {
      // ---- producer: tile jt + stages - 1 goes out before this tile's math, into the slot tile
      // jt - 1 used (every warp left it at the barrier that ended the last iteration).
      const int fill = stage == 0 ? L::kStages - 1 : stage - 1;
      if (jt + L::kStages - 1 < t_end) {
        IssueTile<CacheT, L>(p, kvh, phys, smem_base + L::kStageBase + fill * L::kStageBytes);
        LoadTileBlocks<L>(p, seq, ctx, jt + L::kStages, t_end, phys);
      }
      CpAsyncCommit();  // possibly empty: keeps "all but the newest stages - 1 groups" = tile jt
      CpAsyncWait<L::kStages - 1>();
      uint32_t k_tile;
      const uint8_t* raw = smem + L::kStageBase + stage * L::kStageBytes;  // converted caches' landed stage
      if constexpr (L::kDirect) {
        k_tile = smem_base + stage * L::kStageBytes;
      } else {
        ConvertChunks<CacheT, L>(raw, reinterpret_cast<__nv_bfloat16*>(smem));
        k_tile = smem_base;
      }
      const uint32_t v_tile = k_tile + L::kTileBytes;
      stage = stage + 1 == L::kStages ? 0 : stage + 1;
      __syncthreads();  // the tile (copied or converted by every thread) is visible to all warps

      const int kbase = jt * kPrefillKvTile;
      // Warp-uniform: the warp has real rows and at least one key of the tile is visible to one.
      if (warp_active && kbase <= warp_pos_hi) {
        float s[kNT][4];
#pragma unroll
        for (int n = 0; n < kNT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        if constexpr (kQk8) {
          // The K codes in the raw stage, by KAddr over 16-byte rows of codes (k-steps of 32).
          const uint32_t k8_tile = SmemAddr(raw);
#pragma unroll
          for (int kk = 0; kk < D / 32; ++kk) {
#pragma unroll
            for (int np = 0; np < kNT / 2; ++np) {
              const prefill_v2::RowCol ka = prefill_v2::KAddr(lane, np, kk);
              uint32_t b[4];
              LdMatrixX4(b, k8_tile + ka.row * L::kRawPitch + ka.col * 2);
              Mma16832E4M3(s[2 * np], qf8[kk], b[0], b[1]);
              Mma16832E4M3(s[2 * np + 1], qf8[kk], b[2], b[3]);
            }
          }
          // dot(codes) -> q . k: key tile n lies in block n / 2 of the 64-key tile.
          float kb[kPrefillKvTile / kBlockTokens];
#pragma unroll
          for (int b = 0; b < kPrefillKvTile / kBlockTokens; ++b) kb[b] = KBlockScale<L>(raw, b);
#pragma unroll
          for (int n = 0; n < kNT; ++n) {
#pragma unroll
            for (int c = 0; c < 4; ++c) s[n][c] *= (c < 2 ? qs_a : qs_b) * kb[n >> 1];
          }
        } else {
#pragma unroll
          for (int kk = 0; kk < kKS; ++kk) {
#pragma unroll
            for (int np = 0; np < kNT / 2; ++np) {
              const prefill_v2::RowCol ka = prefill_v2::KAddr(lane, np, kk);
              uint32_t b[4];
              LdMatrixX4(b, k_tile + ka.row * kRowPitchBytes + ka.col * 2);
              M::Mma(s[2 * np], qf[kk], b[0], b[1]);
              M::Mma(s[2 * np + 1], qf[kk], b[2], b[3]);
            }
          }
        }
        // Mask only where a key of the tile is past the warp's first row (keys >= ctx always are:
        // every position is < ctx). S element c of key tile n: row c < 2 ? g : g + 8, key
        // kbase + n*8 + 2t + (c & 1).
        if (kbase + kPrefillKvTile - 1 > warp_pos_lo) {
#pragma unroll
          for (int n = 0; n < kNT; ++n) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int key = kbase + n * 8 + 2 * t + (c & 1);
              s[n][c] = key <= (c < 2 ? pos_a : pos_b) ? s[n][c] * p.scale_log2 : -INFINITY;
            }
          }
        } else {
#pragma unroll
          for (int n = 0; n < kNT; ++n) {
#pragma unroll
            for (int c = 0; c < 4; ++c) s[n][c] *= p.scale_log2;
          }
        }
        OnlineSoftmaxStep(s, o, m_a, m_b, l_a, l_b);
        // P as the A operand of k-step k2 (keys k2*16..+15) straight from the S accumulators: key
        // tile 2 k2 holds P[g][2t..], P[g+8][2t..] (a[0], a[1]) and tile 2 k2 + 1 the same rows 8
        // keys on (a[2], a[3]).
#pragma unroll
        for (int k2 = 0; k2 < kPrefillKvTile / 16; ++k2) {
          uint32_t a[4];
          a[0] = M::Pack(s[2 * k2][0], s[2 * k2][1]);
          a[1] = M::Pack(s[2 * k2][2], s[2 * k2][3]);
          a[2] = M::Pack(s[2 * k2 + 1][0], s[2 * k2 + 1][1]);
          a[3] = M::Pack(s[2 * k2 + 1][2], s[2 * k2 + 1][3]);
#pragma unroll
          for (int dp = 0; dp < kDT / 2; ++dp) {
            const prefill_v2::RowCol va = prefill_v2::VAddr(lane, k2, dp);
            uint32_t b[4];
            LdMatrixX4Trans(b, v_tile + va.row * kRowPitchBytes + va.col * 2);
            M::Mma(o[2 * dp], a, b[0], b[1]);
            M::Mma(o[2 * dp + 1], a, b[2], b[3]);
          }
        }
      }
      __syncthreads();  // every warp is done with this stage before it is refilled
    }
    CpAsyncWait<0>();  // nothing is left in flight (only empty groups can be): no copy outlives the CTA
  }

  // ---- epilogue: normalise and write, as v1 (rows mapped back to (token, head)) ----------------
  WritePrefillRows<D>(p, o, l_a, l_b, m_a, m_b, static_cast<int64_t>(qs) + q0, kvh, row_a, rows_valid, split, t);
}

template <typename CacheT, int D, bool kQk8>
CudaStatus Launch(const PrefillParams& p, dim3 grid, cudaStream_t stream) {
  using L = Layout<CacheT, D, kQk8>;
  static_assert(L::kBytes == PrefillV2SmemBytes(D, sizeof(CacheT), L::kDirect, kQk8), "smem plan mismatch");
  // Above 48 KB a kernel must opt in to its dynamic shared memory; the call is cheap and keeps the
  // launcher free of "configured already" state.
  const cudaError_t e = cudaFuncSetAttribute(PrefillV2Kernel<CacheT, D, kQk8>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
  if (e != cudaSuccess) return {CudaStatusKind::kCudaError, static_cast<int>(e), "cudaFuncSetAttribute(PrefillV2Kernel)"};
  PrefillV2Kernel<CacheT, D, kQk8><<<grid, kPrefillV2Threads, L::kBytes, stream>>>(p);
  return LaunchStatus("PrefillV2Kernel");
}

}  // namespace

CudaStatus LaunchPrefillV2(const PrefillParams& p, KvDtype dtype, int head_dim, bool fp8_qk, dim3 grid,
                           cudaStream_t stream) {
  if (fp8_qk) {
    if (dtype != KvDtype::kFp8E4M3) return CudaStatus::Invalid("prefill FP8 Q.K needs an FP8 cache");
    return head_dim == 128 ? Launch<uint8_t, 128, true>(p, grid, stream) : Launch<uint8_t, 64, true>(p, grid, stream);
  }
  CudaStatus st = CudaStatus::Ok();
  DispatchCacheTypeAndHeadDim(dtype, head_dim, [&](auto type, auto d) {
    st = Launch<typename decltype(type)::type, decltype(d)::value, false>(p, grid, stream);
  });
  return st;
}

}  // namespace kvgate::cuda
