// CudaBackend (engine Backend interface). Without a GPU only the creation errors are checked; with
// one, attention (decode and prefill paths, f16 cache) and the Q8_0 matmul are compared with the
// CPU references, and so are mixed decode/prefill steps, the bf16 twins MatMul reads and the FP8
// MatMul (against the host emulation of its numerics).
#include "local_engine/cuda_backend.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bench/reference.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/gemm_emulation.h"
#include "tests/cuda/have_device.h"

namespace kvgate::cuda {
namespace {

uint16_t ToHalf(float f) {  // exact for the small values used here (multiples of 1/1024 in [-2, 2])
  for (uint32_t h = 0; h < 65536; ++h)
    if (HalfToFloat(static_cast<uint16_t>(h)) == f) return static_cast<uint16_t>(h);
  return 0x7e00;
}

// Values on a 1/1024 grid in [-1, 1): exact in f16.
float GridValue(std::mt19937& rng) {
  return static_cast<float>(static_cast<int>(rng() % 2048) - 1024) / 1024.0f;
}

// The GPU tests' setup: a backend and a random f16 paged cache of 12 blocks, 3 kv heads of 64,
// on the host (the reference's) and in backend memory; two sequences' block tables [2][4].
struct GpuCase {
  static constexpr int kBlocks = 12, kKvHeads = 3, kHeadDim = 64;
  std::mt19937 rng;
  std::unique_ptr<CudaBackend> backend;
  std::string error;
  ref::HostPagedKv kv;
  engine::DeviceBuffer k, v;
  engine::KvCacheLayer cache;
  const std::vector<int32_t> tables = {3, 7, 1, -1, 10, 0, 5, 2};

