// Paged decode attention (one new query token per sequence), GQA-aware, split-K, online softmax.
//
// v1 design: CTA = (kv head, sequence, split), 4 warps. Each warp takes whole 16-token KV blocks of
// the split in turn (warp w: blocks w, w+4, ...). Within a warp, D/8 lanes share one token row
// (8 elements = one 16-byte bf16 load or one 8-byte FP8 load per lane), so a warp covers 32/(D/8)
// tokens per load instruction and a block in 16/(32/(D/8)) steps. All K and V rows of a block are
// loaded before the first use (16 independent loads per lane in flight). Every K row is read once
// and used for all G query heads of the group: KV bytes are read exactly once per (sequence, kv
// head), which is the whole point for a memory-bound kernel. Scores are in the log2 domain
// (q pre-multiplied by scale * log2 e) so exp2f is one MUFU op.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/kernels.h"

namespace kvgate::cuda {
namespace {

// CTAs per SM the register budget must allow. Measured on an H200 (2026-11-29), group 4, D=128,
// bf16, S=64: unbounded it took 189 registers (2 CTAs, 8 warps per SM) and reached 0.56 of copy
// bandwidth; held to 3 CTAs (168 registers, no spill) 0.69; held to 4 (128 registers) it spills
// and falls back to 0.60.
template <int D, int kMaxG>
constexpr int DecodeMinCtasPerSm() {
  return (D == 128 && kMaxG == 4) ? kDecodeG4D128CtasPerSm : 1;
}

template <typename CacheT, int D, int kMaxG>
__global__ void __launch_bounds__(kAttnThreads, (DecodeMinCtasPerSm<D, kMaxG>()))
    DecodeKernel(const DecodeParams p) {
  constexpr int kLanesPerTok = D / 8;
  constexpr int kToksPerIter = 32 / kLanesPerTok;
  constexpr int kIters = kBlockTokens / kToksPerIter;
  using Raw = typename Raw8<CacheT>::type;

  const int kvh = blockIdx.x, seq = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tok_in_iter = lane / kLanesPerTok, chunk = lane % kLanesPerTok;
  const int G = p.group;
  const int ctx = p.context_lens[seq];
  const int nblocks = (ctx + kBlockTokens - 1) / kBlockTokens;
  const BlockRange range = DecodeSplitBlocks(split, p.splits, p.blocks_per_split, nblocks);
  const int b_begin = range.begin, b_end = range.end;

  float qv[kMaxG][8];  // this lane's 8 dims of each query head of the group, pre-scaled
#pragma unroll
  for (int g = 0; g < kMaxG; ++g) {
    if (g < G) {
      const uint4 raw = *reinterpret_cast<const uint4*>(
          p.q + seq * p.q_stride + (kvh * G + g) * D + chunk * 8);
      Bf16x8ToFloat(raw, qv[g]);
#pragma unroll
      for (int i = 0; i < 8; ++i) qv[g][i] *= p.scale_log2;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) qv[g][i] = 0.0f;
    }
  }
  float m[kMaxG], l[kMaxG], acc[kMaxG][8];
#pragma unroll
  for (int g = 0; g < kMaxG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }

