// Paged decode attention v2 (kernels/NOTES.md, "decode v2"; compiled, never run on a GPU). Same
// grid, split-K plan, lane map, arithmetic and merge as v1 (attention_decode.cu); what changes is how
// a warp streams its KV blocks.
//
// v1 loads all 16 K and V rows of a block into registers (64 registers for bf16 D=128) and only then
// computes, so a warp waits a full memory latency at every block and the registers cap it at 3 CTAs
// per SM. v2 gives every warp a ring of kDecodeV2Stages stages in shared memory and fills it with
// cp.async: while the warp computes block i, block i+1 is already in flight, and the refill of
// block i's stage with block i + kStages is issued as soon as block i is consumed. The block-table
// entry a refill needs is loaded one iteration earlier, so no copy waits on an index. Chunks are
// read from shared memory one at a time as v1's arithmetic consumes them, so the K/V registers go
// and the kernel fits 4 CTAs' worth of registers (128). Each lane copies and reads only its own
// chunks (decode_v2_layout.h): cp.async.wait_group is all the synchronisation the loop needs.
//
// Keys past the context (the last block's unwritten slots, which may hold NaN) are zero-filled by
// cp.async's src-size 0 instead of read, and masked exactly as in v1 (score -inf, no PV term).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/decode_v2_layout.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/mma_sm80.cuh"

