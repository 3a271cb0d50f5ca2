// Private to local_engine/device.cc: the CUDA half of the device seam. CMake compiles exactly one
// of with_cuda.cc (loads the CUDA plugin, libkvgate_cuda.so, on first use) and without_cuda.cc
// (stubs), so the engine never links CUDA: in a build with CUDA, only the plugin does.
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

// The CudaBackendOptions an engine chooses (the rest keep their defaults).
struct CudaBackendChoice {
  bool fp8_gemm = false;
};

// REQUIRES: kBuiltWithCuda and DeviceCount() > 0 (device.cc checks both first).
Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendChoice& choice);
Result<int64_t> KvTokensForMemoryFraction(double fraction, int64_t kv_bytes_per_token);

// What the plugin exports (plugin.cc), through `extern "C" const PluginApi*
// kvgate_cuda_plugin_api()`. The plugin is built with the binary that loads it (same compiler and
// flags), so C++ types cross the boundary; the version guards against a stale plugin file.
inline constexpr int kPluginAbiVersion = 3;  // 2: Backend::BeginStep/EndStep; 3: CudaBackendChoice
struct PluginApi {
  int abi_version;
  int (*device_count)(std::string* why);
  Result<std::unique_ptr<Backend>> (*make_backend)(const CudaBackendChoice& choice);
  Result<int64_t> (*kv_tokens_for_memory_fraction)(double fraction, int64_t kv_bytes_per_token);
};

}  // namespace kvgate::engine::cuda_seam
