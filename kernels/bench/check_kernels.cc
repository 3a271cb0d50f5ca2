// Device checks of the non-attention kernels and the two ceilings (copy bandwidth, bf16 GEMM).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "kernels/bench/checks.h"
#include "kernels/bench/reference.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/fp8.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant_format.h"

namespace kvgate::cuda::bench {

std::vector<uint16_t> RandomBf16(size_t n, std::mt19937_64& rng, float scale) {
  std::vector<uint16_t> v(n);
  if (scale == 0.0f) return v;  // zeros (a distribution over [-0, 0) is not defined)
  std::uniform_real_distribution<float> u(-scale, scale);
  for (auto& x : v) x = FloatToBf16(u(rng));
  return v;
}

std::vector<float> Bf16ToFloatVec(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = Bf16ToFloat(v[i]);
  return f;
}

namespace {

std::string Dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) {
    if (!s.empty()) s.push_back('x');
    s.append(std::to_string(x));
  }
  return s;
}

double GBps(double bytes, double ms) { return ms > 0 ? bytes / ms / 1e6 : 0.0; }

// y = x w^T on `samples` random entries, compared with double sums over host copies.
double SampledGemmError(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w,
                        const std::vector<uint16_t>* y0, const std::vector<uint16_t>& y, int64_t m,
                        int64_t n, int64_t k, std::mt19937_64& rng) {
  std::vector<float> out;
  std::vector<double> ref;
  for (int s = 0; s < 256; ++s) {
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(m));
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    double acc = y0 ? Bf16ToFloat((*y0)[static_cast<size_t>(i * n + j)]) : 0.0;
    for (int64_t t = 0; t < k; ++t)
      acc += static_cast<double>(Bf16ToFloat(x[static_cast<size_t>(i * k + t)])) *
             Bf16ToFloat(w[static_cast<size_t>(j * k + t)]);
    ref.push_back(acc);
    out.push_back(Bf16ToFloat(y[static_cast<size_t>(i * n + j)]));
  }
  return ref::RelError(out, ref);
}

bool GemmCase(CheckContext& c, const char* name, int64_t m, int64_t n, int64_t k, float beta,
              bool ceiling_row) {
  DeviceBuffer x, w, y;
  KV_TRY(x.Alloc(static_cast<size_t>(m * k) * 2) && w.Alloc(static_cast<size_t>(n * k) * 2) &&
                 y.Alloc(static_cast<size_t>(m * n) * 2)
             ? cudaSuccess : cudaErrorMemoryAllocation);
  const uint64_t tag = static_cast<uint64_t>(m * 31 + n * 7 + k);
  KV_TRY(FillUniformBf16(x.as<bf16>(), m * k, c.seed + tag, 1.0f, c.stream));
  KV_TRY(FillUniformBf16(w.as<bf16>(), n * k, c.seed + tag + 1, 1.0f / std::sqrt(static_cast<float>(k)), c.stream));
  if (beta != 0.0f) {
    KV_TRY(FillUniformBf16(y.as<bf16>(), m * n, c.seed + tag + 2, 1.0f, c.stream));
  } else {
    KV_TRY(y.Poison());
  }
  KV_TRY(cudaStreamSynchronize(c.stream));
  std::vector<uint16_t> hx, hw, hy0, hy;
  KV_TRY(x.Download(&hx, static_cast<size_t>(m * k)) && w.Download(&hw, static_cast<size_t>(n * k))
             ? cudaSuccess : cudaErrorUnknown);
  if (beta != 0.0f) KV_TRY(y.Download(&hy0, static_cast<size_t>(m * n)) ? cudaSuccess : cudaErrorUnknown);
  KV_TRY(c.gemm->Run(x.as<bf16>(), k, w.as<bf16>(), k, y.as<bf16>(), n, m, n, k, 1.0f, beta, c.stream));
  KV_TRY(cudaStreamSynchronize(c.stream));
  KV_TRY(y.Download(&hy, static_cast<size_t>(m * n)) ? cudaSuccess : cudaErrorUnknown);
  auto rng = Rng(c, tag);
  const double err = SampledGemmError(hx, hw, beta != 0.0f ? &hy0 : nullptr, hy, m, n, k, rng);
  const double ms = TimeMs(c.stream, 3, 10, [&] {
    return c.gemm->Run(x.as<bf16>(), k, w.as<bf16>(), k, y.as<bf16>(), n, m, n, k, 1.0f, beta, c.stream).ok();
  });
  if (ms < 0) return false;
  const double tflops = 2.0 * static_cast<double>(m) * n * k / ms / 1e9;
  if (ceiling_row) c.gemm_tflops = tflops;
  c.rows->push_back({name, Dims({m, n, k}), err, 1e-2, err <= 1e-2, ms, tflops, "TFLOP/s",
                     ceiling_row ? 0.0 : c.gemm_tflops, beta != 0.0f ? "beta=1 (residual add)" : ""});
  return true;
}

}  // namespace

