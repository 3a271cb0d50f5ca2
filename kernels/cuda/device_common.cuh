// Device-side helpers shared by the .cu files of kernels/cuda (nvcc only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/fp8.h"

namespace kvgate::cuda {

inline CudaStatus LaunchStatus(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return {CudaStatusKind::kCudaError, static_cast<int>(e), what};
  return CudaStatus::Ok();
}

// 8 consecutive cache elements -> float. bf16: one 16-byte load; FP8: one 8-byte load.
struct Vec8 {
  float v[8];
};

__device__ __forceinline__ void Bf16x8ToFloat(const uint4& raw, float* out) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(p[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void Fp8x8ToFloat(const uint2& raw, float* out) {
  const __nv_fp8x2_storage_t* p = reinterpret_cast<const __nv_fp8x2_storage_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(p[i], __NV_E4M3);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void F16x8ToFloat(const uint4& raw, float* out) {
  const __half2* p = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(p[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// Raw storage of 8 cache elements of type T (bf16 / f16 -> uint4, FP8 -> uint2) and its conversion.
template <typename T>
struct Raw8;
template <>
struct Raw8<__nv_bfloat16> {
  using type = uint4;
  static __device__ __forceinline__ void ToFloat(const uint4& r, float* out) { Bf16x8ToFloat(r, out); }
};
template <>
struct Raw8<__half> {
  using type = uint4;
  static __device__ __forceinline__ void ToFloat(const uint4& r, float* out) { F16x8ToFloat(r, out); }
};
template <>
struct Raw8<uint8_t> {
  using type = uint2;
  static __device__ __forceinline__ void ToFloat(const uint2& r, float* out) { Fp8x8ToFloat(r, out); }
};

__device__ __forceinline__ uint8_t EncodeFp8Hw(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The sum of every thread's `v` over a block of kThreads threads (a multiple of 32), returned to
// all of them. Uses one static shared array: call it at most once per kernel.
template <int kThreads>
__device__ __forceinline__ float BlockSum(float v) {
  static_assert(kThreads % 32 == 0, "whole warps");
  __shared__ float partial[kThreads / 32];
  v = WarpSum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  return total;
}
__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

}  // namespace kvgate::cuda
