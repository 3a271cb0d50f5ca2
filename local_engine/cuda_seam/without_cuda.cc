// The device seam in a build without CUDA: nothing to link; device.cc reports the build.
#include "local_engine/cuda_seam/cuda_seam.h"

namespace kvgate::engine::cuda_seam {

const bool kBuiltWithCuda = false;

int DeviceCount(std::string* why) {
  if (why) *why = "this kvgate was built without CUDA";
  return 0;
}

Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendChoice&) {
  return MakeError(ErrorCode::kUnavailable, "this kvgate was built without CUDA");
}

Result<int64_t> KvTokensForMemoryFraction(double, int64_t) {
  return MakeError(ErrorCode::kUnavailable, "this kvgate was built without CUDA");
}

}  // namespace kvgate::engine::cuda_seam