bool MeasureCeilings(CheckContext& c) {
  const size_t bytes = c.quick ? (size_t{256} << 20) : (size_t{2} << 30);
  DeviceBuffer a, b;
  if (!a.Alloc(bytes) || !b.Alloc(bytes)) return false;
  KV_TRY(FillUniformBf16(a.as<bf16>(), static_cast<int64_t>(bytes / 2), c.seed, 1.0f, c.stream));
  const double ms = TimeMs(c.stream, 3, 10, [&] {
    return Ok(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, c.stream), "d2d");
  });
  if (ms < 0) return false;
  c.copy_gbps = GBps(2.0 * static_cast<double>(bytes), ms);
  c.rows->push_back({"ceiling: d2d memcpy", std::to_string(bytes >> 20) + " MiB", 0, 0, true, ms,
                     c.copy_gbps, "GB/s", 0, "read+write bytes"});
  const int64_t s = c.quick ? 4096 : 8192;
  return GemmCase(c, "ceiling: cuBLASLt bf16 GEMM", s, s, s, 0.0f, true);
}

// CudaBackend's GEMMs: operands at element offsets into their buffers (the engine's activations
// start t * k elements into a scratch buffer: with k = 576 that is 64-128-byte alignment, not the
// 256 cuBLASLt assumes unless told), and the f32 output the backend writes directly. Sampled
// entries against double sums; the whole output must be written (poisoned before).
bool GemmEngineCase(CheckContext& c, const char* name, int64_t m, int64_t n, int64_t k, int64_t x_off,
                    int64_t w_off, int64_t y_off, bool y_f32) {
  const size_t ybytes = y_f32 ? 4 : 2;
  DeviceBuffer x, w, y;
  if (!x.Alloc(static_cast<size_t>(m * k + x_off) * 2) || !w.Alloc(static_cast<size_t>(n * k + w_off) * 2) ||
      !y.Alloc(static_cast<size_t>(m * n + y_off) * ybytes) || !y.Poison())
    return false;
  const uint64_t tag = static_cast<uint64_t>(m * 131 + n * 17 + k + x_off + w_off + y_off);
  bf16* xp = x.as<bf16>() + x_off;
  bf16* wp = w.as<bf16>() + w_off;
  KV_TRY(FillUniformBf16(xp, m * k, c.seed + tag, 1.0f, c.stream));
  KV_TRY(FillUniformBf16(wp, n * k, c.seed + tag + 1, 1.0f / std::sqrt(static_cast<float>(k)), c.stream));
  KV_TRY(cudaStreamSynchronize(c.stream));
  std::vector<uint16_t> hx, hw;
  {
    std::vector<uint16_t> ax, aw;
    if (!x.Download(&ax, static_cast<size_t>(m * k + x_off)) || !w.Download(&aw, static_cast<size_t>(n * k + w_off)))
      return false;
    hx.assign(ax.begin() + x_off, ax.end());
    hw.assign(aw.begin() + w_off, aw.end());
  }
  auto run = [&] {
    return y_f32 ? c.gemm->Run(xp, k, wp, k, y.as<float>() + y_off, n, m, n, k, 1.0f, 0.0f, c.stream)
                 : c.gemm->Run(xp, k, wp, k, y.as<bf16>() + y_off, n, m, n, k, 1.0f, 0.0f, c.stream);
  };
  KV_TRY(run());
  KV_TRY(cudaStreamSynchronize(c.stream));
  std::vector<float> got(static_cast<size_t>(m * n));
  if (y_f32) {
    std::vector<float> all;
    if (!y.Download(&all, static_cast<size_t>(m * n + y_off))) return false;
    std::copy(all.begin() + y_off, all.end(), got.begin());
  } else {
    std::vector<uint16_t> all;
    if (!y.Download(&all, static_cast<size_t>(m * n + y_off))) return false;
    for (size_t i = 0; i < got.size(); ++i) got[i] = Bf16ToFloat(all[static_cast<size_t>(y_off) + i]);
  }
  bool written = true;
  for (float v : got) written &= std::isfinite(v);
  auto rng = Rng(c, tag);
  std::vector<float> out;
  std::vector<double> ref;
  for (int s = 0; s < 512; ++s) {
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(m)), j = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    double acc = 0;
    for (int64_t t = 0; t < k; ++t)
      acc += static_cast<double>(Bf16ToFloat(hx[static_cast<size_t>(i * k + t)])) * Bf16ToFloat(hw[static_cast<size_t>(j * k + t)]);
    ref.push_back(acc);
    out.push_back(got[static_cast<size_t>(i * n + j)]);
  }
  const double err = ref::RelError(out, ref);
  // f32 output: no bf16 rounding, so the error must be far below the bf16 rows' ~2e-3.
  const double thresh = y_f32 ? 1e-4 : 1e-2;
  const double ms = TimeMs(c.stream, 3, 10, [&] { return run().ok(); });
  if (ms < 0) return false;
  const double tflops = 2.0 * static_cast<double>(m) * n * k / ms / 1e9;
  char note[96];
  std::snprintf(note, sizeof(note), "align x %u w %u y %u B%s%s", GemmPointerAlignment(xp), GemmPointerAlignment(wp),
                y_f32 ? GemmPointerAlignment(y.as<float>() + y_off) : GemmPointerAlignment(y.as<bf16>() + y_off),
                y_f32 ? "; f32 out" : "", written ? "" : " UNWRITTEN OUTPUT");
  c.rows->push_back({name, Dims({m, n, k}), err, thresh, err <= thresh && written, ms, tflops, "TFLOP/s",
                     c.gemm_tflops, note});
  return true;
}

