#include "kernels/cuda/gemm.h"

#include <library_types.h>

#include <utility>

namespace kvgate::cuda {

CudaStatus GemmBf16::Create(size_t workspace_bytes, std::unique_ptr<GemmBf16>* out) {
  std::unique_ptr<LtMatmul> lt;
  if (CudaStatus s = LtMatmul::Create(workspace_bytes, &lt); !s.ok()) return s;
  out->reset(new GemmBf16(std::move(lt)));
  return CudaStatus::Ok();
}

GemmBf16::~GemmBf16() = default;

// Row-major y = x w^T is column-major y^T [N x M] = w^T-op(A = w as K x N col-major, transposed)
// times B = x^T (K x M col-major, i.e. x row-major as is): LtMatmul's mapping.
CudaStatus GemmBf16::Run(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                         __nv_bfloat16* y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                         float alpha, float beta, cudaStream_t stream) {
  return RunTyped(x, ldx, w, ldw, y, false, ldy, m, n, k, alpha, beta, stream);
}

CudaStatus GemmBf16::Run(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw, float* y,
                         int64_t ldy, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                         cudaStream_t stream) {
  return RunTyped(x, ldx, w, ldw, y, true, ldy, m, n, k, alpha, beta, stream);
}

CudaStatus GemmBf16::RunTyped(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw, void* y,
                              bool y_f32, int64_t ldy, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                              cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0) return CudaStatus::Invalid("gemm sizes must be positive");
  if (ldx < k || ldw < k || ldy < n) return CudaStatus::Invalid("gemm leading dimension too small");
  if (!x || !w || !y) return CudaStatus::Invalid("gemm pointer is null");
  LtProduct p;
  p.in_type = CUDA_R_16BF;
  p.out_type = y_f32 ? CUDA_R_32F : CUDA_R_16BF;
  p.m = m, p.n = n, p.k = k, p.ldx = ldx, p.ldw = ldw, p.ldy = ldy;
  p.accumulate = beta != 0.0f;
  p.align_x = GemmPointerAlignment(x), p.align_w = GemmPointerAlignment(w), p.align_y = GemmPointerAlignment(y);
  return lt_->Run(p, x, w, y, alpha, beta, nullptr, nullptr, stream);
}

}  // namespace kvgate::cuda
