#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/backend_ops.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/status.h"

namespace kvgate::cuda {
namespace {

CudaStatus CudaCall(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return CudaStatus::Ok();
  return {CudaStatusKind::kCudaError, static_cast<int>(e), what};
}

// Device memory that only grows; growth waits for the stream so no in-flight kernel reads the old.
class Scratch {
 public:
  ~Scratch() {
    if (p_) cudaFree(p_);
  }
  CudaStatus Reserve(size_t bytes, cudaStream_t stream) {
    if (bytes <= bytes_) return CudaStatus::Ok();
    const size_t want = std::max(bytes, bytes_ * 2);  // before bytes_ is reset: growth doubles
    if (p_) {
      if (CudaStatus s = CudaCall(cudaStreamSynchronize(stream), "scratch sync"); !s.ok()) return s;
      cudaFree(p_);
      p_ = nullptr;
      bytes_ = 0;
    }
    if (CudaStatus s = CudaCall(cudaMalloc(&p_, want), "cudaMalloc(scratch)"); !s.ok()) return s;
    bytes_ = want;
    return CudaStatus::Ok();
  }
  template <typename T>
  T* as(size_t byte_offset = 0) const { return reinterpret_cast<T*>(static_cast<char*>(p_) + byte_offset); }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(int device, cudaStream_t stream, int num_sms, std::unique_ptr<GemmBf16> gemm)
      : device_(device), stream_(stream), num_sms_(num_sms), gemm_(std::move(gemm)) {}
  ~CudaBackendImpl() override {
    cudaStreamSynchronize(stream_);
    gemm_.reset();
    dequantized_.clear();
    uploaded_.clear();
    cudaStreamDestroy(stream_);
  }

  std::string_view Name() const override { return name_; }
  Status status() const override { return ToStatus(error_); }

