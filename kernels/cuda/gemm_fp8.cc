#include "kernels/cuda/gemm_fp8.h"

#include <library_types.h>

#include <utility>

#include "kernels/cuda/gemm.h"  // GemmPointerAlignment

namespace kvgate::cuda {

CudaStatus GemmFp8::Create(size_t workspace_bytes, std::unique_ptr<GemmFp8>* out) {
  std::unique_ptr<LtMatmul> lt;
  if (CudaStatus s = LtMatmul::Create(workspace_bytes, &lt); !s.ok()) return s;
  out->reset(new GemmFp8(std::move(lt)));
  return CudaStatus::Ok();
}

GemmFp8::~GemmFp8() = default;

CudaStatus GemmFp8::Run(const __nv_fp8_e4m3* x, int64_t ldx, const float* x_scale, const __nv_fp8_e4m3* w,
                        int64_t ldw, const float* w_scale, __nv_bfloat16* y, int64_t ldy, int64_t m, int64_t n,
                        int64_t k, float beta, cudaStream_t stream) {
  return RunTyped(x, ldx, x_scale, w, ldw, w_scale, y, false, ldy, m, n, k, beta, stream);
}

CudaStatus GemmFp8::Run(const __nv_fp8_e4m3* x, int64_t ldx, const float* x_scale, const __nv_fp8_e4m3* w,
                        int64_t ldw, const float* w_scale, float* y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                        float beta, cudaStream_t stream) {
  return RunTyped(x, ldx, x_scale, w, ldw, w_scale, y, true, ldy, m, n, k, beta, stream);
}

// The same row-major -> column-major mapping as GemmBf16: A = w (K x N col-major, transposed),
// B = x (K x M col-major, as is), C = D = y^T (N x M). That is exactly the TN form FP8 requires.
CudaStatus GemmFp8::RunTyped(const __nv_fp8_e4m3* x, int64_t ldx, const float* x_scale, const __nv_fp8_e4m3* w,
                             int64_t ldw, const float* w_scale, void* y, bool y_f32, int64_t ldy, int64_t m,
                             int64_t n, int64_t k, float beta, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0) return CudaStatus::Invalid("fp8 gemm sizes must be positive");
  if (ldx < k || ldw < k || ldy < n) return CudaStatus::Invalid("fp8 gemm leading dimension too small");
  if (k % 16 != 0 || ldx % 16 != 0 || ldw % 16 != 0)
    return CudaStatus::Invalid("fp8 gemm needs K, ldx and ldw multiples of 16 (cuBLASLt FP8)");
  if (ldy % (y_f32 ? 4 : 8) != 0) return CudaStatus::Invalid("fp8 gemm ldy must be 16 bytes a row");
  if (!x || !w || !y || !x_scale || !w_scale) return CudaStatus::Invalid("fp8 gemm pointer is null");
  if (beta != 0.0f && beta != 1.0f) return CudaStatus::Invalid("fp8 gemm beta must be 0 or 1");
  LtProduct p;
  p.in_type = CUDA_R_8F_E4M3;
  p.out_type = y_f32 ? CUDA_R_32F : CUDA_R_16BF;  // C has D's type (never FP8 here)
  p.m = m, p.n = n, p.k = k, p.ldx = ldx, p.ldw = ldw, p.ldy = ldy;
  p.accumulate = beta != 0.0f;
  p.align_x = GemmPointerAlignment(x), p.align_w = GemmPointerAlignment(w), p.align_y = GemmPointerAlignment(y);
  if (p.align_x < 16 || p.align_w < 16 || p.align_y < 16)
    return CudaStatus::Invalid("fp8 gemm buffers must be 16-byte aligned");
  // The scales are device pointers, read when the product runs: one computed on the stream just
  // before needs no host sync.
  return lt_->Run(p, x, w, y, 1.0f, beta, x_scale, w_scale, stream);
}

}  // namespace kvgate::cuda
