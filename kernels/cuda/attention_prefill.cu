// Prefill (chunked, with a cached prefix) attention over the paged KV cache: FlashAttention-2 style.
//
// v1 design: CTA = (query head, 64-row query tile, split), 4 warps, each warp owns 16 query rows and
// keeps its Q fragments, running max / sum and the O accumulator [16][D] in registers. Keys come in
// 64-token tiles (4 KV blocks) gathered through the block table into shared memory (FP8 caches are
// dequantized with their block scale on the way in), then S = Q K^T and O += P V run on tensor
// cores with mma.sync.m16n8k16 (bf16 in, or f16 for an f16 cache: its values exactly as stored;
// f32 accumulate); softmax is online in the log2 domain.
// Causal: a tile stops at the last key its last row can see; masking only touches the diagonal
// tiles. A short chunk over a long prefix (few tiles) is split over the key range and merged by
// LaunchSplitReduce. Known v1 limits (see kernels/NOTES.md): no cp.async double buffering, V
// fragments read with 16-bit shared loads (no ldmatrix.trans), mma.sync rather than wgmma, K/V
// read once per query head (L2 absorbs most of the G-fold re-read). attention_prefill_v2.cu
// addresses all but wgmma; PrefillGeometry::variant picks the kernel, and this file's launcher
// validates and dispatches both.
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

