// Memory-bound elementwise kernels: RMSNorm, interleaved RoPE, SiLU*mul, Q4_1/Q8_0 dequantization,
// the FP8 hardware encoder (for checks) and a deterministic random fill. Each uses 16-byte accesses
// where the shapes allow and a grid-stride loop sized by ElementwiseGrid.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant_format.h"

namespace kvgate::cuda {
namespace {

constexpr int kNormThreads = 256;

// One CTA per row; cols % 8 == 0. Two passes over the row (the second hits L1/L2).
__global__ void __launch_bounds__(kNormThreads)
    RmsNormKernel(const bf16* x, int64_t x_stride, const bf16* w, bf16* out, int64_t out_stride,
                  int cols, float eps) {
  const bf16* xr = x + blockIdx.x * x_stride;
  bf16* yr = out + blockIdx.x * out_stride;
  float ss = 0.0f;
  for (int c = threadIdx.x * 8; c < cols; c += kNormThreads * 8) {
    float f[8];
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(xr + c), f);
#pragma unroll
    for (int i = 0; i < 8; ++i) ss = fmaf(f[i], f[i], ss);
  }
  const float inv = rsqrtf(BlockSum<kNormThreads>(ss) / static_cast<float>(cols) + eps);
  for (int c = threadIdx.x * 8; c < cols; c += kNormThreads * 8) {
    float f[8], wf[8];
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(xr + c), f);
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(w + c), wf);
    __align__(16) __nv_bfloat162 o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o[i] = __floats2bfloat162_rn(f[2 * i] * inv * wf[2 * i], f[2 * i + 1] * inv * wf[2 * i + 1]);
    *reinterpret_cast<uint4*>(yr + c) = *reinterpret_cast<const uint4*>(o);
  }
}

// One thread per (token, head, pair). The angle is formed and range-reduced in double: at
// positions near 1e5 a float angle would already be off by ~4e-3 rad.
__global__ void RopeKernel(bf16* q, int64_t q_stride, int hq, bf16* k, int64_t k_stride, int hkv,
                           int d, const int32_t* positions, int num_tokens, double log2_theta) {
  const int half = d / 2;
  const int64_t per_token = static_cast<int64_t>(hq + hkv) * half;
  const int64_t n = per_token * num_tokens;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int t = static_cast<int>(idx / per_token);
    const int rem = static_cast<int>(idx % per_token);
    const int head = rem / half, i = rem % half;
    bf16* base = head < hq ? q + t * q_stride + head * d : k + t * k_stride + (head - hq) * d;
    const double inv_freq = exp2(-log2_theta * (2.0 * i) / d);
    double a = static_cast<double>(positions[t]) * inv_freq;
    a -= 6.283185307179586 * rint(a / 6.283185307179586);
    float sn, cs;
    sincosf(static_cast<float>(a), &sn, &cs);
    __nv_bfloat162* pair = reinterpret_cast<__nv_bfloat162*>(base + 2 * i);
    const float2 v = __bfloat1622float2(*pair);
    *pair = __floats2bfloat162_rn(v.x * cs - v.y * sn, v.x * sn + v.y * cs);
  }
}

__global__ void SiluMulKernel(const bf16* gate_up, bf16* out, int num_tokens, int ffn) {
  const int chunks = ffn / 8;
  const int64_t n = static_cast<int64_t>(num_tokens) * chunks;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / chunks;
    const int c = static_cast<int>(idx % chunks) * 8;
    float g[8], u[8];
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(gate_up + t * 2 * ffn + c), g);
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(gate_up + t * 2 * ffn + ffn + c), u);
    __align__(16) __nv_bfloat162 o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float a = g[2 * i] / (1.0f + __expf(-g[2 * i])) * u[2 * i];
      const float b = g[2 * i + 1] / (1.0f + __expf(-g[2 * i + 1])) * u[2 * i + 1];
      o[i] = __floats2bfloat162_rn(a, b);
    }
    *reinterpret_cast<uint4*>(out + t * ffn + c) = *reinterpret_cast<const uint4*>(o);
  }
}

