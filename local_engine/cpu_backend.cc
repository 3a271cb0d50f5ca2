#include "local_engine/cpu_backend.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"

namespace kvgate::engine {
namespace {

namespace kc = kernels::cpu;

kc::QMatrix ToQMatrix(const WeightMatrix& w) {
  return kc::QMatrix{w.type == GgmlType::kQ8_0 ? kc::WeightType::kQ8_0 : kc::WeightType::kQ4_1,
                     w.data, w.rows, w.cols};
}

// REQUIRES: SupportsKvDtype(cache.dtype) (ModelRunner::Create checks).
kc::KvLayout Layout(const KvCacheLayer& cache, const BatchMetadata& batch) {
  return kc::KvLayout{*CpuKvFormat(cache.dtype), batch.block_size, cache.kv_heads, cache.head_dim};
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(kc::ThreadPool* pool, kc::Isa isa)
      : kernels_(&kc::KernelsFor(isa)), pool_(pool), ctx_{kernels_, pool_, &q8_scratch_} {
    name_ = "cpu-" + std::string(kc::IsaName(kernels_->isa)) + "-" + std::to_string(pool->size()) +
            "t";
  }

  std::string_view Name() const override { return name_; }

  Result<DeviceBuffer> Allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p == nullptr) {
      return MakeError(ErrorCode::kResourceExhausted,
                       "cpu backend: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    std::memset(p, 0, rounded);
    return DeviceBuffer{std::shared_ptr<void>(p, [](void* q) { std::free(q); }), bytes};
  }

  size_t MemoryCapacity() const override {
    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return 0;
    return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
  }

  Result<const void*> UploadWeights(const void* host, size_t) override { return host; }
  void CopyToHost(const void* src, void* dst, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  bool CopyFromHost(const void* src, void* dst, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return true;
  }
  bool CopyBlocks(std::span<const BlockPlane> src, std::span<const BlockPlane> dst,
                  std::span<const BlockCopy> copies) override {
    if (src.size() != dst.size()) return false;
    for (size_t p = 0; p < src.size(); ++p) {
      const auto n = static_cast<size_t>(src[p].block_bytes);
      if (dst[p].block_bytes != src[p].block_bytes) return false;
      for (const BlockCopy& c : copies) {
        std::memcpy(dst[p].base + static_cast<size_t>(c.dst) * n,
                    src[p].base + static_cast<size_t>(c.src) * n, n);
      }
    }
    return true;
  }
  void Synchronize() override {}
  bool SupportsKvDtype(KvDtype dtype) const override { return CpuKvFormat(dtype).has_value(); }

  void Embed(const WeightMatrix& table, const BatchMetadata& batch, float* out) override {
    kc::EmbedRows(ToQMatrix(table), batch.token_ids, out);
  }

  void RmsNorm(const float* x, const float* weight, int64_t t, int64_t d, float eps,
               float* out) override {
    kc::RmsNorm(ctx_, x, weight, t, d, eps, out);
  }

  void MatMul(const float* x, int64_t t, int64_t k, std::span<const MatMulOutput> outs) override {
    kc::QMatrix mats[8];
    const kc::QMatrix* ws[8];
    float* os[8];
    // Up to 8 targets per dispatch (the runner uses at most 3); more are split.
    for (size_t begin = 0; begin < outs.size(); begin += 8) {
      const size_t n = std::min<size_t>(8, outs.size() - begin);
      for (size_t i = 0; i < n; ++i) {
        mats[i] = ToQMatrix(*outs[begin + i].w);
        ws[i] = &mats[i];
        os[i] = outs[begin + i].out;
      }
      kc::MatMul(ctx_, x, t, k, std::span(ws, n), std::span(os, n));
    }
  }

  void Rope(float* x, int64_t heads, int64_t head_dim, float theta,
            const BatchMetadata& batch) override {
    kc::RopeInterleaved(x, batch.num_tokens(), heads, head_dim, batch.positions, theta);
  }

  void WriteKv(const float* k, const float* v, int64_t kv_dim, const BatchMetadata& batch,
               const KvCacheLayer& cache) override {
    (void)kv_dim;  // == cache.kv_heads * cache.head_dim
    kc::WriteKv(ctx_, k, v, batch.num_tokens(), batch.slot_mapping, Layout(cache, batch),
                cache.k, cache.v);
  }

  void Attention(const float* q, const KvCacheLayer& cache, const AttentionShape& shape,
                 const BatchMetadata& batch, float* out) override {
    kc::PagedAttentionArgs a{q,
                             cache.k,
                             cache.v,
                             batch.num_tokens(),
                             shape.heads,
                             shape.kv_heads,
                             shape.head_dim,
                             batch.block_size,
                             batch.query_start,
                             batch.context_lens,
                             batch.block_tables,
                             batch.max_blocks_per_seq,
                             shape.scale,
                             out,
                             Layout(cache, batch).format};
    kc::PagedAttention(ctx_, a);
  }

  void SwiGlu(const float* gate, const float* up, int64_t n, float* out) override {
    kc::SwiGlu(gate, up, n, out);
  }

  void Add(float* x, const float* y, int64_t n) override { kc::AddInPlace(x, y, n); }

  void GatherRows(const float* x, int64_t d, std::span<const int32_t> rows, float* out) override {
    for (size_t r = 0; r < rows.size(); ++r) {
      std::memcpy(out + r * d, x + static_cast<int64_t>(rows[r]) * d, d * sizeof(float));
    }
  }

 private:
  // Constant after construction.
  const kc::VecKernels* kernels_;
  kc::ThreadPool* pool_;
  std::string name_;
  // Scratch for quantized activations; only touched on the (single) calling thread.
  std::vector<kc::BlockQ8A> q8_scratch_;
  kc::CpuContext ctx_;
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(kernels::cpu::ThreadPool* pool, kernels::cpu::Isa isa) {
  return std::make_unique<CpuBackend>(pool, isa);
}

}  // namespace kvgate::engine
