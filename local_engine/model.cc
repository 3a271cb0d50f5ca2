#include "local_engine/model.h"

#include <cmath>
#include <string>

namespace kvgate::engine {

int64_t KvBytesPerToken(const LlamaDims& d, KvDtype dtype) {
  return static_cast<int64_t>(KvBytesPerTokenMha(static_cast<uint64_t>(d.n_layers),
                                                 static_cast<uint64_t>(d.kv_heads),
                                                 static_cast<uint64_t>(d.head_dim), dtype));
}

int64_t KvBlocksForBytes(const LlamaDims& d, KvDtype dtype, int32_t block_size, uint64_t bytes) {
  const uint64_t block = static_cast<uint64_t>(KvBytesPerToken(d, dtype)) * block_size;
  return block == 0 ? 0 : static_cast<int64_t>(bytes / block);
}

Result<std::unique_ptr<ModelRunner>> ModelRunner::Create(const ModelWeights& weights,
                                                         Backend& backend, KvCacheConfig config,
                                                         RunnerOptions options) {
  if (config.num_blocks <= 0 || config.block_size <= 0 || config.block_size > 64) {
    return MakeError(ErrorCode::kInvalidArgument, "kv cache: bad block configuration");
  }
  if (!backend.SupportsKvDtype(config.dtype)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "kv_cache_dtype " + std::string(KvDtypeName(config.dtype)) + ": the " +
                         std::string(backend.Name()) + " backend does not serve it (use f16)");
  }
  std::unique_ptr<ModelRunner> r(new ModelRunner(weights, backend, config, options));
  const LlamaDims& d = weights.dims;
  // One layer's K (or V): the per-token bytes' share of one layer and one of K, V.
  const size_t layer_bytes = static_cast<size_t>(config.num_blocks) * config.block_size *
                             static_cast<size_t>(engine::KvBytesPerToken(d, config.dtype) /
                                                 (2 * d.n_layers));
  // Zeroing touches every byte: a pool over the machine's memory ends with the kernel killing the
  // process, not with an error anyone can read.
  const size_t total = layer_bytes * 2 * static_cast<size_t>(d.n_layers);
  if (const size_t capacity = backend.MemoryCapacity(); capacity > 0 && total > capacity) {
    return MakeError(ErrorCode::kResourceExhausted,
                     "kv cache: " + std::to_string(int64_t{config.num_blocks} * config.block_size) +
                         " tokens need " + std::to_string(total) + " bytes, more than the " +
                         std::to_string(capacity) + " bytes of " + std::string(backend.Name()) +
                         " memory (a smaller kv_cache_tokens?)");
  }
  for (int64_t l = 0; l < d.n_layers; ++l) {
    auto k = backend.Allocate(layer_bytes);
    if (!k) return std::unexpected(k.error());
    auto v = backend.Allocate(layer_bytes);
    if (!v) return std::unexpected(v.error());
    r->k_cache_.push_back(std::move(*k));
    r->v_cache_.push_back(std::move(*v));
  }
  return r;
}

Status ModelRunner::ReadBlock(int32_t block, std::span<std::byte> out) {
  const size_t part = static_cast<size_t>(KvBytesPerBlock() / (2 * weights_.dims.n_layers));
  if (block < 0 || block >= config_.num_blocks || out.size() != part * 2 * k_cache_.size()) {
    return MakeError(ErrorCode::kInvalidArgument, "kv cache: bad block read");
  }
  std::byte* dst = out.data();
  for (size_t l = 0; l < k_cache_.size(); ++l) {
    for (const DeviceBuffer* cache : {&k_cache_[l], &v_cache_[l]}) {
      backend_.CopyToHost(static_cast<const std::byte*>(cache->data()) + block * part, dst, part);
      dst += part;
    }
  }
  backend_.Synchronize();
  return backend_.status();
}

