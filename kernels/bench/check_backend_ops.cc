// Device checks of the f32 / f16 adapter kernels CudaBackend runs for the engine (backend_ops.h):
// until this file only their bf16 counterparts were checked, so the path the engine actually takes
// on a GPU was verified end to end (greedy tokens) but never op by op. Shapes are the bundled
// SmolLM2-135M's (hidden 576, 9 heads / 3 kv heads of 64, FFN 1536) at a 512-token step; conversions,
// adds, gathers, embeddings and the f16 KV write must be bit-exact with the host, the rest within
// 1e-5 of a double-precision reference (f32 arithmetic, no bf16 rounding anywhere).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/bench/checks.h"
#include "kernels/bench/reference.h"
#include "kernels/cuda/backend_ops.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant_format.h"
#include "kernels/cuda/rope_table.h"

namespace kvgate::cuda::bench {
namespace {

constexpr int kTokens = 512, kHidden = 576, kHeads = 9, kKvHeads = 3, kHeadDim = 64, kFfn = 1536;

std::vector<float> RandomF32(size_t n, std::mt19937_64& rng, float scale) {
  std::vector<float> v(n);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (auto& x : v) x = u(rng);
  return v;
}

// Host f32 -> f16 bits, round to nearest even (what __float2half_rn does) for finite inputs in f16's
// normal and subnormal range; the check's values stay well inside it.
uint16_t FloatToHalfRne(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (a == 0.0f) return sign;
  int e = 0;
  std::frexp(a, &e);                      // a = m * 2^e, m in [0.5, 1)
  const int exp = std::max(e - 1, -14);   // f16 exponent (subnormals share -14)
  const double q = std::ldexp(static_cast<double>(a), 10 - exp);  // mantissa units
  double r = std::nearbyint(q);           // ties to even (default rounding mode)
  int biased = exp + 15;
  if (r >= 2048.0) {  // rounded up into the next binade
    r /= 2.0;
    ++biased;
  }
  if (r < 1024.0) return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));  // subnormal
  return static_cast<uint16_t>(sign | (biased << 10) | (static_cast<uint16_t>(r) & 0x3ff));
}

bool Download(const DeviceBuffer& b, std::vector<float>* v, size_t n) { return b.Download(v, n); }

// Mismatches between a producer's bf16 twin (op_twin.h) and F32ToBf16 of its f32 output, which is
// what CudaBackend::MatMul would have converted; -1 when the download fails.
double TwinMismatches(const DeviceBuffer& twin, const std::vector<float>& y) {
  std::vector<uint16_t> bits;
  if (!twin.Download(&bits, y.size())) return -1;
  double bad = 0;
  for (size_t i = 0; i < y.size(); ++i) bad += Bf16ToFloat(bits[i]) != RoundBf16(y[i]);
  return bad;
}

void Push(CheckContext& c, const char* name, const std::string& size, double err, double thresh, bool pass,
          double ms, double bytes, const char* note) {
  // ms < 0: the timing failed; 0: not timed.
  c.rows->push_back({name, size, err, thresh, pass && ms >= 0, ms, ms > 0 ? bytes / ms / 1e6 : 0.0, "GB/s",
                     c.copy_gbps, note});
}

}  // namespace

