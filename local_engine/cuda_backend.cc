#include "local_engine/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/backend_ops.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/op_twin.h"
#include "kernels/cuda/rope_table.h"
#include "kernels/cuda/status.h"
#include "kernels/cuda/step_staging.h"
#include "local_engine/block_manager.h"

namespace kvgate::cuda {
namespace {

// The kernels' KV block (geometry.h, B) is the engine's: one block table serves both.
static_assert(engine::kBlockSize == kBlockTokens, "kernels/cuda and the engine disagree on the KV block size");

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
  bool Fits(size_t bytes) const { return bytes <= bytes_; }
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

// Pinned host memory that only grows (the staging side of the per-step metadata copy).
class PinnedHost {
 public:
  ~PinnedHost() {
    if (p_) cudaFreeHost(p_);
  }
  CudaStatus Reserve(size_t bytes) {
    if (bytes <= bytes_) return CudaStatus::Ok();
    const size_t want = std::max(bytes, bytes_ * 2);
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    bytes_ = 0;
    if (CudaStatus s = CudaCall(cudaHostAlloc(&p_, want, cudaHostAllocDefault), "cudaHostAlloc(staging)"); !s.ok())
      return s;
    bytes_ = want;
    return CudaStatus::Ok();
  }
  std::span<std::byte> bytes() const { return {static_cast<std::byte*>(p_), bytes_}; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// The step between BeginStep and EndStep: which host spans were staged and where they are on the
// device. Ops recognise the step's batch by address (ModelRunner hands every op the same one).
struct ActiveStep {
  bool active = false;
  const engine::BatchMetadata* batch = nullptr;
  const int32_t* gather_rows = nullptr;
  StepLayout layout;
  char* device = nullptr;  // the staged copy
  int geometry_context = 0;  // the decode split-K context bound (bucketed for a graph step)
  engine::StepKey key;
  template <typename T>
  const T* at(StepArray a) const { return reinterpret_cast<const T*>(device + layout.offset[a]); }
};

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(const CudaBackendOptions& options, cudaStream_t stream, int num_sms, std::unique_ptr<GemmBf16> gemm,
                  std::unique_ptr<Fp8Linear> fp8)
      : options_(options), stream_(stream), num_sms_(num_sms), gemm_(std::move(gemm)), fp8_(std::move(fp8)),
        prefill_tile_tokens_(PrefillTileTokens(options.prefill_variant, 1)) {}
  ~CudaBackendImpl() override {
    if (capturing_) {
      cudaGraph_t g = nullptr;
      if (cudaStreamEndCapture(stream_, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    }
    cudaStreamSynchronize(stream_);
    graphs_.Clear();
    if (staged_event_) cudaEventDestroy(staged_event_);
    if (copy_args_event_) cudaEventDestroy(copy_args_event_);
    gemm_.reset();
    fp8_.reset();
    dequantized_.clear();
    uploaded_.clear();
    cudaStreamDestroy(stream_);
  }

  std::string_view Name() const override { return name_; }
  size_t cached_graphs() const override { return graphs_.graphs(); }
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

  engine::StepMode BeginStep(const engine::BatchMetadata& batch, std::span<const int32_t> gather_rows,
                             const engine::StepKey& key) override;
  bool EndStep() override;

  void CopyToHost(const void* src, void* dst, size_t bytes) override {
    if (!error_.ok()) return;
    Check(CudaCall(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "CopyToHost")) &&
        Check(CudaCall(cudaStreamSynchronize(stream_), "CopyToHost sync"));
  }

  // Page-locked, so that the offload tier's host slots are device-addressable (UVA) and CopyBlocks
  // moves them without a staging copy or a host wait.
  Result<engine::DeviceBuffer> AllocateHost(size_t bytes) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, std::max<size_t>(bytes, 64), cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      return MakeError(ErrorCode::kResourceExhausted,
                       "cuda backend: cannot pin " + std::to_string(bytes) + " bytes of host memory");
    }
    std::memset(p, 0, std::max<size_t>(bytes, 64));
    return engine::DeviceBuffer{std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); }), bytes};
  }

  bool CopyBlocks(std::span<const engine::BlockPlane> src, std::span<const engine::BlockPlane> dst,
                  std::span<const engine::BlockCopy> copies) override;

  void Synchronize() override {
    if (!error_.ok()) return;
    Check(CudaCall(cudaStreamSynchronize(stream_), "Synchronize"));
  }