  const CacheT* kc = static_cast<const CacheT*>(p.k);
  const CacheT* vc = static_cast<const CacheT*>(p.v);
  const int64_t row = static_cast<int64_t>(p.num_kv_heads) * D;  // elements per slot
  for (int b = b_begin + warp; b < b_end; b += kAttnWarps) {
    const int64_t phys = p.block_tables[static_cast<int64_t>(seq) * p.bt_stride + b];
    const int valid = min(kBlockTokens, ctx - b * kBlockTokens);
    const int64_t base = phys * kBlockTokens * row + kvh * D + chunk * 8;
    Raw kr[kIters], vr[kIters];
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int64_t off = base + (it * kToksPerIter + tok_in_iter) * row;
      kr[it] = *reinterpret_cast<const Raw*>(kc + off);
      vr[it] = *reinterpret_cast<const Raw*>(vc + off);
    }
    float ks = 1.0f, vs = 1.0f;
    if constexpr (sizeof(CacheT) == 1) {
      ks = p.k_scale[phys * p.num_kv_heads + kvh];
      vs = p.v_scale[phys * p.num_kv_heads + kvh];
    }
    float s[kMaxG][kIters];
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      float kf[8];
      Raw8<CacheT>::ToFloat(kr[it], kf);
      const bool ok = it * kToksPerIter + tok_in_iter < valid;
#pragma unroll
      for (int g = 0; g < kMaxG; ++g) {
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d = fmaf(qv[g][i], kf[i], d);
#pragma unroll
        for (int o = kLanesPerTok / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        s[g][it] = ok ? d * ks : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < kMaxG; ++g) {
      float bmax = s[g][0];
#pragma unroll
      for (int it = 1; it < kIters; ++it) bmax = fmaxf(bmax, s[g][it]);
#pragma unroll
      for (int o = kLanesPerTok; o < 32; o <<= 1)
        bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, o));
      const float m_new = fmaxf(m[g], bmax);  // finite: every block has a valid token
      const float alpha = exp2f(m[g] - m_new);
      m[g] = m_new;
      l[g] *= alpha;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= alpha;
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        s[g][it] = exp2f(s[g][it] - m_new);
        l[g] += s[g][it];
      }
    }
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      if (it * kToksPerIter + tok_in_iter < valid) {  // skip unwritten slots (may hold NaN)
        float vf[8];
        Raw8<CacheT>::ToFloat(vr[it], vf);
#pragma unroll
        for (int g = 0; g < kMaxG; ++g) {
          const float pw = s[g][it] * vs;
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(pw, vf[i], acc[g][i]);
        }
      }
    }
  }
  DecodeMergeAndStore<D, kMaxG>(p, m, l, acc);
}

template <int D>
__global__ void __launch_bounds__(D) SplitReduceKernel(const float* ws, int splits,
                                                       __nv_bfloat16* out) {
  const int row = blockIdx.x, h = blockIdx.y, hq = gridDim.y, d = threadIdx.x;
  const int64_t n_rows = static_cast<int64_t>(gridDim.x) * hq * splits;
  const int64_t r0 = (static_cast<int64_t>(row) * hq + h) * splits;
  const float* lse = ws + n_rows * D + r0;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, lse[s]);
  float W = 0.0f, O = 0.0f;
  if (M != -INFINITY) {
    for (int s = 0; s < splits; ++s) {
      const float w = exp2f(lse[s] - M);
      W += w;
      O = fmaf(w, ws[(r0 + s) * D + d], O);
    }
  }
  out[(static_cast<int64_t>(row) * hq + h) * D + d] = __float2bfloat16(W > 0.0f ? O / W : 0.0f);
}

template <typename CacheT, int D>
void LaunchDecode(const DecodeParams& p, dim3 grid, cudaStream_t stream) {
  if (p.group <= 4)
    DecodeKernel<CacheT, D, 4><<<grid, kAttnThreads, 0, stream>>>(p);
  else
    DecodeKernel<CacheT, D, 8><<<grid, kAttnThreads, 0, stream>>>(p);
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

CudaStatus CheckPagedKv(const PagedKv& kv) {
  if (!kv.k || !kv.v) return CudaStatus::Invalid("kv cache pointer is null");
  if (kv.num_blocks <= 0 || kv.num_kv_heads <= 0) return CudaStatus::Invalid("kv cache is empty");
  if (kv.head_dim != 64 && kv.head_dim != 128) return CudaStatus::Invalid("head_dim must be 64/128");
  if (!Aligned16(kv.k) || !Aligned16(kv.v)) return CudaStatus::Invalid("kv cache not 16B aligned");
  if (kv.dtype == KvDtype::kFp8E4M3 && (!kv.k_scale || !kv.v_scale))
    return CudaStatus::Invalid("FP8 kv cache needs block scales");
  return CudaStatus::Ok();
}

CudaStatus LaunchSplitReduce(const float* ws, int rows, int num_q_heads, int splits, int head_dim,
                             __nv_bfloat16* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(num_q_heads));
  if (head_dim == 128)
    SplitReduceKernel<128><<<grid, 128, 0, stream>>>(ws, splits, out);
  else
    SplitReduceKernel<64><<<grid, 64, 0, stream>>>(ws, splits, out);
  return LaunchStatus("SplitReduceKernel");
}