namespace kvgate::cuda {
namespace {

template <typename CacheT, int D>
struct DecodeV2Layout {
  static constexpr int kChunkBytes = 8 * static_cast<int>(sizeof(CacheT));
  static constexpr int kIters = decode_v2::DecodeV2Iters(D);
  static constexpr uint32_t kItStride = 32 * kChunkBytes;           // next iteration, same lane
  static constexpr uint32_t kKvStride = kIters * kItStride;         // K -> V of one stage
  static constexpr uint32_t kStageStride = 2 * kKvStride;           // next stage, same warp
  static constexpr size_t kChunksBytes = size_t{kAttnWarps} * kDecodeV2Stages * kStageStride;
  static constexpr bool kScales = sizeof(CacheT) == 1;
  static constexpr uint32_t kScaleStageStride = 32 * 2 * sizeof(float);
  static constexpr size_t kBytes =
      kChunksBytes + (kScales ? size_t{kAttnWarps} * kDecodeV2Stages * kScaleStageStride : 0);
  static_assert(kBytes == DecodeV2SmemBytes(D, sizeof(CacheT)), "geometry.h disagrees with the kernel");
  static_assert(decode_v2::ChunkOffset(D, kChunkBytes, kDecodeV2Stages, 0, 1, 0, 0, 0) == kStageStride);
  static_assert(decode_v2::ChunkOffset(D, kChunkBytes, kDecodeV2Stages, 0, 0, 1, 0, 0) == kKvStride);
  static_assert(decode_v2::ChunkOffset(D, kChunkBytes, kDecodeV2Stages, 0, 0, 0, 1, 0) == kItStride);
  static_assert(decode_v2::ScaleOffset(0, kDecodeV2Stages, 0, 1, 0) == kScaleStageStride);
};

// Group <= 4: 4 CTAs (16 warps) per SM, i.e. at most 128 registers; shared memory (DecodeV2SmemBytes
// + the merge arrays) may hold a bf16 / f16 D=128 CTA to 3 (NOTES.md has the numbers). Group 8 holds
// twice the per-head state and is left at 2.
template <int kMaxG>
constexpr int DecodeV2MinCtasPerSm() {
  return kMaxG <= 4 ? kDecodeV2G4CtasPerSm : 2;
}

template <int kChunkBytes>
__device__ __forceinline__ void CpAsyncChunk(uint32_t dst, const void* src, int src_bytes) {
  if constexpr (kChunkBytes == 16) {
    CpAsync16(dst, src, src_bytes);
  } else {
    static_assert(kChunkBytes == 8);
    CpAsync8(dst, src, src_bytes);
  }
}

template <typename CacheT, int D, int kMaxG>
__global__ void __launch_bounds__(kAttnThreads, (DecodeV2MinCtasPerSm<kMaxG>()))
    DecodeV2Kernel(const DecodeParams p) {
  using L = DecodeV2Layout<CacheT, D>;
  using Raw = typename Raw8<CacheT>::type;
  constexpr int kStages = kDecodeV2Stages;
  constexpr int kLanesPerTok = D / 8;
  constexpr int kToksPerIter = 32 / kLanesPerTok;
  constexpr int kIters = L::kIters;
  static_assert(kIters * kToksPerIter == kBlockTokens);
  // Iterations per online-softmax update (see the loop); D = 64 has 4 in all, so one per block.
  constexpr int kSub = kIters < 4 ? kIters : 4;
  static_assert(kIters % kSub == 0);
  extern __shared__ __align__(16) unsigned char smem[];

  const int kvh = blockIdx.x, seq = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // v1's lane map, from the function DecodeV2LayoutTest checks: token LaneChunk(D, lane, it).token
  // = it * kToksPerIter + tok_in_iter, chunk lane % (D / 8) (the one DecodeMergeAndStore assumes).
  const int tok_in_iter = decode_v2::LaneChunk(D, lane, 0).token, chunk = decode_v2::LaneChunk(D, lane, 0).chunk;
  const int G = p.group;
  const int ctx = p.context_lens[seq];
  const int nblocks = (ctx + kBlockTokens - 1) / kBlockTokens;
  const BlockRange range = DecodeSplitBlocks(split, p.splits, p.blocks_per_split, nblocks);
  const int b_begin = range.begin, b_end = range.end;
  // This warp's blocks, as in v1: first, first + 4, ... below b_end; n of them.
  const int first = b_begin + warp;
  const int n = first < b_end ? (b_end - first + kAttnWarps - 1) / kAttnWarps : 0;
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.bt_stride;

  const CacheT* kc = static_cast<const CacheT*>(p.k);
  const CacheT* vc = static_cast<const CacheT*>(p.v);
  const int64_t row = static_cast<int64_t>(p.num_kv_heads) * D;  // elements per slot
  const uint32_t ring = SmemAddr(smem);
  // Stage 0's K chunk of iteration 0 for this lane; the other chunks are constant strides away.
  const uint32_t my_chunks =
      ring + static_cast<uint32_t>(decode_v2::ChunkOffset(D, L::kChunkBytes, kStages, warp, 0, 0, 0, lane));
  const uint32_t my_scales =
      ring + static_cast<uint32_t>(decode_v2::ScaleOffset(L::kChunksBytes, kStages, warp, 0, lane));

  // Copies this warp's block i (physical id phys) into `stage`: this lane's 2 x kIters chunks (and,
  // FP8, the block's K and V scale). Slots at or past the context are zero-filled, not read.
  auto issue = [&](int i, int64_t phys, int stage) {
    const int valid = min(kBlockTokens, ctx - (first + i * kAttnWarps) * kBlockTokens);
    const int64_t base = phys * kBlockTokens * row + kvh * D + chunk * 8;
    const uint32_t dst = my_chunks + stage * L::kStageStride;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int tok = decode_v2::LaneChunk(D, lane, it).token;
      const int bytes = tok < valid ? L::kChunkBytes : 0;
      const int64_t off = base + (bytes ? tok : 0) * row;  // token 0 is always valid: a safe address
      CpAsyncChunk<L::kChunkBytes>(dst + it * L::kItStride, kc + off, bytes);
      CpAsyncChunk<L::kChunkBytes>(dst + L::kKvStride + it * L::kItStride, vc + off, bytes);
    }
    if constexpr (L::kScales) {
      const uint32_t sdst = my_scales + stage * L::kScaleStageStride;
      CpAsync4(sdst, p.k_scale + phys * p.num_kv_heads + kvh, 4);
      CpAsync4(sdst + 4, p.v_scale + phys * p.num_kv_heads + kvh, 4);
    }
  };
  auto table_at = [&](int i) -> int64_t { return i < n ? table[first + i * kAttnWarps] : 0; };

