// Per-tensor FP8 (E4M3) quantization on the device, feeding GemmFp8: amax -> scale -> codes, all
// on the stream (no host sync). The quantize uses the hardware conversion (EncodeFp8Hw), which the
// device check measured bit-identical to the host's EncodeE4M3 (fp8.h) on every code and rounding
// midpoint (H200, 2026-11-29), so the CPU reference (QuantizeE4M3) agrees bit for bit; NaN inputs
// excepted (either NaN code). Built; never run on a GPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cuda_status.h"

namespace kvgate::cuda {

// *amax = max |x[i]| over n values. Zeroes *amax first (on the stream), then atomicMax on the
// float bits: non-negative floats order like their bit patterns as unsigned ints.
CudaStatus LaunchAmaxF32(const float* x, int64_t n, float* amax, cudaStream_t stream);
CudaStatus LaunchAmaxBf16(const __nv_bfloat16* x, int64_t n, float* amax, cudaStream_t stream);

// scale[0] = Fp8TensorScale(*amax), inv_scale[0] = its inverse (one thread).
CudaStatus LaunchFp8ScaleFromAmax(const float* amax, float* scale, float* inv_scale, cudaStream_t stream);

// out[i] = QuantizeE4M3(x[i], *inv_scale): x * inv_scale rounded to nearest even, saturated to +-448.
CudaStatus LaunchQuantizeE4M3F32(const float* x, int64_t n, const float* inv_scale, uint8_t* out,
                                 cudaStream_t stream);
CudaStatus LaunchQuantizeE4M3Bf16(const __nv_bfloat16* x, int64_t n, const float* inv_scale, uint8_t* out,
                                  cudaStream_t stream);

}  // namespace kvgate::cuda
