// Device checks of paged decode and prefill attention against ref::AttendOne (double precision over
// the same cache contents), on random pools with shuffled block tables and NaN-poisoned unused slots.
// Decode and prefill run every case on v1 and then on v2 (DecodeVariant, PrefillVariant), each on
// the same inputs (rebuilt from the same seeds), so a fault in v2 cannot cost v1's rows; prefill then runs
// the FP8 cases on kV2Fp8Qk (FP8 Q K^T), against the reference of its own quantized Q, and the bf16
// and f16 cases run on v3 (wgmma + TMA) in a check of their own, the last of the run, because a
// fault there (a hang, a trap) can end the process.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/bench/checks.h"
#include "kernels/bench/reference.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/fp8_quant_math.h"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/kernels.h"

namespace kvgate::cuda::bench {
namespace {

// A random paged cache holding `ctx[s]` tokens for each sequence s, device and host copies.
struct Pool {
  DeviceBuffer k, v, ks, vs, table;
  ref::HostPagedKv host;
  std::vector<int32_t> table_host;  // [S][max_blocks]
  int max_blocks = 0;
  PagedKv view;
};

// IEEE half bits of m / 1024 for |m| <= 1024 (exact: 11 significant bits suffice).
uint16_t HalfOfMilli(int m) {
  if (m == 0) return 0;
  const uint16_t sign = m < 0 ? 0x8000 : 0;
  int a = m < 0 ? -m : m, e = 0;  // a / 1024 = (a / 2^e) * 2^(e - 10) with a / 2^e in [1, 2)
  while ((a >> (e + 1)) != 0) ++e;
  const int mant = ((a << (10 - e)) & 0x3ff);
  return static_cast<uint16_t>(sign | ((e - 10 + 15) << 10) | mant);
}

bool BuildPool(CheckContext& c, std::mt19937_64& rng, const std::vector<int>& ctx, int hkv, int d, KvDtype dtype,
               Pool* p) {
  const bool fp8 = dtype == KvDtype::kFp8E4M3, f16 = dtype == KvDtype::kF16;
  std::vector<std::vector<int32_t>> seq_blocks;
  int total = 0;
  for (int n : ctx) {
    p->max_blocks = std::max(p->max_blocks, (n + kBlockTokens - 1) / kBlockTokens);
    total += (n + kBlockTokens - 1) / kBlockTokens;
  }
  const int nb = total + 3;  // a few blocks nobody uses
  std::vector<int32_t> perm(static_cast<size_t>(nb));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  size_t next = 0;
  for (int n : ctx) {
    seq_blocks.emplace_back();
    for (int b = 0; b < (n + kBlockTokens - 1) / kBlockTokens; ++b) seq_blocks.back().push_back(perm[next++]);
  }
  if (!Ok(BuildBlockTable(seq_blocks, p->max_blocks, &p->table_host), "BuildBlockTable")) return false;
  const int64_t row = static_cast<int64_t>(hkv) * d;
  const size_t elems = static_cast<size_t>(nb) * kBlockTokens * static_cast<size_t>(row);
  const size_t elem_bytes = fp8 ? 1 : 2;
  if (!p->k.Alloc(elems * elem_bytes) || !p->v.Alloc(elems * elem_bytes) || !p->table.Alloc(p->table_host.size() * 4) ||
      !p->table.Upload(p->table_host))
    return false;
  p->host = {};
  p->host.num_blocks = nb;
  p->host.num_kv_heads = hkv;
  p->host.head_dim = d;
  p->host.fp8 = fp8;
  if (fp8) {
    auto codes = [&] {
      std::vector<uint8_t> v(elems);
      for (auto& x : v) {
        x = static_cast<uint8_t>(rng());
        if ((x & 0x7f) == 0x7f) x = static_cast<uint8_t>(x - 1);  // no NaN codes in used data
      }
      return v;
    };
    auto scales = [&] {
      std::vector<float> v(static_cast<size_t>(nb) * hkv);
      std::uniform_real_distribution<float> u(0.5f / 448.0f, 2.0f / 448.0f);
      for (auto& x : v) x = u(rng);
      return v;
    };
    p->host.k8 = codes();
    p->host.v8 = codes();
    p->host.k_scale = scales();
    p->host.v_scale = scales();
    if (!p->ks.Alloc(p->host.k_scale.size() * 4) || !p->vs.Alloc(p->host.v_scale.size() * 4) ||
        !p->k.Upload(p->host.k8) || !p->v.Upload(p->host.v8) || !p->ks.Upload(p->host.k_scale) ||
        !p->vs.Upload(p->host.v_scale))
      return false;
  } else if (f16) {  // the engine's cache type; values m / 1024 in [-1, 1], exact in f16
    auto halves = [&] {
      std::vector<uint16_t> v(elems);
      for (auto& x : v) x = HalfOfMilli(static_cast<int>(rng() % 2049) - 1024);
      return v;
    };
    p->host.f16 = true;
    p->host.k16 = halves();
    p->host.v16 = halves();
    if (!p->k.Upload(p->host.k16) || !p->v.Upload(p->host.v16)) return false;
  } else {
    KV_TRY(FillUniformBf16(p->k.as<bf16>(), static_cast<int64_t>(elems), rng(), 1.0f, c.stream));
    KV_TRY(FillUniformBf16(p->v.as<bf16>(), static_cast<int64_t>(elems), rng(), 1.0f, c.stream));
  }
  // Slots past each context in its last block are unwritten in a real cache: poison them (NaN).
  for (size_t s = 0; s < ctx.size(); ++s) {
    const int n = ctx[s], end = (n + kBlockTokens - 1) / kBlockTokens * kBlockTokens;
    for (int pos = n; pos < end; ++pos) {
      const size_t slot = static_cast<size_t>(seq_blocks[s][static_cast<size_t>(pos / kBlockTokens)]) * kBlockTokens +
                          pos % kBlockTokens;
      const size_t off = slot * static_cast<size_t>(row) * elem_bytes;
      KV_TRY(cudaMemsetAsync(p->k.as<char>() + off, 0xff, static_cast<size_t>(row) * elem_bytes, c.stream));
      KV_TRY(cudaMemsetAsync(p->v.as<char>() + off, 0xff, static_cast<size_t>(row) * elem_bytes, c.stream));
    }
  }
  KV_TRY(cudaStreamSynchronize(c.stream));
  // Download the bf16/f16 pools again: the host copy must hold the NaN poison exactly as the device.
  if (!fp8 && (!p->k.Download(&p->host.k16, elems) || !p->v.Download(&p->host.v16, elems))) return false;
  p->view = {p->k.get(), p->v.get(), fp8 ? p->ks.as<float>() : nullptr, fp8 ? p->vs.as<float>() : nullptr, nb, hkv,
             d, dtype};
  return true;
}

// Overwrites K of token `pos` of sequence `seq`, kv head `kvh`, with `row` [D] (bf16 bits) in a bf16
// pool, host and device copies: a key the peaked-softmax cases make dominate one head's scores.
bool PlantKey(Pool* p, int seq, int pos, int kvh, const uint16_t* row) {
  const int d = p->host.head_dim;
  const size_t slot =
      static_cast<size_t>(p->table_host[static_cast<size_t>(seq) * p->max_blocks + pos / kBlockTokens]) * kBlockTokens +
      pos % kBlockTokens;
  const size_t off = (slot * p->host.num_kv_heads + kvh) * d;
  std::copy(row, row + d, p->host.k16.begin() + static_cast<std::ptrdiff_t>(off));
  return Ok(cudaMemcpy(p->k.as<uint16_t>() + off, row, static_cast<size_t>(d) * 2, cudaMemcpyHostToDevice), "plant");
}

// The keys the peaked cases plant for a sequence of `ctx` tokens: the last key (in the last,
// usually partial, block), the first key of the last block, and the first key of the last split
// of `geo` (0: no split). Where a kernel drops or mis-masks one of those, its head's output is
// that key's V instead of a blend, which the reference comparison cannot miss.
std::vector<int> PlantedPositions(int ctx, int last_split_first_key) {
  std::vector<int> v = {ctx - 1, (ctx - 1) / kBlockTokens * kBlockTokens};
  if (last_split_first_key > 0 && last_split_first_key < ctx) v.push_back(last_split_first_key);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

struct DecodeSpec {
  std::string name;
  int hq, hkv, d;
  std::vector<int> ctx;
  KvDtype dtype;
  int q_pad = 0;          // extra elements per q row (tests the stride)
  float q_scale = 1.0f;   // q uniform in [-q_scale, q_scale]: 16-32 makes the softmax peaked
  bool plant = false;     // bf16 only: plant q-aligned keys (PlantedPositions) in every sequence
  int plan_divisor = 1;   // plan the split-K geometry for max context / this (a too-short plan)
};

// Runs one case on one kernel variant. *passed: the row's verdict. *ms_io: v1's time in (for v2's
// speedup note), this run's time out. *v1_out: v1's output, written by v1, compared by v2 (bitwise
// equality is expected but not required: v2 rescales its softmax per half block, v1 per block).
bool RunDecode(CheckContext& c, const DecodeSpec& sp, DecodeVariant variant, bool* passed, double* ms_io,
               std::vector<uint16_t>* v1_out) {
  auto rng = Rng(c, 100 + sp.ctx.size() * 7 + static_cast<uint64_t>(sp.hq));
  const int s = static_cast<int>(sp.ctx.size());
  Pool pool;
  if (!BuildPool(c, rng, sp.ctx, sp.hkv, sp.d, sp.dtype, &pool)) return false;
  const int64_t q_stride = static_cast<int64_t>(sp.hq) * sp.d + sp.q_pad;
  const auto q = RandomBf16(static_cast<size_t>(s * q_stride), rng, sp.q_scale);
  DecodeGeometry geo;
  const int max_ctx = *std::max_element(sp.ctx.begin(), sp.ctx.end());
  const int g = sp.hq / sp.hkv;
  DecodeShape shape{s, sp.hq, sp.hkv, sp.d, std::max(1, max_ctx / sp.plan_divisor)};
  shape.variant = variant;
  // The split rule as CudaBackend applies it: CTAs per SM of this kernel from the occupancy API.
  if (!Ok(DecodeCtasPerSm(sp.dtype, sp.d, g, variant, &shape.ctas_per_sm), "DecodeCtasPerSm")) return false;
  if (!Ok(ChooseDecodeGeometry(shape, c.num_sms, &geo), "geometry")) return false;
  if (sp.plant) {
    if (sp.dtype != KvDtype::kBf16) return Ok(false, "planted keys need a bf16 pool");
    const int last_split_key = geo.splits > 1 ? (geo.splits - 1) * geo.blocks_per_split * kBlockTokens : 0;
    for (int seq = 0; seq < s; ++seq)
      for (int kvh = 0; kvh < sp.hkv; ++kvh) {
        int k = 0;
        for (int pos : PlantedPositions(sp.ctx[static_cast<size_t>(seq)], last_split_key)) {
          const int h = kvh * g + (k++ % g);  // a different head of the group per planted key
          std::vector<uint16_t> row(static_cast<size_t>(sp.d));
          for (int j = 0; j < sp.d; ++j)
            row[static_cast<size_t>(j)] =
                FloatToBf16(Bf16ToFloat(q[static_cast<size_t>(seq * q_stride + h * sp.d + j)]) / sp.q_scale);
          if (!PlantKey(&pool, seq, pos, kvh, row.data())) return false;
        }
      }
  }
  DeviceBuffer dq, dout, dctx, ws;
  const size_t out_elems = static_cast<size_t>(s) * sp.hq * sp.d;
  if (!dq.Alloc(q.size() * 2) || !dout.Alloc(out_elems * 2) || !dctx.Alloc(sp.ctx.size() * 4) ||
      !ws.Alloc(geo.workspace_floats * 4) || !dq.Upload(q) || !dctx.Upload(sp.ctx) || !dout.Poison() || !ws.Poison())
    return false;
  DecodeAttentionArgs a;
  a.q = dq.as<bf16>();
  a.q_stride = q_stride;
  a.out = dout.as<bf16>();
  a.kv = pool.view;
  a.block_tables = pool.table.as<int32_t>();
  a.block_table_stride = pool.max_blocks;
  a.context_lens = dctx.as<int32_t>();
  a.num_q_heads = sp.hq;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(sp.d));
  a.geo = geo;
  a.workspace = geo.workspace_floats ? ws.as<float>() : nullptr;
  if (!Ok(DecodeAttention(a, c.stream), "DecodeAttention") || !Ok(cudaStreamSynchronize(c.stream), "decode"))
    return false;
  std::vector<uint16_t> out;
  if (!dout.Download(&out, out_elems)) return false;
  const int checked = s;  // every sequence, every head
  std::vector<double> ref(static_cast<size_t>(checked) * sp.hq * sp.d);
  ref::ParallelFor(static_cast<int64_t>(checked) * sp.hq, [&](int64_t i) {
    const int seq = static_cast<int>(i / sp.hq), h = static_cast<int>(i % sp.hq);
    std::vector<float> qf(static_cast<size_t>(sp.d));
    for (int j = 0; j < sp.d; ++j) qf[static_cast<size_t>(j)] = Bf16ToFloat(q[static_cast<size_t>(seq * q_stride + h * sp.d + j)]);
    ref::AttendOne(pool.host, &pool.table_host[static_cast<size_t>(seq) * pool.max_blocks], sp.ctx[static_cast<size_t>(seq)],
                   h / g, qf.data(), 1.0 / std::sqrt(static_cast<double>(sp.d)), &ref[static_cast<size_t>(i) * sp.d]);
  });
  std::vector<float> got(ref.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = Bf16ToFloat(out[i]);
  // Every output element must be written (poison check), not only the compared ones.
  bool all_written = true;
  for (uint16_t x : out) all_written &= !std::isnan(Bf16ToFloat(x));
  const double err = ref::RelError(got, ref);
  const double ms = TimeMs(c.stream, 3, 20, [&] { return DecodeAttention(a, c.stream).ok(); });
  double bytes = 2.0 * static_cast<double>(out_elems) * 2;
  for (int n : sp.ctx) bytes += 2.0 * n * sp.hkv * sp.d * (sp.dtype == KvDtype::kFp8E4M3 ? 1 : 2);
  const std::string size = "S=" + std::to_string(s) + " ctx<=" + std::to_string(max_ctx) + " " +
                           std::to_string(sp.hq) + "/" + std::to_string(sp.hkv) + "x" + std::to_string(sp.d);
  const bool v2 = variant == DecodeVariant::kV2;
  std::string note = (v2 ? "v2 splits=" : "splits=") + std::to_string(geo.splits) +
                     " ctas/SM=" + std::to_string(shape.ctas_per_sm) +
                     (sp.plan_divisor > 1 ? " plan for ctx/" + std::to_string(sp.plan_divisor) : "") +
                     (all_written ? "" : " UNWRITTEN OUTPUT");
  if (!v2) {
    *v1_out = out;
  } else {
    if (*ms_io > 0 && ms > 0) {
      char speedup[48];
      std::snprintf(speedup, sizeof(speedup), " %.2fx v1", *ms_io / ms);
      note += speedup;
    }
    size_t differ = 0;
    for (size_t i = 0; i < out.size() && i < v1_out->size(); ++i) differ += out[i] != (*v1_out)[i];
    note += differ == 0 && out.size() == v1_out->size() ? " bitwise=v1"
                                                         : " " + std::to_string(differ) + " elems differ from v1";
  }
  const bool pass = err <= 1e-2 && all_written && ms > 0;
  c.rows->push_back({sp.name + (v2 ? " [v2]" : ""), size, err, 1e-2, pass, ms, bytes / ms / 1e6, "GB/s", c.copy_gbps,
                     note});
  *passed = pass;
  *ms_io = ms;
  return true;
}

struct PrefillSpec {
  std::string name;
  int hq, hkv, d;
  std::vector<int> q_lens, ctx;
  KvDtype dtype;
  int samples;  // 0: compare every (row, head); else this many random ones plus each sequence's last row
  float q_scale = 1.0f;  // q uniform in [-q_scale, q_scale]: 16-32 makes the softmax peaked
  bool plant = false;    // bf16 only: keys aligned with the last row's q at PlantedPositions
};

const char* VariantName(PrefillVariant v) {
  switch (v) {
    case PrefillVariant::kV1: return "v1";
    case PrefillVariant::kV2: return "v2";
    case PrefillVariant::kV2Fp8Qk: return "v2 fp8 Q.K";
    case PrefillVariant::kV3: return "v3";
  }
  return "?";
}

// q as kV2Fp8Qk multiplies it: each (token, head) row of D values quantized to E4M3 under its own
// scale (amax / 448), then decoded times that scale.
void QuantizeQRow(std::vector<float>& row) {
  float amax = 0.0f;
  for (float x : row) amax = std::max(amax, std::fabs(x));
  const float scale = Fp8TensorScale(amax), inv = Fp8TensorInvScale(amax);
  for (float& x : row) x = DequantizeE4M3(QuantizeE4M3(x, inv), scale);
}

// Runs one case on one kernel variant. *passed: the row's verdict. *ms: the median time. kV2Fp8Qk
// is held to the reference of its own arithmetic (Q quantized as the kernel does); its error
// against the unquantized reference, what FP8 Q K^T costs, goes to the note.
bool RunPrefill(CheckContext& c, const PrefillSpec& sp, PrefillVariant variant, bool* passed, double* ms_out) {
  auto rng = Rng(c, 200 + sp.q_lens.size() * 13 + static_cast<uint64_t>(sp.ctx.back()));
  Pool pool;
  if (!BuildPool(c, rng, sp.ctx, sp.hkv, sp.d, sp.dtype, &pool)) return false;
  std::vector<int32_t> q_start = {0};
  for (int n : sp.q_lens) q_start.push_back(q_start.back() + n);
  const int t = q_start.back(), s = static_cast<int>(sp.q_lens.size()), g = sp.hq / sp.hkv;
  const int64_t q_stride = static_cast<int64_t>(sp.hq + 2 * sp.hkv) * sp.d;  // fused QKV rows
  const auto q = RandomBf16(static_cast<size_t>(t * q_stride), rng, sp.q_scale);
  if (sp.plant) {
    if (sp.dtype != KvDtype::kBf16) return Ok(false, "planted keys need a bf16 pool");
    for (int seq = 0; seq < s; ++seq) {
      if (sp.q_lens[static_cast<size_t>(seq)] == 0) continue;
      const int64_t last_tok = q_start[static_cast<size_t>(seq) + 1] - 1;
      for (int kvh = 0; kvh < sp.hkv; ++kvh) {
        int k = 0;
        for (int pos : PlantedPositions(sp.ctx[static_cast<size_t>(seq)], 0)) {
          const int h = kvh * g + (k++ % g);
          std::vector<uint16_t> row(static_cast<size_t>(sp.d));
          for (int j = 0; j < sp.d; ++j)
            row[static_cast<size_t>(j)] =
                FloatToBf16(Bf16ToFloat(q[static_cast<size_t>(last_tok * q_stride + h * sp.d + j)]) / sp.q_scale);
          if (!PlantKey(&pool, seq, pos, kvh, row.data())) return false;
        }
      }
    }
  }
  std::vector<int32_t> tiles;
  if (!Ok(BuildPrefillTiles(sp.q_lens, PrefillTileTokens(variant, g), &tiles), "tiles")) return false;
  PrefillGeometry geo;
  const int max_ctx = *std::max_element(sp.ctx.begin(), sp.ctx.end());
  PrefillShape shape{s, t, sp.hq, sp.hkv, sp.d, max_ctx};
  shape.variant = variant;
  if (!Ok(ChoosePrefillGeometry(shape, static_cast<int>(tiles.size() / 2), c.num_sms, &geo), "geometry"))
    return false;
  DeviceBuffer dq, dout, dctx, dstart, dtiles, ws;
  const size_t out_elems = static_cast<size_t>(t) * sp.hq * sp.d;
  if (!dq.Alloc(q.size() * 2) || !dout.Alloc(out_elems * 2) || !dctx.Alloc(sp.ctx.size() * 4) ||
      !dstart.Alloc(q_start.size() * 4) || !dtiles.Alloc(tiles.size() * 4) || !ws.Alloc(geo.workspace_floats * 4) ||
      !dq.Upload(q) || !dctx.Upload(sp.ctx) || !dstart.Upload(q_start) || !dtiles.Upload(tiles) || !dout.Poison() ||
      !ws.Poison())
    return false;
  PrefillAttentionArgs a;
  a.q = dq.as<bf16>();
  a.q_stride = q_stride;
  a.out = dout.as<bf16>();
  a.kv = pool.view;
  a.block_tables = pool.table.as<int32_t>();
  a.block_table_stride = pool.max_blocks;
  a.q_start = dstart.as<int32_t>();
  a.context_lens = dctx.as<int32_t>();
  a.tiles = dtiles.as<int32_t>();
  a.tile_tokens = PrefillTileTokens(variant, g);
  a.num_q_heads = sp.hq;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(sp.d));
  a.geo = geo;
  a.workspace = geo.workspace_floats ? ws.as<float>() : nullptr;
  if (!Ok(PrefillAttention(a, c.stream), "PrefillAttention") || !Ok(cudaStreamSynchronize(c.stream), "prefill"))
    return false;
  std::vector<uint16_t> out;
  if (!dout.Download(&out, out_elems)) return false;
  // (sequence, row within sequence, head) triples to compare.
  std::vector<std::array<int, 3>> picks;
  for (int seq = 0; seq < s; ++seq)
    for (int i = 0; i < sp.q_lens[static_cast<size_t>(seq)]; ++i)
      for (int h = 0; h < sp.hq; ++h)
        if (sp.samples == 0 || i == sp.q_lens[static_cast<size_t>(seq)] - 1 || i == 0 ||
            rng() % static_cast<uint64_t>(std::max<int64_t>(1, static_cast<int64_t>(t) * sp.hq / sp.samples)) == 0)
          picks.push_back({seq, i, h});
  const bool q8 = variant == PrefillVariant::kV2Fp8Qk;
  std::vector<double> ref(picks.size() * static_cast<size_t>(sp.d)), ref_exact(q8 ? ref.size() : 0);
  std::vector<float> got(ref.size());
  ref::ParallelFor(static_cast<int64_t>(picks.size()), [&](int64_t k) {
    const auto [seq, i, h] = picks[static_cast<size_t>(k)];
    const int64_t tok = q_start[static_cast<size_t>(seq)] + i;
    std::vector<float> qf(static_cast<size_t>(sp.d));
    for (int j = 0; j < sp.d; ++j) qf[static_cast<size_t>(j)] = Bf16ToFloat(q[static_cast<size_t>(tok * q_stride + h * sp.d + j)]);
    const int visible = sp.ctx[static_cast<size_t>(seq)] - sp.q_lens[static_cast<size_t>(seq)] + i + 1;
    const int32_t* row_table = &pool.table_host[static_cast<size_t>(seq) * pool.max_blocks];
    const double scale = 1.0 / std::sqrt(static_cast<double>(sp.d));
    if (q8) {
      ref::AttendOne(pool.host, row_table, visible, h / g, qf.data(), scale, &ref_exact[static_cast<size_t>(k) * sp.d]);
      QuantizeQRow(qf);
    }
    ref::AttendOne(pool.host, row_table, visible, h / g, qf.data(), scale, &ref[static_cast<size_t>(k) * sp.d]);
    for (int j = 0; j < sp.d; ++j)
      got[static_cast<size_t>(k) * sp.d + j] = Bf16ToFloat(out[static_cast<size_t>((tok * sp.hq + h) * sp.d + j)]);
  });
  bool all_written = true;
  for (uint16_t x : out) all_written &= !std::isnan(Bf16ToFloat(x));
  const double err = ref::RelError(got, ref);
  const double ms = TimeMs(c.stream, 2, 10, [&] { return PrefillAttention(a, c.stream).ok(); });
  double flops = 0;
  for (int seq = 0; seq < s; ++seq)
    for (int i = 0; i < sp.q_lens[static_cast<size_t>(seq)]; ++i)
      flops += 4.0 * sp.d * sp.hq * (sp.ctx[static_cast<size_t>(seq)] - sp.q_lens[static_cast<size_t>(seq)] + i + 1);
  std::string size = "q=" + std::to_string(t) + " ctx<=" + std::to_string(max_ctx) + " " + std::to_string(sp.hq) +
                     "/" + std::to_string(sp.hkv) + "x" + std::to_string(sp.d);
  const bool pass = err <= 1e-2 && all_written && ms > 0;
  std::string note = std::string(VariantName(variant)) + " splits=" + std::to_string(geo.splits) +
                     " rows=" + std::to_string(picks.size()) + (all_written ? "" : " UNWRITTEN OUTPUT");
  if (variant != PrefillVariant::kV1 && *ms_out > 0 && ms > 0) {  // *ms_out: the time to compare with
    char speedup[48];
    std::snprintf(speedup, sizeof(speedup), " %.2fx %s", *ms_out / ms, variant == PrefillVariant::kV2 ? "v1" : "v2");
    note += speedup;
  }
  if (q8) {
    char cost[64];
    std::snprintf(cost, sizeof(cost), " err vs unquantized q %.2e", ref::RelError(got, ref_exact));
    note += cost;
  }
  const std::string tag = variant == PrefillVariant::kV1 ? "" : std::string(" [") + VariantName(variant) + "]";
  c.rows->push_back({sp.name + tag, size, err, 1e-2, pass, ms,
                     flops / ms / 1e9, "TFLOP/s", c.gemm_tflops, note});
  *passed = pass;
  *ms_out = ms;
  return true;
}

std::vector<int> RandomCtx(std::mt19937_64& rng, int n, int lo, int hi) {
  std::vector<int> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
  return v;
}

}  // namespace

bool CheckDecodeAttention(CheckContext& c) {
  auto rng = Rng(c, 99);
  const int big = c.quick ? 8 : 64, long_ctx = c.quick ? 20000 : 100000;
  const KvDtype bf = KvDtype::kBf16;
  auto small = RandomCtx(rng, 16, 1, 2000);
  small[0] = 1;
  small[1] = 17;
  const KvDtype fp8 = KvDtype::kFp8E4M3, f16 = KvDtype::kF16;
  // Contexts of the cases before "decode attn f16" are drawn in the order of earlier runs, so a
  // seed gives them the inputs it gave then. Every case compares every sequence and head.
  std::vector<DecodeSpec> specs = {
      {"decode attn bf16", 32, 8, 128, RandomCtx(rng, big, 3584, 4096), bf},
      {"decode attn bf16 split-K", 32, 8, 128, {long_ctx}, bf},
      {"decode attn fp8", 32, 8, 128, RandomCtx(rng, big, 3584, 4096), fp8},
      {"decode attn bf16 G=3 D=64", 9, 3, 64, small, bf, 64},
      {"decode attn bf16 G=8", 64, 8, 128, RandomCtx(rng, 8, 1000, 2048), bf, 3 * 128},
      // The engine's cache type (CudaBackend decodes on f16).
      {"decode attn f16", 32, 8, 128, RandomCtx(rng, 8, 1000, 2048), f16},
  };
  // The remaining variants (kernel instantiations) at D = 64; the bundled model's shape (9/3x64).
  specs.push_back({"decode attn fp8 D=64", 9, 3, 64, RandomCtx(rng, 16, 1, 2000), fp8});
  specs.push_back({"decode attn f16 D=64", 9, 3, 64, RandomCtx(rng, 16, 1, 2000), f16, 64});
  specs.push_back({"decode attn bf16 G=8 D=64", 32, 4, 64, RandomCtx(rng, 8, 1000, 2048), bf});
  // Peaked softmax: q x 16-32 and keys equal to a head's q direction planted at the last key, the
  // last block's first key and the last split's first key. Contexts end mid-block.
  auto mid_block = [&](int n, int lo, int hi) {
    auto v = RandomCtx(rng, n, lo, hi);
    for (auto& x : v) x = x / kBlockTokens * kBlockTokens + 1 + static_cast<int>(rng() % (kBlockTokens - 1));
    return v;
  };
  specs.push_back({"decode attn bf16 peaked", 32, 8, 128, mid_block(big, 3584, 4096), bf, 0, 32.0f, true});
  specs.push_back({"decode attn bf16 split-K peaked", 32, 8, 128, mid_block(1, long_ctx - 64, long_ctx), bf, 0, 16.0f,
                   true});
  specs.push_back({"decode attn bf16 G=3 D=64 peaked", 9, 3, 64, mid_block(16, 17, 2000), bf, 0, 32.0f, true});
  // A plan made for a third of the longest context: the last split must run to the end.
  specs.push_back({"decode attn bf16 short plan", 32, 8, 128, mid_block(2, 20000, 30000), bf, 0, 16.0f, true, 3});
  // v1 first for every case (its rows survive a v2 fault), then v2 on the same inputs.
  std::vector<double> v1_ms(specs.size(), 0.0);
  std::vector<std::vector<uint16_t>> v1_out(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    bool passed = false;
    if (!RunDecode(c, specs[i], DecodeVariant::kV1, &passed, &v1_ms[i], &v1_out[i])) return false;
  }
  bool all_v2 = true;
  for (size_t i = 0; i < specs.size(); ++i) {
    bool passed = false;
    double ms = v1_ms[i];
    if (!RunDecode(c, specs[i], DecodeVariant::kV2, &passed, &ms, &v1_out[i])) return false;
    all_v2 &= passed;
  }
  std::printf("decode v2: %s\n", all_v2 ? "every case matches the reference" : "FAILED at least one case");
  return true;
}

namespace {

// The prefill cases, v1 to v3 alike.
std::vector<PrefillSpec> PrefillSpecs(const CheckContext& c) {
  const int chunk = c.quick ? 2048 : 8192, prefix_ctx = c.quick ? 16384 : 65536, long_ctx = c.quick ? 20000 : 100000;
  const KvDtype bf = KvDtype::kBf16;
  return {
      {"prefill attn bf16 varlen", 32, 8, 128, {300, 200, 1, 64}, {300, 1000, 77, 64}, bf, 0},
      {"prefill attn fp8 varlen", 32, 8, 128, {300, 200, 1, 64}, {300, 1000, 77, 64}, KvDtype::kFp8E4M3, 0},
      {"prefill attn f16 varlen", 32, 8, 128, {300, 200, 1, 64}, {300, 1000, 77, 64}, KvDtype::kF16, 0},
      {"prefill attn bf16 G=3 D=64", 9, 3, 64, {130, 50}, {130, 500}, bf, 0},
      {"prefill attn fp8 G=3 D=64", 9, 3, 64, {130, 50}, {130, 500}, KvDtype::kFp8E4M3, 0},
      {"prefill attn bf16 G=8 D=64", 16, 2, 64, {100, 37}, {100, 700}, bf, 0},
      {"prefill attn bf16 G=1", 4, 4, 128, {200, 130}, {200, 900}, bf, 0},
      {"prefill attn chunk", 32, 8, 128, {chunk}, {chunk}, bf, 64},
      {"prefill attn chunk+prefix", 32, 8, 128, {chunk}, {prefix_ctx}, bf, 64},
      {"prefill attn warm tail (split)", 32, 8, 128, {16}, {long_ctx}, bf, 32},
      // v2's 16-token tiles (G = 8, D = 128), and peaked softmax (q x 16-32, keys aligned with the
      // last row's q planted at the last key and the last block's first key; contexts mid-block).
      {"prefill attn bf16 G=8 D=128", 32, 4, 128, {200, 37}, {200, 900}, bf, 0},
      {"prefill attn bf16 peaked", 32, 8, 128, {300, 200, 1, 64}, {301, 1003, 77, 69}, bf, 0, 32.0f, true},
      {"prefill attn bf16 G=3 D=64 peaked", 9, 3, 64, {130, 50}, {133, 509}, bf, 0, 16.0f, true},
      {"prefill attn warm tail peaked", 32, 8, 128, {16}, {long_ctx - 7}, bf, 32, 16.0f, true},
      // The cold chunk on an FP8 cache: v2 against kV2Fp8Qk (below) at the size that matters.
      {"prefill attn fp8 chunk", 32, 8, 128, {chunk}, {chunk}, KvDtype::kFp8E4M3, 64},
      // ... and on the engine's cache type, f16 (v3's f16 wgmma at the size that matters).
      {"prefill attn f16 chunk", 32, 8, 128, {chunk}, {chunk}, KvDtype::kF16, 64},
  };
}

}  // namespace

bool CheckPrefillAttention(CheckContext& c) {
  const std::vector<PrefillSpec> specs = PrefillSpecs(c);
  // v1 first for every case (its rows survive a v2 fault), then v2 on the same inputs.
  std::vector<double> v1_ms(specs.size(), 0.0);
  for (size_t i = 0; i < specs.size(); ++i) {
    bool passed = false;
    if (!RunPrefill(c, specs[i], PrefillVariant::kV1, &passed, &v1_ms[i])) return false;
  }
  c.prefill_v2_passed = false;
  bool all_v2 = true;
  std::vector<double> v2_ms(specs.size(), 0.0);
  for (size_t i = 0; i < specs.size(); ++i) {
    bool passed = false;
    v2_ms[i] = v1_ms[i];
    if (!RunPrefill(c, specs[i], PrefillVariant::kV2, &passed, &v2_ms[i])) return false;
    all_v2 &= passed;
  }
  c.prefill_v2_passed = all_v2;
  std::printf("prefill v2: %s\n", all_v2 ? "every case matches the reference" : "FAILED at least one case");
  std::fflush(stdout);
  // FP8 Q K^T (kV2Fp8Qk) on every FP8 case, timed against v2 on the same inputs.
  bool all_q8 = true;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].dtype != KvDtype::kFp8E4M3) continue;
    bool passed = false;
    double ms = v2_ms[i];
    if (!RunPrefill(c, specs[i], PrefillVariant::kV2Fp8Qk, &passed, &ms)) return false;
    all_q8 &= passed;
  }
  std::printf("prefill v2 fp8 Q.K: %s\n", all_q8 ? "every case matches its reference" : "FAILED at least one case");
  c.prefill_v2_ms = v2_ms;
  return true;
}

bool CheckPrefillAttentionV3(CheckContext& c) {
  const std::vector<PrefillSpec> specs = PrefillSpecs(c);
  bool all_v3 = true;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].dtype == KvDtype::kFp8E4M3) continue;
    bool passed = false;
    double ms = i < c.prefill_v2_ms.size() ? c.prefill_v2_ms[i] : 0.0;
    if (!RunPrefill(c, specs[i], PrefillVariant::kV3, &passed, &ms)) return false;
    all_v3 &= passed;
  }
  std::printf("prefill v3: %s\n", all_v3 ? "every case matches the reference" : "FAILED at least one case");
  return true;
}

}  // namespace kvgate::cuda::bench
