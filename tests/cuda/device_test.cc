// Tests of the CUDA library that need its runtime: argument checks of the launchers and the
// no-device error run on any machine; kernel smoke tests GTEST_SKIP without a GPU (the full
// checks are kvgate_cuda_checks, run by kernels/bench/run_device_checks.sh).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/bench/reference.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/status.h"
#include "tests/cuda/have_device.h"

namespace kvgate::cuda {
namespace {

TEST(CudaDeviceTest, NoDeviceIsAClearError) {
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present";
  const CudaStatus st = RequireDevice();
  EXPECT_EQ(st.kind, CudaStatusKind::kNoDevice);
  const Status s = ToStatus(st);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(s.error().message, "no CUDA device found");
  std::unique_ptr<GemmBf16> gemm;
  EXPECT_EQ(GemmBf16::Create(1 << 20, &gemm).kind, CudaStatusKind::kNoDevice);
  EXPECT_EQ(gemm, nullptr);
}

TEST(CudaDeviceTest, LaunchersRejectBadArgumentsBeforeLaunching) {
  DecodeAttentionArgs d;
  EXPECT_EQ(DecodeAttention(d, nullptr).kind, CudaStatusKind::kInvalidArgument);  // null cache
  alignas(16) static char fake[64];
  d.kv = {fake, fake, nullptr, nullptr, 1, 8, 128, KvDtype::kBf16};
  d.num_q_heads = 30;  // not a multiple of 8
  EXPECT_EQ(DecodeAttention(d, nullptr).kind, CudaStatusKind::kInvalidArgument);
  d.num_q_heads = 32;
  d.q = reinterpret_cast<const bf16*>(fake);
  d.out = reinterpret_cast<bf16*>(fake);
  d.block_tables = reinterpret_cast<const int32_t*>(fake);
  d.context_lens = reinterpret_cast<const int32_t*>(fake);
  d.q_stride = 32 * 128;
  d.geo.grid_x = 4;  // geometry for another cache
  EXPECT_EQ(DecodeAttention(d, nullptr).kind, CudaStatusKind::kInvalidArgument);
  d.kv.dtype = KvDtype::kFp8E4M3;  // FP8 without scales
  EXPECT_EQ(DecodeAttention(d, nullptr).kind, CudaStatusKind::kInvalidArgument);
  const Status s = ToStatus(DecodeAttention(d, nullptr));
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);