bool CheckBackendOps(CheckContext& c) {
  auto rng = Rng(c, 900);
  const std::string tag = std::to_string(kTokens) + "x" + std::to_string(kHidden);
  const size_t n = static_cast<size_t>(kTokens) * kHidden;

  {  // f32 -> bf16 -> f32 (around every GEMM of CudaBackend::MatMul)
    const auto x = RandomF32(n, rng, 4.0f);
    DeviceBuffer dx, db, dy;
    if (!dx.Alloc(n * 4) || !db.Alloc(n * 2) || !dy.Alloc(n * 4) || !dx.Upload(x) || !dy.Poison()) return false;
    auto run = [&] {
      return F32ToBf16(dx.as<float>(), db.as<bf16>(), static_cast<int64_t>(n), c.stream).ok() &&
             Bf16ToF32(db.as<bf16>(), dy.as<float>(), static_cast<int64_t>(n), c.stream).ok();
    };
    if (!run() || !Ok(cudaStreamSynchronize(c.stream), "f32<->bf16")) return false;
    std::vector<float> y;
    if (!Download(dy, &y, n)) return false;
    double bad = 0;
    for (size_t i = 0; i < n; ++i) bad += y[i] != RoundBf16(x[i]);
    Push(c, "backend f32->bf16->f32", tag, bad, 0, bad == 0, TimeMs(c.stream, 3, 20, run), 12.0 * n,
         "err = mismatches (bit-exact RNE)");
  }
  {  // RMSNorm f32, in place as the engine may call it
    const auto x = RandomF32(n, rng, 2.0f), w = RandomF32(kHidden, rng, 1.0f);
    DeviceBuffer dx, dw, dy, dt;
    if (!dx.Alloc(n * 4) || !dw.Alloc(kHidden * 4) || !dy.Alloc(n * 4) || !dt.Alloc(n * 2) || !dx.Upload(x) ||
        !dw.Upload(w) || !dy.Poison() || !dt.Poison())
      return false;
    auto run = [&] {
      return RmsNormF32(dx.as<float>(), dw.as<float>(), dy.as<float>(), kTokens, kHidden, 1e-5f, dt.as<bf16>(),
                        c.stream).ok();
    };
    if (!run() || !Ok(cudaStreamSynchronize(c.stream), "rmsnorm f32")) return false;
    std::vector<float> y;
    if (!Download(dy, &y, n)) return false;
    std::vector<double> ref(n);
    for (int r = 0; r < kTokens; ++r) {
      double ss = 0;
      for (int j = 0; j < kHidden; ++j) ss += static_cast<double>(x[r * kHidden + j]) * x[r * kHidden + j];
      const double inv = 1.0 / std::sqrt(ss / kHidden + 1e-5);
      for (int j = 0; j < kHidden; ++j) ref[r * kHidden + j] = x[r * kHidden + j] * inv * w[j];
    }
    const double err = ref::RelError(y, ref);
    Push(c, "backend rmsnorm f32", tag, err, 1e-5, err <= 1e-5, TimeMs(c.stream, 3, 20, run), 10.0 * n,
         "with its bf16 twin");
    const double twin_bad = TwinMismatches(dt, y);
    Push(c, "backend rmsnorm bf16 twin", tag, twin_bad, 0, twin_bad == 0, 0, 0, "err = mismatches vs F32ToBf16(out)");
  }
  {  // RoPE f32 at positions up to 100K (the long-context range), theta 1e5: the double-precision
     // kernel and the table kernel CudaBackend uses for positions below kRopeMaxPositions
    const size_t m = static_cast<size_t>(kTokens) * kHeads * kHeadDim;
    const auto x = RandomF32(m, rng, 1.0f);
    std::vector<int32_t> pos(kTokens);
    for (auto& p : pos) p = static_cast<int32_t>(rng() % 100000);
    pos[0] = 0;
    pos[1] = 99999;
    pos[2] = 255;
    pos[3] = 256;
    std::vector<double> ref(m);
    for (int t = 0; t < kTokens; ++t)
      for (int h = 0; h < kHeads; ++h)
        for (int i = 0; i < kHeadDim / 2; ++i) {
          const size_t o = (static_cast<size_t>(t) * kHeads + h) * kHeadDim + 2 * i;
          ref::RopePair(x[o], x[o + 1], i, kHeadDim, pos[static_cast<size_t>(t)], 1e5, &ref[o], &ref[o + 1]);
        }
    RopeTable table;
    if (!Ok(BuildRopeTable(1e5f, kHeadDim, &table), "BuildRopeTable")) return false;
    DeviceBuffer dx, dp, dlow, dhigh;
    if (!dx.Alloc(m * 4) || !dp.Alloc(kTokens * 4) || !dp.Upload(pos) || !dlow.Alloc(table.low.size() * 4) ||
        !dhigh.Alloc(table.high.size() * 4) || !dlow.Upload(table.low) || !dhigh.Upload(table.high))
      return false;
    for (const bool use_table : {false, true}) {
      auto run = [&] {
        return use_table ? RopeInterleavedF32Table(dx.as<float>(), kTokens, kHeads, kHeadDim, dp.as<int32_t>(),
                                                   dlow.as<float>(), dhigh.as<float>(), c.stream)
                         : RopeInterleavedF32(dx.as<float>(), kTokens, kHeads, kHeadDim, dp.as<int32_t>(), 1e5f,
                                              c.stream);
      };
      if (!dx.Upload(x) || !Ok(run(), "rope f32") || !Ok(cudaStreamSynchronize(c.stream), "rope f32")) return false;
      std::vector<float> y;
      if (!Download(dx, &y, m)) return false;
      const double err = ref::RelError(y, ref);
      // In place: timed on the rotated data (values do not matter for the timing).
      const double ms = TimeMs(c.stream, 3, 20, [&] { return run().ok(); });
      Push(c, use_table ? "backend rope f32 (table)" : "backend rope f32 (double)", std::to_string(kTokens) + "x9x64",
           err, 1e-5, err <= 1e-5, ms, 8.0 * m, use_table ? "positions < 100K; what CudaBackend runs" : "positions < 100K");
    }
  }
  {  // K/V f32 -> f16 cache at int64 slots; slot -1 (decode padding) is skipped
    const int kv = kKvHeads * kHeadDim, pool = 4 * kTokens;
    const auto k = RandomF32(static_cast<size_t>(kTokens) * kv, rng, 3.0f),
               v = RandomF32(static_cast<size_t>(kTokens) * kv, rng, 3.0f);
    std::vector<int64_t> slots(kTokens);
    std::vector<int32_t> perm(pool);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int t = 0; t < kTokens; ++t) slots[static_cast<size_t>(t)] = t % 7 == 3 ? -1 : perm[static_cast<size_t>(t)];
    DeviceBuffer dk, dv, ds, kc, vc;
    const size_t cache_elems = static_cast<size_t>(pool) * kv;
    if (!dk.Alloc(k.size() * 4) || !dv.Alloc(v.size() * 4) || !ds.Alloc(slots.size() * 8) ||
        !kc.Alloc(cache_elems * 2) || !vc.Alloc(cache_elems * 2) || !dk.Upload(k) || !dv.Upload(v) ||
        !ds.Upload(slots) || !kc.Poison() || !vc.Poison())
      return false;
    auto run = [&] {
      return WriteKvF16(dk.as<float>(), dv.as<float>(), kTokens, kv, ds.as<int64_t>(), kc.as<uint16_t>(),
                        vc.as<uint16_t>(), c.stream)
          .ok();
    };
    if (!run() || !Ok(cudaStreamSynchronize(c.stream), "write kv f16")) return false;
    std::vector<uint16_t> gk, gv;
    if (!kc.Download(&gk, cache_elems) || !vc.Download(&gv, cache_elems)) return false;
    std::vector<uint16_t> want_k(cache_elems, 0xffff), want_v(cache_elems, 0xffff);
    for (int t = 0; t < kTokens; ++t) {
      if (slots[static_cast<size_t>(t)] < 0) continue;
      for (int j = 0; j < kv; ++j) {
        const size_t dst = static_cast<size_t>(slots[static_cast<size_t>(t)]) * kv + j, src = static_cast<size_t>(t) * kv + j;
        want_k[dst] = FloatToHalfRne(k[src]);
        want_v[dst] = FloatToHalfRne(v[src]);
      }
    }
    double bad = 0;
    for (size_t i = 0; i < cache_elems; ++i) bad += (gk[i] != want_k[i]) + (gv[i] != want_v[i]);
    Push(c, "backend write kv f16", std::to_string(kTokens) + " tok x3x64", bad, 0, bad == 0,
         TimeMs(c.stream, 3, 20, run), 12.0 * kTokens * kv, "bit-exact; slot -1 untouched");
  }
  {  // SwiGLU and the residual add
    const size_t m = static_cast<size_t>(kTokens) * kFfn;
    const auto g = RandomF32(m, rng, 6.0f), u = RandomF32(m, rng, 2.0f);
    DeviceBuffer dg, du, dout, dt;
    if (!dg.Alloc(m * 4) || !du.Alloc(m * 4) || !dout.Alloc(m * 4) || !dt.Alloc(m * 2) || !dg.Upload(g) ||
        !du.Upload(u) || !dout.Poison() || !dt.Poison())
      return false;
    auto run = [&] {
      return SwiGluF32(dg.as<float>(), du.as<float>(), static_cast<int64_t>(m), dout.as<float>(), dt.as<bf16>(),
                       c.stream).ok();
    };
    if (!run() || !Ok(cudaStreamSynchronize(c.stream), "swiglu f32")) return false;
    std::vector<float> y;
    if (!Download(dout, &y, m)) return false;
    std::vector<double> ref(m);
    for (size_t i = 0; i < m; ++i) ref[i] = ref::SiluMul(g[i], u[i]);
    const double err = ref::RelError(y, ref);
    Push(c, "backend swiglu f32", std::to_string(kTokens) + "x" + std::to_string(kFfn), err, 1e-5, err <= 1e-5,
         TimeMs(c.stream, 3, 20, run), 14.0 * m, "with its bf16 twin");
    const double twin_bad = TwinMismatches(dt, y);
    Push(c, "backend swiglu bf16 twin", std::to_string(kTokens) + "x" + std::to_string(kFfn), twin_bad, 0,
         twin_bad == 0, 0, 0, "err = mismatches vs F32ToBf16(out)");
    // out += gate (in place): exact f32 addition.
    if (!Ok(AddF32(dout.as<float>(), dg.as<float>(), static_cast<int64_t>(m), c.stream), "AddF32") ||
        !Ok(cudaStreamSynchronize(c.stream), "add f32"))
      return false;
    std::vector<float> sum;
    if (!Download(dout, &sum, m)) return false;
    double bad = 0;
    for (size_t i = 0; i < m; ++i) bad += sum[i] != y[i] + g[i];
    const double ms = TimeMs(c.stream, 3, 20, [&] {
      return AddF32(dout.as<float>(), dg.as<float>(), static_cast<int64_t>(m), c.stream).ok();
    });
    Push(c, "backend add f32", std::to_string(kTokens) + "x" + std::to_string(kFfn), bad, 0, bad == 0, ms, 12.0 * m,
         "bit-exact");
  }
  {  // GatherRows (the logits rows) and the embedding lookup from Q8_0 / Q4_1 tables
    const auto x = RandomF32(n, rng, 1.0f);
    std::vector<int32_t> rows = {kTokens - 1, 0, 17, 17, 300};
    DeviceBuffer dx, dr, dout;
    if (!dx.Alloc(n * 4) || !dr.Alloc(rows.size() * 4) || !dout.Alloc(rows.size() * kHidden * 4) || !dx.Upload(x) ||
        !dr.Upload(rows) || !dout.Poison())
      return false;
    if (!Ok(GatherRowsF32(dx.as<float>(), kHidden, dr.as<int32_t>(), static_cast<int64_t>(rows.size()), dout.as<float>(),
                          c.stream), "GatherRowsF32") ||
        !Ok(cudaStreamSynchronize(c.stream), "gather"))
      return false;
    std::vector<float> y;
    if (!Download(dout, &y, rows.size() * kHidden)) return false;
    double bad = 0;
    for (size_t r = 0; r < rows.size(); ++r)
      for (int j = 0; j < kHidden; ++j) bad += y[r * kHidden + j] != x[static_cast<size_t>(rows[r]) * kHidden + j];
    Push(c, "backend gather rows f32", std::to_string(rows.size()) + "x" + std::to_string(kHidden), bad, 0, bad == 0,
         0, 0, "bit-exact (not timed)");

    const int vocab = 4096;
    for (bool q8 : {true, false}) {
      const int bb = q8 ? kQ8_0BlockBytes : kQ4_1BlockBytes, per_row = kHidden / kQuantBlock;
      std::vector<uint8_t> table(static_cast<size_t>(vocab) * per_row * bb);
      for (auto& b : table) b = static_cast<uint8_t>(rng());
      for (size_t blk = 0; blk < table.size() / bb; ++blk) {  // finite f16 scale (and min) per block
        for (int h = 0; h < (q8 ? 1 : 2); ++h) {
          const uint16_t half = FloatToHalfRne(std::ldexp(static_cast<float>(1 + rng() % 1023), -16) * (rng() & 1 ? 1 : -1));
          table[blk * bb + 2 * h] = static_cast<uint8_t>(half & 0xff);
          table[blk * bb + 2 * h + 1] = static_cast<uint8_t>(half >> 8);
        }
      }
      std::vector<int32_t> ids(kTokens);
      for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
      DeviceBuffer dt, di, de;
      if (!dt.Alloc(table.size()) || !di.Alloc(ids.size() * 4) || !de.Alloc(n * 4) || !dt.Upload(table) ||
          !di.Upload(ids) || !de.Poison())
        return false;
      auto run = [&] {
        return EmbedRowsF32(dt.as<uint8_t>(), q8, kHidden, di.as<int32_t>(), kTokens, de.as<float>(), c.stream).ok();
      };
      if (!run() || !Ok(cudaStreamSynchronize(c.stream), "embed")) return false;
      std::vector<float> e;
      if (!Download(de, &e, n)) return false;
      double mism = 0;
      for (int t = 0; t < kTokens; ++t)
        for (int j = 0; j < kHidden; ++j) {
          const uint8_t* p = &table[(static_cast<size_t>(ids[static_cast<size_t>(t)]) * per_row + j / kQuantBlock) * bb];
          const float d = HalfToFloat(static_cast<uint16_t>(p[0] | (p[1] << 8)));
          const int jj = j % kQuantBlock;
          float want;
          if (q8) {
            want = static_cast<float>(static_cast<int8_t>(p[2 + jj])) * d;
          } else {
            const float mn = HalfToFloat(static_cast<uint16_t>(p[2] | (p[3] << 8)));
            const int q = jj < 16 ? (p[4 + jj] & 15) : (p[4 + jj - 16] >> 4);
            want = std::fma(static_cast<float>(q), d, mn);
          }
          mism += e[static_cast<size_t>(t) * kHidden + j] != want;
        }
      Push(c, q8 ? "backend embed q8_0 f32" : "backend embed q4_1 f32", tag, mism, 0, mism == 0,
           TimeMs(c.stream, 3, 20, run), 4.0 * n + static_cast<double>(kTokens) * per_row * bb, "bit-exact");
    }
  }
  return true;
}

}  // namespace kvgate::cuda::bench
