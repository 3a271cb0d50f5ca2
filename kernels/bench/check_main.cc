// kvgate_cuda_checks: checks every CUDA kernel against its CPU reference on random inputs (seed
// printed; pass --seed N to repeat a run), times it with CUDA events (warm-up, median), reports the
// fraction of the measured device ceilings, then runs the Qwen3-8B-shaped end-to-end timings.
// Exit status: 0 all checks passed, 1 a correctness check failed, 2 a CUDA call failed / no device.
// Flags: --seed N, --quick (small sizes), --no-e2e.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bench/checks.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"

int main(int argc, char** argv) {
  using namespace kvgate::cuda;
  using namespace kvgate::cuda::bench;
  CheckContext c;
  c.seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  bool e2e = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) c.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--quick")) c.quick = true;
    else if (!std::strcmp(argv[i], "--no-e2e")) e2e = false;
    else {
      std::fprintf(stderr, "usage: %s [--seed N] [--quick] [--no-e2e]\n", argv[0]);
      return 2;
    }
  }
  std::printf("kvgate_cuda_checks seed=%llu%s\n", static_cast<unsigned long long>(c.seed), c.quick ? " (quick)" : "");
  if (CudaStatus st = RequireDevice(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.what);
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs, %.1f GiB, L2 %d MiB, cc %d.%d\n", prop.name, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1u << 30), prop.l2CacheSize >> 20, prop.major, prop.minor);
  std::fflush(stdout);
  RowTable table;
  c.rows = &table;
  if (!Ok(DeviceSmCount(&c.num_sms), "sm count") || !Ok(cudaStreamCreate(&c.stream), "stream")) return 2;
  std::unique_ptr<GemmBf16> gemm;
  if (!Ok(GemmBf16::Create(size_t{32} << 20, &gemm), "GemmBf16::Create")) return 2;
  c.gemm = gemm.get();

  struct Named {
    const char* name;
    bool (*fn)(CheckContext&);
  };
  std::vector<Named> checks = {
      {"ceilings", MeasureCeilings},         {"gemm", CheckGemm},
      {"gemm fp8", CheckGemmFp8},
      {"fp8 encode", CheckFp8Encode},        {"dequant", CheckDequant},
      {"rmsnorm", CheckRmsNorm},             {"rope", CheckRope},
      {"silu_mul", CheckSiluMul},            {"cache bf16", CheckCacheWriteBf16},
      {"cache fp8", CheckCacheWriteFp8},     {"copy blocks", CheckCopyBlocks},
      {"decode attention", CheckDecodeAttention}, {"prefill attention", CheckPrefillAttention},
      {"backend ops", CheckBackendOps},
  };
  if (e2e) checks.push_back({"end to end", RunEndToEnd});
  checks.push_back({"prefill attention v3", CheckPrefillAttentionV3});  // last: see checks.h
  bool infra_ok = true;
  for (const Named& n : checks) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = n.fn(c);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[%s] %s in %.1f s\n", ok ? "done" : "CUDA FAILURE", n.name, s);
    std::fflush(stdout);
    if (!ok) {
      infra_ok = false;
      if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) break;  // sticky error
    }
  }
  const std::vector<Row>& rows = table.rows();
  PrintTable(rows);
  int failed = 0;
  for (const Row& r : rows) failed += !r.pass;
  std::printf("\nseed=%llu  rows=%zu  failed=%d  cuda_failures=%s\n", static_cast<unsigned long long>(c.seed),
              rows.size(), failed, infra_ok ? "none" : "YES");
  cudaStreamDestroy(c.stream);
  if (!infra_ok) return 2;
  return failed ? 1 : 0;
}
