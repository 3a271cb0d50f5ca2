// FP8 (E4M3) GEMM through cuBLASLt for Hopper, modelled on GemmBf16 (gemm.h): one object owns a
// handle and a workspace and caches a plan per shape and alignment. Not thread-safe.
// Built; never run on a GPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/lt_matmul.h"

namespace kvgate::cuda {

class GemmFp8 {
 public:
  // Creates the handle and a `workspace_bytes` device workspace. Errors: no device, OOM, cuBLAS.
  static CudaStatus Create(size_t workspace_bytes, std::unique_ptr<GemmFp8>* out);
  ~GemmFp8();
  GemmFp8(const GemmFp8&) = delete;
  GemmFp8& operator=(const GemmFp8&) = delete;

  // y [M][N] = (x_scale * w_scale) * x [M][K] . w [N][K]^T + beta * y (row-major, w stored
  // [out][in]). x_scale / w_scale are DEVICE pointers to one float each (a code c stands for
  // DecodeE4M3(c) * scale, fp8_quant_math.h), read by cuBLASLt at run time so a scale computed on
  // the stream needs no host sync. beta is 0 or 1 (residual add). cuBLASLt FP8 only supports the
  // TN layout this mapping gives, and needs K, ldx, ldw multiples of 16; ldy >= N, a multiple of 8
  // (bf16) or 4 (f32); every pointer 16-byte aligned. Violations return kInvalid, nothing launches.
  CudaStatus Run(const __nv_fp8_e4m3* x, int64_t ldx, const float* x_scale, const __nv_fp8_e4m3* w,
                 int64_t ldw, const float* w_scale, __nv_bfloat16* y, int64_t ldy, int64_t m, int64_t n,
                 int64_t k, float beta, cudaStream_t stream);
  CudaStatus Run(const __nv_fp8_e4m3* x, int64_t ldx, const float* x_scale, const __nv_fp8_e4m3* w,
                 int64_t ldw, const float* w_scale, float* y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                 float beta, cudaStream_t stream);

 private:
  CudaStatus RunTyped(const __nv_fp8_e4m3* x, int64_t ldx, const float* x_scale, const __nv_fp8_e4m3* w,
                      int64_t ldw, const float* w_scale, void* y, bool y_f32, int64_t ldy, int64_t m,
                      int64_t n, int64_t k, float beta, cudaStream_t stream);
  explicit GemmFp8(std::unique_ptr<LtMatmul> lt) : lt_(std::move(lt)) {}
  std::unique_ptr<LtMatmul> lt_;  // handle, workspace, per-shape plans
};

}  // namespace kvgate::cuda
