// Shared between the decode and prefill attention files (nvcc only).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/kernels.h"

namespace kvgate::cuda {

// Merges split-K partials. ws holds o [rows][Hq][splits][D] f32 (normalised within the split) then
// lse [rows][Hq][splits] f32 (log2 domain; -inf for an empty split). out [rows][Hq][D] bf16.
CudaStatus LaunchSplitReduce(const float* ws, int rows, int num_q_heads, int splits, int head_dim,
                             __nv_bfloat16* out, cudaStream_t stream);

CudaStatus CheckPagedKv(const PagedKv& kv);

// Kernel arguments of both decode variants (attention_decode.cu validates and fills them).
struct DecodeParams {
  const __nv_bfloat16* q;  // [S][q_stride] holding [Hq][D]
  int64_t q_stride;
  __nv_bfloat16* out;      // [S][Hq][D]
  const void* k;           // [NB][B][Hkv][D]
  const void* v;
  const float* k_scale;    // [NB][Hkv] (FP8)
  const float* v_scale;
  const int32_t* block_tables;  // [S][bt_stride]
  int bt_stride;
  const int32_t* context_lens;  // [S]
  int num_q_heads, num_kv_heads, group;
  int splits, blocks_per_split;
  float scale_log2;
  float* workspace;
};

// The end of both decode kernels (CTA = (kv head blockIdx.x, sequence blockIdx.y, split blockIdx.z),
// kAttnWarps warps, v1's lane map: D / 8 lanes per token row, lane chunk = lane % (D / 8)). Each
// thread holds its running max m (the same across its warp), sum l and acc [8 dims of its chunk]
// per query head of the group. Merges the token groups of each warp (shuffles), then the warps
// (shared memory), and writes out, or with splits > 1 the split's normalised o and log2-sum-exp to
// the workspace (-inf lse for a split that saw no key; SplitReduceKernel weighs it 0).
template <int D, int kMaxG>
__device__ __forceinline__ void DecodeMergeAndStore(const DecodeParams& p, float (&m)[kMaxG],
                                                    float (&l)[kMaxG], float (&acc)[kMaxG][8]) {
  constexpr int kLanesPerTok = D / 8;
  __shared__ float sm_m[kAttnWarps][kMaxG];
  __shared__ float sm_l[kAttnWarps][kMaxG];
  __shared__ float sm_acc[kAttnWarps][kMaxG][D];
  const int kvh = blockIdx.x, seq = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, chunk = lane % kLanesPerTok;
  const int G = p.group;
  // Merge the token groups of the warp (same m across the warp), then the 4 warps.
#pragma unroll
  for (int g = 0; g < kMaxG; ++g) {
#pragma unroll
    for (int o = kLanesPerTok; o < 32; o <<= 1) {
      l[g] += __shfl_xor_sync(0xffffffffu, l[g], o);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] += __shfl_xor_sync(0xffffffffu, acc[g][i], o);
    }
  }
  if (lane < kLanesPerTok) {
#pragma unroll
    for (int g = 0; g < kMaxG; ++g) {
#pragma unroll
      for (int i = 0; i < 8; ++i) sm_acc[warp][g][chunk * 8 + i] = acc[g][i];
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < kMaxG; ++g) {
      sm_m[warp][g] = m[g];
      sm_l[warp][g] = l[g];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += kAttnThreads) {
    const int g = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sm_m[w][g]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kAttnWarps; ++w) {
        const float f = exp2f(sm_m[w][g] - M);
        L += sm_l[w][g] * f;
        O += sm_acc[w][g][d] * f;
      }
    }
    const int h = kvh * G + g;
    if (p.splits == 1) {
      p.out[(static_cast<int64_t>(seq) * p.num_q_heads + h) * D + d] = __float2bfloat16(O / L);
    } else {
      const int64_t r = (static_cast<int64_t>(seq) * p.num_q_heads + h) * p.splits + split;
      const int64_t n_rows = static_cast<int64_t>(gridDim.y) * p.num_q_heads * p.splits;
      p.workspace[r * D + d] = L > 0.0f ? O / L : 0.0f;
      if (d == 0) p.workspace[n_rows * D + r] = L > 0.0f ? M + log2f(L) : -INFINITY;
    }
  }
}

// Launches the decode v2 kernel (attention_decode_v2.cu) for a validated launch; grid from
// DecodeGeometry (variant kV2). Does not run the split reduction.
CudaStatus LaunchDecodeV2(const DecodeParams& p, KvDtype dtype, int head_dim, dim3 grid,
                          cudaStream_t stream);
// DecodeCtasPerSm for v2 (its kernels and their dynamic shared memory live in that file).
CudaStatus DecodeV2CtasPerSm(KvDtype dtype, int head_dim, int group, int* ctas_per_sm);

// Kernel arguments of both prefill variants (attention_prefill.cu validates and fills them).
struct PrefillParams {
  const __nv_bfloat16* q;  // [T][q_stride] holding [Hq][D]
  int64_t q_stride;
  __nv_bfloat16* out;      // [T][Hq][D]
  const void* k;           // [NB][B][Hkv][D]
  const void* v;
  const float* k_scale;    // [NB][Hkv]
  const float* v_scale;
  const int32_t* block_tables;  // [S][bt_stride]
  int bt_stride;
  const int32_t* q_start;       // [S + 1]
  const int32_t* context_lens;  // [S]
  const int32_t* tiles;         // [num_tiles][2]
  int num_q_heads, num_kv_heads, group, splits, num_q_tokens;
  int tile_tokens;              // query tokens per tile (v2: 128 / G)
  float scale_log2;
  float* workspace;
};

// Launches the prefill v2 kernel (attention_prefill_v2.cu) for a validated launch; grid from
// PrefillGeometry (variant kV2, or kV2Fp8Qk with fp8_qk and an FP8 cache). Does not run the split
// reduction.
CudaStatus LaunchPrefillV2(const PrefillParams& p, KvDtype dtype, int head_dim, bool fp8_qk, dim3 grid,
                           cudaStream_t stream);

// Launches the prefill v3 kernel (attention_prefill_v3.cu) for a validated launch on a bf16 or f16
// cache `kv` (its two planes get a TMA tensor map each); grid from PrefillGeometry (variant kV3).
// Does not run the split reduction.
CudaStatus LaunchPrefillV3(const PrefillParams& p, const PagedKv& kv, dim3 grid, cudaStream_t stream);

inline constexpr float kLog2e = 1.4426950408889634f;

// The attention launchers' one dispatch from run-time (cache element type, head dim) to the
// compiled instantiations: calls launch(std::type_identity<T>{}, std::integral_constant<int, D>{})
// with T in {bf16, f16, FP8 E4M3 bytes} and D in {64, 128} (callers validated d first).
template <class Launch>
void DispatchCacheTypeAndHeadDim(KvDtype dtype, int d, Launch&& launch) {
  auto with_head_dim = [&](auto type) {
    if (d == 128) {
      launch(type, std::integral_constant<int, 128>{});
    } else {
      launch(type, std::integral_constant<int, 64>{});
    }
  };
  switch (dtype) {
    case KvDtype::kBf16:
      with_head_dim(std::type_identity<__nv_bfloat16>{});
      break;
    case KvDtype::kF16:
      with_head_dim(std::type_identity<__half>{});
      break;
    case KvDtype::kFp8E4M3:
      with_head_dim(std::type_identity<uint8_t>{});
      break;
  }
}

}  // namespace kvgate::cuda
