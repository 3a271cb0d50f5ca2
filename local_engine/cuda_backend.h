// The CUDA implementation of the engine's Backend interface (local_engine/backend.h): f32
// activations and the f16 paged KV cache of that interface, quantized GGUF weights dequantized once
// to bf16 on first use and multiplied through cuBLASLt, attention through the paged decode/prefill
// kernels of kernels.h. The engine reaches it through local_engine/device.h (`device: cuda`).
//
// Errors: creation fails with kUnavailable "no CUDA device found" when cudaGetDeviceCount reports
// none. The interface's ops return void, so an op that fails records the first error, every later
// op becomes a no-op, and Backend::status() reports it (ModelRunner checks it after Synchronize()).
// Whole steps (Backend::BeginStep/EndStep): each step's metadata goes to the device in one copy
// from pinned memory, to fixed addresses the ops read; a StepKey::graph step (a decode step of an
// engine with cuda_graphs) is recorded as a CUDA graph on its key's second occurrence and replayed
// after that (kernels/NOTES.md, "CUDA graphs for decode"; not yet run on a GPU). A capture,
// instantiation or replay that fails in the CUDA runtime is not an error: that key runs eagerly from
// then on (the step is reissued eagerly), and only an eager failure becomes status(). Ops called
// outside a step upload their spans themselves.
// Thread safety: one thread at a time, like every Backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/error.h"
#include "kernels/cuda/geometry.h"
#include "local_engine/backend.h"

namespace kvgate::cuda {

struct CudaBackendOptions {
  int device = 0;
  size_t gemm_workspace_bytes = size_t{32} << 20;
  // The attention kernels' variants (kernels/cuda/geometry.h): v2 once the device run
  // (kernels/bench/run_device_checks.sh) has verified it (k{Prefill,Decode}V2Verified), else v1.
  PrefillVariant prefill_variant = kPrefillV2Verified ? PrefillVariant::kV2 : PrefillVariant::kV1;
  DecodeVariant decode_variant = kDecodeV2Verified ? DecodeVariant::kV2 : DecodeVariant::kV1;
  // A mixed step's decode rows (the leading sequences with one new token) go through the decode
  // kernel while the rest go through prefill tiles; false: the whole step through prefill tiles.
  bool mixed_decode_rows = true;
  // RMSNorm, SwiGLU and attention write a bf16 copy of their output, which the MatMul right after
  // reads instead of converting its f32 input (kernels/cuda/op_twin.h); false: always convert.
  // RMSNorm and SwiGLU write none with fp8_gemm, whose MatMuls read the f32 activations.
  bool bf16_twins = true;
  // MatMul in FP8 (E4M3, per-tensor scales) through cuBLASLt (kernels/cuda/fp8_linear.h) instead
  // of bf16: about twice the tensor-core rate, at the accuracy bench/fp8_gemm measures. Off by
  // default: built, never run on a GPU.
  bool fp8_gemm = false;
};

// status() (from engine::Backend) reports the first error an op met.
class CudaBackend : public engine::Backend {
 public:
  // Recorded decode-step graphs held now (tests and diagnostics).
  virtual size_t cached_graphs() const = 0;
};

Result<std::unique_ptr<CudaBackend>> MakeCudaBackend(const CudaBackendOptions& options = {});

// KV pool size in tokens that fits in `fraction` (0, 1] of the device's currently free memory, at
// `kv_bytes_per_token` (2 x layers x Hkv x Dh x bytes per value), rounded down to whole KV blocks
// (engine::kBlockSize tokens).
Result<int64_t> KvCacheTokensForMemoryFraction(double fraction, int64_t kv_bytes_per_token, int device = 0);

}  // namespace kvgate::cuda