  explicit GpuCase(uint32_t seed, const CudaBackendOptions& options = {}) : rng(seed) {
    auto created = MakeCudaBackend(options);
    if (!created) {
      error = created.error().ToString();
      return;
    }
    backend = std::move(*created);
    kv.num_blocks = kBlocks;
    kv.num_kv_heads = kKvHeads;
    kv.head_dim = kHeadDim;
    kv.f16 = true;
    for (int i = 0; i < kBlocks * 16 * kKvHeads * kHeadDim; ++i) {
      kv.k16.push_back(ToHalf(val()));
      kv.v16.push_back(ToHalf(val()));
    }
    auto kb = backend->Allocate(kv.k16.size() * 2), vb = backend->Allocate(kv.v16.size() * 2);
    if (!kb || !vb) {
      error = "cannot allocate the cache";
      return;
    }
    k = *kb, v = *vb;
    cudaMemcpy(k.data(), kv.k16.data(), kv.k16.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(v.data(), kv.v16.data(), kv.v16.size() * 2, cudaMemcpyHostToDevice);
    cache = {static_cast<uint16_t*>(k.data()), static_cast<uint16_t*>(v.data()), kBlocks};
  }
  bool ok() const { return error.empty(); }
  float val() { return GridValue(rng); }
};

// The reference attention of every query row of a batch (9 heads over the case's 3 kv heads, scale
// 0.125): row r of sequence s sees the context up to its own position.
std::vector<double> ReferenceAttention(const GpuCase& g, std::span<const int32_t> tables,
                                       std::span<const int32_t> q_start, std::span<const int32_t> ctx,
                                       const std::vector<float>& q, int h, int d) {
  std::vector<double> want(q.size());
  for (size_t s = 0; s + 1 < q_start.size(); ++s)
    for (int row = q_start[s]; row < q_start[s + 1]; ++row)
      for (int hh = 0; hh < h; ++hh)
        ref::AttendOne(g.kv, &tables[s * 4], ctx[s] - (q_start[s + 1] - row) + 1, hh / 3,
                       &q[(static_cast<size_t>(row) * h + hh) * d], 0.125,
                       &want[(static_cast<size_t>(row) * h + hh) * d]);
  return want;
}

// A Q8_0 weight [n][k] (k % 32 == 0) of random codes, every block scale 2^-7.
std::vector<uint8_t> RandomQ8_0(std::mt19937& rng, int n, int k) {
  std::vector<uint8_t> w(static_cast<size_t>(n) * (k / 32) * 34);
  for (size_t b = 0; b < w.size() / 34; ++b) {
    const uint16_t dh = 0x2000;  // 2^-7
    std::memcpy(&w[b * 34], &dh, 2);
    for (int j = 0; j < 32; ++j) w[b * 34 + 2 + j] = static_cast<uint8_t>(rng());
  }
  return w;
}

TEST(CudaBackendTest, CreationWithoutDeviceIsAClearError) {
  EXPECT_EQ(KvCacheTokensForMemoryFraction(1.5, 1000).error().code, ErrorCode::kInvalidArgument);
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present";
  auto b = MakeCudaBackend();
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(b.error().message, "no CUDA device found");
  EXPECT_EQ(KvCacheTokensForMemoryFraction(0.5, 1000).error().code, ErrorCode::kUnavailable);
}

// The offload tier's host tier on cuda: AllocateHost is page-locked memory, and CopyBlocks moves
// whole blocks of two planes pool -> host slots and back (other slots, other blocks) in stream
// order, with no wait between the two copies; the host sees them after Synchronize.
TEST(CudaBackendTest, CopyBlocksMovesBlocksBetweenThePoolAndPinnedHostMemory) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device found: run on a GPU machine";
  auto created = MakeCudaBackend();
  ASSERT_TRUE(created.has_value()) << created.error().ToString();
  CudaBackend& be = **created;
  constexpr int64_t kPlane[] = {6144, 1536};  // an f16 block of 3 x 64 heads, and a smaller plane
  constexpr int kPool = 10, kSlots = 4;
  std::vector<engine::DeviceBuffer> pool, host;
  std::vector<engine::BlockPlane> pool_planes, host_planes;
  std::vector<std::vector<uint8_t>> want(2);
  for (int p = 0; p < 2; ++p) {
    auto d = be.Allocate(static_cast<size_t>(kPlane[p] * kPool));
    auto h = be.AllocateHost(static_cast<size_t>(kPlane[p] * kSlots));
    ASSERT_TRUE(d && h);
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, h->data()), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost);  // page-locked, not pageable
    want[p].resize(static_cast<size_t>(kPlane[p] * kPool));
    for (size_t i = 0; i < want[p].size(); ++i) want[p][i] = static_cast<uint8_t>((i * 7 + p * 13) & 0xff);
    cudaMemcpy(d->data(), want[p].data(), want[p].size(), cudaMemcpyHostToDevice);
    pool.push_back(*d), host.push_back(*h);
    pool_planes.push_back({static_cast<std::byte*>(d->data()), kPlane[p]});
    host_planes.push_back({static_cast<std::byte*>(h->data()), kPlane[p]});
  }
  const engine::BlockCopy out[] = {{3, 0}, {7, 2}};  // pool block -> host slot
  const engine::BlockCopy back[] = {{0, 8}, {2, 1}};  // host slot -> another pool block
  ASSERT_TRUE(be.CopyBlocks(pool_planes, host_planes, out));
  ASSERT_TRUE(be.CopyBlocks(host_planes, pool_planes, back));
  be.Synchronize();
  ASSERT_TRUE(be.status().has_value()) << be.status().error().ToString();
  for (int p = 0; p < 2; ++p) {
    const auto n = static_cast<size_t>(kPlane[p]);
    const auto* slots = static_cast<const uint8_t*>(host[p].data());
    EXPECT_EQ(0, std::memcmp(slots + 0 * n, want[p].data() + 3 * n, n)) << "plane " << p;
    EXPECT_EQ(0, std::memcmp(slots + 2 * n, want[p].data() + 7 * n, n)) << "plane " << p;
    std::vector<uint8_t> got(want[p].size());
    be.CopyToHost(pool[p].data(), got.data(), got.size());
    EXPECT_EQ(0, std::memcmp(got.data() + 8 * n, want[p].data() + 3 * n, n)) << "plane " << p;
    EXPECT_EQ(0, std::memcmp(got.data() + 1 * n, want[p].data() + 7 * n, n)) << "plane " << p;
    EXPECT_EQ(0, std::memcmp(got.data() + 3 * n, want[p].data() + 3 * n, n)) << "source kept";
  }
  // A misaligned plane is an error in status(), not a silent partial copy.
  const engine::BlockPlane odd[] = {{pool_planes[0].base + 8, kPlane[0]}};
  be.CopyBlocks(odd, {host_planes.data(), 1}, out);
  EXPECT_FALSE(be.status().has_value());
}

