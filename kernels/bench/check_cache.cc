// Device checks of the KV cache writes (bf16, FP8 with per-block scales) and the block copy
// (device -> pinned host -> device: the offload tier).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "kernels/bench/checks.h"
#include "kernels/bench/reference.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/kernels.h"

namespace kvgate::cuda::bench {
namespace {

double GBps(double bytes, double ms) { return ms > 0 ? bytes / ms / 1e6 : 0.0; }

}  // namespace

bool CheckCacheWriteBf16(CheckContext& c) {
  const int nb = 4096, hkv = 8, d = 128, t = c.quick ? 1024 : 8192, stride = 48 * d;
  const int64_t row = static_cast<int64_t>(hkv) * d;
  auto rng = Rng(c, 10);
  const auto qkv = RandomBf16(static_cast<size_t>(t) * stride, rng, 1.0f);
  std::vector<int32_t> all(static_cast<size_t>(nb) * kBlockTokens);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int32_t> slots(all.begin(), all.begin() + t);
  slots[3] = -1;  // a padding token: must not be written
  DeviceBuffer dqkv, dslots, kc, vc;
  const size_t cache_bytes = static_cast<size_t>(nb) * kBlockTokens * row * 2;
  if (!dqkv.Alloc(qkv.size() * 2) || !dslots.Alloc(slots.size() * 4) || !kc.Alloc(cache_bytes) ||
      !vc.Alloc(cache_bytes) || !dqkv.Upload(qkv) || !dslots.Upload(slots) || !kc.Poison() || !vc.Poison())
    return false;
  CacheWriteArgs a;
  a.k = dqkv.as<bf16>() + 32 * d;
  a.k_stride = stride;
  a.v = dqkv.as<bf16>() + 40 * d;
  a.v_stride = stride;
  a.slots = dslots.as<int32_t>();
  a.num_tokens = t;
  a.kv = {kc.get(), vc.get(), nullptr, nullptr, nb, hkv, d, KvDtype::kBf16};
  if (!Ok(ReshapeAndCache(a, c.stream), "ReshapeAndCache") || !Ok(cudaStreamSynchronize(c.stream), "sync"))
    return false;
  std::vector<uint16_t> hk, hv;
  if (!kc.Download(&hk, cache_bytes / 2) || !vc.Download(&hv, cache_bytes / 2)) return false;
  std::vector<uint8_t> written(static_cast<size_t>(nb) * kBlockTokens, 0);
  double bad = 0;
  for (int i = 0; i < t; ++i) {
    if (slots[static_cast<size_t>(i)] < 0) continue;
    const size_t s = static_cast<size_t>(slots[static_cast<size_t>(i)]);
    written[s] = 1;
    for (int j = 0; j < row; ++j) {
      bad += hk[s * row + j] != qkv[static_cast<size_t>(i) * stride + 32 * d + j];
      bad += hv[s * row + j] != qkv[static_cast<size_t>(i) * stride + 40 * d + j];
    }
  }
  for (size_t s = 0; s < written.size(); ++s)  // every other slot keeps its poison
    if (!written[s]) bad += hk[s * row] != 0xffff || hv[s * row + row - 1] != 0xffff;
  const double ms = TimeMs(c.stream, 3, 20, [&] { return ReshapeAndCache(a, c.stream).ok(); });
  c.rows->push_back({"reshape_and_cache bf16", std::to_string(t) + " tok x8x128", bad, 0, bad == 0, ms,
                     GBps(2.0 * 2.0 * 2.0 * t * row, ms), "GB/s", c.copy_gbps, "err = wrong elements"});
  return true;
}

bool CheckCacheWriteFp8(CheckContext& c) {
  const int nb = 1024, hkv = 8, d = 128, seqs = c.quick ? 128 : 512, half = 8;
  const int t = seqs * half;
  const int64_t row = static_cast<int64_t>(hkv) * d;
  auto rng = Rng(c, 11);
  std::vector<int32_t> blocks(static_cast<size_t>(nb));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<uint8_t> hk(static_cast<size_t>(nb) * kBlockTokens * row, 0xff), hv = hk;
  std::vector<float> hks(static_cast<size_t>(nb) * hkv, 0.0f), hvs = hks;
  DeviceBuffer dk, dv, dslots, dsegs, kc, vc, ks, vs;
  if (!dk.Alloc(static_cast<size_t>(t) * row * 2) || !dv.Alloc(static_cast<size_t>(t) * row * 2) ||
      !dslots.Alloc(static_cast<size_t>(t) * 4) || !dsegs.Alloc(static_cast<size_t>(t) * sizeof(CacheSegment)) ||
      !kc.Alloc(hk.size()) || !vc.Alloc(hv.size()) || !ks.Alloc(hks.size() * 4) || !vs.Alloc(hvs.size() * 4) ||
      !kc.Poison() || !vc.Poison() || !ks.Upload(hks) || !vs.Upload(hvs))
    return false;
  CacheWriteArgs a;
  a.k = dk.as<bf16>();
  a.k_stride = row;
  a.v = dv.as<bf16>();
  a.v_stride = row;
  a.slots = dslots.as<int32_t>();
  a.num_tokens = t;
  a.segments = dsegs.as<CacheSegment>();
  a.kv = {kc.get(), vc.get(), ks.as<float>(), vs.as<float>(), nb, hkv, d, KvDtype::kFp8E4M3};
  double bad = 0;
  // Pass 0 fills offsets 0..7 of every sequence's block; pass 1 adds 8..15, four times larger for
  // odd sequences so their scale grows and the first half is re-encoded. Sequences 2 mod 4 write
  // zeros first (the block's scale stays unset, 0) and then values of 0.05: their scale must come
  // from those (0.05 / 448), not stay at a placeholder.
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<uint16_t> k, v;
    for (int s = 0; s < seqs; ++s) {
      const float scale = s % 4 == 2 ? (pass == 0 ? 0.0f : 0.05f) : pass == 1 && (s & 1) ? 4.0f : 1.0f;
      const auto ks_ = RandomBf16(static_cast<size_t>(half) * row, rng, scale);
      const auto vs_ = RandomBf16(static_cast<size_t>(half) * row, rng, scale);
      k.insert(k.end(), ks_.begin(), ks_.end());
      v.insert(v.end(), vs_.begin(), vs_.end());
    }
    std::vector<int32_t> slots;
    for (int s = 0; s < seqs; ++s)
      for (int j = 0; j < half; ++j) slots.push_back(blocks[static_cast<size_t>(s)] * kBlockTokens + pass * half + j);
    std::vector<CacheSegment> segs;
    if (!Ok(BuildCacheSegments(slots, &segs), "BuildCacheSegments")) return false;
    a.num_segments = static_cast<int>(segs.size());
    std::vector<uint8_t> seg_bytes(segs.size() * sizeof(CacheSegment));
    std::memcpy(seg_bytes.data(), segs.data(), seg_bytes.size());
    if (!dk.Upload(k) || !dv.Upload(v) || !dslots.Upload(slots) || !dsegs.Upload(seg_bytes)) return false;
    if (!Ok(ReshapeAndCache(a, c.stream), "ReshapeAndCache fp8") || !Ok(cudaStreamSynchronize(c.stream), "sync"))
      return false;
    ref::Fp8CacheWrite(k.data(), row, segs, hkv, d, &hk, &hks);
    ref::Fp8CacheWrite(v.data(), row, segs, hkv, d, &hv, &hvs);
    std::vector<uint8_t> gk, gv;
    std::vector<float> gks, gvs;
    if (!kc.Download(&gk, hk.size()) || !vc.Download(&gv, hv.size()) || !ks.Download(&gks, hks.size()) ||
        !vs.Download(&gvs, hvs.size()))
      return false;
    for (size_t i = 0; i < hk.size(); ++i) bad += (gk[i] != hk[i]) + (gv[i] != hv[i]);
    for (size_t i = 0; i < hks.size(); ++i) bad += (gks[i] != hks[i]) + (gvs[i] != hvs[i]);
  }
  // Time pass-0-shaped writes (segments start at offset 0, so no state carries between runs).
  std::vector<int32_t> slots0;
  for (int s = 0; s < seqs; ++s)
    for (int j = 0; j < half; ++j) slots0.push_back(blocks[static_cast<size_t>(s)] * kBlockTokens + j);
  std::vector<CacheSegment> segs0;
  if (!Ok(BuildCacheSegments(slots0, &segs0), "segments")) return false;
  std::vector<uint8_t> seg_bytes(segs0.size() * sizeof(CacheSegment));
  std::memcpy(seg_bytes.data(), segs0.data(), seg_bytes.size());
  if (!dslots.Upload(slots0) || !dsegs.Upload(seg_bytes)) return false;
  a.num_segments = static_cast<int>(segs0.size());
  const double ms = TimeMs(c.stream, 3, 20, [&] { return ReshapeAndCache(a, c.stream).ok(); });
  c.rows->push_back({"reshape_and_cache fp8+scales", std::to_string(t) + " tok x8x128 x2", bad, 0, bad == 0, ms,
                     GBps(2.0 * 3.0 * t * row, ms), "GB/s", c.copy_gbps, "bit-exact codes+scales, rescale + zero-first paths"});
  return true;
}