  void Embed(const engine::WeightMatrix& table, const engine::BatchMetadata& batch, float* out) override {
    if (!BeginOp()) return;
    const int32_t* ids = InStep(batch) ? step_.at<int32_t>(kStepTokenIds) : Upload(batch.token_ids, 0);
    if (!ids) return;
    Check(EmbedRowsF32(static_cast<const uint8_t*>(table.data), table.type == engine::GgmlType::kQ8_0, table.cols,
                       ids, batch.num_tokens(), out, stream_));
  }

  void RmsNorm(const float* x, const float* weight, int64_t t, int64_t d, float eps, float* out) override {
    if (!BeginOp()) return;
    __nv_bfloat16* twin = Twin(t * d);
    if (!Live()) return;
    if (Check(RmsNormF32(x, weight, out, t, d, eps, twin, stream_)) && twin) twins_.Wrote(out, t * d, twin);
  }

  void MatMul(const float* x, int64_t t, int64_t k, std::span<const engine::MatMulOutput> outs) override {
    if (!BeginOp() || t <= 0) return;
    int64_t max_n = 0;
    for (const auto& o : outs) max_n = std::max(max_n, o.w->rows);
    const size_t xb = static_cast<size_t>(t * k) * 2;
    if (!Reserve(act_, xb + static_cast<size_t>(t * max_n) * 2)) return;
    // With fp8_gemm every product but the output head's goes through Fp8Linear (the activations
    // quantized once for all of them), except one whose shape or alignment cuBLASLt FP8 refuses,
    // which runs in bf16. The head is alone in its call (ModelRunner), so a call is one or the other.
    const bool fp8 = fp8_ != nullptr && !outs.front().w->output_head;
    if (fp8 && (!Fp8ActivationsFit(t * k) || !Check(fp8_->QuantizeActivations(x, t, k, stream_)))) return;
    const __nv_bfloat16* xbf = nullptr;  // the bf16 input, made when a bf16 product first needs it
    for (const auto& o : outs) {
      const __nv_bfloat16* w = Dequantized(*o.w);
      if (!w) return;
      if (fp8) {
        if (!Fp8WeightReady(w, *o.w)) return;
        const CudaStatus st = fp8_->Run(w, o.w->rows, o.out, t, k, stream_);
        if (st.ok()) continue;
        if (st.kind != CudaStatusKind::kInvalidArgument) {
          Check(st);
          return;
        }
      }
      if (!xbf) {
        xbf = static_cast<const __nv_bfloat16*>(twins_.TwinOf(x, t * k));  // none with twins off
        if (!xbf && !Check(F32ToBf16(x, act_.as<__nv_bfloat16>(), t * k, stream_))) return;
        if (!xbf) xbf = act_.as<__nv_bfloat16>();
      }
      if (!MatMulBf16(xbf, w, o, t, k, act_.as<__nv_bfloat16>(xb))) return;
    }
  }

  void Rope(float* x, int64_t heads, int64_t head_dim, float theta, const engine::BatchMetadata& batch) override {
    if (!BeginOp()) return;
    const int32_t* pos = InStep(batch) ? step_.at<int32_t>(kStepPositions) : Upload(batch.positions, 0);
    if (!pos) return;
    // Single precision from the tables (rope_table.h) when every position is inside them; the
    // double-precision reduction per element otherwise.
    bool in_table = true;
    for (int32_t p : batch.positions) in_table &= p >= 0 && p < kRopeMaxPositions;
    if (in_table) {
      const engine::DeviceBuffer* table = RopeTableFor(theta, static_cast<int>(head_dim));
      if (!table) return;
      const auto* t = static_cast<const float*>(table->data());
      const size_t low_floats = static_cast<size_t>(kRopeLowPositions) * static_cast<size_t>(head_dim);
      Check(RopeInterleavedF32Table(x, batch.num_tokens(), heads, head_dim, pos, t, t + low_floats, stream_));
      return;
    }
    Check(RopeInterleavedF32(x, batch.num_tokens(), heads, head_dim, pos, theta, stream_));
  }

