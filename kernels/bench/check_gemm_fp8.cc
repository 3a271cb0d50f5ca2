// The FP8 GEMM rows: GemmFp8 (cuBLASLt E4M3, per-tensor device scales) on operands quantized on
// the device by the fp8_quant kernels, next to GemmBf16 on the same bf16 operands. Two errors per
// row: against a double product of the very codes and scales the GEMM read (the GEMM's own error,
// must be ~f32 accumulation), and against the bf16 product (what quantizing to E4M3 costs, reported
// in the note, not a pass criterion). Never run on a GPU yet: see kernels/NOTES.md, "FP8 GEMM".
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "kernels/bench/checks.h"
#include "kernels/bench/reference.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/fp8_quant_math.h"
#include "kernels/cuda/gemm_fp8.h"
#include "kernels/cuda/kernels.h"

namespace kvgate::cuda::bench {
namespace {

// y [m][n] = x [m][k] . w [n][k]^T with f32 output; 512 sampled entries compared.
bool Fp8Case(CheckContext& c, GemmFp8& gemm, const char* name, int64_t m, int64_t n, int64_t k) {
  DeviceBuffer x, w, qx, qw, scales, y8, y16;
  if (!x.Alloc(static_cast<size_t>(m * k) * 2) || !w.Alloc(static_cast<size_t>(n * k) * 2) ||
      !qx.Alloc(static_cast<size_t>(m * k)) || !qw.Alloc(static_cast<size_t>(n * k)) || !scales.Alloc(6 * 4) ||
      !y8.Alloc(static_cast<size_t>(m * n) * 4) || !y16.Alloc(static_cast<size_t>(m * n) * 4) || !y8.Poison())
    return false;
  const uint64_t tag = static_cast<uint64_t>(m * 131 + n * 17 + k) + 0xf8;
  KV_TRY(FillUniformBf16(x.as<bf16>(), m * k, c.seed + tag, 1.0f, c.stream));
  KV_TRY(FillUniformBf16(w.as<bf16>(), n * k, c.seed + tag + 1, 1.0f / std::sqrt(static_cast<float>(k)), c.stream));
  // scales: [0] amax x, [1] scale x, [2] 1 / scale x, [3..5] the same for w.
  float* s = scales.as<float>();
  auto quantize = [&] {
    return LaunchAmaxBf16(x.as<__nv_bfloat16>(), m * k, s + 0, c.stream).ok() &&
           LaunchFp8ScaleFromAmax(s + 0, s + 1, s + 2, c.stream).ok() &&
           LaunchQuantizeE4M3Bf16(x.as<__nv_bfloat16>(), m * k, s + 2, qx.as<uint8_t>(), c.stream).ok();
  };
  KV_TRY(quantize());
  KV_TRY(LaunchAmaxBf16(w.as<__nv_bfloat16>(), n * k, s + 3, c.stream));
  KV_TRY(LaunchFp8ScaleFromAmax(s + 3, s + 4, s + 5, c.stream));
  KV_TRY(LaunchQuantizeE4M3Bf16(w.as<__nv_bfloat16>(), n * k, s + 5, qw.as<uint8_t>(), c.stream));
  auto run8 = [&] {
    return gemm.Run(qx.as<__nv_fp8_e4m3>(), k, s + 1, qw.as<__nv_fp8_e4m3>(), k, s + 4, y8.as<float>(), n, m, n, k,
                    0.0f, c.stream);
  };
  auto run16 = [&] {
    return c.gemm->Run(x.as<bf16>(), k, w.as<bf16>(), k, y16.as<float>(), n, m, n, k, 1.0f, 0.0f, c.stream);
  };
  KV_TRY(run8());
  KV_TRY(run16());
  KV_TRY(cudaStreamSynchronize(c.stream));
  std::vector<uint16_t> hx, hw;
  std::vector<uint8_t> cx, cw;
  std::vector<float> sc, got;
  if (!x.Download(&hx, static_cast<size_t>(m * k)) || !w.Download(&hw, static_cast<size_t>(n * k)) ||
      !qx.Download(&cx, static_cast<size_t>(m * k)) || !qw.Download(&cw, static_cast<size_t>(n * k)) ||
      !scales.Download(&sc, 6) || !y8.Download(&got, static_cast<size_t>(m * n)))
    return false;
  bool written = true;
  for (float v : got) written &= std::isfinite(v);
  // The device codes must be the host codec's (sampled: a full pass over 200M codes is slow).
  double code_mismatches = 0;
  auto rng = Rng(c, tag);
  for (int i = 0; i < 4096; ++i) {
    const size_t a = rng() % cx.size(), b = rng() % cw.size();
    code_mismatches += cx[a] != QuantizeE4M3(Bf16ToFloat(hx[a]), sc[2]);
    code_mismatches += cw[b] != QuantizeE4M3(Bf16ToFloat(hw[b]), sc[5]);
  }
  std::vector<float> out, out_vs_bf16;
  std::vector<double> ref_codes, ref_bf16;
  for (int e = 0; e < 512; ++e) {
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(m)),
                  j = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    double acc8 = 0, acc16 = 0;
    for (int64_t t = 0; t < k; ++t) {
      const size_t xi = static_cast<size_t>(i * k + t), wi = static_cast<size_t>(j * k + t);
      acc8 += static_cast<double>(DequantizeE4M3(cx[xi], sc[1])) * DequantizeE4M3(cw[wi], sc[4]);
      acc16 += static_cast<double>(Bf16ToFloat(hx[xi])) * Bf16ToFloat(hw[wi]);
    }
    ref_codes.push_back(acc8);
    ref_bf16.push_back(acc16);
    out.push_back(got[static_cast<size_t>(i * n + j)]);
  }
  const double err = ref::RelError(out, ref_codes), quant_err = ref::RelError(out, ref_bf16);
  const double thresh = 1e-4;  // f32 accumulation of exact products of codes: ~1e-6 expected
  const double ms8 = TimeMs(c.stream, 3, 10, [&] { return run8().ok(); });
  const double ms16 = TimeMs(c.stream, 3, 10, [&] { return run16().ok(); });
  const double ms_q = TimeMs(c.stream, 3, 10, quantize);  // the activation's per-call cost
  if (ms8 < 0 || ms16 < 0 || ms_q < 0) return false;
  const double tflops = 2.0 * static_cast<double>(m) * n * k / ms8 / 1e9;
  char size[64], note[160];
  std::snprintf(size, sizeof(size), "%lldx%lldx%lld", static_cast<long long>(m), static_cast<long long>(n),
                static_cast<long long>(k));
  std::snprintf(note, sizeof(note), "vs bf16 %.3f ms: %.2fx; x quantize %.3f ms; vs bf16 product %.1e; codes %g%s",
                ms16, ms16 / ms8, ms_q, quant_err, code_mismatches, written ? "" : " UNWRITTEN OUTPUT");
  // The ceiling column is the measured bf16 GEMM rate: the FP8 tensor cores' peak is twice that.
  c.rows->push_back({name, size, err, thresh, err <= thresh && written && code_mismatches == 0, ms8, tflops,
                     "TFLOP/s", c.gemm_tflops, note});
  return true;
}

}  // namespace

bool CheckGemmFp8(CheckContext& c) {
  std::unique_ptr<GemmFp8> gemm;
  KV_TRY(GemmFp8::Create(size_t{32} << 20, &gemm));
  const int64_t m = c.quick ? 1024 : 8192;
  return Fp8Case(c, *gemm, "gemm fp8 qkv", m, 6144, 4096) && Fp8Case(c, *gemm, "gemm fp8 gate_up", m, 24576, 4096) &&
         Fp8Case(c, *gemm, "gemm fp8 down", m, 4096, 12288) &&
         Fp8Case(c, *gemm, "gemm fp8 decode qkv (M=64)", 64, 6144, 4096) &&
         Fp8Case(c, *gemm, "gemm fp8 engine (513x1536x576)", 513, 1536, 576);
}

}  // namespace kvgate::cuda::bench