  PrefillAttentionArgs p;
  EXPECT_EQ(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  // Prefill v2: its geometry must be a v2 one, and q must suit 16-byte cp.async rows.
  p.kv = {fake, fake, nullptr, nullptr, 1, 8, 128, KvDtype::kBf16};
  p.num_q_heads = 32;
  p.q = reinterpret_cast<const bf16*>(fake);
  p.out = reinterpret_cast<bf16*>(fake);
  p.block_tables = p.q_start = p.context_lens = p.tiles = reinterpret_cast<const int32_t*>(fake);
  p.q_stride = 32 * 128;
  PrefillShape shape{1, 16, 32, 8, 128, 16};
  shape.variant = PrefillVariant::kV2;
  ASSERT_TRUE(ChoosePrefillGeometry(shape, 1, 132, &p.geo).ok());
  p.tile_tokens = PrefillTileTokens(PrefillVariant::kV1, 4);  // v1's 64-token tiles, v2's geometry
  EXPECT_EQ(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  p.tile_tokens = p.geo.tile_tokens;
  p.geo.grid_x = 32;  // v1's grid over query heads
  EXPECT_EQ(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  ASSERT_TRUE(ChoosePrefillGeometry(shape, 1, 132, &p.geo).ok());
  p.geo.tile_tokens = kPrefillQTile;  // tiles of v1's size
  EXPECT_EQ(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  ASSERT_TRUE(ChoosePrefillGeometry(shape, 1, 132, &p.geo).ok());
  p.q_stride = 32 * 128 + 2;  // even, enough for v1, not whole 16-byte rows
  EXPECT_EQ(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  p.q_stride = 32 * 128;
  p.q = reinterpret_cast<const bf16*>(fake + 2);
  EXPECT_EQ(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  // FP8 Q K^T multiplies the cache's codes: a bf16 cache is refused before anything launches.
  shape.variant = PrefillVariant::kV2Fp8Qk;
  ASSERT_TRUE(ChoosePrefillGeometry(shape, 1, 132, &p.geo).ok());
  p.tile_tokens = p.geo.tile_tokens;
  p.q = reinterpret_cast<const bf16*>(fake);
  EXPECT_EQ(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  EXPECT_STREQ(PrefillAttention(p, nullptr).what, "prefill FP8 Q.K needs an FP8 cache");
  // v3 reads 16-bit caches through TMA: an FP8 cache is refused, a v2 CTA size is not v3's.
  shape.variant = PrefillVariant::kV3;
  ASSERT_TRUE(ChoosePrefillGeometry(shape, 1, 132, &p.geo).ok());
  EXPECT_EQ(p.geo.threads, kPrefillV3Threads);
  p.kv.dtype = KvDtype::kFp8E4M3;
  p.kv.k_scale = p.kv.v_scale = reinterpret_cast<float*>(fake);
  EXPECT_STREQ(PrefillAttention(p, nullptr).what, "prefill v3 reads a bf16 or f16 cache");
  p.kv = {fake, fake, nullptr, nullptr, 1, 8, 128, KvDtype::kBf16};
  p.geo.threads = kPrefillV2Threads;
  EXPECT_EQ(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  p.q = reinterpret_cast<const bf16*>(fake + 2);
  // v1 with q at an odd bf16 element: its 32-bit Q loads would fault, so it is refused too; the
  // same v1 arguments with q aligned pass the checks (and then fail only at the launch, no GPU).
  shape.variant = PrefillVariant::kV1;
  ASSERT_TRUE(ChoosePrefillGeometry(shape, 1, 132, &p.geo).ok());
  p.tile_tokens = p.geo.tile_tokens;
  p.q = reinterpret_cast<const bf16*>(fake + 2);
  EXPECT_EQ(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  p.q = reinterpret_cast<const bf16*>(fake);
  p.out = reinterpret_cast<bf16*>(fake + 2);
  EXPECT_EQ(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  p.out = reinterpret_cast<bf16*>(fake);
  if (!HaveDevice()) {
    EXPECT_NE(PrefillAttention(p, nullptr).kind, CudaStatusKind::kInvalidArgument);
  }
  auto* b = reinterpret_cast<bf16*>(fake);
  EXPECT_EQ(RmsNorm(b, 12, b, b, 12, 1, 12, 1e-6f, nullptr).kind, CudaStatusKind::kInvalidArgument);
  EXPECT_EQ(SiluMul(b, b, 1, 12, nullptr).kind, CudaStatusKind::kInvalidArgument);
  EXPECT_EQ(DequantQ4_1(reinterpret_cast<uint8_t*>(fake), 33, b, nullptr).kind, CudaStatusKind::kInvalidArgument);
  EXPECT_EQ(RopeInterleaved(b, 4, 4, nullptr, 0, 0, 3, nullptr, 1, 1e4f, nullptr).kind,
            CudaStatusKind::kInvalidArgument);
  CacheWriteArgs c;
  c.k = c.v = b;
  c.slots = reinterpret_cast<const int32_t*>(fake);
  c.num_tokens = 1;
  c.kv = {fake, fake, reinterpret_cast<float*>(fake), reinterpret_cast<float*>(fake), 1, 1, 8, KvDtype::kFp8E4M3};
  c.k_stride = c.v_stride = 8;
  EXPECT_EQ(ReshapeAndCache(c, nullptr).kind, CudaStatusKind::kInvalidArgument);  // FP8 needs segments
}

// The alignment GemmBf16 tells cuBLASLt (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*) and keys its plans by.
TEST(GemmAlignmentTest, LargestPowerOfTwoOfTheAddressCappedAt256) {
  alignas(512) static char buf[4096];
  EXPECT_EQ(GemmPointerAlignment(buf), 256u);
  EXPECT_EQ(GemmPointerAlignment(buf + 256), 256u);
  EXPECT_EQ(GemmPointerAlignment(buf + 128), 128u);
  EXPECT_EQ(GemmPointerAlignment(buf + 2), 2u);
  EXPECT_EQ(GemmPointerAlignment(buf + 1), 1u);
  // The engine's activations: row t of a [T][576] bf16 buffer starts t * 1152 bytes in.
  EXPECT_EQ(GemmPointerAlignment(buf + 1152), 128u);
  EXPECT_EQ(GemmPointerAlignment(buf + 3 * 1152), 128u);
  EXPECT_EQ(GemmPointerAlignment(buf + 576), 64u);
}

// Small decode attention (GQA 4, split-K) against the CPU reference.
TEST(CudaDeviceTest, DecodeAttentionSmoke) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device found: run kernels/bench/run_device_checks.sh on a GPU machine";
  const int hq = 8, hkv = 2, d = 64, nb = 40;
  const std::vector<int32_t> ctx = {5, 600};
  std::vector<std::vector<int32_t>> blocks = {{39}, {}};
  for (int i = 0; i < 38; ++i) blocks[1].push_back(i);
  std::vector<int32_t> table;
  ASSERT_TRUE(BuildBlockTable(blocks, 38, &table).ok());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  ref::HostPagedKv kv;
  kv.num_blocks = nb;
  kv.num_kv_heads = hkv;
  kv.head_dim = d;
  for (int i = 0; i < nb * 16 * hkv * d; ++i) {
    kv.k16.push_back(FloatToBf16(u(rng)));
    kv.v16.push_back(FloatToBf16(u(rng)));
  }
  std::vector<uint16_t> q(2 * hq * d);
  for (auto& x : q) x = FloatToBf16(u(rng));
  DecodeGeometry geo;
  ASSERT_TRUE(ChooseDecodeGeometry({2, hq, hkv, d, 600}, 132, &geo).ok());
  ASSERT_GT(geo.splits, 1);
  void *dk, *dv, *dq, *dout, *dtab, *dctx, *ws;
  ASSERT_EQ(cudaMalloc(&dk, kv.k16.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dv, kv.v16.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dq, q.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, q.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dtab, table.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dctx, 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ws, geo.workspace_floats * 4), cudaSuccess);
  cudaMemcpy(dk, kv.k16.data(), kv.k16.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, kv.v16.data(), kv.v16.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dtab, table.data(), table.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dctx, ctx.data(), 8, cudaMemcpyHostToDevice);
  cudaMemset(dout, 0xff, q.size() * 2);
  DecodeAttentionArgs a;
  a.q = static_cast<bf16*>(dq);
  a.q_stride = hq * d;
  a.out = static_cast<bf16*>(dout);
  a.kv = {dk, dv, nullptr, nullptr, nb, hkv, d, KvDtype::kBf16};
  a.block_tables = static_cast<int32_t*>(dtab);
  a.block_table_stride = 38;
  a.context_lens = static_cast<int32_t*>(dctx);
  a.num_q_heads = hq;
  a.softmax_scale = 0.125f;
  a.geo = geo;
  a.workspace = static_cast<float*>(ws);
  std::vector<double> want(q.size());
  for (int s = 0; s < 2; ++s)
    for (int h = 0; h < hq; ++h) {
      std::vector<float> qf(d);
      for (int i = 0; i < d; ++i) qf[i] = Bf16ToFloat(q[(s * hq + h) * d + i]);
      ref::AttendOne(kv, &table[s * 38], ctx[s], h / 4, qf.data(), 0.125, &want[(s * hq + h) * d]);
    }
  // v2 plans exactly as v1 (DecodeGeometryTest.V2PlansExactlyAsV1): only the variant changes.
  for (DecodeVariant variant : {DecodeVariant::kV1, DecodeVariant::kV2}) {
    a.geo.variant = variant;
    cudaMemset(dout, 0xff, q.size() * 2);
    ASSERT_TRUE(DecodeAttention(a, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> out(q.size());
    cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost);
    std::vector<float> got;
    for (uint16_t x : out) got.push_back(Bf16ToFloat(x));
    EXPECT_LT(ref::RelError(got, want), 1e-2) << (variant == DecodeVariant::kV2 ? "v2" : "v1");
  }
  for (void* p : {dk, dv, dq, dout, dtab, dctx, ws}) cudaFree(p);
}

}  // namespace
}  // namespace kvgate::cuda