  // Prologue: blocks 0 .. kStages-1 in flight, one commit group each (empty past n, so that the
  // wait below always counts kStages - 1 younger groups).
#pragma unroll
  for (int i = 0; i < kStages; ++i) {
    if (i < n) issue(i, table_at(i), i);
    CpAsyncCommit();
  }
  int64_t ahead = table_at(kStages);  // the table entry of the next block to issue

  float qv[kMaxG][8];  // this lane's 8 dims of each query head of the group, pre-scaled (as v1)
#pragma unroll
  for (int g = 0; g < kMaxG; ++g) {
    if (g < G) {
      const uint4 raw = *reinterpret_cast<const uint4*>(
          p.q + seq * p.q_stride + (kvh * G + g) * D + chunk * 8);
      Bf16x8ToFloat(raw, qv[g]);
#pragma unroll
      for (int i = 0; i < 8; ++i) qv[g][i] *= p.scale_log2;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) qv[g][i] = 0.0f;
    }
  }
  float m[kMaxG], l[kMaxG], acc[kMaxG][8];
#pragma unroll
  for (int g = 0; g < kMaxG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }

  int stage = 0;
  for (int i = 0; i < n; ++i) {
    // Groups committed so far: kStages + i; block i's is the oldest not yet waited for.
    CpAsyncWait<kStages - 1>();
    const unsigned char* chunks = smem + (my_chunks - ring) + stage * L::kStageStride;
    const int valid = min(kBlockTokens, ctx - (first + i * kAttnWarps) * kBlockTokens);
    float ks = 1.0f, vs = 1.0f;
    if constexpr (L::kScales) {
      const float2 sc = *reinterpret_cast<const float2*>(smem + (my_scales - ring) + stage * L::kScaleStageStride);
      ks = sc.x;
      vs = sc.y;
    }
    // v1's arithmetic, reading chunks from the ring, over sub-blocks of kSub iterations (kSub * 32 /
    // (D/8) tokens) with one online-softmax update each, so the scores of only kSub iterations are
    // live (v1 keeps the whole block's: 32 registers at G = 4, D = 128, which spilled under the 128
    // cap). A sub-block wholly past the context is skipped (the test is warp-uniform); the first
    // one always holds the block's token 0, so m stays finite from the first block on.
#pragma unroll
    for (int sub = 0; sub < kIters / kSub; ++sub) {
      if (sub * kSub * kToksPerIter >= valid) break;
      float s[kMaxG][kSub];
#pragma unroll
      for (int j = 0; j < kSub; ++j) {
        const int it = sub * kSub + j;
        float kf[8];
        Raw8<CacheT>::ToFloat(*reinterpret_cast<const Raw*>(chunks + it * L::kItStride), kf);
        const bool ok = it * kToksPerIter + tok_in_iter < valid;
#pragma unroll
        for (int g = 0; g < kMaxG; ++g) {
          float d = 0.0f;
#pragma unroll
          for (int e = 0; e < 8; ++e) d = fmaf(qv[g][e], kf[e], d);
#pragma unroll
          for (int o = kLanesPerTok / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
          s[g][j] = ok ? d * ks : -INFINITY;
        }
      }
#pragma unroll
      for (int g = 0; g < kMaxG; ++g) {
        float bmax = s[g][0];
#pragma unroll
        for (int j = 1; j < kSub; ++j) bmax = fmaxf(bmax, s[g][j]);
#pragma unroll
        for (int o = kLanesPerTok; o < 32; o <<= 1)
          bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, o));
        const float m_new = fmaxf(m[g], bmax);  // finite: see above
        const float alpha = exp2f(m[g] - m_new);
        m[g] = m_new;
        l[g] *= alpha;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] *= alpha;
#pragma unroll
        for (int j = 0; j < kSub; ++j) {
          s[g][j] = exp2f(s[g][j] - m_new);
          l[g] += s[g][j];
        }
      }
#pragma unroll
      for (int j = 0; j < kSub; ++j) {
        const int it = sub * kSub + j;
        if (it * kToksPerIter + tok_in_iter < valid) {  // skip slots past the context (zero-filled)
          float vf[8];
          Raw8<CacheT>::ToFloat(*reinterpret_cast<const Raw*>(chunks + L::kKvStride + it * L::kItStride), vf);
#pragma unroll
          for (int g = 0; g < kMaxG; ++g) {
            const float pw = s[g][j] * vs;
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(pw, vf[e], acc[g][e]);
          }
        }
      }
    }
    // Refill this stage with block i + kStages. Only this lane reads these bytes, and its reads
    // above precede the copy in program order (the asm is volatile with a memory clobber, so the
    // compiler keeps them there), so no barrier is needed before overwriting them.
    if (i + kStages < n) issue(i + kStages, ahead, stage);
    CpAsyncCommit();
    ahead = table_at(i + kStages + 1);  // used one iteration from now: its latency is hidden
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  CpAsyncWait<0>();  // only empty groups can remain; no copy may land after the CTA exits
  DecodeMergeAndStore<D, kMaxG>(p, m, l, acc);
}

