// The CUDA plugin (libkvgate_cuda.so): kernels/cuda's CudaBackend on device 0, behind the one
// entry point with_cuda.cc looks up after dlopen. Only this library links the CUDA runtime and
// cuBLAS, so a kvgate that never asks for device: cuda neither needs them nor maps them.
#include <cuda_runtime_api.h>

#include "local_engine/cuda_backend.h"
#include "local_engine/cuda_seam/cuda_seam.h"

namespace kvgate::engine::cuda_seam {
namespace {

int DeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later runtime calls report their own
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return 0;
  }
  if (count <= 0 && why) *why = "cudaGetDeviceCount reported 0 devices";
  return count > 0 ? count : 0;
}

Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendChoice& choice) {
  cuda::CudaBackendOptions options;
  options.fp8_gemm = choice.fp8_gemm;
  auto backend = cuda::MakeCudaBackend(options);
  if (!backend) return std::unexpected(backend.error());
  return std::unique_ptr<Backend>(std::move(*backend));
}

Result<int64_t> KvTokensForMemoryFraction(double fraction, int64_t kv_bytes_per_token) {
  return cuda::KvCacheTokensForMemoryFraction(fraction, kv_bytes_per_token);
}

constexpr PluginApi kApi{kPluginAbiVersion, &DeviceCount, &MakeCudaBackend,
                         &KvTokensForMemoryFraction};

}  // namespace
}  // namespace kvgate::engine::cuda_seam

extern "C" __attribute__((visibility("default"))) const kvgate::engine::cuda_seam::PluginApi*
kvgate_cuda_plugin_api() {
  return &kvgate::engine::cuda_seam::kApi;
}
