// Prefill attention v3 over the paged KV cache: wgmma with TMA-fed K/V tiles and producer /
// consumer warpgroups, after FlashAttention-3 (built; NEVER RUN ON A GPU yet: kernels/NOTES.md,
// "prefill v3"). Same arguments, tiles, geometry, outputs and split-K workspace as v2
// (PrefillVariant::kV3); bf16 and f16 caches. The plan it follows, and the host tests of it:
// prefill_v3_layout.h.
//
// Why it should be faster than v2: the tensor cores of an H100/H200 reach their rate only through
// wgmma (mma.sync tops out near two thirds of it), a wgmma reads its B operand (and Q) straight
// from shared memory without ldmatrix, and TMA moves each 2 KB box with one instruction from one
// thread instead of 256 threads' cp.asyncs, so the consumers do nothing but math and softmax.
// What it does not do yet (FA3 does): overlap one tile's softmax with the next tile's Q K^T
// (intra-warpgroup pipelining), ping-pong the two consumer warpgroups, setmaxnreg.
#include <cuda.h>  // CUtensorMap (a type only: the encode call goes through the runtime's driver entry point)
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/prefill_tile_math.cuh"
#include "kernels/cuda/prefill_v3_layout.h"

namespace kvgate::cuda {
namespace {

namespace v3 = prefill_v3;

// wgmma, mbarrier and TMA exist in the sm_90a device pass only; the compute_90 PTX pass gets a
// kernel that traps (the launcher never runs it on anything else: sm_90a is what the build targets).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVGATE_V3_DEVICE 1

__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void FenceBarrierInit() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads (wgmma).
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Spins until the phase of parity `parity` has completed (labels are local to the braces).
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred ready;\nV3_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 ready, [%0], %1;\n"
      "@!ready bra V3_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// One box of a 3-D tensor map into shared memory, completing `bytes` on the mbarrier.
__device__ __forceinline__ void TmaLoad3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void ConsumerBarrier() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaWaitAll() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator reads or writes across an asynchronous wgmma.
template <int N>
__device__ __forceinline__ void PinRegisters(float* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// d [64 x 64] (+)= A (shared, K-major) . B (shared, K-major), bf16; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaSS_m64n64k16_bf16(float* d, uint64_t a, uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(scale_d));
}

// d [64 x 64] += A (registers, 4 x bf16x2 per thread) . B (shared, MN-major: imm-trans-b 1), bf16.
__device__ __forceinline__ void WgmmaRS_m64n64k16_bf16(float* d, const uint32_t* a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// d [64 x 128] += A (registers, 4 x bf16x2 per thread) . B (shared, MN-major: imm-trans-b 1), bf16.
__device__ __forceinline__ void WgmmaRS_m64n128k16_bf16(float* d, const uint32_t* a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// d [64 x 64] (+)= A (shared, K-major) . B (shared, K-major), f16; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaSS_m64n64k16_f16(float* d, uint64_t a, uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(scale_d));
}

// d [64 x 64] += A (registers, 4 x f16x2 per thread) . B (shared, MN-major: imm-trans-b 1), f16.
__device__ __forceinline__ void WgmmaRS_m64n64k16_f16(float* d, const uint32_t* a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// d [64 x 128] += A (registers, 4 x f16x2 per thread) . B (shared, MN-major: imm-trans-b 1), f16.
__device__ __forceinline__ void WgmmaRS_m64n128k16_f16(float* d, const uint32_t* a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

template <bool kF16>
__device__ __forceinline__ void WgmmaS(float* s, uint64_t a, uint64_t b, int scale_d) {
  if constexpr (kF16) {
    WgmmaSS_m64n64k16_f16(s, a, b, scale_d);
  } else {
    WgmmaSS_m64n64k16_bf16(s, a, b, scale_d);
  }
}
template <bool kF16, int D>
__device__ __forceinline__ void WgmmaO(float* o, const uint32_t* a, uint64_t b) {
  if constexpr (kF16 && D == 128) {
    WgmmaRS_m64n128k16_f16(o, a, b);
  } else if constexpr (kF16) {
    WgmmaRS_m64n64k16_f16(o, a, b);
  } else if constexpr (D == 128) {
    WgmmaRS_m64n128k16_bf16(o, a, b);
  } else {
    WgmmaRS_m64n64k16_bf16(o, a, b);
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename CacheT, int D>
__global__ void __launch_bounds__(v3::kThreads, 1)
    PrefillV3Kernel(const PrefillParams p, const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                    int num_slots) {
#if defined(KVGATE_V3_DEVICE)
  constexpr bool kF16 = std::is_same_v<CacheT, __half>;
  using M = MmaOps<kF16>;
  constexpr v3::Smem L{D};
  constexpr int kNT = v3::kKeys / 8;  // 8-key column groups of S
  constexpr int kDT = D / 8;          // 8-dim column groups of O
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_base = SmemAddr(smem_raw);
  const uint32_t base = (raw_base + v3::kAtomBytes - 1) & ~static_cast<uint32_t>(v3::kAtomBytes - 1);
  uint8_t* smem = smem_raw + (base - raw_base);

  // The tile, exactly as v2 (last tile first).
  const int kvh = blockIdx.x, tile = gridDim.y - 1 - blockIdx.y, split = blockIdx.z;
  const int seq = p.tiles[2 * tile], q0 = p.tiles[2 * tile + 1];
  const int qs = p.q_start[seq], q_len = p.q_start[seq + 1] - qs, ctx = p.context_lens[seq];
  const int G = p.group;
  const int tokens = min(p.tile_tokens, q_len - q0);
  const int rows_valid = tokens * G;
  const int pos0 = ctx - q_len + q0;
  const int kv_end = pos0 + tokens;
  const int n_kv_tiles = (kv_end + v3::kKeys - 1) / v3::kKeys;
  const int per_split = (n_kv_tiles + p.splits - 1) / p.splits;
  const int t_begin = split * per_split, t_end = min(n_kv_tiles, t_begin + per_split);

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < v3::kStages; ++s) {
      MbarInit(base + L.full(s), 1);                        // the producer's arrive (+ the TMA bytes)
      MbarInit(base + L.empty(s), v3::kConsumerThreads);   // every consumer thread's arrive
    }
    FenceBarrierInit();
  }
  // Q [128][D] in the cache's element type, 128-byte swizzled; rows past the tile's are zero.
  for (int c = static_cast<int>(threadIdx.x); c < v3::kRows * D / 8; c += v3::kThreads) {
    const int r = c / (D / 8), col = (c % (D / 8)) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows_valid) {
      v = *reinterpret_cast<const uint4*>(p.q + static_cast<int64_t>(qs + q0 + r / G) * p.q_stride +
                                          static_cast<int64_t>(kvh * G + r % G) * D + col);
      if constexpr (kF16) v = make_uint4(Bf16x2ToF16x2(v.x), Bf16x2ToF16x2(v.y), Bf16x2ToF16x2(v.z), Bf16x2ToF16x2(v.w));
    }
    *reinterpret_cast<uint4*>(smem + L.q() + v3::SwizzledOffset(r, col, v3::kRows)) = v;
  }
  FenceProxyAsync();
  __syncthreads();  // barriers initialised, Q written: the roles split here and never meet again

  const int wg = static_cast<int>(threadIdx.x) / 128;
  if (wg == 0) {  // ---- producer: one thread issues every TMA load --------------------------------
    if (threadIdx.x != 0) return;
    for (int jt = t_begin, i = 0; jt < t_end; ++jt, ++i) {
      const int s = i % v3::kStages;
      MbarWait(base + L.empty(s), ((i / v3::kStages) & 1) ^ 1);  // a fresh barrier passes parity 1
      MbarArriveExpectTx(base + L.full(s), L.stage_tx_bytes());
#pragma unroll
      for (int b = 0; b < v3::kKeys / v3::kBlockKeys; ++b) {
        const int key0 = jt * v3::kKeys + b * v3::kBlockKeys;
        // A block past the context: a wholly out-of-bounds box, which TMA fills with zeros.
        const int slot = key0 < ctx ? p.block_tables[static_cast<int64_t>(seq) * p.bt_stride + key0 / kBlockTokens] *
                                          kBlockTokens
                                    : num_slots;
#pragma unroll
        for (int c = 0; c < D / v3::kChunkElems; ++c) {
          TmaLoad3d(base + L.k(s) + v3::BoxOffset(b, c), &tk, c * v3::kChunkElems, kvh, slot, base + L.full(s));
          TmaLoad3d(base + L.v(s) + v3::BoxOffset(b, c), &tv, c * v3::kChunkElems, kvh, slot, base + L.full(s));
        }
      }
    }
    return;
  }

  // ---- consumers: warpgroup cw owns rows cw*64 .. cw*64+63; each warp 16 of them ----------------
  const int cw = wg - 1;
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane >> 2, t = lane & 3;
  const int row_a = cw * 64 + warp * 16 + g, row_b = row_a + 8;
  const int pos_a = pos0 + row_a / G, pos_b = pos0 + row_b / G;
  // Warpgroup-uniform (a wgmma runs on all 128 threads or none).
  const bool wg_active = cw * 64 < rows_valid;
  const int wg_pos_lo = pos0 + (cw * 64) / G;
  const int wg_pos_hi = pos0 + min(cw * 64 + 63, rows_valid - 1) / G;

  // O [64][D] as the wgmma accumulator: o[j][c] is row g (c < 2) or g + 8, column 8j + 2t + (c & 1)
  // (wgmma's m64nN accumulator is mma.m16n8's per warp, one 8-column group after another).
  float o[kDT][4];
#pragma unroll
  for (int j = 0; j < kDT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  for (int jt = t_begin, i = 0; jt < t_end; ++jt, ++i) {
    const int stage = i % v3::kStages;
    MbarWait(base + L.full(stage), (i / v3::kStages) & 1);
    const int kbase = jt * v3::kKeys;
    if (kbase + v3::kKeys > ctx) {
      // CTA-uniform: the tile ends past the context. Its last block's rows past ctx hold whatever
      // those slots hold (stale keys, or the device check's NaN poison): P is 0 there, but 0 x NaN
      // is not, so V's rows are zeroed (K's are masked out of S by a select, not a product).
      constexpr int kRowChunks = D / v3::kChunkElems * 8;  // 16-byte pieces of one key row
      const int first = ctx - kbase, n = (v3::kKeys - first) * kRowChunks;
      for (int e = static_cast<int>(threadIdx.x) - 128; e < n; e += v3::kConsumerThreads) {
        const int r = first + e / kRowChunks, piece = e % kRowChunks;
        const int c = piece / 8, p16 = piece % 8;
        *reinterpret_cast<uint4*>(smem + L.v(stage) + c * v3::ChunkBytes(v3::kKeys) + r * 128 + p16 * 16) =
            make_uint4(0, 0, 0, 0);
      }
      FenceProxyAsync();
      ConsumerBarrier();
    }
    if (wg_active && kbase <= wg_pos_hi) {
      float s[kNT][4];
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        WgmmaS<kF16>(&s[0][0], v3::QDescriptor(base + L.q(), cw, kk), v3::KDescriptor(base + L.k(stage), kk), kk > 0);
      WgmmaCommit();
      WgmmaWaitAll();
      PinRegisters<kNT * 4>(&s[0][0]);
      // Scale, causal mask (a select: never a product with a masked score), online softmax: v2's.
      const bool mask = kbase + v3::kKeys - 1 > wg_pos_lo;
#pragma unroll
      for (int n = 0; n < kNT; ++n) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = kbase + n * 8 + 2 * t + (c & 1);
          float& x = s[n][c];
          x = !mask || key <= (c < 2 ? pos_a : pos_b) ? x * p.scale_log2 : -INFINITY;
        }
      }
      OnlineSoftmaxStep(s, o, m_a, m_b, l_a, l_b);
      // P as wgmma A registers, k-step k2 = keys 16 k2 ..: the m64nNk16 A layout per warp is
      // mma.m16n8k16's, so column groups 2 k2 and 2 k2 + 1 of S pack straight into it.
      uint32_t a[v3::kKeys / 16][4];
#pragma unroll
      for (int k2 = 0; k2 < v3::kKeys / 16; ++k2) {
        a[k2][0] = M::Pack(s[2 * k2][0], s[2 * k2][1]);
        a[k2][1] = M::Pack(s[2 * k2][2], s[2 * k2][3]);
        a[k2][2] = M::Pack(s[2 * k2 + 1][0], s[2 * k2 + 1][1]);
        a[k2][3] = M::Pack(s[2 * k2 + 1][2], s[2 * k2 + 1][3]);
      }
      PinRegisters<D / 2>(&o[0][0]);
      WgmmaFence();
#pragma unroll
      for (int k2 = 0; k2 < v3::kKeys / 16; ++k2) WgmmaO<kF16, D>(&o[0][0], a[k2], v3::VDescriptor(base + L.v(stage), k2));
      WgmmaCommit();
      WgmmaWaitAll();
      PinRegisters<D / 2>(&o[0][0]);
    }
    MbarArrive(base + L.empty(stage));  // this thread is done with the stage
  }

  // ---- epilogue: v2's (the wgmma accumulator layout is mma's, 16 rows per warp) ---------------
  WritePrefillRows<D>(p, o, l_a, l_b, m_a, m_b, static_cast<int64_t>(qs) + q0, kvh, row_a, rows_valid, split, t);
#else
  (void)p, (void)tk, (void)tv, (void)num_slots;
  __trap();
#endif
}

// The tensor map of one cache plane (PlanPagedKvTensorMap), through the driver's encoder, which the
// runtime hands out (the build does not link libcuda).
CudaStatus EncodePlane(const void* plane, const PagedKv& kv, CUtensorMap* map) {
  const v3::PagedKvTensorMap plan = v3::PlanPagedKvTensorMap(kv.num_blocks, kv.num_kv_heads, kv.head_dim);
  if (!plan.Ok()) return CudaStatus::Invalid("prefill v3: the KV pool does not fit a TMA tensor map");
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn)
    return {CudaStatusKind::kCudaError, static_cast<int>(e), "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)"};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)(
      map, kv.dtype == KvDtype::kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
      const_cast<void*>(plane), plan.dims, plan.strides, plan.box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return {CudaStatusKind::kCudaError, static_cast<int>(r), "cuTensorMapEncodeTiled"};
  return CudaStatus::Ok();
}

template <typename CacheT, int D>
CudaStatus Launch(const PrefillParams& p, const PagedKv& kv, dim3 grid, cudaStream_t stream) {
  constexpr v3::Smem L{D};
  static_assert(L.alloc() <= 227 * 1024, "prefill v3 shared memory exceeds an sm_90 CTA's");
  CUtensorMap tk, tv;
  if (CudaStatus st = EncodePlane(kv.k, kv, &tk); !st.ok()) return st;
  if (CudaStatus st = EncodePlane(kv.v, kv, &tv); !st.ok()) return st;
  const cudaError_t e =
      cudaFuncSetAttribute(PrefillV3Kernel<CacheT, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, L.alloc());
  if (e != cudaSuccess) return {CudaStatusKind::kCudaError, static_cast<int>(e), "cudaFuncSetAttribute(PrefillV3Kernel)"};
  PrefillV3Kernel<CacheT, D><<<grid, v3::kThreads, L.alloc(), stream>>>(p, tk, tv, kv.num_blocks * kBlockTokens);
  return LaunchStatus("PrefillV3Kernel");
}

}  // namespace

CudaStatus LaunchPrefillV3(const PrefillParams& p, const PagedKv& kv, dim3 grid, cudaStream_t stream) {
  const bool d128 = kv.head_dim == 128;
  switch (kv.dtype) {
    case KvDtype::kBf16:
      return d128 ? Launch<__nv_bfloat16, 128>(p, kv, grid, stream) : Launch<__nv_bfloat16, 64>(p, kv, grid, stream);
    case KvDtype::kF16:
      return d128 ? Launch<__half, 128>(p, kv, grid, stream) : Launch<__half, 64>(p, kv, grid, stream);
    case KvDtype::kFp8E4M3:
      break;
  }
  return CudaStatus::Invalid("prefill v3 reads a bf16 or f16 cache");
}

}  // namespace kvgate::cuda
