// The f32 / f16 adapter kernels behind CudaBackend (see backend_ops.h). Simple grid-stride loops:
// these serve the engine's op-by-op interface, not the tuned bf16 path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/backend_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/quant_format.h"
#include "kernels/cuda/rope_table.h"

namespace kvgate::cuda {
namespace {

#define KVGATE_GRID_STRIDE(i, n)                                                                  \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void F32ToBf16Kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  KVGATE_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}
__global__ void Bf16ToF32Kernel(const __nv_bfloat16* x, float* y, int64_t n) {
  KVGATE_GRID_STRIDE(i, n) y[i] = __bfloat162float(x[i]);
}

constexpr int kNormThreads = 256;
__global__ void __launch_bounds__(kNormThreads)
    RmsNormF32Kernel(const float* x, const float* w, float* out, __nv_bfloat16* twin, int64_t cols, float eps) {
  const float* xr = x + blockIdx.x * cols;
  float* yr = out + blockIdx.x * cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kNormThreads) ss = fmaf(xr[c], xr[c], ss);
  const float inv = rsqrtf(BlockSum<kNormThreads>(ss) / static_cast<float>(cols) + eps);
  __nv_bfloat16* tr = twin ? twin + blockIdx.x * cols : nullptr;
  for (int64_t c = threadIdx.x; c < cols; c += kNormThreads) {
    const float y = xr[c] * inv * w[c];
    yr[c] = y;
    if (tr) tr[c] = __float2bfloat16_rn(y);
  }
}

__global__ void RopeF32Kernel(float* x, int64_t tokens, int64_t heads, int64_t d, const int32_t* pos,
                              double log2_theta) {
  const int64_t half = d / 2, n = tokens * heads * half;
  KVGATE_GRID_STRIDE(idx, n) {
    const int64_t t = idx / (heads * half), i = idx % half;
    const double inv_freq = exp2(-log2_theta * (2.0 * static_cast<double>(i)) / static_cast<double>(d));
    double a = static_cast<double>(pos[t]) * inv_freq;
    a -= 6.283185307179586 * rint(a / 6.283185307179586);
    float sn, cs;
    sincosf(static_cast<float>(a), &sn, &cs);
    float* p = x + (idx / half) * d + 2 * i;
    const float x0 = p[0], x1 = p[1];
    p[0] = x0 * cs - x1 * sn;
    p[1] = x0 * sn + x1 * cs;
  }
}

// One thread per (token, head, pair): RopeTableRotation's arithmetic (rope_table.h).
__global__ void RopeF32TableKernel(float* x, int64_t tokens, int64_t heads, int64_t d, const int32_t* pos,
                                   const float2* low, const float2* high) {
  const int64_t half = d / 2, n = tokens * heads * half;
  KVGATE_GRID_STRIDE(idx, n) {
    const int64_t t = idx / (heads * half), i = idx % half;
    const int32_t p = pos[t];
    const float2 lo = low[(p & (kRopeLowPositions - 1)) * half + i];
    const float2 hi = high[(p >> kRopeLowBits) * half + i];
    const float cs = fmaf(hi.x, lo.x, -hi.y * lo.y), sn = fmaf(hi.y, lo.x, hi.x * lo.y);
    float* q = x + (idx / half) * d + 2 * i;
    const float x0 = q[0], x1 = q[1];
    q[0] = x0 * cs - x1 * sn;
    q[1] = x0 * sn + x1 * cs;
  }
}

__global__ void WriteKvF16Kernel(const float* k, const float* v, int64_t tokens, int64_t kv_dim,
                                 const int64_t* slots, __half* kc, __half* vc) {
  KVGATE_GRID_STRIDE(idx, tokens * kv_dim) {
    const int64_t t = idx / kv_dim, j = idx % kv_dim, slot = slots[t];
    if (slot < 0) continue;
    kc[slot * kv_dim + j] = __float2half_rn(k[idx]);
    vc[slot * kv_dim + j] = __float2half_rn(v[idx]);
  }
}

__global__ void SwiGluF32Kernel(const float* g, const float* u, int64_t n, float* out, __nv_bfloat16* twin) {
  KVGATE_GRID_STRIDE(i, n) {
    const float y = g[i] / (1.0f + expf(-g[i])) * u[i];
    out[i] = y;
    if (twin) twin[i] = __float2bfloat16_rn(y);
  }
}
__global__ void AddF32Kernel(float* x, const float* y, int64_t n) {
  KVGATE_GRID_STRIDE(i, n) x[i] += y[i];
}
__global__ void GatherRowsF32Kernel(const float* x, int64_t d, const int32_t* rows, int64_t n, float* out) {
  KVGATE_GRID_STRIDE(i, n * d) out[i] = x[static_cast<int64_t>(rows[i / d]) * d + i % d];
}

__device__ __forceinline__ float HalfAt(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<uint16_t>(p[0] | (p[1] << 8))));
}

