// The cuBLASLt machinery GemmBf16 and GemmFp8 share: one handle, one device workspace, and a plan
// (descriptors + the heuristic's algorithm) per product shape, created on first use. It computes
// the row-major y [M][N] = alpha * x [M][K] . w [N][K]^T + beta * y as cuBLASLt's column-major
// y^T = op(A = w)^T . B = x (A transposed: the TN form FP8 requires, and bf16 is happy with).
// The element types are the caller's; checking what a type allows is the caller's job too.
// Not thread-safe: one object per stream / thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/cuda/cuda_status.h"

namespace kvgate::cuda {

struct LtProduct {
  int in_type = 0;   // cudaDataType_t of x and w (CUDA_R_16BF, CUDA_R_8F_E4M3)
  int out_type = 0;  // cudaDataType_t of y (C = D)
  int64_t m = 0, n = 0, k = 0, ldx = 0, ldw = 0, ldy = 0;
  bool accumulate = false;  // beta != 0
  // The alignment (GemmPointerAlignment) the algorithm may assume of each buffer: without it the
  // heuristic assumes 256 bytes and may pick vector loads that fault on a less aligned buffer.
  uint32_t align_x = 256, align_w = 256, align_y = 256;
  auto key() const {
    return std::make_tuple(in_type, out_type, m, n, k, ldx, ldw, ldy, accumulate, align_x, align_w, align_y);
  }
};

class LtMatmul {
 public:
  // Errors: no device, OOM, cuBLAS.
  static CudaStatus Create(size_t workspace_bytes, std::unique_ptr<LtMatmul>* out);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // Runs `p` on the buffers. x_scale / w_scale: device pointers to one float each that cuBLASLt
  // multiplies in (FP8's per-tensor scales), set on every call so one plan serves scales at any
  // address; null for none.
  CudaStatus Run(const LtProduct& p, const void* x, const void* w, void* y, float alpha, float beta,
                 const float* x_scale, const float* w_scale, cudaStream_t stream);

 private:
  struct Plan;
  LtMatmul() = default;
  CudaStatus MakePlan(const LtProduct& p, std::unique_ptr<Plan>* out);
  void* handle_ = nullptr;     // cublasLtHandle_t
  void* workspace_ = nullptr;  // device memory
  size_t workspace_bytes_ = 0;
  std::map<decltype(LtProduct{}.key()), std::unique_ptr<Plan>> plans_;
};

}  // namespace kvgate::cuda
