// The error value every kvgate CUDA launcher returns. Plain C++20 with no CUDA or <expected> include,
// so that .cu files (compiled by nvcc at C++20) and g++ code share it; status.h converts it to
// kvgate::Status for the engine. Launchers never exit or abort: a bad argument or a failed CUDA call
// comes back as a value.
#pragma once

namespace kvgate::cuda {

enum class CudaStatusKind {
  kOk,
  kInvalidArgument,  // shapes, pointers or options the launcher cannot run with
  kCudaError,        // a CUDA runtime call or kernel launch failed; `code` is the cudaError_t
  kCublasError,      // a cuBLAS / cuBLASLt call failed; `code` is the cublasStatus_t
  kNoDevice,         // cudaGetDeviceCount returned 0 (or failed)
};

struct CudaStatus {
  CudaStatusKind kind = CudaStatusKind::kOk;
  int code = 0;                // cudaError_t / cublasStatus_t when kind says so
  const char* what = nullptr;  // static string naming the failing call or argument; never freed

  constexpr bool ok() const { return kind == CudaStatusKind::kOk; }
  static constexpr CudaStatus Ok() { return {}; }
  static constexpr CudaStatus Invalid(const char* what) {
    return {CudaStatusKind::kInvalidArgument, 0, what};
  }
};

}  // namespace kvgate::cuda