  Result<engine::DeviceBuffer> Allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(bytes, 64)) != cudaSuccess) {
      cudaGetLastError();
      return MakeError(ErrorCode::kResourceExhausted, "cuda backend: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    engine::DeviceBuffer b{std::shared_ptr<void>(p, [](void* q) { cudaFree(q); }), bytes};
    // Zeroed on the backend's stream and waited for: the buffer is ready for any stream or copy.
    if (!Check(CudaCall(cudaMemsetAsync(p, 0, std::max<size_t>(bytes, 64), stream_), "cudaMemset(Allocate)")) ||
        !Check(CudaCall(cudaStreamSynchronize(stream_), "Allocate sync")))
      return ToStatusError();
    return b;
  }

  Result<const void*> UploadWeights(const void* host, size_t bytes) override {
    auto buf = Allocate(bytes);
    if (!buf) return std::unexpected(buf.error());
    if (!Check(CudaCall(cudaMemcpyAsync(buf->data(), host, bytes, cudaMemcpyHostToDevice, stream_), "upload weights")) ||
        !Check(CudaCall(cudaStreamSynchronize(stream_), "upload weights sync")))
      return ToStatusError();
    uploaded_.push_back(*buf);
    return static_cast<const void*>(buf->data());
  }

  void CopyToHost(const void* src, void* dst, size_t bytes) override {
    if (!error_.ok()) return;
    Check(CudaCall(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "CopyToHost")) &&
        Check(CudaCall(cudaStreamSynchronize(stream_), "CopyToHost sync"));
  }

  void Synchronize() override {
    if (!error_.ok()) return;
    Check(CudaCall(cudaStreamSynchronize(stream_), "Synchronize"));
  }

  void Embed(const engine::WeightMatrix& table, const engine::BatchMetadata& batch, float* out) override {
    if (!error_.ok()) return;
    const int32_t* ids = Upload(batch.token_ids, 0);
    if (!ids) return;
    Check(EmbedRowsF32(static_cast<const uint8_t*>(table.data), table.type == engine::GgmlType::kQ8_0, table.cols,
                       ids, batch.num_tokens(), out, stream_));
  }

  void RmsNorm(const float* x, const float* weight, int64_t t, int64_t d, float eps, float* out) override {
    if (!error_.ok()) return;
    Check(RmsNormF32(x, weight, out, t, d, eps, stream_));
  }

  void MatMul(const float* x, int64_t t, int64_t k, std::span<const engine::MatMulOutput> outs) override {
    if (!error_.ok() || t <= 0) return;
    int64_t max_n = 0;
    for (const auto& o : outs) max_n = std::max(max_n, o.w->rows);
    const size_t xb = static_cast<size_t>(t * k) * 2;
    if (!Check(act_.Reserve(xb + static_cast<size_t>(t * max_n) * 2, stream_))) return;
    auto* xbf = act_.as<__nv_bfloat16>();
    auto* ybf = act_.as<__nv_bfloat16>(xb);
    if (!Check(F32ToBf16(x, xbf, t * k, stream_))) return;
    for (const auto& o : outs) {
      const __nv_bfloat16* w = Dequantized(*o.w);
      if (!w) return;
      if (!Check(gemm_->Run(xbf, k, w, k, ybf, o.w->rows, t, o.w->rows, k, 1.0f, 0.0f, stream_)) ||
          !Check(Bf16ToF32(ybf, o.out, t * o.w->rows, stream_)))
        return;
    }
  }

  void Rope(float* x, int64_t heads, int64_t head_dim, float theta, const engine::BatchMetadata& batch) override {
    if (!error_.ok()) return;
    const int32_t* pos = Upload(batch.positions, 0);
    if (!pos) return;
    Check(RopeInterleavedF32(x, batch.num_tokens(), heads, head_dim, pos, theta, stream_));
  }

  void WriteKv(const float* k, const float* v, int64_t kv_dim, const engine::BatchMetadata& batch,
               const engine::KvCacheLayer& cache) override {
    if (!error_.ok()) return;
    const int64_t* slots = Upload(batch.slot_mapping, 0);
    if (!slots) return;
    Check(WriteKvF16(k, v, batch.num_tokens(), kv_dim, slots, cache.k, cache.v, stream_));
  }

  void Attention(const float* q, const engine::KvCacheLayer& cache, const engine::AttentionShape& shape,
                 const engine::BatchMetadata& batch, float* out) override;

  void SwiGlu(const float* gate, const float* up, int64_t n, float* out) override {
    if (!error_.ok()) return;
    Check(SwiGluF32(gate, up, n, out, stream_));
  }

  void Add(float* x, const float* y, int64_t n) override {
    if (!error_.ok()) return;
    Check(AddF32(x, y, n, stream_));
  }

  void GatherRows(const float* x, int64_t d, std::span<const int32_t> rows, float* out) override {
    if (!error_.ok()) return;
    const int32_t* r = Upload(rows, 0);
    if (!r) return;
    Check(GatherRowsF32(x, d, r, static_cast<int64_t>(rows.size()), out, stream_));
  }

 private:
  bool Check(const CudaStatus& s) {
    if (!s.ok() && error_.ok()) error_ = s;
    return s.ok();
  }
  std::unexpected<Error> ToStatusError() const { return std::unexpected(status().error()); }

  // Copies a host span into the metadata scratch at `offset` bytes (16-byte aligned by callers);
  // stream-ordered, so reusing the region for the next op is safe. Null on failure.
  template <typename T>
  T* Upload(std::span<const T> v, size_t offset) {
    const size_t bytes = v.size() * sizeof(T);
    if (!Check(meta_.Reserve(offset + bytes + 16, stream_))) return nullptr;
    if (bytes && !Check(CudaCall(cudaMemcpyAsync(meta_.as<char>(offset), v.data(), bytes, cudaMemcpyHostToDevice,
                                                 stream_), "metadata upload")))
      return nullptr;
    return meta_.as<T>(offset);
  }

  const __nv_bfloat16* Dequantized(const engine::WeightMatrix& w) {
    auto it = dequantized_.find(w.data);
    if (it != dequantized_.end()) return static_cast<const __nv_bfloat16*>(it->second.data());
    if (w.cols % 32 != 0 || (w.type != engine::GgmlType::kQ4_1 && w.type != engine::GgmlType::kQ8_0)) {
      Check(CudaStatus::Invalid("cuda backend: weights must be Q4_1 or Q8_0 with K % 32 == 0"));
      return nullptr;
    }
    auto buf = Allocate(static_cast<size_t>(w.rows * w.cols) * 2);
    if (!buf) {
      Check({CudaStatusKind::kCudaError, static_cast<int>(cudaErrorMemoryAllocation), "dequantized weight"});
      return nullptr;
    }
    auto* dst = static_cast<__nv_bfloat16*>(buf->data());
    const auto* src = static_cast<const uint8_t*>(w.data);
    if (!Check(w.type == engine::GgmlType::kQ8_0 ? DequantQ8_0(src, w.rows * w.cols, dst, stream_)
                                                  : DequantQ4_1(src, w.rows * w.cols, dst, stream_)))
      return nullptr;
    dequantized_.emplace(w.data, *buf);
    return dst;
  }

  int device_;
  cudaStream_t stream_;
  int num_sms_;
  std::unique_ptr<GemmBf16> gemm_;
  std::string name_ = "cuda";
  CudaStatus error_;
  Scratch meta_, act_, attn_;
  std::vector<engine::DeviceBuffer> uploaded_;                   // weights copied by UploadWeights
  std::map<const void*, engine::DeviceBuffer> dequantized_;      // quantized data -> bf16 copy
};

void CudaBackendImpl::Attention(const float* q, const engine::KvCacheLayer& cache,
                                const engine::AttentionShape& shape, const engine::BatchMetadata& batch,
                                float* out) {
  if (!error_.ok()) return;
  const int64_t t = batch.num_tokens(), s = batch.num_seqs();
  const int h = static_cast<int>(shape.heads), hkv = static_cast<int>(shape.kv_heads),
            d = static_cast<int>(shape.head_dim);
  if (batch.block_size != kBlockTokens) {
    Check(CudaStatus::Invalid("cuda backend: KV block size must be 16"));
    return;
  }
  bool decode = true;
  int max_ctx = 0;
  std::vector<int32_t> q_lens(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i) {
    q_lens[static_cast<size_t>(i)] = batch.query_start[static_cast<size_t>(i) + 1] - batch.query_start[static_cast<size_t>(i)];
    decode &= q_lens[static_cast<size_t>(i)] == 1;
    max_ctx = std::max(max_ctx, batch.context_lens[static_cast<size_t>(i)]);
  }
  int32_t max_block = 0;
  for (int32_t b : batch.block_tables) max_block = std::max(max_block, b);
  std::vector<int32_t> tiles;
  if (!decode && !Check(BuildPrefillTiles(q_lens, &tiles))) return;
  // Metadata layout in meta_: tables | context_lens | query_start | tiles, each 256-byte aligned.
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  const size_t o_ctx = align(batch.block_tables.size_bytes());
  const size_t o_qs = o_ctx + align(batch.context_lens.size_bytes());
  const size_t o_tiles = o_qs + align(batch.query_start.size_bytes());
  if (!Check(meta_.Reserve(o_tiles + align(tiles.size() * 4) + 16, stream_))) return;
  const int32_t* tables = Upload(batch.block_tables, 0);
  const int32_t* ctx = Upload(batch.context_lens, o_ctx);
  const int32_t* qs = Upload(batch.query_start, o_qs);
  const int32_t* dtiles = Upload(std::span<const int32_t>(tiles), o_tiles);
  if (!tables || !ctx || !qs || !dtiles) return;
  const PagedKv kv{cache.k, cache.v, nullptr, nullptr, max_block + 1, hkv, d, KvDtype::kF16};
  const size_t qo = static_cast<size_t>(t) * h * d * 2;
  size_t ws_floats = 0;
  DecodeGeometry dg;
  PrefillGeometry pg;
  if (decode) {
    if (!Check(ChooseDecodeGeometry({static_cast<int>(s), h, hkv, d, max_ctx}, num_sms_, &dg))) return;
    ws_floats = dg.workspace_floats;
  } else {
    if (!Check(ChoosePrefillGeometry({static_cast<int>(s), static_cast<int>(t), h, hkv, d, max_ctx},
                                     static_cast<int>(tiles.size() / 2), num_sms_, &pg)))
      return;
    ws_floats = pg.workspace_floats;
  }
  if (!Check(attn_.Reserve(2 * qo + ws_floats * 4, stream_))) return;
  auto* qb = attn_.as<__nv_bfloat16>();
  auto* ob = attn_.as<__nv_bfloat16>(qo);
  float* ws = ws_floats ? attn_.as<float>(2 * qo) : nullptr;
  if (!Check(F32ToBf16(q, qb, t * h * d, stream_))) return;
  if (decode) {
    DecodeAttentionArgs a;
    a.q = qb;
    a.q_stride = static_cast<int64_t>(h) * d;
    a.out = ob;
    a.kv = kv;
    a.block_tables = tables;
    a.block_table_stride = batch.max_blocks_per_seq;
    a.context_lens = ctx;
    a.num_q_heads = h;
    a.softmax_scale = shape.scale;
    a.geo = dg;
    a.workspace = ws;
    if (!Check(DecodeAttention(a, stream_))) return;
  } else {
    PrefillAttentionArgs a;
    a.q = qb;
    a.q_stride = static_cast<int64_t>(h) * d;
    a.out = ob;
    a.kv = kv;
    a.block_tables = tables;
    a.block_table_stride = batch.max_blocks_per_seq;
    a.q_start = qs;
    a.context_lens = ctx;
    a.tiles = dtiles;
    a.num_q_heads = h;
    a.softmax_scale = shape.scale;
    a.geo = pg;
    a.workspace = ws;
    if (!Check(PrefillAttention(a, stream_))) return;
  }
  Check(Bf16ToF32(ob, out, t * h * d, stream_));
}

}  // namespace