__global__ void EmbedRowsKernel(const uint8_t* table, bool q8, int64_t d, const int32_t* ids, int64_t n,
                                float* out) {
  const int64_t blocks_per_row = d / kQuantBlock;
  KVGATE_GRID_STRIDE(idx, n * d) {
    const int64_t t = idx / d, c = idx % d, b = static_cast<int64_t>(ids[t]) * blocks_per_row + c / kQuantBlock;
    const int j = static_cast<int>(c % kQuantBlock);
    if (q8) {
      const uint8_t* p = table + b * kQ8_0BlockBytes;
      out[idx] = static_cast<float>(static_cast<int8_t>(p[2 + j])) * HalfAt(p);
    } else {
      const uint8_t* p = table + b * kQ4_1BlockBytes;
      const int q = j < 16 ? (p[4 + j] & 15) : (p[4 + j - 16] >> 4);
      out[idx] = fmaf(static_cast<float>(q), HalfAt(p), HalfAt(p + 2));
    }
  }
}

unsigned Blocks(int64_t n) {
  int sms = 132;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    sms = 132;
  return static_cast<unsigned>(ElementwiseGrid(n, sms).blocks);
}

}  // namespace

CudaStatus F32ToBf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return CudaStatus::Ok();
  F32ToBf16Kernel<<<Blocks(n), 256, 0, s>>>(x, y, n);
  return LaunchStatus("F32ToBf16Kernel");
}
CudaStatus Bf16ToF32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return CudaStatus::Ok();
  Bf16ToF32Kernel<<<Blocks(n), 256, 0, s>>>(x, y, n);
  return LaunchStatus("Bf16ToF32Kernel");
}
CudaStatus RmsNormF32(const float* x, const float* w, float* out, int64_t rows, int64_t cols, float eps,
                      __nv_bfloat16* twin, cudaStream_t s) {
  if (rows <= 0) return CudaStatus::Ok();
  if (cols <= 0 || rows > 0x7fffffff) return CudaStatus::Invalid("rmsnorm f32: bad shape");
  RmsNormF32Kernel<<<static_cast<unsigned>(rows), kNormThreads, 0, s>>>(x, w, out, twin, cols, eps);
  return LaunchStatus("RmsNormF32Kernel");
}
CudaStatus RopeInterleavedF32(float* x, int64_t tokens, int64_t heads, int64_t head_dim, const int32_t* positions,
                              float theta, cudaStream_t s) {
  if (tokens <= 0) return CudaStatus::Ok();
  if (head_dim % 2 || heads <= 0 || !(theta > 0.0f)) return CudaStatus::Invalid("rope f32: bad shape");
  RopeF32Kernel<<<Blocks(tokens * heads * head_dim / 2), 256, 0, s>>>(x, tokens, heads, head_dim, positions,
                                                                       std::log2(static_cast<double>(theta)));
  return LaunchStatus("RopeF32Kernel");
}
CudaStatus RopeInterleavedF32Table(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                                   const int32_t* positions, const float* low, const float* high, cudaStream_t s) {
  if (tokens <= 0) return CudaStatus::Ok();
  if (head_dim % 2 || heads <= 0 || !low || !high) return CudaStatus::Invalid("rope f32 table: bad shape or table");
  RopeF32TableKernel<<<Blocks(tokens * heads * head_dim / 2), 256, 0, s>>>(
      x, tokens, heads, head_dim, positions, reinterpret_cast<const float2*>(low), reinterpret_cast<const float2*>(high));
  return LaunchStatus("RopeF32TableKernel");
}
CudaStatus WriteKvF16(const float* k, const float* v, int64_t tokens, int64_t kv_dim, const int64_t* slots,
                      uint16_t* k_cache, uint16_t* v_cache, cudaStream_t s) {
  if (tokens <= 0) return CudaStatus::Ok();
  WriteKvF16Kernel<<<Blocks(tokens * kv_dim), 256, 0, s>>>(k, v, tokens, kv_dim, slots,
                                                           reinterpret_cast<__half*>(k_cache),
                                                           reinterpret_cast<__half*>(v_cache));
  return LaunchStatus("WriteKvF16Kernel");
}
CudaStatus SwiGluF32(const float* gate, const float* up, int64_t n, float* out, __nv_bfloat16* twin,
                     cudaStream_t s) {
  if (n <= 0) return CudaStatus::Ok();
  SwiGluF32Kernel<<<Blocks(n), 256, 0, s>>>(gate, up, n, out, twin);
  return LaunchStatus("SwiGluF32Kernel");
}
CudaStatus AddF32(float* x, const float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return CudaStatus::Ok();
  AddF32Kernel<<<Blocks(n), 256, 0, s>>>(x, y, n);
  return LaunchStatus("AddF32Kernel");
}
CudaStatus GatherRowsF32(const float* x, int64_t d, const int32_t* rows, int64_t n_rows, float* out, cudaStream_t s) {
  if (n_rows <= 0) return CudaStatus::Ok();
  GatherRowsF32Kernel<<<Blocks(n_rows * d), 256, 0, s>>>(x, d, rows, n_rows, out);
  return LaunchStatus("GatherRowsF32Kernel");
}
CudaStatus EmbedRowsF32(const uint8_t* table, bool q8, int64_t d, const int32_t* ids, int64_t n, float* out,
                        cudaStream_t s) {
  if (n <= 0) return CudaStatus::Ok();
  if (d % kQuantBlock) return CudaStatus::Invalid("embed: row length not a multiple of 32");
  EmbedRowsKernel<<<Blocks(n * d), 256, 0, s>>>(table, q8, d, ids, n, out);
  return LaunchStatus("EmbedRowsKernel");
}

}  // namespace kvgate::cuda
