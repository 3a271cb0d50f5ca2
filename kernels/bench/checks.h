// The device checks, split by file: check_kernels.cc (ceilings, GEMM, elementwise, cache, copy,
// FP8, dequant), check_gemm_fp8.cc (the FP8 GEMM), check_attention.cc (decode and prefill
// attention), check_backend_ops.cc (the f32 / f16 kernels CudaBackend runs), e2e_model.cc
// (Qwen3-8B-shaped model). Each check appends rows to the table; it returns false only when a CUDA
// call fails.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/bench/bench_util.h"
#include "kernels/cuda/gemm.h"

namespace kvgate::cuda::bench {

struct CheckContext {
  cudaStream_t stream = nullptr;
  uint64_t seed = 0;
  int num_sms = 0;
  double copy_gbps = 0.0;     // measured device copy bandwidth (bytes read + written)
  double gemm_tflops = 0.0;   // measured bf16 GEMM rate
  GemmBf16* gemm = nullptr;
  RowTable* rows = nullptr;  // prints each row as it is added
  bool quick = false;         // smaller sizes (for a smoke run)
  // Set by CheckPrefillAttention: every prefill v2 case matched the reference in this run. The
  // end-to-end run uses v2 only then (v2 has not been verified on a GPU before).
  bool prefill_v2_passed = false;
  // Set by CheckPrefillAttention: v2's median time per prefill case (CheckPrefillAttentionV3's ratios).
  std::vector<double> prefill_v2_ms;
};

// Fresh generator per check: seed mixed with a per-check tag.
inline std::mt19937_64 Rng(const CheckContext& c, uint64_t tag) {
  return std::mt19937_64(c.seed * 0x9e3779b97f4a7c15ull + tag);
}
std::vector<uint16_t> RandomBf16(size_t n, std::mt19937_64& rng, float scale);
std::vector<float> Bf16ToFloatVec(const std::vector<uint16_t>& v);

bool MeasureCeilings(CheckContext& c);
bool CheckGemm(CheckContext& c);
bool CheckGemmFp8(CheckContext& c);  // check_gemm_fp8.cc: GemmFp8 next to GemmBf16
bool CheckFp8Encode(CheckContext& c);
bool CheckDequant(CheckContext& c);
bool CheckRmsNorm(CheckContext& c);
bool CheckRope(CheckContext& c);
bool CheckSiluMul(CheckContext& c);
bool CheckCacheWriteBf16(CheckContext& c);
bool CheckCacheWriteFp8(CheckContext& c);
bool CheckCopyBlocks(CheckContext& c);
bool CheckDecodeAttention(CheckContext& c);
bool CheckPrefillAttention(CheckContext& c);
// Prefill v3 on the bf16 and f16 cases of CheckPrefillAttention, timed against its v2 rows. A
// check of its own, run last: a v3 fault (a hang on a barrier, a trap) can end the process.
bool CheckPrefillAttentionV3(CheckContext& c);
bool CheckBackendOps(CheckContext& c);  // check_backend_ops.cc: CudaBackend's f32 / f16 kernels
bool RunEndToEnd(CheckContext& c);

}  // namespace kvgate::cuda::bench
