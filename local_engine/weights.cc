#include "local_engine/weights.h"

#include <string>

namespace kvgate::engine {
namespace {

std::string Where(const GgufFile& f) { return f.path() + ": "; }

Result<int64_t> RequireInt(const GgufFile& f, const std::string& key) {
  const auto v = f.GetInt(key);
  if (!v) return MakeError(ErrorCode::kCorruptData, Where(f) + "missing integer metadata " + key);
  if (*v <= 0 || *v > (int64_t{1} << 31)) {
    return MakeError(ErrorCode::kCorruptData,
                     Where(f) + key + " out of range: " + std::to_string(*v));
  }
  return *v;
}

std::string DimsString(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

Result<const GgufTensor*> FindChecked(const GgufFile& f, const std::string& name,
                                      std::vector<uint64_t> dims) {
  const GgufTensor* t = f.FindTensor(name);
  if (t == nullptr) return MakeError(ErrorCode::kCorruptData, Where(f) + "missing tensor " + name);
  if (t->dims != dims) {
    return MakeError(ErrorCode::kCorruptData, Where(f) + "tensor " + name + " has shape " +
                                                  DimsString(t->dims) + ", expected " +
                                                  DimsString(dims));
  }
  return t;
}

Result<WeightMatrix> LoadMatrix(const GgufFile& f, Backend& backend, const std::string& name,
                                int64_t rows, int64_t cols) {
  auto t = FindChecked(f, name, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)});
  if (!t) return std::unexpected(t.error());
  const GgufTensor& g = **t;
  if (g.type != GgmlType::kQ4_1 && g.type != GgmlType::kQ8_0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     Where(f) + "tensor " + name + " has type " + std::string(GgmlTypeName(g.type)) +
                         "; the engine supports Q4_1 and Q8_0 matrices");
  }
  const uint64_t block_bytes = g.type == GgmlType::kQ4_1 ? 20 : 34;
  if (cols % 32 != 0 || g.n_bytes != static_cast<uint64_t>(rows) * (cols / 32) * block_bytes) {
    return MakeError(ErrorCode::kCorruptData, Where(f) + "tensor " + name + " has " +
                                                  std::to_string(g.n_bytes) +
                                                  " bytes, inconsistent with its shape and type");
  }
  auto data = backend.UploadWeights(g.data, g.n_bytes);
  if (!data) return std::unexpected(data.error());
  return WeightMatrix{g.type, *data, rows, cols};
}

Result<const float*> LoadNorm(const GgufFile& f, Backend& backend, const std::string& name,
                              int64_t d) {
  auto t = FindChecked(f, name, {static_cast<uint64_t>(d)});
  if (!t) return std::unexpected(t.error());
  if ((*t)->type != GgmlType::kF32 || (*t)->n_bytes != static_cast<uint64_t>(d) * 4) {
    return MakeError(ErrorCode::kInvalidArgument, Where(f) + "tensor " + name + " must be F32");
  }
  auto data = backend.UploadWeights((*t)->data, (*t)->n_bytes);
  if (!data) return std::unexpected(data.error());
  return static_cast<const float*>(*data);
}

}  // namespace

