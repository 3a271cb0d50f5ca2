// Conversion of a CudaStatus into the project's kvgate::Status. Host (g++) code only: it includes
// <expected> through common/error.h, which nvcc's C++20 mode cannot compile.
#pragma once

#include <string>

#include "common/error.h"
#include "kernels/cuda/cuda_status.h"

namespace kvgate::cuda {

// REQUIRES: the CUDA runtime library is linked when `s` may carry a CUDA error (for its name).
std::string CudaStatusMessage(const CudaStatus& s);

inline Status ToStatus(const CudaStatus& s) {
  if (s.ok()) return {};
  ErrorCode code = ErrorCode::kInternal;
  switch (s.kind) {
    case CudaStatusKind::kInvalidArgument: code = ErrorCode::kInvalidArgument; break;
    case CudaStatusKind::kNoDevice: code = ErrorCode::kUnavailable; break;
    case CudaStatusKind::kCudaError:
    case CudaStatusKind::kCublasError:
    case CudaStatusKind::kOk: code = ErrorCode::kInternal; break;
  }
  return MakeError(code, CudaStatusMessage(s));
}

}  // namespace kvgate::cuda