__device__ __forceinline__ float LoadHalf(const uint8_t* p) {
  const uint16_t bits = static_cast<uint16_t>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(bits));
}

// Four threads per 32-value block; thread j writes values 4j..4j+3 and 16+4j..16+4j+3.
__global__ void DequantQ4_1Kernel(const uint8_t* blocks, int64_t n_blocks, bf16* out) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n_blocks * 4;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = idx / 4;
    const int j = static_cast<int>(idx % 4);
    const uint8_t* p = blocks + b * kQ4_1BlockBytes;
    const float d = LoadHalf(p), m = LoadHalf(p + 2);
    __align__(8) bf16 lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint8_t q = p[4 + 4 * j + i];
      lo[i] = __float2bfloat16_rn(__fmaf_rn(static_cast<float>(q & 15), d, m));
      hi[i] = __float2bfloat16_rn(__fmaf_rn(static_cast<float>(q >> 4), d, m));
    }
    *reinterpret_cast<uint2*>(out + b * 32 + 4 * j) = *reinterpret_cast<const uint2*>(lo);
    *reinterpret_cast<uint2*>(out + b * 32 + 16 + 4 * j) = *reinterpret_cast<const uint2*>(hi);
  }
}

__global__ void DequantQ8_0Kernel(const uint8_t* blocks, int64_t n_blocks, bf16* out) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n_blocks * 4;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = idx / 4;
    const int j = static_cast<int>(idx % 4);
    const uint8_t* p = blocks + b * kQ8_0BlockBytes;
    const float d = LoadHalf(p);
    __align__(16) bf16 v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      v[i] = __float2bfloat16_rn(__fmul_rn(static_cast<float>(static_cast<int8_t>(p[2 + 8 * j + i])), d));
    *reinterpret_cast<uint4*>(out + b * 32 + 8 * j) = *reinterpret_cast<const uint4*>(v);
  }
}

__global__ void EncodeFp8Kernel(const float* x, int64_t n, float scale, uint8_t* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = EncodeFp8Hw(__fdiv_rn(x[i], scale));
}

__device__ __forceinline__ uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void FillUniformKernel(bf16* out, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = SplitMix64(seed * 0x100000001b3ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    out[i] = __float2bfloat16_rn((2.0f * u - 1.0f) * scale);
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

CudaStatus SmCount(int* n) {
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess)
    return {CudaStatusKind::kCudaError, static_cast<int>(e), "cudaGetDevice"};
  if (cudaError_t e = cudaDeviceGetAttribute(n, cudaDevAttrMultiProcessorCount, dev); e != cudaSuccess)
    return {CudaStatusKind::kCudaError, static_cast<int>(e), "cudaDeviceGetAttribute"};
  return CudaStatus::Ok();
}

dim3 GridFor(int64_t n) {
  int sms = 132;
  if (!SmCount(&sms).ok()) sms = 132;
  return dim3(static_cast<unsigned>(ElementwiseGrid(n, sms).blocks));
}

}  // namespace

CudaStatus RequireDevice() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return {CudaStatusKind::kNoDevice, 0, "no CUDA device found"};
  }
  return CudaStatus::Ok();
}

CudaStatus DeviceSmCount(int* num_sms) { return SmCount(num_sms); }

CudaStatus RmsNorm(const bf16* x, int64_t x_stride, const bf16* w, bf16* out, int64_t out_stride,
                   int rows, int cols, float eps, cudaStream_t stream) {
  if (!x || !w || !out) return CudaStatus::Invalid("rmsnorm pointer is null");
  if (rows <= 0 || cols <= 0 || cols % 8 != 0) return CudaStatus::Invalid("rmsnorm: cols % 8 != 0");
  if (x_stride < cols || out_stride < cols || x_stride % 8 || out_stride % 8 || !Aligned16(x) ||
      !Aligned16(w) || !Aligned16(out))
    return CudaStatus::Invalid("rmsnorm: strides/alignment must allow 16-byte accesses");
  RmsNormKernel<<<rows, kNormThreads, 0, stream>>>(x, x_stride, w, out, out_stride, cols, eps);
  return LaunchStatus("RmsNormKernel");
}