  void WriteKv(const float* k, const float* v, int64_t kv_dim, const engine::BatchMetadata& batch,
               const engine::KvCacheLayer& cache) override {
    if (!BeginOp()) return;
    const int64_t* slots = InStep(batch) ? step_.at<int64_t>(kStepSlots) : Upload(batch.slot_mapping, 0);
    if (!slots) return;
    // f16 only: Backend::SupportsKvDtype's default, so ModelRunner never hands this backend another.
    Check(WriteKvF16(k, v, batch.num_tokens(), kv_dim, slots, static_cast<uint16_t*>(cache.k),
                     static_cast<uint16_t*>(cache.v), stream_));
  }

  void Attention(const float* q, const engine::KvCacheLayer& cache, const engine::AttentionShape& shape,
                 const engine::BatchMetadata& batch, float* out) override;

  void SwiGlu(const float* gate, const float* up, int64_t n, float* out) override {
    if (!BeginOp()) return;
    __nv_bfloat16* twin = Twin(n);
    if (!Live()) return;
    if (Check(SwiGluF32(gate, up, n, out, twin, stream_)) && twin) twins_.Wrote(out, n, twin);
  }

  void Add(float* x, const float* y, int64_t n) override {
    if (!BeginOp()) return;
    Check(AddF32(x, y, n, stream_));
  }

  void GatherRows(const float* x, int64_t d, std::span<const int32_t> rows, float* out) override {
    if (!BeginOp()) return;
    const int32_t* r = step_.active && rows.data() == step_.gather_rows ? step_.at<int32_t>(kStepGatherRows)
                                                                        : Upload(rows, 0);
    if (!r) return;
    Check(GatherRowsF32(x, d, r, static_cast<int64_t>(rows.size()), out, stream_));
  }

 private:
  // Keeps the first error. During a capture a failure is not yet an error: the capture is given up
  // (the remaining ops no-op), the key falls back to eager (StepGraphCache::Failed) and the step's
  // eager rerun meets the failure again if it is real.
  bool Check(const CudaStatus& s) {
    if (s.ok()) return true;
    if (capturing_) {
      capture_failed_ = abandoned_ = true;
      cudaGetLastError();
    } else if (error_.ok()) {
      error_ = s;
    }
    return false;
  }
  std::unexpected<Error> ToStatusError() const { return std::unexpected(status().error()); }
  // Ops do nothing after an error, and for the rest of a capture the backend abandoned.
  bool Live() const { return error_.ok() && !abandoned_; }
  // The start of every op (OpTwins counts them: a twin is only good for the op right after).
  bool BeginOp() {
    twins_.NextOp();
    return Live();
  }
  // Where a producer op writes the bf16 twin of its `elems` outputs; null with twins off or when
  // the scratch could not grow (the op then runs without one). None with fp8_gemm either: its
  // MatMuls quantize the f32 activations, and only the output head (one conversion a step) and a
  // refused shape read bf16.
  __nv_bfloat16* Twin(int64_t elems) {
    if (!options_.bf16_twins || fp8_ || elems <= 0) return nullptr;
    if (!Reserve(twin_, static_cast<size_t>(elems) * 2)) return nullptr;
    return twin_.as<__nv_bfloat16>();
  }
  bool InStep(const engine::BatchMetadata& batch) const { return step_.active && step_.batch == &batch; }

  // Grows `s` to `bytes`. Growth cannot be recorded (cudaMalloc, a stream sync), so during a capture
  // it abandons the capture instead (the step reruns eagerly and grows then). Graphs hold the old
  // address, so growth drops them.
  bool Reserve(Scratch& s, size_t bytes) {
    if (s.Fits(bytes)) return true;
    if (capturing_) {
      abandoned_ = true;
      return false;
    }
    if (!Check(s.Reserve(bytes, stream_))) return false;
    graphs_.Clear();
    return true;
  }

  // Copies a host span into the metadata scratch at `offset` bytes (16-byte aligned by callers);
  // stream-ordered, so reusing the region for the next op is safe. Null on failure.
  // Ops called outside a step (tests, direct callers) only: a pageable copy cannot be recorded, so
  // one during a capture abandons it.
  template <typename T>
  T* Upload(std::span<const T> v, size_t offset) {
    if (capturing_) {
      abandoned_ = true;
      return nullptr;
    }
    const size_t bytes = v.size() * sizeof(T);
    if (!Reserve(meta_, offset + bytes + 16)) return nullptr;
    if (bytes && !Check(CudaCall(cudaMemcpyAsync(meta_.as<char>(offset), v.data(), bytes, cudaMemcpyHostToDevice,
                                                 stream_), "metadata upload")))
      return nullptr;
    return meta_.as<T>(offset);
  }

