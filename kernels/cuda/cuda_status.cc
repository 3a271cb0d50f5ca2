#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda/status.h"

namespace kvgate::cuda {

std::string CudaStatusMessage(const CudaStatus& s) {
  std::string what = s.what ? s.what : "";
  switch (s.kind) {
    case CudaStatusKind::kOk: return "ok";
    case CudaStatusKind::kInvalidArgument: return what;
    case CudaStatusKind::kNoDevice: return what.empty() ? "no CUDA device found" : what;
    case CudaStatusKind::kCudaError:
      return what + ": " + cudaGetErrorString(static_cast<cudaError_t>(s.code));
    case CudaStatusKind::kCublasError:
      return what + ": " + cublasGetStatusString(static_cast<cublasStatus_t>(s.code));
  }
  return what;
}

}  // namespace kvgate::cuda