Result<ModelWeights> LoadWeights(const GgufFile& f, Backend& backend) {
  const auto arch = f.GetString("general.architecture");
  if (!arch || *arch != "llama") {
    return MakeError(ErrorCode::kInvalidArgument,
                     Where(f) + "unsupported architecture '" + arch.value_or("<none>") +
                         "' (the engine runs llama-family models)");
  }
  ModelWeights w;
  LlamaDims& d = w.dims;
#define KVGATE_REQUIRE_INT(field, key)                \
  do {                                                \
    auto v = RequireInt(f, key);                      \
    if (!v) return std::unexpected(v.error());        \
    d.field = *v;                                     \
  } while (0)
  KVGATE_REQUIRE_INT(n_layers, "llama.block_count");
  KVGATE_REQUIRE_INT(hidden, "llama.embedding_length");
  KVGATE_REQUIRE_INT(ffn, "llama.feed_forward_length");
  KVGATE_REQUIRE_INT(heads, "llama.attention.head_count");
  KVGATE_REQUIRE_INT(context_length, "llama.context_length");
#undef KVGATE_REQUIRE_INT
  d.kv_heads = f.GetInt("llama.attention.head_count_kv").value_or(d.heads);
  d.rope_theta = static_cast<float>(f.GetFloat("llama.rope.freq_base").value_or(10000.0));
  constexpr std::string_view kEps = "llama.attention.layer_norm_rms_epsilon";
  if (f.Find(kEps) != nullptr && !f.GetFloat(kEps)) {
    return MakeError(ErrorCode::kCorruptData, std::string(kEps) + " must be a number");
  }
  d.rms_eps = static_cast<float>(f.GetFloat(kEps).value_or(1e-5));
  if (d.hidden % d.heads != 0 || d.kv_heads <= 0 || d.heads % d.kv_heads != 0) {
    return MakeError(ErrorCode::kCorruptData, Where(f) + "inconsistent head counts");
  }
  d.head_dim = d.hidden / d.heads;
  if (d.head_dim % 2 != 0 || d.head_dim > 256 || d.hidden % 32 != 0 || d.ffn % 32 != 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     Where(f) + "unsupported dimensions (head dim must be even and <= 256; hidden "
                                "and FFN sizes multiples of 32)");
  }
  if (auto rd = f.GetInt("llama.rope.dimension_count"); rd && *rd != d.head_dim) {
    return MakeError(ErrorCode::kInvalidArgument,
                     Where(f) + "partial RoPE (rope.dimension_count != head dim) is unsupported");
  }
  if (d.n_layers > 1024 || !(d.rope_theta > 0.0f) || !(d.rms_eps > 0.0f)) {
    return MakeError(ErrorCode::kCorruptData, Where(f) + "hyper-parameters out of range");
  }
  const GgufTensor* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2) {
    return MakeError(ErrorCode::kCorruptData, Where(f) + "missing or malformed token_embd.weight");
  }
  d.vocab = static_cast<int64_t>(embd->dims[1]);
  if (d.vocab <= 0 || d.vocab > (int64_t{1} << 24)) {
    return MakeError(ErrorCode::kCorruptData, Where(f) + "vocabulary size out of range");
  }

  auto check = [&](auto&& r, auto& dst) -> Status {
    if (!r) return std::unexpected(r.error());
    dst = *r;
    return {};
  };
  const int64_t qd = d.heads * d.head_dim, kvd = d.kv_heads * d.head_dim;
  if (auto s = check(LoadMatrix(f, backend, "token_embd.weight", d.vocab, d.hidden), w.token_embd);
      !s) {
    return std::unexpected(s.error());
  }
  if (auto s = check(LoadNorm(f, backend, "output_norm.weight", d.hidden), w.output_norm); !s) {
    return std::unexpected(s.error());
  }
  if (f.FindTensor("output.weight") != nullptr) {
    if (auto s = check(LoadMatrix(f, backend, "output.weight", d.vocab, d.hidden), w.output); !s) {
      return std::unexpected(s.error());
    }
  } else {
    w.output = w.token_embd;
    w.tied_embeddings = true;
  }
  w.output.output_head = true;
  w.layers.resize(d.n_layers);
  for (int64_t i = 0; i < d.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[i];
    Status s = check(LoadNorm(f, backend, p + "attn_norm.weight", d.hidden), l.attn_norm);
    if (s) s = check(LoadMatrix(f, backend, p + "attn_q.weight", qd, d.hidden), l.q);
    if (s) s = check(LoadMatrix(f, backend, p + "attn_k.weight", kvd, d.hidden), l.k);
    if (s) s = check(LoadMatrix(f, backend, p + "attn_v.weight", kvd, d.hidden), l.v);
    if (s) s = check(LoadMatrix(f, backend, p + "attn_output.weight", d.hidden, qd), l.o);
    if (s) s = check(LoadNorm(f, backend, p + "ffn_norm.weight", d.hidden), l.ffn_norm);
    if (s) s = check(LoadMatrix(f, backend, p + "ffn_gate.weight", d.ffn, d.hidden), l.gate);
    if (s) s = check(LoadMatrix(f, backend, p + "ffn_up.weight", d.ffn, d.hidden), l.up);
    if (s) s = check(LoadMatrix(f, backend, p + "ffn_down.weight", d.hidden, d.ffn), l.down);
    if (!s) return std::unexpected(s.error());
  }
  return w;
}

}  // namespace kvgate::engine
