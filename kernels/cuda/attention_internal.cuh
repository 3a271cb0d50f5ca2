// Shared between the decode and prefill attention files (nvcc only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/kernels.h"

namespace kvgate::cuda {

// Merges split-K partials. ws holds o [rows][Hq][splits][D] f32 (normalised within the split) then
// lse [rows][Hq][splits] f32 (log2 domain; -inf for an empty split). out [rows][Hq][D] bf16.
CudaStatus LaunchSplitReduce(const float* ws, int rows, int num_q_heads, int splits, int head_dim,
                             __nv_bfloat16* out, cudaStream_t stream);

CudaStatus CheckPagedKv(const PagedKv& kv);

inline constexpr float kLog2e = 1.4426950408889634f;

}  // namespace kvgate::cuda