CudaStatus DecodeCtasPerSm(KvDtype dtype, int head_dim, int group, DecodeVariant variant, int* ctas_per_sm) {
  if (!ctas_per_sm || group < 1 || group > 8 || (head_dim != 64 && head_dim != 128))
    return CudaStatus::Invalid("decode occupancy: group 1..8, head_dim 64/128");
  *ctas_per_sm = 0;
  if (variant == DecodeVariant::kV2) return DecodeV2CtasPerSm(dtype, head_dim, group, ctas_per_sm);
  cudaError_t e = cudaSuccess;
  DispatchCacheTypeAndHeadDim(dtype, head_dim, [&](auto type, auto d) {
    using T = typename decltype(type)::type;
    constexpr int kD = decltype(d)::value;
    e = group <= 4 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, DecodeKernel<T, kD, 4>, kAttnThreads, 0)
                   : cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, DecodeKernel<T, kD, 8>, kAttnThreads, 0);
  });
  if (e != cudaSuccess) return {CudaStatusKind::kCudaError, static_cast<int>(e), "decode occupancy"};
  return CudaStatus::Ok();
}

CudaStatus DecodeAttention(const DecodeAttentionArgs& a, cudaStream_t stream) {
  if (CudaStatus st = CheckPagedKv(a.kv); !st.ok()) return st;
  const int hkv = a.kv.num_kv_heads, d = a.kv.head_dim;
  if (a.num_q_heads <= 0 || a.num_q_heads % hkv != 0 || a.num_q_heads / hkv > 8)
    return CudaStatus::Invalid("query heads must be 1..8 times the kv heads");
  if (!a.q || !a.out || !a.block_tables || !a.context_lens)
    return CudaStatus::Invalid("decode attention pointer is null");
  if (a.q_stride < static_cast<int64_t>(a.num_q_heads) * d || a.q_stride % 8 != 0 || !Aligned16(a.q))
    return CudaStatus::Invalid("q stride must cover Hq*D, be a multiple of 8, q 16B aligned");
  if (a.geo.grid_x != hkv || a.geo.grid_y <= 0 || a.geo.splits < 1 || a.geo.grid_z != a.geo.splits)
    return CudaStatus::Invalid("decode geometry does not match the cache");
  if (a.geo.splits > 1 && !a.workspace) return CudaStatus::Invalid("split decode needs a workspace");
  if (a.geo.variant != DecodeVariant::kV1 && a.geo.variant != DecodeVariant::kV2)
    return CudaStatus::Invalid("unknown decode variant");
  if (a.block_table_stride < 0) return CudaStatus::Invalid("negative block table stride");
  DecodeParams p{};
  p.q = a.q;
  p.q_stride = a.q_stride;
  p.out = a.out;
  p.k = a.kv.k;
  p.v = a.kv.v;
  p.k_scale = a.kv.k_scale;
  p.v_scale = a.kv.v_scale;
  p.block_tables = a.block_tables;
  p.bt_stride = a.block_table_stride;
  p.context_lens = a.context_lens;
  p.num_q_heads = a.num_q_heads;
  p.num_kv_heads = hkv;
  p.group = a.num_q_heads / hkv;
  p.splits = a.geo.splits;
  p.blocks_per_split = a.geo.blocks_per_split;
  p.scale_log2 = a.softmax_scale * kLog2e;
  p.workspace = a.workspace;
  const dim3 grid(static_cast<unsigned>(a.geo.grid_x), static_cast<unsigned>(a.geo.grid_y),
                  static_cast<unsigned>(a.geo.grid_z));
  if (a.geo.variant == DecodeVariant::kV2) {
    if (CudaStatus st = LaunchDecodeV2(p, a.kv.dtype, d, grid, stream); !st.ok()) return st;
  } else {
    DispatchCacheTypeAndHeadDim(a.kv.dtype, d, [&](auto type, auto head_dim) {
      LaunchDecode<typename decltype(type)::type, decltype(head_dim)::value>(p, grid, stream);
    });
    if (CudaStatus st = LaunchStatus("DecodeKernel"); !st.ok()) return st;
  }
  if (a.geo.splits > 1)
    return LaunchSplitReduce(a.workspace, a.geo.grid_y, a.num_q_heads, a.geo.splits, d, a.out, stream);
  return CudaStatus::Ok();
}

}  // namespace kvgate::cuda