TEST(CudaBackendTest, AttentionAndMatMulMatchReferences) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device found: run on a GPU machine";
  GpuCase g(4);
  ASSERT_TRUE(g.ok()) << g.error;
  CudaBackend& be = *g.backend;
  const int h = 9, hkv = GpuCase::kKvHeads, d = GpuCase::kHeadDim;
  for (const bool decode : {true, false}) {
    const std::vector<int32_t> q_start = decode ? std::vector<int32_t>{0, 1, 2} : std::vector<int32_t>{0, 20, 61};
    const std::vector<int32_t> ctx = decode ? std::vector<int32_t>{40, 64} : std::vector<int32_t>{45, 41};
    const int t = q_start.back();
    std::vector<int32_t> ids(static_cast<size_t>(t), 0), pos(static_cast<size_t>(t), 0);
    std::vector<int64_t> slots(static_cast<size_t>(t), -1);
    engine::BatchMetadata batch{ids, pos, slots, q_start, ctx, g.tables, 4, 16};
    std::vector<float> q(static_cast<size_t>(t) * h * d);
    for (auto& x : q) x = g.val();
    auto dq = be.Allocate(q.size() * 4), dout = be.Allocate(q.size() * 4);
    ASSERT_TRUE(dq && dout);
    cudaMemcpy(dq->data(), q.data(), q.size() * 4, cudaMemcpyHostToDevice);
    be.Attention(dq->f32(), g.cache, {h, hkv, d, 0.125f}, batch, dout->f32());
    std::vector<float> got(q.size());
    be.CopyToHost(dout->data(), got.data(), got.size() * 4);
    ASSERT_TRUE(be.status().has_value()) << be.status().error().ToString();
    const std::vector<double> want = ReferenceAttention(g, g.tables, q_start, ctx, q, h, d);
    EXPECT_LT(ref::RelError(got, want), 1e-2) << (decode ? "decode" : "prefill");
  }
  // MatMul against a Q8_0 weight [N = 64][K = 64]: the backend uses bf16 activations and weights.
  const int n = 64, k = 64, tt = 3;
  const std::vector<uint8_t> w = RandomQ8_0(g.rng, n, k);
  auto dw = be.UploadWeights(w.data(), w.size());
  ASSERT_TRUE(dw.has_value());
  const engine::WeightMatrix wm{engine::GgmlType::kQ8_0, *dw, n, k};
  std::vector<float> x(static_cast<size_t>(tt) * k);
  for (auto& v : x) v = g.val();
  auto dx = be.Allocate(x.size() * 4), dy = be.Allocate(static_cast<size_t>(tt) * n * 4);
  ASSERT_TRUE(dx && dy);
  cudaMemcpy(dx->data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice);
  const engine::MatMulOutput mo{&wm, dy->f32()};
  be.MatMul(dx->f32(), tt, k, std::span(&mo, 1));
  std::vector<float> y(static_cast<size_t>(tt) * n);
  be.CopyToHost(dy->data(), y.data(), y.size() * 4);
  std::vector<double> yref(y.size());
  for (int r = 0; r < tt; ++r)
    for (int c = 0; c < n; ++c) {
      double acc = 0;
      for (int j = 0; j < k; ++j)
        acc += x[static_cast<size_t>(r) * k + j] * static_cast<int8_t>(w[(static_cast<size_t>(c) * 2 + j / 32) * 34 + 2 + j % 32]) / 128.0;
      yref[static_cast<size_t>(r) * n + c] = acc;
    }
  EXPECT_LT(ref::RelError(y, yref), 1e-2);
  EXPECT_TRUE(be.status().has_value());
}

