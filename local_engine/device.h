// Which compute backend the engine runs on, and the one seam that builds it.
//
// The CUDA backend (local_engine/cuda_backend.h) is linked into the engine only when the build has
// it (-DKVGATE_CUDA=ON and nvcc found at configure time); local_engine/cuda_seam/ holds the two
// implementations of the CUDA half of this API and CMake compiles exactly one. In a build without
// CUDA, asking for the cuda device is a clear kUnavailable error at run time, never a link error.
//
// Error messages start with "device cuda: " and carry no advice: callers know whether the user
// wrote `device: cpu` in a config or `--device cpu` on a command line, and add that.
// Thread safety: every function here may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "common/error.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec.h"
#include "local_engine/backend.h"

namespace kvgate::engine {

enum class Device { kCpu, kCuda };

std::string_view DeviceName(Device device);                // "cpu" | "cuda"
std::optional<Device> ParseDevice(std::string_view name);  // exactly "cpu" or "cuda"

// True when this binary links the CUDA backend.
bool BuiltWithCuda();
// CUDA devices the runtime reports; 0 in a build without CUDA, without a driver or without a GPU.
int CudaDeviceCount();

// Ok when `device` can run in this process. For cuda, kUnavailable with
//   "device cuda: this kvgate was built without CUDA (...)" or
//   "device cuda: no CUDA device found (cudaGetDeviceCount: <the runtime's reason>)".
Status CheckDevice(Device device);

struct BackendSpec {
  Device device = Device::kCpu;
  // cpu only: the worker pool (REQUIRED there; must outlive the backend) and the kernel ISA.
  kernels::cpu::ThreadPool* pool = nullptr;
  kernels::cpu::Isa isa = kernels::cpu::Isa::kScalar;
  // cuda only: MatMul in FP8 (CudaBackendOptions::fp8_gemm).
  bool fp8_gemm = false;
};

// The backend for `spec.device`: CheckDevice's errors, or the CUDA backend's creation errors.
Result<std::unique_ptr<Backend>> MakeBackend(const BackendSpec& spec);

// KV-pool tokens that fit in `fraction` (0, 1] of the device memory free right now at
// `kv_bytes_per_token`, a multiple of 16. cuda only (kInvalidArgument for cpu: host memory is
// sized explicitly); CheckDevice's errors.
Result<int64_t> KvTokensForMemoryFraction(Device device, double fraction,
                                          int64_t kv_bytes_per_token);

}  // namespace kvgate::engine