  // DecodeCtasPerSm of the decode kernel this backend runs for (D, G), queried once; -1 when the
  // query failed (recorded) or must wait for the eager rerun of a capture.
  int DecodeCtasPerSmFor(int head_dim, int group) {
    const auto key = std::make_pair(head_dim, group);
    auto it = decode_ctas_.find(key);
    if (it != decode_ctas_.end()) return it->second;
    if (capturing_) {  // cudaFuncSetAttribute / occupancy queries are kept out of recordings
      abandoned_ = true;
      return -1;
    }
    int n = 0;
    if (!Check(DecodeCtasPerSm(KvDtype::kF16, head_dim, group, options_.decode_variant, &n))) return -1;
    decode_ctas_.emplace(key, n);
    return n;
  }

  // The RoPE tables of (theta, head_dim), low then high, built and uploaded on first use (an
  // allocation: during a capture the capture is abandoned and the eager rerun builds them).
  const engine::DeviceBuffer* RopeTableFor(float theta, int head_dim) {
    const auto key = std::make_pair(theta, head_dim);
    auto it = rope_tables_.find(key);
    if (it != rope_tables_.end()) return &it->second;
    if (capturing_) {
      abandoned_ = true;
      return nullptr;
    }
    RopeTable t;
    if (!Check(BuildRopeTable(theta, head_dim, &t))) return nullptr;
    std::vector<float> both(t.low);
    both.insert(both.end(), t.high.begin(), t.high.end());
    auto buf = Allocate(both.size() * sizeof(float));
    if (!buf) {
      Check({CudaStatusKind::kCudaError, static_cast<int>(cudaErrorMemoryAllocation), "rope table"});
      return nullptr;
    }
    if (!Check(CudaCall(cudaMemcpyAsync(buf->data(), both.data(), both.size() * sizeof(float), cudaMemcpyHostToDevice,
                                        stream_), "rope table upload")) ||
        !Check(CudaCall(cudaStreamSynchronize(stream_), "rope table sync")))
      return nullptr;
    return &rope_tables_.emplace(key, *buf).first->second;
  }