namespace kvgate::cuda {
namespace {

__device__ __forceinline__ uint32_t PackRaw(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

// Gathers keys [kbase, kbase + 64) of `cache` for kv head kvh into tile [64][D + 8]; keys at or
// past ctx are zero (their slots may be unwritten). The tile holds bf16 (bf16 cache; FP8 decoded
// times its block scale) or, for an f16 cache, its f16 bits unchanged (the kernel multiplies
// those with f16 mma: MmaOps).
template <typename CacheT, int D>
__device__ __forceinline__ void LoadKvTile(const PrefillParams& p, const CacheT* cache,
                                           const float* scales, int seq, int kvh, int kbase,
                                           int ctx, __nv_bfloat16 (*tile)[D + 8]) {
  constexpr int kChunksPerRow = D / 8;
  const int64_t row = static_cast<int64_t>(p.num_kv_heads) * D;
#pragma unroll
  for (int c = threadIdx.x; c < kPrefillKvTile * kChunksPerRow; c += kAttnThreads) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const int key = kbase + r;
    uint4 packed = make_uint4(0u, 0u, 0u, 0u);
    if (key < ctx) {
      const int64_t phys = p.block_tables[static_cast<int64_t>(seq) * p.bt_stride + key / kBlockTokens];
      const int64_t off = (phys * kBlockTokens + key % kBlockTokens) * row + kvh * D + col;
      if constexpr (std::is_same_v<CacheT, __nv_bfloat16>) {
        packed = *reinterpret_cast<const uint4*>(cache + off);
      } else if constexpr (std::is_same_v<CacheT, __half>) {  // f16 cache: f16 bits, f16 mma
        packed = *reinterpret_cast<const uint4*>(cache + off);
      } else {
        float f[8];
        Fp8x8ToFloat(*reinterpret_cast<const uint2*>(cache + off), f);
        const float s = scales[phys * p.num_kv_heads + kvh];
        packed.x = PackBf16(f[0] * s, f[1] * s);
        packed.y = PackBf16(f[2] * s, f[3] * s);
        packed.z = PackBf16(f[4] * s, f[5] * s);
        packed.w = PackBf16(f[6] * s, f[7] * s);
      }
    }
    *reinterpret_cast<uint4*>(&tile[r][col]) = packed;
  }
}

template <typename CacheT, int D>
__global__ void __launch_bounds__(kAttnThreads) PrefillKernel(const PrefillParams p) {
  using M = MmaOps<std::is_same_v<CacheT, __half>>;
  constexpr int kNT = kPrefillKvTile / 8;  // 8-key column tiles of S
  constexpr int kDT = D / 8;               // 8-wide column tiles of O
  constexpr int kKS = D / 16;              // k-steps of Q K^T
  __shared__ __align__(16) __nv_bfloat16 sk[kPrefillKvTile][D + 8];
  __shared__ __align__(16) __nv_bfloat16 sv[kPrefillKvTile][D + 8];

  const int h = blockIdx.x, tile = blockIdx.y, split = blockIdx.z;
  const int seq = p.tiles[2 * tile], q0 = p.tiles[2 * tile + 1];
  const int qs = p.q_start[seq], q_len = p.q_start[seq + 1] - qs, ctx = p.context_lens[seq];
  const int kvh = h / p.group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int row_a = q0 + warp * 16 + g, row_b = row_a + 8;  // rows within the sequence
  const int pos_a = ctx - q_len + row_a, pos_b = ctx - q_len + row_b;
  const int last_row = min(q_len, q0 + kPrefillQTile) - 1;
  const int kv_end = ctx - q_len + last_row + 1;
  const int n_kv_tiles = (kv_end + kPrefillKvTile - 1) / kPrefillKvTile;
  const int per_split = (n_kv_tiles + p.splits - 1) / p.splits;
  const int t_begin = split * per_split, t_end = min(n_kv_tiles, t_begin + per_split);

  uint32_t qf[kKS][4];
  {
    const __nv_bfloat16* qa = p.q + static_cast<int64_t>(qs + row_a) * p.q_stride + h * D;
    const __nv_bfloat16* qb = p.q + static_cast<int64_t>(qs + row_b) * p.q_stride + h * D;
    const bool va = row_a < q_len, vb = row_b < q_len;
#pragma unroll
    for (int kk = 0; kk < kKS; ++kk) {
      const int c = kk * 16 + 2 * t;
      qf[kk][0] = va ? M::FromBf16x2(*reinterpret_cast<const uint32_t*>(qa + c)) : 0u;
      qf[kk][1] = vb ? M::FromBf16x2(*reinterpret_cast<const uint32_t*>(qb + c)) : 0u;
      qf[kk][2] = va ? M::FromBf16x2(*reinterpret_cast<const uint32_t*>(qa + c + 8)) : 0u;
      qf[kk][3] = vb ? M::FromBf16x2(*reinterpret_cast<const uint32_t*>(qb + c + 8)) : 0u;
    }
  }
  float o[kDT][4];
#pragma unroll
  for (int n = 0; n < kDT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  const CacheT* kc = static_cast<const CacheT*>(p.k);
  const CacheT* vc = static_cast<const CacheT*>(p.v);
  for (int jt = t_begin; jt < t_end; ++jt) {
    const int kbase = jt * kPrefillKvTile;
    __syncthreads();  // the previous tile is no longer read
    LoadKvTile<CacheT, D>(p, kc, p.k_scale, seq, kvh, kbase, ctx, sk);
    LoadKvTile<CacheT, D>(p, vc, p.v_scale, seq, kvh, kbase, ctx, sv);
    __syncthreads();

    float s[kNT][4];
#pragma unroll
    for (int n = 0; n < kNT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKS; ++kk) {
#pragma unroll
      for (int n = 0; n < kNT; ++n) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&sk[n * 8 + g][kk * 16 + 2 * t]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&sk[n * 8 + g][kk * 16 + 8 + 2 * t]);
        M::Mma(s[n], qf[kk], b0, b1);
      }
    }
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int key = kbase + n * 8 + 2 * t + (c & 1);
        const int pos = c < 2 ? pos_a : pos_b;
        s[n][c] = key <= pos ? s[n][c] * p.scale_log2 : -INFINITY;
      }
    }
    OnlineSoftmaxStep</*kFastExp=*/false>(s, o, m_a, m_b, l_a, l_b);
#pragma unroll
    for (int k2 = 0; k2 < kPrefillKvTile / 16; ++k2) {
      uint32_t a[4];
      a[0] = M::Pack(s[2 * k2][0], s[2 * k2][1]);
      a[1] = M::Pack(s[2 * k2][2], s[2 * k2][3]);
      a[2] = M::Pack(s[2 * k2 + 1][0], s[2 * k2 + 1][1]);
      a[3] = M::Pack(s[2 * k2 + 1][2], s[2 * k2 + 1][3]);
      const int r0 = k2 * 16 + 2 * t;
#pragma unroll
      for (int n = 0; n < kDT; ++n) {
        const int col = n * 8 + g;
        const uint32_t b0 = PackRaw(sv[r0][col], sv[r0 + 1][col]);
        const uint32_t b1 = PackRaw(sv[r0 + 8][col], sv[r0 + 9][col]);
        M::Mma(o[n], a, b0, b1);
      }
    }
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  const float inv_a = l_a > 0.0f ? 1.0f / l_a : 0.0f, inv_b = l_b > 0.0f ? 1.0f / l_b : 0.0f;
  if (p.splits == 1) {
#pragma unroll
    for (int n = 0; n < kDT; ++n) {
      const int col = h * D + n * 8 + 2 * t;
      const int64_t hd = static_cast<int64_t>(p.num_q_heads) * D;
      if (row_a < q_len)
        *reinterpret_cast<uint32_t*>(p.out + (qs + row_a) * hd + col) =
            PackBf16(o[n][0] * inv_a, o[n][1] * inv_a);
      if (row_b < q_len)
        *reinterpret_cast<uint32_t*>(p.out + (qs + row_b) * hd + col) =
            PackBf16(o[n][2] * inv_b, o[n][3] * inv_b);
    }
  } else {
    const int64_t n_rows = static_cast<int64_t>(p.num_q_tokens) * p.num_q_heads * p.splits;
    const int rows[2] = {row_a, row_b};
    const float invs[2] = {inv_a, inv_b}, ls[2] = {l_a, l_b}, ms[2] = {m_a, m_b};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (rows[half] >= q_len) continue;
      const int64_t r = ((static_cast<int64_t>(qs) + rows[half]) * p.num_q_heads + h) * p.splits + split;
#pragma unroll
      for (int n = 0; n < kDT; ++n) {
        p.workspace[r * D + n * 8 + 2 * t] = o[n][2 * half] * invs[half];
        p.workspace[r * D + n * 8 + 2 * t + 1] = o[n][2 * half + 1] * invs[half];
      }
      if (t == 0) p.workspace[n_rows * D + r] = ls[half] > 0.0f ? ms[half] + log2f(ls[half]) : -INFINITY;
    }
  }
}