template <typename CacheT, int D, int kMaxG>
CudaStatus Launch(const DecodeParams& p, dim3 grid, cudaStream_t stream) {
  constexpr size_t kBytes = DecodeV2Layout<CacheT, D>::kBytes;
  // Above 48 KB dynamic shared memory needs the opt-in, per kernel; setting it on every launch is a
  // cheap host call and keeps the launcher free of "configured already" state.
  const cudaError_t e = cudaFuncSetAttribute(DecodeV2Kernel<CacheT, D, kMaxG>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kBytes));
  if (e != cudaSuccess) return {CudaStatusKind::kCudaError, static_cast<int>(e), "cudaFuncSetAttribute(DecodeV2Kernel)"};
  DecodeV2Kernel<CacheT, D, kMaxG><<<grid, kAttnThreads, kBytes, stream>>>(p);
  return LaunchStatus("DecodeV2Kernel");
}

template <typename CacheT, int D, int kMaxG>
CudaStatus Occupancy(int* n) {
  constexpr size_t kBytes = DecodeV2Layout<CacheT, D>::kBytes;
  // The same opt-in as a launch: without it, more than 48 KB of dynamic shared memory fits 0 CTAs.
  cudaError_t e = cudaFuncSetAttribute(DecodeV2Kernel<CacheT, D, kMaxG>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kBytes));
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, DecodeV2Kernel<CacheT, D, kMaxG>, kAttnThreads, kBytes);
  if (e != cudaSuccess) return {CudaStatusKind::kCudaError, static_cast<int>(e), "decode v2 occupancy"};
  return CudaStatus::Ok();
}

}  // namespace

CudaStatus DecodeV2CtasPerSm(KvDtype dtype, int head_dim, int group, int* ctas_per_sm) {
  CudaStatus st = CudaStatus::Ok();
  DispatchCacheTypeAndHeadDim(dtype, head_dim, [&](auto type, auto d) {
    using T = typename decltype(type)::type;
    constexpr int kD = decltype(d)::value;
    st = group <= 4 ? Occupancy<T, kD, 4>(ctas_per_sm) : Occupancy<T, kD, 8>(ctas_per_sm);
  });
  return st;
}

CudaStatus LaunchDecodeV2(const DecodeParams& p, KvDtype dtype, int head_dim, dim3 grid, cudaStream_t stream) {
  CudaStatus st = CudaStatus::Ok();
  DispatchCacheTypeAndHeadDim(dtype, head_dim, [&](auto type, auto d) {
    using T = typename decltype(type)::type;
    constexpr int kD = decltype(d)::value;
    st = p.group <= 4 ? Launch<T, kD, 4>(p, grid, stream) : Launch<T, kD, 8>(p, grid, stream);
  });
  return st;
}

}  // namespace kvgate::cuda
