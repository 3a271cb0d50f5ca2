// Warp-level tensor-core building blocks shared by the prefill attention kernels (nvcc only; decode
// v2 uses only the cp.async wrappers):
// mma.sync m16n8k16 bf16 -> f32, ldmatrix (plain and .trans) and cp.async. Fragment layouts, as the
// PTX ISA defines them; every kernel that pairs these states which smem rows each lane addresses
// and why the result is the fragment the mma wants.
//
// Lane names: g = lane / 4 (groupID), t = lane % 4 (threadID_in_group).
//
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, D = A [16 x 16] * B [16 x 8] + C:
//   A: 4 x .b32, 2 bf16 each (low half = lower column):
//        a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]
//        a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
//   B: 2 x .b32:  b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]   (k index first)
//   C/D: 4 x f32: c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
// (v1's prefill kernel builds these fragments with plain shared loads and passed its checks on an
// H200, which pins these three layouts down independently of the ldmatrix reasoning below.)
//
// ldmatrix.sync.aligned.m8n8.x4.shared.b16 {r0..r3}, [addr]: four 8 x 8 b16 matrices. Lane
// 8 m + i supplies the address of row i of matrix m (16 contiguous, 16-byte aligned bytes; rows
// may lie anywhere). Without .trans, r[m] of lane L holds row L / 4, columns 2 (L % 4) and
// 2 (L % 4) + 1 of matrix m, i.e. M_m[g][2t, 2t+1]: the layout of an A or B register above. With
// .trans the matrix is read column-major: r[m] holds M_m[2t][g] and M_m[2t+1][g], where M_m[i]
// is the 16-byte row lane 8 m + i addressed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvgate::cuda {

__device__ __forceinline__ void Mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (low 16 bits)
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The same mma with f16 A and B (same fragment layouts): the prefill kernels' path for an f16 KV
// cache, whose values it multiplies exactly as stored (decode reads them exactly too), instead of
// rounding them to bf16's 8-bit mantissa.
__device__ __forceinline__ void Mma16816F16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackF16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);  // .x = lo (low 16 bits)
  return *reinterpret_cast<const uint32_t*>(&v);
}

// A bf16 pair (Q fragments: q is bf16) as an f16 pair, rounded to nearest. Exact for |x| in
// [2^-14, 65504] (f16 has 3 more mantissa bits); smaller magnitudes lose relative precision (but
// no more than 2^-25 absolute), larger ones become inf. q = the rotated query, O(1..100) in practice.
__device__ __forceinline__ uint32_t Bf16x2ToF16x2(uint32_t v) {
  const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&v);
  const float2 f = __bfloat1622float2(b);
  return PackF16(f.x, f.y);
}

// The mma element type a prefill kernel uses for a cache of CacheT: f16 for an f16 cache, bf16
// for bf16 and FP8 (FP8 is dequantized times its block scale, whose range bf16 keeps).
template <bool kF16>
struct MmaOps {
  static __device__ __forceinline__ void Mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    if constexpr (kF16) {
      Mma16816F16(c, a, b0, b1);
    } else {
      Mma16816(c, a, b0, b1);
    }
  }
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    if constexpr (kF16) {
      return PackF16(lo, hi);
    } else {
      return PackBf16(lo, hi);
    }
  }
  // A pair of q (bf16 in memory) as an A-operand register.
  static __device__ __forceinline__ uint32_t FromBf16x2(uint32_t v) {
    if constexpr (kF16) {
      return Bf16x2ToF16x2(v);
    } else {
      return v;
    }
  }
};

// c [16x8 f32] += a [16x32 E4M3, row] . b [32x8 E4M3, col] (sm_89 and later: prefill kV2Fp8Qk).
// PTX ISA, "Matrix Fragments for mma.m16n8k32": each A register holds 4 consecutive k of one row,
// a[0] = row g, k 4t..4t+3; a[1] = row g + 8, same k; a[2], a[3] = the same rows, k + 16. Each B
// register 4 consecutive k of column g: b0 = k 4t..4t+3, b1 = k 16 + 4t..; the lowest k in the
// lowest byte. C as m16n8k16's. (g = lane / 4, t = lane % 4.) ldmatrix of 16-byte rows of codes
// hands out exactly these registers (prefill_v2_layout.h, "FP8").
__device__ __forceinline__ void Mma16832E4M3(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)c, (void)a, (void)b0, (void)b1;
  __trap();  // FP8 tensor cores start with sm_89; the build targets sm_90a
#endif
}

// Shared-memory address (the 32-bit .shared window) of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The ldmatrix and cp.async wrappers are volatile so the compiler keeps them in program order
// with __syncthreads and with each other; the waits also clobber memory, so plain C++ reads of a
// landed tile are not hoisted above them.
__device__ __forceinline__ void LdMatrixX4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Copies 16 bytes global -> shared without passing through registers (.cg: L2 only, L1 bypassed;
// K/V tiles are read once per CTA). src_bytes 0 reads nothing and zero-fills the 16 bytes (keys
// past the context: their slots may hold NaN), 16 copies them; src must still be a valid address.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// 8 bytes (.ca, as every cp.async below 16 bytes; decode v2's FP8 chunks), same zero-fill rule.
__device__ __forceinline__ void CpAsync8(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// 4 bytes (.ca: the only cp.async kind below 16 bytes), same zero-fill rule.
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` of this thread's committed groups are still in flight. Makes the
// completed copies visible to this thread only; other threads need a barrier after it.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// 2^x, MUFU.EX2 with flush-to-zero; 2^-inf = +0, which the online softmax relies on.
__device__ __forceinline__ float Exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kvgate::cuda