Status ModelRunner::WriteBlock(int32_t block, std::span<const std::byte> in) {
  const size_t part = static_cast<size_t>(KvBytesPerBlock() / (2 * weights_.dims.n_layers));
  if (block < 0 || block >= config_.num_blocks || in.size() != part * 2 * k_cache_.size()) {
    return MakeError(ErrorCode::kInvalidArgument, "kv cache: bad block write");
  }
  const std::byte* src = in.data();
  for (size_t l = 0; l < k_cache_.size(); ++l) {
    for (const DeviceBuffer* cache : {&k_cache_[l], &v_cache_[l]}) {
      if (!backend_.CopyFromHost(src, static_cast<std::byte*>(cache->data()) + block * part,
                                 part)) {
        return MakeError(ErrorCode::kUnavailable,
                         std::string(backend_.Name()) + " backend cannot restore KV blocks");
      }
      src += part;
    }
  }
  backend_.Synchronize();
  return backend_.status();
}

std::vector<BlockPlane> ModelRunner::KvPlanes() const {
  const int64_t part = KvBytesPerBlock() / (2 * weights_.dims.n_layers);
  std::vector<BlockPlane> planes;
  for (size_t l = 0; l < k_cache_.size(); ++l) {
    for (const DeviceBuffer* cache : {&k_cache_[l], &v_cache_[l]}) {
      planes.push_back({static_cast<std::byte*>(cache->data()), part});
    }
  }
  return planes;
}

Status ModelRunner::CopyBlock(int32_t src, int32_t dst) {
  if (src < 0 || src >= config_.num_blocks || dst < 0 || dst >= config_.num_blocks) {
    return MakeError(ErrorCode::kInvalidArgument, "kv cache: bad block copy");
  }
  const std::vector<BlockPlane> planes = KvPlanes();
  const BlockCopy copy{src, dst};
  if (backend_.CopyBlocks(planes, planes, {&copy, 1})) return backend_.status();
  std::vector<std::byte> bytes(static_cast<size_t>(KvBytesPerBlock()));
  if (auto s = ReadBlock(src, bytes); !s) return s;
  return WriteBlock(dst, bytes);
}

Status ModelRunner::EnsureActivations(int64_t t, int64_t rows_out) {
  const LlamaDims& d = weights_.dims;
  auto alloc = [&](DeviceBuffer& b, int64_t floats) -> Status {
    auto r = backend_.Allocate(static_cast<size_t>(floats) * sizeof(float));
    if (!r) return std::unexpected(r.error());
    b = std::move(*r);
    return {};
  };
  if (t > capacity_tokens_) {
    const int64_t qd = d.heads * d.head_dim, kvd = d.kv_heads * d.head_dim;
    for (auto [buf, width] : {std::pair{&x_, d.hidden}, {&xn_, d.hidden}, {&q_, qd}, {&k_, kvd},
                              {&v_, kvd}, {&attn_, qd}, {&tmp_, d.hidden}, {&gate_, d.ffn},
                              {&up_, d.ffn}}) {
      if (auto s = alloc(*buf, t * width); !s) return s;
    }
    capacity_tokens_ = t;
    ++activation_generation_;
  }
  if (rows_out > capacity_rows_) {
    if (auto s = alloc(last_, rows_out * d.hidden); !s) return s;
    if (auto s = alloc(logits_, rows_out * d.vocab); !s) return s;
    capacity_rows_ = rows_out;
    ++activation_generation_;
  }
  return {};
}

