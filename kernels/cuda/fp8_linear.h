// The FP8 path of a linear layer: y [T][N] (f32) = x [T][K] (f32) . w [N][K]^T with both operands
// quantized to E4M3 under per-tensor scales (fp8_quant.h) and multiplied by GemmFp8. A weight is
// quantized once, from its bf16 copy, and kept here keyed by that copy's address; the activations
// of a call are quantized once into a scratch that every output of that call reads. The numbers
// are those of the host emulation (gemm_emulation.h, GemmFormat::kFp8Tensor), which the FP8
// accuracy benchmark (bench/fp8_gemm) runs on the CPU. Built; never run on a GPU. Not thread-safe.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemm_fp8.h"

namespace kvgate::cuda {

class Fp8Linear {
 public:
  static CudaStatus Create(size_t workspace_bytes, std::unique_ptr<Fp8Linear>* out);
  ~Fp8Linear();
  Fp8Linear(const Fp8Linear&) = delete;
  Fp8Linear& operator=(const Fp8Linear&) = delete;

  // Whether `w` has been quantized, and whether the activation scratch holds `elems` codes: when
  // both hold, Quantize and Run allocate nothing (a CUDA graph capture may record them).
  bool HasWeight(const __nv_bfloat16* w) const { return weights_.count(w) != 0; }
  bool ActivationsFit(int64_t elems) const { return static_cast<size_t>(elems) <= act_bytes_; }

  // Quantizes w [n][k] (bf16, device) to codes held here, once per address; allocates. Errors:
  // kInvalid for n or k not positive, OOM, a failed launch.
  CudaStatus PrepareWeight(const __nv_bfloat16* w, int64_t n, int64_t k, cudaStream_t stream);
  // Grows the activation scratch to `elems` codes (waiting for the stream first when it grows).
  CudaStatus ReserveActivations(int64_t elems, cudaStream_t stream);
  // x [t][k] (f32, device) -> codes under the tensor's own scale, in the scratch (which must fit).
  CudaStatus QuantizeActivations(const float* x, int64_t t, int64_t k, cudaStream_t stream);
  // y [t][n] = the last quantized activations . w^T, f32, overwriting y. REQUIRES: PrepareWeight(w)
  // and QuantizeActivations of this t, k. kInvalid (nothing launched) for a shape or alignment
  // cuBLASLt FP8 cannot take (GemmFp8::Run): the caller runs that product another way.
  CudaStatus Run(const __nv_bfloat16* w, int64_t n, float* y, int64_t t, int64_t k, cudaStream_t stream);

 private:
  struct Weight {
    void* codes = nullptr;  // [n][k] E4M3
    float* scales = nullptr;  // amax, scale, 1 / scale
    int64_t n = 0, k = 0;
  };
  explicit Fp8Linear(std::unique_ptr<GemmFp8> gemm) : gemm_(std::move(gemm)) {}

  std::unique_ptr<GemmFp8> gemm_;
  std::map<const __nv_bfloat16*, Weight> weights_;
  void* act_ = nullptr;  // activation codes, then (at act_scales_) amax, scale, 1 / scale
  size_t act_bytes_ = 0;
  float* act_scales_ = nullptr;
  int64_t act_elems_ = 0;  // of the last QuantizeActivations
};

}  // namespace kvgate::cuda
