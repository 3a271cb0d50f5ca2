#include "local_engine/device.h"

#include "local_engine/cpu_backend.h"
#include "local_engine/cuda_seam/cuda_seam.h"

namespace kvgate::engine {

std::string_view DeviceName(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

std::optional<Device> ParseDevice(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return std::nullopt;
}

bool BuiltWithCuda() { return cuda_seam::kBuiltWithCuda; }

int CudaDeviceCount() { return cuda_seam::DeviceCount(nullptr); }

Status CheckDevice(Device device) {
  if (device == Device::kCpu) return {};
  if (!cuda_seam::kBuiltWithCuda) {
    return MakeError(ErrorCode::kUnavailable,
                     "device cuda: this kvgate was built without CUDA (-DKVGATE_CUDA=OFF, or no "
                     "CUDA compiler at configure time)");
  }
  std::string why;
  if (cuda_seam::DeviceCount(&why) <= 0) {
    return MakeError(ErrorCode::kUnavailable, "device cuda: no CUDA device found (" + why + ")");
  }
  return {};
}

Result<std::unique_ptr<Backend>> MakeBackend(const BackendSpec& spec) {
  if (auto s = CheckDevice(spec.device); !s) return std::unexpected(s.error());
  if (spec.device == Device::kCpu) {
    if (spec.fp8_gemm) return MakeError(ErrorCode::kInvalidArgument, "fp8_gemm needs device cuda");
    if (spec.pool == nullptr)
      return MakeError(ErrorCode::kInvalidArgument, "device cpu: no thread pool");
    return MakeCpuBackend(spec.pool, spec.isa);
  }
  auto backend = cuda_seam::MakeCudaBackend({.fp8_gemm = spec.fp8_gemm});
  if (!backend) return MakeError(backend.error().code, "device cuda: " + backend.error().message);
  return backend;
}

Result<int64_t> KvTokensForMemoryFraction(Device device, double fraction,
                                          int64_t kv_bytes_per_token) {
  if (device == Device::kCpu) {
    return MakeError(ErrorCode::kInvalidArgument, "device cpu: the KV pool is sized explicitly");
  }
  if (auto s = CheckDevice(device); !s) return std::unexpected(s.error());
  auto tokens = cuda_seam::KvTokensForMemoryFraction(fraction, kv_bytes_per_token);
  if (!tokens) return MakeError(tokens.error().code, "device cuda: " + tokens.error().message);
  return tokens;
}

}  // namespace kvgate::engine