// The v2 attention kernels through the backend (CudaBackendOptions), outside a step and in steps:
// prefill v2's tiles are 128 / G = 42 tokens for this G = 3, and sequence 0's 50 query rows need
// two of them (v1's 64-token tiles, or 128-token ones, would be one tile: rows 42..49 unwritten).
// The first step's staged tiles are of the previous prefill's size, the second's are right.
// Prefill v3 (wgmma + TMA) the same way, on the backend's f16 cache.
TEST(CudaBackendTest, V2KernelsMatchTheReferenceInAndOutOfSteps) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device found: run on a GPU machine";
  for (const PrefillVariant prefill : {PrefillVariant::kV2, PrefillVariant::kV3}) {
    SCOPED_TRACE(prefill == PrefillVariant::kV3 ? "prefill v3" : "prefill v2");
    CudaBackendOptions options;
    options.prefill_variant = prefill;
    options.decode_variant = DecodeVariant::kV2;
    GpuCase g(5, options);
    ASSERT_TRUE(g.ok()) << g.error;
    CudaBackend& be = *g.backend;
    const int h = 9, hkv = GpuCase::kKvHeads, d = GpuCase::kHeadDim;
    for (const int mode : {0, 1, 2, 3}) {  // 0: prefill, no step; 1, 2: prefill steps; 3: decode step
      const bool decode = mode == 3;
      const std::vector<int32_t> q_start = decode ? std::vector<int32_t>{0, 1, 2} : std::vector<int32_t>{0, 50, 61};
      const std::vector<int32_t> ctx = decode ? std::vector<int32_t>{40, 63} : std::vector<int32_t>{60, 41};
      const int t = q_start.back();
      std::vector<int32_t> ids(static_cast<size_t>(t), 0), pos(static_cast<size_t>(t), 0);
      std::vector<int64_t> slots(static_cast<size_t>(t), -1);
      engine::BatchMetadata batch{ids, pos, slots, q_start, ctx, g.tables, 4, 16};
      std::vector<float> q(static_cast<size_t>(t) * h * d);
      for (auto& x : q) x = g.val();
      auto dq = be.Allocate(q.size() * 4), dout = be.Allocate(q.size() * 4);
      ASSERT_TRUE(dq && dout);
      cudaMemcpy(dq->data(), q.data(), q.size() * 4, cudaMemcpyHostToDevice);
      cudaMemset(dout->data(), 0xff, q.size() * 4);  // NaN: an unwritten row fails the comparison
      if (mode > 0) {
        EXPECT_EQ(be.BeginStep(batch, {}, engine::StepKey{t, t, 4, 1, false}), engine::StepMode::kEager);
      }
      be.Attention(dq->f32(), g.cache, {h, hkv, d, 0.125f}, batch, dout->f32());
      if (mode > 0) {
        EXPECT_TRUE(be.EndStep());
      }
      std::vector<float> got(q.size());
      be.CopyToHost(dout->data(), got.data(), got.size() * 4);
      ASSERT_TRUE(be.status().has_value()) << be.status().error().ToString();
      const std::vector<double> want = ReferenceAttention(g, g.tables, q_start, ctx, q, h, d);
      EXPECT_LT(ref::RelError(got, want), 1e-2) << "mode " << mode;
    }
  }
}