bool CheckGemm(CheckContext& c) {
  const int64_t m = c.quick ? 1024 : 8192;
  return GemmCase(c, "gemm qkv", m, 6144, 4096, 0.0f, false) &&
         GemmCase(c, "gemm o_proj + residual", m, 4096, 4096, 1.0f, false) &&
         GemmCase(c, "gemm gate_up", m, 24576, 4096, 0.0f, false) &&
         GemmCase(c, "gemm down + residual", m, 4096, 12288, 1.0f, false) &&
         GemmCase(c, "gemm decode qkv (M=64)", 64, 6144, 4096, 0.0f, false) &&
         // The bundled model's q projection at 513 tokens; x 1152 B (128-aligned), w 64 B, y 16 B in.
         GemmEngineCase(c, "gemm unaligned (engine)", 513, 576, 576, 576, 32, 8, false) &&
         GemmEngineCase(c, "gemm f32 out (engine)", 513, 1536, 576, 0, 0, 0, true) &&
         GemmEngineCase(c, "gemm f32 out unaligned", 511, 576, 576, 288, 32, 4, true);
}

bool CheckFp8Encode(CheckContext& c) {
  auto rng = Rng(c, 1);
  std::vector<float> x = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 448.0f, 449.0f, 463.99f, 464.0f,
                          464.01f, 480.0f, 1e6f, -1e30f, 0.5f / 512.0f, 1.5f / 512.0f, 1e-30f};
  for (int code = 0; code < 0x7e; ++code) {  // midpoints between adjacent codes, and their neighbours
    const float mid = (DecodeE4M3(static_cast<uint8_t>(code)) + DecodeE4M3(static_cast<uint8_t>(code + 1))) / 2;
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  const size_t exact_prefix = x.size();
  const size_t n = c.quick ? (size_t{1} << 20) : (size_t{1} << 24);
  std::uniform_real_distribution<float> e(-14.0f, 10.0f);
  while (x.size() < n) x.push_back((rng() & 1 ? -1.0f : 1.0f) * std::exp2(e(rng)));
  DeviceBuffer dx, dout;
  if (!dx.Alloc(n * 4) || !dout.Alloc(n) || !dx.Upload(x) || !dout.Poison()) return false;
  KV_TRY(EncodeFp8(dx.as<float>(), static_cast<int64_t>(n), 1.0f, dout.as<uint8_t>(), c.stream));
  KV_TRY(cudaStreamSynchronize(c.stream));
  std::vector<uint8_t> out;
  if (!dout.Download(&out, n)) return false;
  double mismatches = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t want = EncodeE4M3(x[i]);
    const bool nan_ok = std::isnan(x[i]) && (out[i] & 0x7f) == 0x7f;
    if (out[i] != want && !nan_ok) ++mismatches;
    if (i < exact_prefix && want != ref::EncodeE4M3ByDefinition(x[i])) ++mismatches;
  }
  const double ms = TimeMs(c.stream, 2, 10, [&] {
    return EncodeFp8(dx.as<float>(), static_cast<int64_t>(n), 1.0f, dout.as<uint8_t>(), c.stream).ok();
  });
  c.rows->push_back({"fp8 e4m3 encode (hw vs host)", std::to_string(n), mismatches, 0, mismatches == 0,
                     ms, GBps(5.0 * static_cast<double>(n), ms), "GB/s", c.copy_gbps, "err = mismatching codes"});
  return true;
}

