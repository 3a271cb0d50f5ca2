// f32-activation / f16-cache kernels for CudaBackend, which implements the engine's Backend
// interface (local_engine/backend.h: f32 activations, f16 KV cache, int64 slots, quantized weights).
// The bf16 kernels in kernels.h are the fast path; these adapt the interface's data types.
// Letters: T tokens, D features, H heads, Dh head dim. All pointers are device memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cuda_status.h"

namespace kvgate::cuda {

CudaStatus F32ToBf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
CudaStatus Bf16ToF32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream);
// out [R][C] = x / sqrt(mean(x^2) + eps) * w [C]; out may alias x. A non-null `twin` [R][C] gets
// the same values rounded to bf16 (RNE, bit for bit F32ToBf16 of out): the next GEMM's input
// without a conversion launch (op_twin.h).
CudaStatus RmsNormF32(const float* x, const float* w, float* out, int64_t rows, int64_t cols, float eps,
                      __nv_bfloat16* twin, cudaStream_t stream);
// In place on x [T][H][Dh]: interleaved-pair RoPE at positions [T].
CudaStatus RopeInterleavedF32(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                              const int32_t* positions, float theta, cudaStream_t stream);
// The same rotation in single precision from a RopeTable (rope_table.h) in device memory: low
// [256][Dh/2][2] and high [kRopeMaxPositions / 256][Dh/2][2] floats. REQUIRES: positions in
// [0, kRopeMaxPositions) (CudaBackend checks them on the host).
CudaStatus RopeInterleavedF32Table(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                                   const int32_t* positions, const float* low, const float* high,
                                   cudaStream_t stream);
// k, v [T][kv_dim] -> f16 caches [P][kv_dim] at slots [T] (negative: skip).
CudaStatus WriteKvF16(const float* k, const float* v, int64_t tokens, int64_t kv_dim,
                      const int64_t* slots, uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream);
// out [n] = silu(gate) * up; out may alias gate. `twin` as for RmsNormF32.
CudaStatus SwiGluF32(const float* gate, const float* up, int64_t n, float* out, __nv_bfloat16* twin,
                     cudaStream_t stream);
CudaStatus AddF32(float* x, const float* y, int64_t n, cudaStream_t stream);
// out [R][D] = x [rows[r]][D].
CudaStatus GatherRowsF32(const float* x, int64_t d, const int32_t* rows, int64_t n_rows, float* out,
                         cudaStream_t stream);
// out [T][D] = dequantized rows ids [T] of a GGUF Q4_1 (q8 = false) or Q8_0 table [V][D].
CudaStatus EmbedRowsF32(const uint8_t* table, bool q8, int64_t d, const int32_t* ids, int64_t n,
                        float* out, cudaStream_t stream);

}  // namespace kvgate::cuda