// Whole decode steps through BeginStep/EndStep with StepKey::graph: eager, then captured, then
// replayed with new query values and new context lengths in the same staged arrays; each result
// against the reference. A new activation generation drops the graphs and records again.
TEST(CudaBackendTest, DecodeStepsAreCapturedAndReplayed) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device found: run on a GPU machine";
  GpuCase g(7);
  ASSERT_TRUE(g.ok()) << g.error;
  CudaBackend& be = *g.backend;
  const int h = 9, hkv = GpuCase::kKvHeads, d = GpuCase::kHeadDim;
  const std::vector<int32_t> q_start{0, 1, 2}, ids{0, 0};
  const std::vector<int64_t> slots{-1, -1};
  std::vector<int32_t> ctx(2), pos(2);
  const engine::BatchMetadata batch{ids, pos, slots, q_start, ctx, g.tables, 4, 16};
  std::vector<float> q(static_cast<size_t>(2) * h * d);
  auto dq = be.Allocate(q.size() * 4), dout = be.Allocate(q.size() * 4);
  ASSERT_TRUE(dq && dout);
  engine::StepKey key{2, 2, 4, 1, true};
  const engine::StepMode want[] = {engine::StepMode::kEager, engine::StepMode::kCapture,
                                   engine::StepMode::kReplayed, engine::StepMode::kReplayed,
                                   engine::StepMode::kEager, engine::StepMode::kCapture,
                                   engine::StepMode::kReplayed};
  for (int step = 0; step < 7; ++step) {
    if (step == 4) key.activations = 2;  // the runner's buffers moved
    ctx = {40 - 3 * step, 64 - 5 * step};  // 1..4 blocks: every split plan keeps its bound (64)
    for (int s = 0; s < 2; ++s) pos[s] = ctx[s] - 1;
    for (auto& x : q) x = g.val();
    cudaMemcpy(dq->data(), q.data(), q.size() * 4, cudaMemcpyHostToDevice);
    const engine::StepMode mode = be.BeginStep(batch, {}, key);
    EXPECT_EQ(mode, want[step]) << "step " << step;
    if (mode != engine::StepMode::kReplayed) be.Attention(dq->f32(), g.cache, {h, hkv, d, 0.125f}, batch, dout->f32());
    EXPECT_TRUE(be.EndStep());
    std::vector<float> got(q.size());
    be.CopyToHost(dout->data(), got.data(), got.size() * 4);
    ASSERT_TRUE(be.status().has_value()) << be.status().error().ToString();
    EXPECT_EQ(be.cached_graphs(), (step == 4 ? 0u : step >= 1 ? 1u : 0u)) << "step " << step;
    std::vector<double> ref_out(q.size());
    for (int s = 0; s < 2; ++s)
      for (int hh = 0; hh < h; ++hh)
        ref::AttendOne(g.kv, &g.tables[s * 4], ctx[s], hh / 3, &q[(static_cast<size_t>(s) * h + hh) * d], 0.125,
                       &ref_out[(static_cast<size_t>(s) * h + hh) * d]);
    EXPECT_LT(ref::RelError(got, ref_out), 1e-2) << "step " << step;
  }
}

