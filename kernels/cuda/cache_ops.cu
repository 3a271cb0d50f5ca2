// KV cache writes (bf16 and FP8 E4M3 with per-(block, kv head) scales) and block copies between
// pools (device <-> pinned host: the offload tier).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/kernels.h"

namespace kvgate::cuda {
namespace {

// One thread per (token, kv head, 8-element chunk), K and V both.
__global__ void CacheWriteBf16Kernel(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                                     const int32_t* slots, int num_tokens, int hkv, int d,
                                     bf16* kc, bf16* vc) {
  const int chunks = hkv * d / 8;
  const int64_t n = static_cast<int64_t>(num_tokens) * chunks;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / chunks;
    const int c = static_cast<int>(idx % chunks) * 8;
    const int32_t slot = slots[t];
    if (slot < 0) continue;
    const int64_t dst = static_cast<int64_t>(slot) * hkv * d + c;
    *reinterpret_cast<uint4*>(kc + dst) = *reinterpret_cast<const uint4*>(k + t * k_stride + c);
    *reinterpret_cast<uint4*>(vc + dst) = *reinterpret_cast<const uint4*>(v + t * v_stride + c);
  }
}

constexpr int kFp8Threads = 128;

// CTA = (segment, kv head, K or V). The CTA owns the block's scale for this head while it runs
// (BuildCacheSegments guarantees one segment per block), so the read-modify-write is race free.
__global__ void __launch_bounds__(kFp8Threads)
    CacheWriteFp8Kernel(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                        const CacheSegment* segments, int hkv, int d, uint8_t* kc, uint8_t* vc,
                        float* ks, float* vs) {
  __shared__ float partial[kFp8Threads / 32];
  const CacheSegment seg = segments[blockIdx.x];
  const int h = blockIdx.y;
  const bool is_v = blockIdx.z == 1;
  const bf16* src = is_v ? v : k;
  const int64_t stride = is_v ? v_stride : k_stride;
  uint8_t* cache = is_v ? vc : kc;
  float* scales = is_v ? vs : ks;
  const int n = seg.count * d;
  float amax = 0.0f;
  for (int i = threadIdx.x; i < n; i += kFp8Threads) {
    const int t = seg.token_begin + i / d;
    amax = fmaxf(amax, fabsf(__bfloat162float(src[t * stride + h * d + i % d])));
  }
  amax = WarpMax(amax);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kFp8Threads / 32; ++i) amax = fmaxf(amax, partial[i]);
  const int64_t scale_idx = static_cast<int64_t>(seg.block) * hkv + h;
  const float old_scale = seg.first_offset == 0 ? 0.0f : scales[scale_idx];
  const float scale = Fp8RaisedScale(old_scale, amax);
  const int64_t row = static_cast<int64_t>(hkv) * d;
  const int64_t block_base = static_cast<int64_t>(seg.block) * kBlockTokens * row + h * d;
  if (old_scale > 0.0f && scale != old_scale) {  // re-encode the tokens already in the block
    for (int i = threadIdx.x; i < seg.first_offset * d; i += kFp8Threads) {
      uint8_t* c = cache + block_base + (i / d) * row + i % d;
      *c = EncodeFp8Hw(__fdiv_rn(__fmul_rn(DecodeE4M3(*c), old_scale), scale));
    }
  }
  for (int i = threadIdx.x; i < n; i += kFp8Threads) {
    const int t = seg.token_begin + i / d;
    const float x = __bfloat162float(src[t * stride + h * d + i % d]);
    // scale 0 (unset): every value so far, these included, is 0 (Fp8RaisedScale).
    cache[block_base + (seg.first_offset + i / d) * row + i % d] = scale > 0.0f ? EncodeFp8Hw(__fdiv_rn(x, scale)) : 0;
  }
  __syncthreads();  // every thread has read the old scale
  if (threadIdx.x == 0) scales[scale_idx] = scale;
}