bool CheckDequant(CheckContext& c) {
  const int64_t n = c.quick ? (int64_t{1} << 20) : (int64_t{1} << 25);
  auto rng = Rng(c, 2);
  auto rand_half = [&] {  // finite halves with magnitudes 2^-10 .. 2^5
    const uint16_t exp = static_cast<uint16_t>(5 + rng() % 16), mant = static_cast<uint16_t>(rng() & 0x3ff);
    return static_cast<uint16_t>(((rng() & 1) << 15) | (exp << 10) | mant);
  };
  for (int q8 = 0; q8 < 2; ++q8) {
    const int bb = q8 ? kQ8_0BlockBytes : kQ4_1BlockBytes;
    std::vector<uint8_t> blocks(static_cast<size_t>(n / 32 * bb));
    for (size_t b = 0; b < blocks.size() / bb; ++b) {
      uint8_t* p = &blocks[b * bb];
      const uint16_t d = rand_half(), m = rand_half();
      std::memcpy(p, &d, 2);
      if (!q8) std::memcpy(p + 2, &m, 2);
      for (int i = q8 ? 2 : 4; i < bb; ++i) p[i] = static_cast<uint8_t>(rng());
    }
    std::vector<uint16_t> want(static_cast<size_t>(n)), got;
    q8 ? DequantQ8_0Reference(blocks.data(), want.size(), want.data())
       : DequantQ4_1Reference(blocks.data(), want.size(), want.data());
    DeviceBuffer din, dout;
    if (!din.Alloc(blocks.size()) || !dout.Alloc(static_cast<size_t>(n) * 2) || !din.Upload(blocks) || !dout.Poison())
      return false;
    auto run = [&] {
      return (q8 ? DequantQ8_0(din.as<uint8_t>(), n, dout.as<bf16>(), c.stream)
                 : DequantQ4_1(din.as<uint8_t>(), n, dout.as<bf16>(), c.stream)).ok();
    };
    if (!run() || !Ok(cudaStreamSynchronize(c.stream), "dequant")) return false;
    if (!dout.Download(&got, static_cast<size_t>(n))) return false;
    double mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
    const double ms = TimeMs(c.stream, 2, 10, run);
    c.rows->push_back({q8 ? "dequant q8_0 -> bf16" : "dequant q4_1 -> bf16", std::to_string(n), mismatches, 0,
                       mismatches == 0, ms, GBps(static_cast<double>(blocks.size() + n * 2), ms), "GB/s",
                       c.copy_gbps, "err = mismatching values (bit-exact)"});
  }
  return true;
}

bool CheckRmsNorm(CheckContext& c) {
  const int t = c.quick ? 1024 : 8192, h = 4096;
  auto rng = Rng(c, 3);
  const auto x = RandomBf16(static_cast<size_t>(t) * h, rng, 2.0f), w = RandomBf16(h, rng, 1.0f);
  DeviceBuffer dx, dw, dy;
  if (!dx.Alloc(x.size() * 2) || !dw.Alloc(w.size() * 2) || !dy.Alloc(x.size() * 2) || !dx.Upload(x) ||
      !dw.Upload(w) || !dy.Poison())
    return false;
  auto run = [&] { return RmsNorm(dx.as<bf16>(), h, dw.as<bf16>(), dy.as<bf16>(), h, t, h, 1e-6f, c.stream).ok(); };
  if (!run() || !Ok(cudaStreamSynchronize(c.stream), "rmsnorm")) return false;
  std::vector<uint16_t> y;
  if (!dy.Download(&y, x.size())) return false;
  std::vector<double> ref(x.size());
  ref::ParallelFor(t, [&](int64_t r) { ref::RmsNormRow(&x[r * h], w.data(), h, 1e-6, &ref[r * h]); });
  const double err = ref::RelError(Bf16ToFloatVec(y), ref);
  const double ms = TimeMs(c.stream, 3, 20, run);
  c.rows->push_back({"rmsnorm", Dims({t, h}), err, 1e-2, err <= 1e-2, ms,
                     GBps(2.0 * 2.0 * t * h, ms), "GB/s", c.copy_gbps, ""});
  return true;
}