CudaStatus RopeInterleaved(bf16* q, int64_t q_stride, int num_q_heads, bf16* k, int64_t k_stride,
                           int num_kv_heads, int head_dim, const int32_t* positions, int num_tokens,
                           float theta, cudaStream_t stream) {
  if (!q || !positions) return CudaStatus::Invalid("rope pointer is null");
  if (head_dim <= 0 || head_dim % 2 || num_q_heads <= 0 || num_tokens <= 0 || theta <= 0.0f)
    return CudaStatus::Invalid("rope: bad shape or theta");
  if (!k) num_kv_heads = 0;
  if (q_stride < static_cast<int64_t>(num_q_heads) * head_dim ||
      (k && k_stride < static_cast<int64_t>(num_kv_heads) * head_dim) || q_stride % 2 || k_stride % 2)
    return CudaStatus::Invalid("rope: strides too small or odd");
  const int64_t n = static_cast<int64_t>(num_tokens) * (num_q_heads + num_kv_heads) * (head_dim / 2);
  RopeKernel<<<GridFor(n), 256, 0, stream>>>(q, q_stride, num_q_heads, k, k_stride, num_kv_heads,
                                             head_dim, positions, num_tokens, std::log2(static_cast<double>(theta)));
  return LaunchStatus("RopeKernel");
}

CudaStatus SiluMul(const bf16* gate_up, bf16* out, int num_tokens, int ffn, cudaStream_t stream) {
  if (!gate_up || !out || num_tokens <= 0 || ffn <= 0 || ffn % 8 || !Aligned16(gate_up) || !Aligned16(out))
    return CudaStatus::Invalid("silu_mul: bad pointer, shape (ffn % 8) or alignment");
  SiluMulKernel<<<GridFor(static_cast<int64_t>(num_tokens) * ffn / 8), 256, 0, stream>>>(gate_up, out, num_tokens, ffn);
  return LaunchStatus("SiluMulKernel");
}

CudaStatus DequantQ4_1(const uint8_t* blocks, int64_t n, bf16* out, cudaStream_t stream) {
  if (!blocks || !out || n <= 0 || n % 32 || !Aligned16(out)) return CudaStatus::Invalid("dequant q4_1: bad args");
  DequantQ4_1Kernel<<<GridFor(n / 8), 256, 0, stream>>>(blocks, n / 32, out);
  return LaunchStatus("DequantQ4_1Kernel");
}

CudaStatus DequantQ8_0(const uint8_t* blocks, int64_t n, bf16* out, cudaStream_t stream) {
  if (!blocks || !out || n <= 0 || n % 32 || !Aligned16(out)) return CudaStatus::Invalid("dequant q8_0: bad args");
  DequantQ8_0Kernel<<<GridFor(n / 8), 256, 0, stream>>>(blocks, n / 32, out);
  return LaunchStatus("DequantQ8_0Kernel");
}

CudaStatus EncodeFp8(const float* x, int64_t n, float scale, uint8_t* out, cudaStream_t stream) {
  if (!x || !out || n <= 0 || !(scale > 0.0f)) return CudaStatus::Invalid("encode fp8: bad args");
  EncodeFp8Kernel<<<GridFor(n), 256, 0, stream>>>(x, n, scale, out);
  return LaunchStatus("EncodeFp8Kernel");
}

CudaStatus FillUniformBf16(bf16* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (!out || n <= 0) return CudaStatus::Invalid("fill: bad args");
  FillUniformKernel<<<GridFor(n), 256, 0, stream>>>(out, n, seed, scale);
  return LaunchStatus("FillUniformKernel");
}

}  // namespace kvgate::cuda