// CTA = (pair, plane): copies one block of one plane with 16-byte accesses.
__global__ void CopyBlocksKernel(const void* const* src_planes, void* const* dst_planes,
                                 const int64_t* bytes_per_block, const int2* pairs) {
  const int2 pr = pairs[blockIdx.x];
  const int plane = blockIdx.y;
  const int64_t bytes = bytes_per_block[plane];
  const uint4* src = reinterpret_cast<const uint4*>(static_cast<const char*>(src_planes[plane]) + pr.x * bytes);
  uint4* dst = reinterpret_cast<uint4*>(static_cast<char*>(dst_planes[plane]) + pr.y * bytes);
  for (int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) dst[i] = src[i];
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

CudaStatus ReshapeAndCache(const CacheWriteArgs& a, cudaStream_t stream) {
  const PagedKv& kv = a.kv;
  if (!a.k || !a.v || !a.slots || !kv.k || !kv.v) return CudaStatus::Invalid("cache write pointer is null");
  if (a.num_tokens <= 0) return CudaStatus::Ok();
  const int hkv = kv.num_kv_heads, d = kv.head_dim;
  if (hkv <= 0 || d <= 0 || d % 8 || a.k_stride < static_cast<int64_t>(hkv) * d ||
      a.v_stride < static_cast<int64_t>(hkv) * d || a.k_stride % 8 || a.v_stride % 8 ||
      !Aligned16(a.k) || !Aligned16(a.v) || !Aligned16(kv.k) || !Aligned16(kv.v))
    return CudaStatus::Invalid("cache write: shapes/strides/alignment");
  if (kv.dtype == KvDtype::kF16) return CudaStatus::Invalid("ReshapeAndCache: f16 caches use WriteKvF16");
  if (kv.dtype == KvDtype::kBf16) {
    int sms = 0;
    if (CudaStatus st = DeviceSmCount(&sms); !st.ok()) return st;
    const int64_t n = static_cast<int64_t>(a.num_tokens) * hkv * d / 8;
    CacheWriteBf16Kernel<<<ElementwiseGrid(n, sms).blocks, 256, 0, stream>>>(
        a.k, a.k_stride, a.v, a.v_stride, a.slots, a.num_tokens, hkv, d, static_cast<bf16*>(kv.k),
        static_cast<bf16*>(kv.v));
    return LaunchStatus("CacheWriteBf16Kernel");
  }
  if (!kv.k_scale || !kv.v_scale) return CudaStatus::Invalid("FP8 cache write needs scales");
  if (a.num_segments <= 0 || !a.segments) return CudaStatus::Invalid("FP8 cache write needs segments");
  const dim3 grid(static_cast<unsigned>(a.num_segments), static_cast<unsigned>(hkv), 2);
  CacheWriteFp8Kernel<<<grid, kFp8Threads, 0, stream>>>(
      a.k, a.k_stride, a.v, a.v_stride, a.segments, hkv, d, static_cast<uint8_t*>(kv.k),
      static_cast<uint8_t*>(kv.v), kv.k_scale, kv.v_scale);
  return LaunchStatus("CacheWriteFp8Kernel");
}

CudaStatus CopyBlocks(const BlockCopyArgs& a, cudaStream_t stream) {
  if (a.num_pairs == 0 || a.num_planes == 0) return CudaStatus::Ok();
  if (!a.src_planes || !a.dst_planes || !a.bytes_per_block || !a.pairs || a.num_pairs < 0 ||
      a.num_planes < 0 || a.num_planes > 65535)
    return CudaStatus::Invalid("copy blocks: bad arguments");
  const dim3 grid(static_cast<unsigned>(a.num_pairs), static_cast<unsigned>(a.num_planes));
  CopyBlocksKernel<<<grid, 256, 0, stream>>>(a.src_planes, a.dst_planes, a.bytes_per_block, a.pairs);
  return LaunchStatus("CopyBlocksKernel");
}

}  // namespace kvgate::cuda