  const __nv_bfloat16* Dequantized(const engine::WeightMatrix& w) {
    auto it = dequantized_.find(w.data);
    if (it != dequantized_.end()) return static_cast<const __nv_bfloat16*>(it->second.data());
    if (capturing_) {  // an allocation: the step's eager rerun converts it
      abandoned_ = true;
      return nullptr;
    }
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

  // One bf16 product into o.out (f32). cuBLASLt writes the f32 output directly (no bf16 rounding,
  // no conversion kernel); where it has no algorithm for that (checked once), the bf16 output in
  // `ybf` [t][N] and a conversion.
  bool MatMulBf16(const __nv_bfloat16* xbf, const __nv_bfloat16* w, const engine::MatMulOutput& o, int64_t t,
                  int64_t k, __nv_bfloat16* ybf) {
    const int64_t n = o.w->rows;
    if (gemm_f32_out_) {
      const CudaStatus st = gemm_->Run(xbf, k, w, k, o.out, n, t, n, k, 1.0f, 0.0f, stream_);
      if (st.ok()) return true;
      if (st.kind != CudaStatusKind::kCublasError) return Check(st);
      gemm_f32_out_ = false;
    }
    return Check(gemm_->Run(xbf, k, w, k, ybf, n, t, n, k, 1.0f, 0.0f, stream_)) &&
           Check(Bf16ToF32(ybf, o.out, t * n, stream_));
  }

  // The FP8 codes of weight `w` (its bf16 copy `bf`), quantized on first use, and the activation
  // scratch grown to `elems` codes. Both allocate, so a capture that needs either is abandoned
  // (its eager rerun makes them), as Dequantized does.
  bool Fp8WeightReady(const __nv_bfloat16* bf, const engine::WeightMatrix& w) {
    if (fp8_->HasWeight(bf)) return true;
    if (capturing_) {
      abandoned_ = true;
      return false;
    }
    return Check(fp8_->PrepareWeight(bf, w.rows, w.cols, stream_));
  }
  bool Fp8ActivationsFit(int64_t elems) {
    if (fp8_->ActivationsFit(elems)) return true;
    if (capturing_) {
      abandoned_ = true;
      return false;
    }
    if (!Check(fp8_->ReserveActivations(elems, stream_))) return false;
    graphs_.Clear();  // recorded steps read the old scratch
    return true;
  }

  const CudaBackendOptions options_;
  cudaStream_t stream_;
  int num_sms_;
  std::unique_ptr<GemmBf16> gemm_;
  std::unique_ptr<Fp8Linear> fp8_;  // set with options.fp8_gemm
  std::string name_ = "cuda";
  CudaStatus error_;
  Scratch meta_, act_, attn_;
  // The bf16 twin of the last RMSNorm / SwiGLU output (attention's is its own bf16 output in attn_).
  Scratch twin_;
  OpTwins twins_;
  // Whole steps: the staged metadata (pinned host -> step_meta_, one copy per step; the event
  // marks when the host side may be rewritten) and the graphs of recorded decode steps.
  Scratch step_meta_;
  PinnedHost staging_;
  cudaEvent_t staged_event_ = nullptr;
  // CopyBlocks' arguments (plane pointers, sizes, pairs), read by the kernel from pinned memory;
  // the event marks when the previous copy's have been read.
  PinnedHost copy_args_;
  cudaEvent_t copy_args_event_ = nullptr;
  std::vector<int32_t> step_tiles_;
  int step_tile_tokens_ = 0;     // the tile size step_tiles_ were built with
  int prefill_tile_tokens_ = 0;  // the tile size of the last prefill (v2's depends on G)
  ActiveStep step_;
  StepGraphCache<engine::StepKey> graphs_;
  uint64_t graphs_generation_ = 0;  // StepKey::activations the cached graphs were recorded at
  bool capturing_ = false, abandoned_ = false, capture_failed_ = false;
  bool gemm_f32_out_ = true;  // cuBLASLt found an f32-output algorithm so far (MatMul)
  std::vector<engine::DeviceBuffer> uploaded_;                   // weights copied by UploadWeights
  std::map<const void*, engine::DeviceBuffer> dequantized_;      // quantized data -> bf16 copy
  std::map<std::pair<float, int>, engine::DeviceBuffer> rope_tables_;  // (theta, head dim) -> RopeTable
  std::map<std::pair<int, int>, int> decode_ctas_;                     // (head dim, group) -> CTAs/SM
};

void CudaBackendImpl::Attention(const float* q, const engine::KvCacheLayer& cache,
                                const engine::AttentionShape& shape, const engine::BatchMetadata& batch,
                                float* out) {
  if (!BeginOp()) return;
  const int64_t t = batch.num_tokens(), s = batch.num_seqs();
  const int h = static_cast<int>(shape.heads), hkv = static_cast<int>(shape.kv_heads),
            d = static_cast<int>(shape.head_dim);
  if (batch.block_size != engine::kBlockSize) {
    Check(CudaStatus::Invalid("cuda backend: the batch's KV block size is not engine::kBlockSize"));
    return;
  }
  if (cache.num_blocks <= 0) {
    Check(CudaStatus::Invalid("cuda backend: KvCacheLayer.num_blocks must be the pool size"));
    return;
  }
  // Rows [0, n_dec) (the leading one-token sequences) go to the decode kernel, the rest to prefill
  // tiles; n_dec == s is a pure decode step, n_dec == 0 a step of prefill tiles only.
  const AttentionRowSplit split = SplitAttentionRows(batch.query_start, options_.mixed_decode_rows);
  const int n_dec = split.decode_seqs;
  const bool decode = n_dec == s, prefill = n_dec < s;
  int dec_ctx = 0, pre_ctx = 0;
  for (int64_t i = 0; i < s; ++i) {
    int& longest = i < n_dec ? dec_ctx : pre_ctx;
    longest = std::max(longest, batch.context_lens[i]);
  }
  // Prefill tiles are the variant's size (v2: 128 / G tokens). BeginStep staged tiles of the size
  // the last prefill used; a step whose size differs uploads its own (never in a capture: only
  // pure decode steps are recorded).
  const int tile_tokens = PrefillTileTokens(options_.prefill_variant, hkv > 0 ? h / hkv : 0);
  if (prefill) prefill_tile_tokens_ = tile_tokens;
  const int32_t *tables, *ctx, *qs, *dtiles;
  size_t num_tiles = 0;
  if (InStep(batch)) dec_ctx = std::max(dec_ctx, step_.geometry_context);
  if (InStep(batch) && (decode || step_tile_tokens_ == tile_tokens)) {
    tables = step_.at<int32_t>(kStepBlockTables);
    ctx = step_.at<int32_t>(kStepContextLens);
    qs = step_.at<int32_t>(kStepQueryStart);
    dtiles = step_.at<int32_t>(kStepPrefillTiles);
    num_tiles = step_tiles_.size() / 2;
  } else {
    std::vector<int32_t> tiles;
    if (prefill && !Check(BuildPrefillTiles(split.prefill_q_lens, tile_tokens, &tiles))) return;
    // Metadata layout in meta_: tables | context_lens | query_start | tiles, each 256-byte aligned.
    auto align = [](size_t x) { return (x + 255) / 256 * 256; };
    const size_t o_ctx = align(batch.block_tables.size_bytes());
    const size_t o_qs = o_ctx + align(batch.context_lens.size_bytes());
    const size_t o_tiles = o_qs + align(batch.query_start.size_bytes());
    if (!Reserve(meta_, o_tiles + align(tiles.size() * 4) + 16)) return;
    tables = Upload(batch.block_tables, 0);
    ctx = Upload(batch.context_lens, o_ctx);
    qs = Upload(batch.query_start, o_qs);
    dtiles = Upload(std::span<const int32_t>(tiles), o_tiles);
    num_tiles = tiles.size() / 2;
  }
  if (!tables || !ctx || !qs || !dtiles) return;
  // The tiles must be the ones this launch's geometry expects: a count built for another tile size
  // or another split of the rows would leave rows unwritten (v2 given v1's tiles) or run rows twice.
  if (prefill && static_cast<int64_t>(num_tiles) != PrefillTileCount(split.prefill_q_lens, tile_tokens)) {
    Check(CudaStatus::Invalid("cuda backend: prefill tiles do not match the variant's tile size"));
    return;
  }
  const PagedKv kv{cache.k, cache.v, nullptr, nullptr, cache.num_blocks, hkv, d, KvDtype::kF16};
  const size_t qo = static_cast<size_t>(t) * h * d * 2;
  DecodeGeometry dg;
  PrefillGeometry pg;
  size_t ws_dec = 0, ws_pre = 0;  // floats; the two launches' workspaces are separate regions
  if (n_dec > 0) {
    DecodeShape shape_d{n_dec, h, hkv, d, dec_ctx};
    shape_d.variant = options_.decode_variant;
    shape_d.ctas_per_sm = DecodeCtasPerSmFor(d, hkv > 0 ? h / hkv : 0);
    if (shape_d.ctas_per_sm < 0) return;
    if (!Check(ChooseDecodeGeometry(shape_d, num_sms_, &dg))) return;
    ws_dec = dg.workspace_floats;
  }
  if (prefill) {
    PrefillShape shape_p{static_cast<int>(s), static_cast<int>(t), h, hkv, d, pre_ctx};
    shape_p.variant = options_.prefill_variant;
    if (!Check(ChoosePrefillGeometry(shape_p, static_cast<int>(num_tiles), num_sms_, &pg))) return;
    ws_pre = pg.workspace_floats;
  }
  if (!Reserve(attn_, 2 * qo + (ws_dec + ws_pre) * 4)) return;
  auto* qb = attn_.as<__nv_bfloat16>();
  auto* ob = attn_.as<__nv_bfloat16>(qo);
  float* ws_d = ws_dec ? attn_.as<float>(2 * qo) : nullptr;
  float* ws_p = ws_pre ? attn_.as<float>(2 * qo + ws_dec * 4) : nullptr;
  if (!Check(F32ToBf16(q, qb, t * h * d, stream_))) return;
  // Prefill first: with a split context its reduce writes every one of the T output rows, the
  // decode rows too (from workspace no tile wrote). The decode launch after it writes those rows
  // again, correctly; in the other order the reduce would overwrite them.
  if (prefill) {
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
    a.tile_tokens = tile_tokens;
    a.num_q_heads = h;
    a.softmax_scale = shape.scale;
    a.geo = pg;
    a.workspace = ws_p;
    if (!Check(PrefillAttention(a, stream_))) return;
  }
  if (n_dec > 0) {
    // The decode sequences lead the batch with one token each, so sequence i's query row, block
    // table row and context length are all at index i of the batch's arrays.
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
    a.workspace = ws_d;
    if (!Check(DecodeAttention(a, stream_))) return;
  }
  if (Check(Bf16ToF32(ob, out, t * h * d, stream_)) && options_.bf16_twins) twins_.Wrote(out, t * h * d, ob);
}

engine::StepMode CudaBackendImpl::BeginStep(const engine::BatchMetadata& batch,
                                           std::span<const int32_t> gather_rows, const engine::StepKey& key) {
  step_ = ActiveStep{};
  abandoned_ = capture_failed_ = false;
  if (!error_.ok()) return engine::StepMode::kEager;
  const bool decode = batch.num_tokens() == batch.num_seqs();
  step_tiles_.clear();
  step_tile_tokens_ = prefill_tile_tokens_;
  if (!decode &&
      !Check(BuildPrefillTiles(SplitAttentionRows(batch.query_start, options_.mixed_decode_rows).prefill_q_lens,
                               step_tile_tokens_, &step_tiles_)))
    return engine::StepMode::kEager;
  StepSources src;
  auto add = [&src](StepArray a, auto span) {
    src.data[a] = span.data();
    src.bytes[a] = span.size_bytes();
  };
  add(kStepTokenIds, batch.token_ids);
  add(kStepPositions, batch.positions);
  add(kStepSlots, batch.slot_mapping);
  add(kStepQueryStart, batch.query_start);
  add(kStepContextLens, batch.context_lens);
  add(kStepBlockTables, batch.block_tables);
  add(kStepGatherRows, gather_rows);
  add(kStepPrefillTiles, std::span<const int32_t>(step_tiles_));
  const StepLayout layout = PlanStepLayout(src);
  // The previous step's copy reads the pinned buffer until its event; growing the device side
  // frees the address the graphs read, so they go (Scratch::Reserve waits for the stream first).
  if (staged_event_ == nullptr &&
      !Check(CudaCall(cudaEventCreateWithFlags(&staged_event_, cudaEventDisableTiming), "cudaEventCreate")))
    return engine::StepMode::kEager;
  if (!Check(CudaCall(cudaEventSynchronize(staged_event_), "staging event")) || !Check(staging_.Reserve(layout.total)) ||
      !Reserve(step_meta_, layout.total))
    return engine::StepMode::kEager;
  PackStep(src, layout, staging_.bytes());
  if (!Check(CudaCall(cudaMemcpyAsync(step_meta_.as<char>(), staging_.bytes().data(), layout.total,
                                      cudaMemcpyHostToDevice, stream_), "step metadata copy")) ||
      !Check(CudaCall(cudaEventRecord(staged_event_, stream_), "staging event record")))
    return engine::StepMode::kEager;
  step_.active = true;
  step_.batch = &batch;
  step_.gather_rows = gather_rows.data();
  step_.layout = layout;
  step_.device = step_meta_.as<char>();
  step_.key = key;
  if (!key.graph || !decode) return engine::StepMode::kEager;
  // The bound every recording of this key is planned for (the kernels skip splits past a context).
  step_.geometry_context = key.table_width * batch.block_size;
  if (key.activations != graphs_generation_) {  // the runner's buffers moved: old graphs are stale
    graphs_.Clear();
    graphs_generation_ = key.activations;
  }
  switch (graphs_.Next(key)) {
    case StepGraphCache<engine::StepKey>::Action::kReplay:
      if (cudaGraphLaunch(static_cast<cudaGraphExec_t>(graphs_.exec(key)), stream_) != cudaSuccess) {
        cudaGetLastError();  // the graph did not run: this key goes eager, the ops run now
        graphs_.Failed(key);
        return engine::StepMode::kEager;
      }
      return engine::StepMode::kReplayed;
    case StepGraphCache<engine::StepKey>::Action::kCapture:
      if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        graphs_.Failed(key);
        return engine::StepMode::kEager;
      }
      capturing_ = true;
      return engine::StepMode::kCapture;
    case StepGraphCache<engine::StepKey>::Action::kEager:
      break;
  }
  return engine::StepMode::kEager;
}