bool CheckRope(CheckContext& c) {
  const int t = c.quick ? 1024 : 8192, hq = 32, hkv = 8, d = 128, stride = (hq + 2 * hkv) * d;
  const double theta = 1e6;
  auto rng = Rng(c, 4);
  const auto x = RandomBf16(static_cast<size_t>(t) * stride, rng, 1.0f);
  std::vector<int32_t> pos(static_cast<size_t>(t));
  for (auto& p : pos) p = static_cast<int32_t>(rng() % 131072);
  DeviceBuffer dx, dp;
  if (!dx.Alloc(x.size() * 2) || !dp.Alloc(pos.size() * 4) || !dx.Upload(x) || !dp.Upload(pos)) return false;
  auto run = [&] {
    return RopeInterleaved(dx.as<bf16>(), stride, hq, dx.as<bf16>() + hq * d, stride, hkv, d,
                           dp.as<int32_t>(), t, static_cast<float>(theta), c.stream).ok();
  };
  if (!run() || !Ok(cudaStreamSynchronize(c.stream), "rope")) return false;
  std::vector<uint16_t> y;
  if (!dx.Download(&y, x.size())) return false;
  std::vector<float> out;
  std::vector<double> ref;
  double v_changed = 0;
  for (int i = 0; i < t; ++i) {
    for (int j = 0; j < stride; j += 2) {
      const size_t o = static_cast<size_t>(i) * stride + j;
      if (j >= (hq + hkv) * d) {
        v_changed += (y[o] != x[o]) + (y[o + 1] != x[o + 1]);
        continue;
      }
      double y0, y1;
      ref::RopePair(Bf16ToFloat(x[o]), Bf16ToFloat(x[o + 1]), (j % d) / 2, d, pos[static_cast<size_t>(i)], theta, &y0, &y1);
      ref.push_back(y0);
      ref.push_back(y1);
      out.push_back(Bf16ToFloat(y[o]));
      out.push_back(Bf16ToFloat(y[o + 1]));
    }
  }
  const double err = ref::RelError(out, ref);
  const double ms = TimeMs(c.stream, 3, 20, run);
  c.rows->push_back({"rope interleaved (q,k)", Dims({t, hq + hkv, d}), err, 1e-2, err <= 1e-2 && v_changed == 0, ms,
                     GBps(2.0 * 2.0 * t * (hq + hkv) * d, ms), "GB/s", c.copy_gbps,
                     v_changed ? "V region modified!" : "positions < 131072, theta 1e6"});
  return true;
}

bool CheckSiluMul(CheckContext& c) {
  const int t = c.quick ? 1024 : 8192, f = 12288;
  auto rng = Rng(c, 5);
  const auto x = RandomBf16(static_cast<size_t>(t) * 2 * f, rng, 4.0f);
  DeviceBuffer dx, dy;
  if (!dx.Alloc(x.size() * 2) || !dy.Alloc(x.size()) || !dx.Upload(x) || !dy.Poison()) return false;
  auto run = [&] { return SiluMul(dx.as<bf16>(), dy.as<bf16>(), t, f, c.stream).ok(); };
  if (!run() || !Ok(cudaStreamSynchronize(c.stream), "silu")) return false;
  std::vector<uint16_t> y;
  if (!dy.Download(&y, static_cast<size_t>(t) * f)) return false;
  std::vector<double> ref(y.size());
  for (int i = 0; i < t; ++i)
    for (int j = 0; j < f; ++j)
      ref[static_cast<size_t>(i) * f + j] = ref::SiluMul(Bf16ToFloat(x[static_cast<size_t>(i) * 2 * f + j]),
                                                         Bf16ToFloat(x[static_cast<size_t>(i) * 2 * f + f + j]));
  const double err = ref::RelError(Bf16ToFloatVec(y), ref);
  const double ms = TimeMs(c.stream, 3, 20, run);
  c.rows->push_back({"silu_mul", Dims({t, f}), err, 1e-2, err <= 1e-2, ms, GBps(3.0 * 2.0 * t * f, ms), "GB/s",
                     c.copy_gbps, ""});
  return true;
}

}  // namespace kvgate::cuda::bench