bool CheckCopyBlocks(CheckContext& c) {
  const int planes = c.quick ? 8 : 72, dev_blocks = 512, host_blocks = 256;
  const int64_t bpb = int64_t{kBlockTokens} * 8 * 128 * 2;  // one plane's block: 32 KiB
  const size_t dev_plane = static_cast<size_t>(dev_blocks * bpb), host_plane = static_cast<size_t>(host_blocks * bpb);
  DeviceBuffer src, dst, meta;
  void* host = nullptr;
  if (!src.Alloc(dev_plane * planes) || !dst.Alloc(dev_plane * planes) || !dst.Poison()) return false;
  KV_TRY(cudaHostAlloc(&host, host_plane * planes, cudaHostAllocDefault));
  KV_TRY(FillUniformBf16(src.as<bf16>(), static_cast<int64_t>(src.bytes() / 2), c.seed + 77, 1.0f, c.stream));
  std::memset(host, 0xff, host_plane * planes);
  auto rng = Rng(c, 12);
  std::vector<int32_t> order(static_cast<size_t>(dev_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int2> out_pairs, in_pairs;
  for (int i = 0; i < host_blocks; ++i) {
    out_pairs.push_back({order[static_cast<size_t>(i)], i});                         // offload
    in_pairs.push_back({i, order[static_cast<size_t>(dev_blocks - 1 - i)]});          // restore elsewhere
  }
  // meta: [src planes][dst planes][bytes][pairs] for each direction.
  std::vector<const void*> dsrc(planes), hsrc(planes);
  std::vector<void*> hdst(planes), ddst(planes);
  for (int p = 0; p < planes; ++p) {
    dsrc[static_cast<size_t>(p)] = src.as<char>() + p * dev_plane;
    hdst[static_cast<size_t>(p)] = static_cast<char*>(host) + p * host_plane;
    hsrc[static_cast<size_t>(p)] = hdst[static_cast<size_t>(p)];
    ddst[static_cast<size_t>(p)] = dst.as<char>() + p * dev_plane;
  }
  std::vector<int64_t> bytes(static_cast<size_t>(planes), bpb);
  const size_t ptrs = static_cast<size_t>(planes) * sizeof(void*);
  if (!meta.Alloc(4 * ptrs + bytes.size() * 8 + 2 * out_pairs.size() * sizeof(int2))) {
    cudaFreeHost(host);
    return false;
  }
  char* m = meta.as<char>();
  bool ok = Ok(cudaMemcpy(m, dsrc.data(), ptrs, cudaMemcpyHostToDevice), "meta") &&
            Ok(cudaMemcpy(m + ptrs, hdst.data(), ptrs, cudaMemcpyHostToDevice), "meta") &&
            Ok(cudaMemcpy(m + 2 * ptrs, hsrc.data(), ptrs, cudaMemcpyHostToDevice), "meta") &&
            Ok(cudaMemcpy(m + 3 * ptrs, ddst.data(), ptrs, cudaMemcpyHostToDevice), "meta") &&
            Ok(cudaMemcpy(m + 4 * ptrs, bytes.data(), bytes.size() * 8, cudaMemcpyHostToDevice), "meta") &&
            Ok(cudaMemcpy(m + 4 * ptrs + bytes.size() * 8, out_pairs.data(), out_pairs.size() * sizeof(int2),
                          cudaMemcpyHostToDevice), "meta") &&
            Ok(cudaMemcpy(m + 4 * ptrs + bytes.size() * 8 + out_pairs.size() * sizeof(int2), in_pairs.data(),
                          in_pairs.size() * sizeof(int2), cudaMemcpyHostToDevice), "meta");
  const auto* d_bytes = reinterpret_cast<const int64_t*>(m + 4 * ptrs);
  const auto* d_out = reinterpret_cast<const int2*>(m + 4 * ptrs + bytes.size() * 8);
  BlockCopyArgs off{reinterpret_cast<const void* const*>(m), reinterpret_cast<void* const*>(m + ptrs), d_bytes,
                    planes, d_out, host_blocks};
  BlockCopyArgs on{reinterpret_cast<const void* const*>(m + 2 * ptrs), reinterpret_cast<void* const*>(m + 3 * ptrs),
                   d_bytes, planes, d_out + host_blocks, host_blocks};
  double bad = 0, ms_off = -1, ms_on = -1, ms_ceiling = -1;
  if (ok) ok = Ok(CopyBlocks(off, c.stream), "offload") && Ok(CopyBlocks(on, c.stream), "restore") &&
               Ok(cudaStreamSynchronize(c.stream), "sync");
  if (ok) {
    std::vector<uint8_t> hs, hd;
    ok = src.Download(&hs, src.bytes()) && dst.Download(&hd, dst.bytes());
    for (int p = 0; ok && p < planes; ++p)
      for (int i = 0; i < host_blocks; ++i) {
        const size_t so = p * dev_plane + static_cast<size_t>(out_pairs[static_cast<size_t>(i)].x * bpb);
        const size_t ho = p * host_plane + static_cast<size_t>(i * bpb);
        const size_t dd = p * dev_plane + static_cast<size_t>(in_pairs[static_cast<size_t>(i)].y * bpb);
        bad += std::memcmp(&hs[so], static_cast<char*>(host) + ho, static_cast<size_t>(bpb)) != 0;
        bad += std::memcmp(&hs[so], &hd[dd], static_cast<size_t>(bpb)) != 0;
      }
  }
  if (ok) {
    ms_off = TimeMs(c.stream, 2, 10, [&] { return CopyBlocks(off, c.stream).ok(); });
    ms_on = TimeMs(c.stream, 2, 10, [&] { return CopyBlocks(on, c.stream).ok(); });
    ms_ceiling = TimeMs(c.stream, 2, 10, [&] {
      return Ok(cudaMemcpyAsync(host, src.get(), host_plane * planes, cudaMemcpyDeviceToHost, c.stream), "d2h");
    });
  }
  cudaFreeHost(host);
  if (!ok || ms_off < 0 || ms_on < 0 || ms_ceiling < 0) return false;
  const double total = static_cast<double>(host_plane) * planes;
  const double ceiling = GBps(total, ms_ceiling);
  const std::string size = std::to_string(host_blocks) + " blk x " + std::to_string(planes) + " planes";
  c.rows->push_back({"copy_blocks offload d2h", size, bad, 0, bad == 0, ms_off, GBps(total, ms_off), "GB/s",
                     ceiling, "ceiling: cudaMemcpy d2h pinned"});
  c.rows->push_back({"copy_blocks restore h2d", size, bad, 0, bad == 0, ms_on, GBps(total, ms_on), "GB/s",
                     ceiling, "err = blocks differing"});
  return true;
}

}  // namespace kvgate::cuda::bench