// A mixed step: two decode sequences lead the batch, a 20-token prefill follows. With
// mixed_decode_rows the decode rows go through the decode kernel and the prefill's through tiles
// (two launches into one output); without it every row goes through tiles. Both, in and out of a
// step, against the reference, with the output poisoned first so an unwritten row fails.
TEST(CudaBackendTest, MixedStepsSplitDecodeRowsFromPrefillTiles) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device found: run on a GPU machine";
  for (const bool apart : {true, false}) {
    CudaBackendOptions options;
    options.mixed_decode_rows = apart;
    GpuCase g(6, options);
    ASSERT_TRUE(g.ok()) << g.error;
    CudaBackend& be = *g.backend;
    const int h = 9, hkv = GpuCase::kKvHeads, d = GpuCase::kHeadDim;
    std::vector<int32_t> tables = g.tables;
    tables.insert(tables.end(), {4, 6, 8, 9});
    const std::vector<int32_t> q_start = {0, 1, 2, 22}, ctx = {40, 63, 50};
    const int t = q_start.back();
    std::vector<int32_t> ids(static_cast<size_t>(t), 0), pos(static_cast<size_t>(t), 0);
    std::vector<int64_t> slots(static_cast<size_t>(t), -1);
    engine::BatchMetadata batch{ids, pos, slots, q_start, ctx, tables, 4, 16};
    for (const bool in_step : {false, true}) {
      std::vector<float> q(static_cast<size_t>(t) * h * d);
      for (auto& x : q) x = g.val();
      auto dq = be.Allocate(q.size() * 4), dout = be.Allocate(q.size() * 4);
      ASSERT_TRUE(dq && dout);
      cudaMemcpy(dq->data(), q.data(), q.size() * 4, cudaMemcpyHostToDevice);
      cudaMemset(dout->data(), 0xff, q.size() * 4);
      if (in_step) {
        EXPECT_EQ(be.BeginStep(batch, {}, engine::StepKey{t, t, 4, 1, false}), engine::StepMode::kEager);
      }
      be.Attention(dq->f32(), g.cache, {h, hkv, d, 0.125f}, batch, dout->f32());
      if (in_step) {
        EXPECT_TRUE(be.EndStep());
      }
      std::vector<float> got(q.size());
      be.CopyToHost(dout->data(), got.data(), got.size() * 4);
      ASSERT_TRUE(be.status().has_value()) << be.status().error().ToString();
      const std::vector<double> want = ReferenceAttention(g, tables, q_start, ctx, q, h, d);
      EXPECT_LT(ref::RelError(got, want), 1e-2) << "apart " << apart << " in step " << in_step;
    }
  }
}

// A MatMul right after RMSNorm or SwiGLU reads the producer's bf16 twin; an Add in between breaks
// the twin, so that MatMul converts its f32 input. The twin is the conversion bit for bit, so the
// two products are identical.
TEST(CudaBackendTest, MatMulOnABf16TwinEqualsMatMulOnTheConvertedInput) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device found: run on a GPU machine";
  GpuCase g(7);
  ASSERT_TRUE(g.ok()) << g.error;
  CudaBackend& be = *g.backend;
  const int n = 64, k = 64, t = 5;
  const std::vector<uint8_t> w = RandomQ8_0(g.rng, n, k);
  auto dw = be.UploadWeights(w.data(), w.size());
  ASSERT_TRUE(dw.has_value());
  const engine::WeightMatrix wm{engine::GgmlType::kQ8_0, *dw, n, k};
  std::vector<float> x(static_cast<size_t>(t) * k), up(x.size()), norm_w(k);
  for (auto& v : x) v = g.val() * 3.1f;  // not exact in bf16: the rounding is exercised
  for (auto& v : up) v = g.val();
  for (auto& v : norm_w) v = 1.0f + g.val() / 7.0f;
  auto upload = [&](const std::vector<float>& host) {
    auto b = be.Allocate(host.size() * 4);
    if (b) cudaMemcpy(b->data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice);
    return b;
  };
  auto dx = upload(x), dup = upload(up), dw_norm = upload(norm_w), zero = upload(std::vector<float>(x.size(), 0.0f));
  auto act = be.Allocate(x.size() * 4), y_twin = be.Allocate(static_cast<size_t>(t) * n * 4),
       y_conv = be.Allocate(static_cast<size_t>(t) * n * 4);
  ASSERT_TRUE(dx && dup && dw_norm && zero && act && y_twin && y_conv);
  for (const bool swiglu : {false, true}) {
    auto produce = [&] {
      if (swiglu) {
        be.SwiGlu(dx->f32(), dup->f32(), t * k, act->f32());
      } else {
        be.RmsNorm(dx->f32(), dw_norm->f32(), t, k, 1e-5f, act->f32());
      }
    };
    const engine::MatMulOutput mo_twin{&wm, y_twin->f32()}, mo_conv{&wm, y_conv->f32()};
    produce();
    be.MatMul(act->f32(), t, k, std::span(&mo_twin, 1));
    produce();
    be.Add(act->f32(), zero->f32(), t * k);
    be.MatMul(act->f32(), t, k, std::span(&mo_conv, 1));
    std::vector<float> a(static_cast<size_t>(t) * n), b(a.size());
    be.CopyToHost(y_twin->data(), a.data(), a.size() * 4);
    be.CopyToHost(y_conv->data(), b.data(), b.size() * 4);
    ASSERT_TRUE(be.status().has_value()) << be.status().error().ToString();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << (swiglu ? "swiglu" : "rmsnorm");
  }
}