bool ModelRunner::IssueOps(const BatchMetadata& batch, int64_t rows_out,
                           const std::atomic<bool>* abort) {
  const LlamaDims& d = weights_.dims;
  const int64_t t = batch.num_tokens();
  const int64_t dm = d.hidden, qd = d.heads * d.head_dim, kvd = d.kv_heads * d.head_dim;
  const AttentionShape shape{d.heads, d.kv_heads, d.head_dim,
                             1.0f / std::sqrt(static_cast<float>(d.head_dim))};
  Backend& be = backend_;
  float *x = x_.f32(), *xn = xn_.f32(), *q = q_.f32(), *k = k_.f32(), *v = v_.f32();
  float *attn = attn_.f32(), *tmp = tmp_.f32(), *gate = gate_.f32(), *up = up_.f32();

  be.Embed(weights_.token_embd, batch, x);  // x [T, D]
  for (int64_t l = 0; l < d.n_layers; ++l) {
    if (abort && abort->load(std::memory_order_relaxed)) return false;
    const LayerWeights& w = weights_.layers[l];
    const KvCacheLayer cache{k_cache_[l].data(), v_cache_[l].data(), config_.num_blocks,
                             config_.dtype, static_cast<int32_t>(d.kv_heads),
                             static_cast<int32_t>(d.head_dim)};
    be.RmsNorm(x, w.attn_norm, t, dm, d.rms_eps, xn);
    const MatMulOutput qkv[] = {{&w.q, q}, {&w.k, k}, {&w.v, v}};  // [T, H*Dh], [T, Hkv*Dh] x2
    be.MatMul(xn, t, dm, qkv);
    be.Rope(q, d.heads, d.head_dim, d.rope_theta, batch);
    be.Rope(k, d.kv_heads, d.head_dim, d.rope_theta, batch);
    be.WriteKv(k, v, kvd, batch, cache);
    be.Attention(q, cache, shape, batch, attn);  // attn [T, H*Dh]
    const MatMulOutput o[] = {{&w.o, tmp}};       // tmp [T, D]
    be.MatMul(attn, t, qd, o);
    be.Add(x, tmp, t * dm);
    be.RmsNorm(x, w.ffn_norm, t, dm, d.rms_eps, xn);
    const MatMulOutput gu[] = {{&w.gate, gate}, {&w.up, up}};  // [T, F] x2
    be.MatMul(xn, t, dm, gu);
    be.SwiGlu(gate, up, t * d.ffn, gate);
    const MatMulOutput down[] = {{&w.down, tmp}};  // tmp [T, D]
    be.MatMul(gate, t, d.ffn, down);
    be.Add(x, tmp, t * dm);
  }
  float* last = last_.f32();
  be.GatherRows(x, dm, rows_, last);                              // [R, D]
  be.RmsNorm(last, weights_.output_norm, rows_out, dm, d.rms_eps, last);
  const MatMulOutput head[] = {{&weights_.output, logits_.f32()}};  // [R, V]
  be.MatMul(last, rows_out, dm, head);
  return true;
}

Status ModelRunner::Forward(const BatchMetadata& batch, LogitsMode mode,
                            std::vector<float>& logits, const std::atomic<bool>* abort) {
  if (auto s = ValidateBatch(batch, config_.num_blocks); !s) return s;
  if (batch.block_size != config_.block_size) {
    return MakeError(ErrorCode::kInvalidArgument, "batch block size differs from the cache's");
  }
  const LlamaDims& d = weights_.dims;
  for (int32_t id : batch.token_ids) {
    if (id < 0 || id >= d.vocab) {
      return MakeError(ErrorCode::kInvalidArgument, "token id out of range: " + std::to_string(id));
    }
  }
  for (int32_t p : batch.positions) {
    if (p >= d.context_length) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "position " + std::to_string(p) + " exceeds the model's context length " +
                           std::to_string(d.context_length));
    }
  }
  const int64_t t = batch.num_tokens(), s = batch.num_seqs();
  const int64_t rows_out = mode == LogitsMode::kAllTokens ? t : s;
  if (auto st = EnsureActivations(t, rows_out); !st) return st;

  rows_.resize(rows_out);
  for (int64_t r = 0; r < rows_out; ++r) {
    rows_[r] = mode == LogitsMode::kAllTokens ? static_cast<int32_t>(r) : batch.query_start[r + 1] - 1;
  }
  Backend& be = backend_;
  const StepKey key = MakeStepKey(batch, rows_out, activation_generation_, options_.decode_graphs);
  // Only an eager step may stop halfway: a recording must hold every op of the step.
  const StepMode step = be.BeginStep(batch, rows_, key);
  bool whole = true;
  if (step != StepMode::kReplayed) {
    whole = IssueOps(batch, rows_out, step == StepMode::kEager ? abort : nullptr);
  }
  if (!be.EndStep()) {  // capture abandoned: the same ops again, eagerly
    whole = IssueOps(batch, rows_out, abort);
    be.EndStep();
  }
  be.Synchronize();
  if (auto st = be.status(); !st) return st;
  if (!whole) return MakeError(ErrorCode::kCancelled, "the step was cancelled between layers");
  logits.resize(static_cast<size_t>(rows_out * d.vocab));
  be.CopyToHost(logits_.f32(), logits.data(), logits.size() * sizeof(float));
  return be.status();
}

}  // namespace kvgate::engine
