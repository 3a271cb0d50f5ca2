// Whether this machine has a CUDA device: the GPU tests skip without one.
#pragma once

#include <cuda_runtime_api.h>

namespace kvgate::cuda {

inline bool HaveDevice() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();  // a failed query leaves a sticky error the next CUDA call would report
  return ok;
}

}  // namespace kvgate::cuda