// fp8_gemm: the product is the host emulation's (E4M3 operands under per-tensor scales) up to
// accumulation rounding, far closer to it than the bf16 product is; an output width cuBLASLt FP8
// refuses (ldy = 90 f32 is not 16 bytes a row) runs in bf16 and equals the bf16 backend's.
TEST(CudaBackendTest, Fp8MatMulIsTheEmulatedFp8ProductAndFallsBackToBf16ForRefusedShapes) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device found: run on a GPU machine";
  CudaBackendOptions fp8_options;
  fp8_options.fp8_gemm = true;
  GpuCase g8(8, fp8_options), g16(8);
  ASSERT_TRUE(g8.ok() && g16.ok()) << g8.error << g16.error;
  const int k = 128, t = 5;
  std::vector<float> x(static_cast<size_t>(t) * k);
  for (auto& v : x) v = g8.val() * 3.1f;
  for (const int n : {96, 90}) {
    const std::vector<uint8_t> w = RandomQ8_0(g8.rng, n, k);
    std::vector<float> wf(static_cast<size_t>(n) * k);  // codes * 2^-7: exact in bf16
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c)
        wf[static_cast<size_t>(r) * k + c] = static_cast<int8_t>(w[(static_cast<size_t>(r) * (k / 32) + c / 32) * 34 + 2 + c % 32]) / 128.0f;
    std::vector<float> emu(static_cast<size_t>(t) * n);
    EmulatedGemmColumns(MakeGemmOperand(x.data(), t, k, GemmFormat::kFp8Tensor),
                        MakeGemmOperand(wf.data(), n, k, GemmFormat::kFp8Tensor), 0, n, emu.data(), n);
    auto product = [&](CudaBackend& be) {
      std::vector<float> y(static_cast<size_t>(t) * n, std::nanf(""));
      auto dw = be.UploadWeights(w.data(), w.size());
      auto dx = be.Allocate(x.size() * 4), dy = be.Allocate(y.size() * 4);
      if (!dw || !dx || !dy) return y;
      cudaMemcpy(dx->data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice);
      const engine::WeightMatrix wm{engine::GgmlType::kQ8_0, *dw, n, k};
      const engine::MatMulOutput mo{&wm, dy->f32()};
      be.MatMul(dx->f32(), t, k, std::span(&mo, 1));
      be.CopyToHost(dy->data(), y.data(), y.size() * 4);
      return y;
    };
    const std::vector<float> y8 = product(*g8.backend), y16 = product(*g16.backend);
    ASSERT_TRUE(g8.backend->status().has_value()) << g8.backend->status().error().ToString();
    ASSERT_TRUE(g16.backend->status().has_value()) << g16.backend->status().error().ToString();
    auto rel = [&](const std::vector<float>& y) {
      double num = 0, den = 0;
      for (size_t i = 0; i < y.size(); ++i) num += (y[i] - emu[i]) * (y[i] - emu[i]), den += double(emu[i]) * emu[i];
      return std::sqrt(num / den);
    };
    if (n == 90) {
      EXPECT_EQ(std::memcmp(y8.data(), y16.data(), y8.size() * 4), 0) << "n = 90 runs in bf16";
      continue;
    }
    EXPECT_LT(rel(y8), 1e-3) << "the FP8 product is the emulated one";
    EXPECT_GT(rel(y16), 10 * rel(y8)) << "and not the bf16 one";
  }
}

}  // namespace
}  // namespace kvgate::cuda
