// Private to local_engine/device.cc: the CUDA half of the device seam. CMake compiles exactly one
// of with_cuda.cc (links kernels/cuda's CudaBackend) and without_cuda.cc (stubs), so the engine
// library depends on CUDA only in builds that have it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/error.h"
#include "local_engine/backend.h"

namespace kvgate::engine::cuda_seam {

extern const bool kBuiltWithCuda;

// Devices the CUDA runtime reports (0 on failure); when there are none and `why` is given, the
// runtime's reason ("cudaGetDeviceCount: <error>", or "... reported 0 devices").
int DeviceCount(std::string* why);

// REQUIRES: kBuiltWithCuda and DeviceCount() > 0 (device.cc checks both first).
Result<std::unique_ptr<Backend>> MakeCudaBackend();
Result<int64_t> KvTokensForMemoryFraction(double fraction, int64_t kv_bytes_per_token);

}  // namespace kvgate::engine::cuda_seam