Result<std::unique_ptr<CudaBackend>> MakeCudaBackend(const CudaBackendOptions& options) {
  if (Status s = ToStatus(RequireDevice()); !s) return std::unexpected(s.error());
  int count = 0;
  cudaGetDeviceCount(&count);
  if (options.device < 0 || options.device >= count)
    return MakeError(ErrorCode::kInvalidArgument, "cuda backend: device " + std::to_string(options.device) +
                                                      " not found (" + std::to_string(count) + " present)");
  if (Status s = ToStatus(CudaCall(cudaSetDevice(options.device), "cudaSetDevice")); !s)
    return std::unexpected(s.error());
  int sms = 0;
  if (Status s = ToStatus(DeviceSmCount(&sms)); !s) return std::unexpected(s.error());
  std::unique_ptr<GemmBf16> gemm;
  if (Status s = ToStatus(GemmBf16::Create(options.gemm_workspace_bytes, &gemm)); !s) return std::unexpected(s.error());
  cudaStream_t stream = nullptr;
  if (Status s = ToStatus(CudaCall(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate")); !s)
    return std::unexpected(s.error());
  return std::unique_ptr<CudaBackend>(new CudaBackendImpl(options.device, stream, sms, std::move(gemm)));
}

Result<int64_t> KvCacheTokensForMemoryFraction(double fraction, int64_t kv_bytes_per_token, int device) {
  if (!(fraction > 0.0 && fraction <= 1.0) || kv_bytes_per_token <= 0)
    return MakeError(ErrorCode::kInvalidArgument, "memory fraction must be in (0, 1] and bytes per token positive");
  if (Status s = ToStatus(RequireDevice()); !s) return std::unexpected(s.error());
  if (Status s = ToStatus(CudaCall(cudaSetDevice(device), "cudaSetDevice")); !s) return std::unexpected(s.error());
  size_t free_bytes = 0, total = 0;
  if (Status s = ToStatus(CudaCall(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo")); !s)
    return std::unexpected(s.error());
  const auto tokens = static_cast<int64_t>(static_cast<double>(free_bytes) * fraction) / kv_bytes_per_token;
  return tokens / kBlockTokens * kBlockTokens;
}

}  // namespace kvgate::cuda