bool CudaBackendImpl::CopyBlocks(std::span<const engine::BlockPlane> src,
                                  std::span<const engine::BlockPlane> dst,
                                  std::span<const engine::BlockCopy> copies) {
  if (src.size() != dst.size()) return false;
  if (!Live() || copies.empty() || src.empty()) return true;  // errors are in status()
  if (capturing_) return Check(CudaStatus::Invalid("CopyBlocks inside a recorded step"));
  const size_t n = src.size(), m = copies.size();
  for (size_t p = 0; p < n; ++p) {
    if (src[p].block_bytes != dst[p].block_bytes || src[p].block_bytes % 16 ||
        (reinterpret_cast<uintptr_t>(src[p].base) | reinterpret_cast<uintptr_t>(dst[p].base)) & 15u)
      return Check(CudaStatus::Invalid("CopyBlocks: planes must be 16-byte aligned and sized"));
  }
  // [src planes][dst planes][bytes per block][pairs]: all 8-byte entries.
  const size_t bytes = (3 * n + m) * sizeof(int64_t);
  if (copy_args_event_ == nullptr &&
      !Check(CudaCall(cudaEventCreateWithFlags(&copy_args_event_, cudaEventDisableTiming), "cudaEventCreate")))
    return true;
  if (!Check(CudaCall(cudaEventSynchronize(copy_args_event_), "copy args event")) || !Check(copy_args_.Reserve(bytes)))
    return true;
  auto* base = reinterpret_cast<std::byte*>(copy_args_.bytes().data());
  auto* src_planes = reinterpret_cast<const void**>(base);
  auto* dst_planes = reinterpret_cast<void**>(base + n * 8);
  auto* sizes = reinterpret_cast<int64_t*>(base + 2 * n * 8);
  auto* pairs = reinterpret_cast<int2*>(base + 3 * n * 8);
  for (size_t p = 0; p < n; ++p) {
    src_planes[p] = src[p].base;
    dst_planes[p] = dst[p].base;
    sizes[p] = src[p].block_bytes;
  }
  for (size_t c = 0; c < m; ++c) pairs[c] = int2{copies[c].src, copies[c].dst};
  const BlockCopyArgs args{src_planes, dst_planes, sizes, static_cast<int>(n), pairs, static_cast<int>(m)};
  Check(cuda::CopyBlocks(args, stream_)) &&
      Check(CudaCall(cudaEventRecord(copy_args_event_, stream_), "copy args event record"));
  return true;
}

