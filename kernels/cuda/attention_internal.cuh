// Shared between the decode and prefill attention files (nvcc only).
#pragma once

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
// PrefillGeometry (variant kV2). Does not run the split reduction.
CudaStatus LaunchPrefillV2(const PrefillParams& p, KvDtype dtype, int head_dim, dim3 grid,
                           cudaStream_t stream);

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
