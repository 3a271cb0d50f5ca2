#include "kernels/cuda/fp8_quant.h"

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/fp8_quant_math.h"

namespace kvgate::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;  // grid-stride beyond this; amax atomics stay at one per block

__device__ __forceinline__ float Load(const float* x, int64_t i) { return x[i]; }
__device__ __forceinline__ float Load(const __nv_bfloat16* x, int64_t i) { return __bfloat162float(x[i]); }

template <typename T>
__global__ void AmaxKernel(const T* x, int64_t n, float* amax) {
  float m = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(Load(x, i)));
  m = WarpMax(m);
  __shared__ float warp_max[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
    // fmaxf drops NaN, and |x| >= 0, so the bits order as unsigned ints.
    atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(m));
  }
}

__global__ void ScaleKernel(const float* amax, float* scale, float* inv_scale) {
  *scale = Fp8TensorScale(*amax);
  *inv_scale = Fp8TensorInvScale(*amax);
}

template <typename T>
__global__ void QuantizeKernel(const T* x, int64_t n, const float* inv_scale, uint8_t* out) {
  const float inv = *inv_scale;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = EncodeFp8Hw(Load(x, i) * inv);  // QuantizeE4M3's rounding, in one instruction
}

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < kMaxBlocks ? b : kMaxBlocks);
}

template <typename T>
CudaStatus Amax(const T* x, int64_t n, float* amax, cudaStream_t stream) {
  if (n < 0 || !amax || (n > 0 && !x)) return CudaStatus::Invalid("amax: bad arguments");
  if (cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), stream); e != cudaSuccess)
    return {CudaStatusKind::kCudaError, static_cast<int>(e), "amax: cudaMemsetAsync"};
  if (n == 0) return CudaStatus::Ok();
  AmaxKernel<T><<<Blocks(n), kThreads, 0, stream>>>(x, n, amax);
  return LaunchStatus("amax kernel");
}

template <typename T>
CudaStatus Quantize(const T* x, int64_t n, const float* inv_scale, uint8_t* out, cudaStream_t stream) {
  if (n < 0 || !inv_scale || (n > 0 && (!x || !out))) return CudaStatus::Invalid("quantize e4m3: bad arguments");
  if (n == 0) return CudaStatus::Ok();
  QuantizeKernel<T><<<Blocks(n), kThreads, 0, stream>>>(x, n, inv_scale, out);
  return LaunchStatus("quantize e4m3 kernel");
}

}  // namespace

CudaStatus LaunchAmaxF32(const float* x, int64_t n, float* amax, cudaStream_t stream) {
  return Amax(x, n, amax, stream);
}
CudaStatus LaunchAmaxBf16(const __nv_bfloat16* x, int64_t n, float* amax, cudaStream_t stream) {
  return Amax(x, n, amax, stream);
}
CudaStatus LaunchFp8ScaleFromAmax(const float* amax, float* scale, float* inv_scale, cudaStream_t stream) {
  if (!amax || !scale || !inv_scale) return CudaStatus::Invalid("fp8 scale: pointer is null");
  ScaleKernel<<<1, 1, 0, stream>>>(amax, scale, inv_scale);
  return LaunchStatus("fp8 scale kernel");
}
CudaStatus LaunchQuantizeE4M3F32(const float* x, int64_t n, const float* inv_scale, uint8_t* out,
                                 cudaStream_t stream) {
  return Quantize(x, n, inv_scale, out, stream);
}
CudaStatus LaunchQuantizeE4M3Bf16(const __nv_bfloat16* x, int64_t n, const float* inv_scale, uint8_t* out,
                                  cudaStream_t stream) {
  return Quantize(x, n, inv_scale, out, stream);
}

}  // namespace kvgate::cuda