bool CudaBackendImpl::EndStep() {
  if (!capturing_) {
    step_.active = false;
    return true;
  }
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  const std::unique_ptr<CUgraph_st, cudaError_t (*)(cudaGraph_t)> owned(graph, cudaGraphDestroy);
  // Nothing of a captured step has run yet, so whatever goes wrong from here the runner can issue
  // the ops again, eagerly (returning false keeps step_ for that rerun).
  auto rerun_eagerly = [this](bool failed) {
    cudaGetLastError();  // clears a capture error so the eager ops do not inherit it
    abandoned_ = capture_failed_ = false;
    if (failed) {
      graphs_.Failed(step_.key);
    } else {
      graphs_.Abandoned(step_.key);
    }
    return false;
  };
  if (!error_.ok()) {  // an error from before the capture: the step fails as it would eagerly
    step_.active = false;
    return true;
  }
  if (capture_failed_) return rerun_eagerly(true);
  if (abandoned_) return rerun_eagerly(false);  // not an error: the step needed an allocation
  if (end != cudaSuccess || graph == nullptr) return rerun_eagerly(true);
  cudaGraphExec_t exec = nullptr;
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return rerun_eagerly(true);
  std::shared_ptr<void> owned_exec(exec, [](void* e) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e)); });
  if (cudaGraphLaunch(exec, stream_) != cudaSuccess) return rerun_eagerly(true);
  graphs_.Captured(step_.key, std::move(owned_exec));
  step_.active = false;
  return true;
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
  std::unique_ptr<Fp8Linear> fp8;
  if (options.fp8_gemm) {
    if (Status s = ToStatus(Fp8Linear::Create(options.gemm_workspace_bytes, &fp8)); !s)
      return std::unexpected(s.error());
  }
  cudaStream_t stream = nullptr;
  if (Status s = ToStatus(CudaCall(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate")); !s)
    return std::unexpected(s.error());
  return std::unique_ptr<CudaBackend>(new CudaBackendImpl(options, stream, sms, std::move(gemm), std::move(fp8)));
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
  return tokens / engine::kBlockSize * engine::kBlockSize;
}

}  // namespace kvgate::cuda