template <typename CacheT, int D>
void LaunchPrefill(const PrefillParams& p, dim3 grid, cudaStream_t stream) {
  PrefillKernel<CacheT, D><<<grid, kAttnThreads, 0, stream>>>(p);
}

}  // namespace

CudaStatus PrefillAttention(const PrefillAttentionArgs& a, cudaStream_t stream) {
  if (CudaStatus st = CheckPagedKv(a.kv); !st.ok()) return st;
  const int hkv = a.kv.num_kv_heads, d = a.kv.head_dim;
  if (a.num_q_heads <= 0 || a.num_q_heads % hkv != 0)
    return CudaStatus::Invalid("query heads must be a multiple of kv heads");
  if (!a.q || !a.out || !a.block_tables || !a.q_start || !a.context_lens || !a.tiles)
    return CudaStatus::Invalid("prefill attention pointer is null");
  if (a.q_stride < static_cast<int64_t>(a.num_q_heads) * d || a.q_stride % 2 != 0)
    return CudaStatus::Invalid("q stride must cover Hq*D and be even");
  // v1 reads Q and writes out as pairs of bf16 (32-bit accesses): an odd-element offset would be a
  // misaligned access fault, so it is refused here.
  if (reinterpret_cast<uintptr_t>(a.q) % 4 != 0 || reinterpret_cast<uintptr_t>(a.out) % 4 != 0)
    return CudaStatus::Invalid("prefill attention needs q and out 4-byte aligned");
  const int group = a.num_q_heads / hkv;
  const bool v2 = PrefillPacksHeads(a.geo.variant);
  const bool fp8_qk = a.geo.variant == PrefillVariant::kV2Fp8Qk, v3 = a.geo.variant == PrefillVariant::kV3;
  if (fp8_qk && a.kv.dtype != KvDtype::kFp8E4M3) return CudaStatus::Invalid("prefill FP8 Q.K needs an FP8 cache");
  if (v3 && a.kv.dtype == KvDtype::kFp8E4M3) return CudaStatus::Invalid("prefill v3 reads a bf16 or f16 cache");
  if (a.geo.grid_x != (v2 ? hkv : a.num_q_heads) || a.geo.num_tiles <= 0 || a.geo.grid_y != a.geo.num_tiles ||
      a.geo.splits < 1 || a.geo.grid_z != a.geo.splits ||
      a.geo.tile_tokens != PrefillTileTokens(a.geo.variant, group) || a.tile_tokens != a.geo.tile_tokens ||
      a.geo.threads != PrefillThreads(a.geo.variant))
    return CudaStatus::Invalid("prefill geometry does not match the arguments");
  // v2 copies Q, K and V rows in 16-byte cp.async chunks.
  if (v2 && (a.q_stride % 8 != 0 || reinterpret_cast<uintptr_t>(a.q) % 16 != 0 ||
             reinterpret_cast<uintptr_t>(a.kv.k) % 16 != 0 || reinterpret_cast<uintptr_t>(a.kv.v) % 16 != 0))
    return CudaStatus::Invalid("prefill v2 needs 16-byte aligned q, k, v and a q stride multiple of 8");
  if (a.geo.splits > 1 && !a.workspace) return CudaStatus::Invalid("split prefill needs a workspace");
  if (a.geo.num_q_tokens <= 0) return CudaStatus::Invalid("prefill geometry has no tokens");
  PrefillParams p{};
  p.q = a.q;
  p.q_stride = a.q_stride;
  p.out = a.out;
  p.k = a.kv.k;
  p.v = a.kv.v;
  p.k_scale = a.kv.k_scale;
  p.v_scale = a.kv.v_scale;
  p.block_tables = a.block_tables;
  p.bt_stride = a.block_table_stride;
  p.q_start = a.q_start;
  p.context_lens = a.context_lens;
  p.tiles = a.tiles;
  p.num_q_heads = a.num_q_heads;
  p.num_kv_heads = hkv;
  p.group = group;
  p.tile_tokens = a.geo.tile_tokens;
  p.splits = a.geo.splits;
  p.num_q_tokens = a.geo.num_q_tokens;
  p.scale_log2 = a.softmax_scale * kLog2e;
  p.workspace = a.workspace;
  const dim3 grid(static_cast<unsigned>(a.geo.grid_x), static_cast<unsigned>(a.geo.grid_y),
                  static_cast<unsigned>(a.geo.grid_z));
  if (v3) {
    if (CudaStatus st = LaunchPrefillV3(p, a.kv, grid, stream); !st.ok()) return st;
  } else if (v2) {
    if (CudaStatus st = LaunchPrefillV2(p, a.kv.dtype, d, fp8_qk, grid, stream); !st.ok()) return st;
  } else {
    DispatchCacheTypeAndHeadDim(a.kv.dtype, d, [&](auto type, auto head_dim) {
      LaunchPrefill<typename decltype(type)::type, decltype(head_dim)::value>(p, grid, stream);
    });
    if (CudaStatus st = LaunchStatus("PrefillKernel"); !st.ok()) return st;
  }
  if (a.geo.splits > 1)
    return LaunchSplitReduce(a.workspace, p.num_q_tokens, a.num_q_heads, a.geo.splits, d, a.out, stream);
  return CudaStatus::Ok();
}

}  // namespace kvgate::cuda
