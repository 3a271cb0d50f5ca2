// bf16 GEMM through cuBLASLt. One GemmBf16 owns a cuBLASLt handle and a device workspace and
// caches the chosen algorithm per shape. Not thread-safe: one object per stream / thread.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/lt_matmul.h"

namespace kvgate::cuda {

// The alignment cuBLASLt may assume of a buffer at `p`: the largest power of two dividing its
// address, capped at 256 (the alignment cuBLASLt assumes when told nothing). Activations that
// start t * k elements into a scratch buffer are often less aligned than that (k = 576 bf16 puts
// row t at t * 1152 bytes: 128-byte aligned at best, 64 for odd t).
inline uint32_t GemmPointerAlignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  const uintptr_t low = a & (~a + 1);  // lowest set bit
  return low >= 256 ? 256u : static_cast<uint32_t>(low);
}

class GemmBf16 {
 public:
  // Creates the handle and a `workspace_bytes` device workspace. Errors: no device, OOM, cuBLAS.
  static CudaStatus Create(size_t workspace_bytes, std::unique_ptr<GemmBf16>* out);
  ~GemmBf16();
  GemmBf16(const GemmBf16&) = delete;
  GemmBf16& operator=(const GemmBf16&) = delete;

  // y [M][N] = alpha * x [M][K] . w [N][K]^T + beta * y   (row-major; w is a weight stored
  // [out features][in features] like GGUF / PyTorch). beta = 1 adds the product to y in place
  // (the residual add). Leading dimensions: ldx >= K, ldw >= K, ldy >= N, all multiples of 8.
  CudaStatus Run(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                 __nv_bfloat16* y, int64_t ldy, int64_t m, int64_t n, int64_t k, float alpha,
                 float beta, cudaStream_t stream);
  // The same product with an f32 y (bf16 inputs, f32 accumulate and output): the engine's f32
  // activations without a bf16 output buffer and conversion. ldy >= N, a multiple of 4.
  CudaStatus Run(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw, float* y,
                 int64_t ldy, int64_t m, int64_t n, int64_t k, float alpha, float beta, cudaStream_t stream);

 private:
  CudaStatus RunTyped(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw, void* y,
                      bool y_f32, int64_t ldy, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                      cudaStream_t stream);
  explicit GemmBf16(std::unique_ptr<LtMatmul> lt) : lt_(std::move(lt)) {}
  // The handle, workspace and per-shape plans (keyed by the pointers' alignments too: a less
  // aligned call gets a plan of its own).
  std::unique_ptr<LtMatmul> lt_;
};

}  // namespace kvgate::cuda
