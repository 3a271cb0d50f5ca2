// LoadWeights on small GGUF files built in memory: a valid tiny llama loads and runs; every
// malformation is an Error naming the problem (never a crash).
#include "local_engine/weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "kernels/cpu/thread_pool.h"
#include "local_engine/cpu_backend.h"
#include "local_engine/model.h"

namespace kvgate::engine {
namespace {

// Minimal GGUF v3 writer: u32/f32/string metadata and tensors with zero-filled data.
class GgufBuilder {
 public:
  void U32(const std::string& k, uint32_t v) { kv_.push_back({k, 4, Le(v)}); }
  void F32(const std::string& k, float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    kv_.push_back({k, 6, Le(u)});
  }
  void Str(const std::string& k, const std::string& v) { kv_.push_back({k, 8, String(v)}); }
  void Tensor(const std::string& name, std::vector<uint64_t> dims, GgmlType type) {
    tensors_.push_back({name, std::move(dims), type});
  }
  void Remove(const std::string& name) {
    std::erase_if(tensors_, [&](const T& t) { return t.name == name; });
  }
  void SetType(const std::string& name, GgmlType type) {
    for (auto& t : tensors_) if (t.name == name) t.type = type;
  }
  std::vector<uint8_t> Build() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    Append(out, Le(uint32_t{3}));
    Append(out, Le64(tensors_.size()));
    Append(out, Le64(kv_.size()));
    for (const auto& e : kv_) {
      Append(out, String(e.key));
      Append(out, Le(e.type));
      Append(out, e.value);
    }
    uint64_t offset = 0;
    std::vector<uint64_t> sizes;
    for (const auto& t : tensors_) {
      Append(out, String(t.name));
      Append(out, Le(static_cast<uint32_t>(t.dims.size())));
      for (uint64_t d : t.dims) Append(out, Le64(d));
      Append(out, Le(static_cast<uint32_t>(t.type)));
      Append(out, Le64(offset));
      uint64_t n = 1;
      for (uint64_t d : t.dims) n *= d;
      const uint64_t bytes = t.type == GgmlType::kF32   ? n * 4
                             : t.type == GgmlType::kF16 ? n * 2
                             : t.type == GgmlType::kQ8_0 ? n / 32 * 34
                                                         : n / 32 * 20;
      sizes.push_back(bytes);
      offset += (bytes + 31) / 32 * 32;
    }
    out.resize((out.size() + 31) / 32 * 32, 0);
    out.resize(out.size() + offset, 0);
    return out;
  }

 private:
  struct KV {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> value;
  };
  struct T {
    std::string name;
    std::vector<uint64_t> dims;
    GgmlType type;
  };
  static std::vector<uint8_t> Le(uint32_t v) { return {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)}; }
  static std::vector<uint8_t> Le64(uint64_t v) {
    std::vector<uint8_t> b(8);
    for (int i = 0; i < 8; ++i) b[i] = uint8_t(v >> (8 * i));
    return b;
  }
  static std::vector<uint8_t> String(const std::string& s) {
    auto b = Le64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return b;
  }
  static void Append(std::vector<uint8_t>& out, const std::vector<uint8_t>& b) { out.insert(out.end(), b.begin(), b.end()); }
  std::vector<KV> kv_;
  std::vector<T> tensors_;
};

// 1 layer, hidden 64, 2 heads of 32, 1 KV head, FFN 96, vocab 10.
GgufBuilder TinyLlama() {
  GgufBuilder b;
  b.Str("general.architecture", "llama");
  b.U32("llama.block_count", 1);
  b.U32("llama.embedding_length", 64);
  b.U32("llama.feed_forward_length", 96);
  b.U32("llama.attention.head_count", 2);
  b.U32("llama.attention.head_count_kv", 1);
  b.U32("llama.context_length", 128);
  b.F32("llama.rope.freq_base", 10000.0f);
  b.F32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  b.Tensor("token_embd.weight", {64, 10}, GgmlType::kQ8_0);
  b.Tensor("output_norm.weight", {64}, GgmlType::kF32);
  b.Tensor("blk.0.attn_norm.weight", {64}, GgmlType::kF32);
  b.Tensor("blk.0.attn_q.weight", {64, 64}, GgmlType::kQ4_1);
  b.Tensor("blk.0.attn_k.weight", {64, 32}, GgmlType::kQ4_1);
  b.Tensor("blk.0.attn_v.weight", {64, 32}, GgmlType::kQ4_1);
  b.Tensor("blk.0.attn_output.weight", {64, 64}, GgmlType::kQ4_1);
  b.Tensor("blk.0.ffn_norm.weight", {64}, GgmlType::kF32);
  b.Tensor("blk.0.ffn_gate.weight", {64, 96}, GgmlType::kQ4_1);
  b.Tensor("blk.0.ffn_up.weight", {64, 96}, GgmlType::kQ4_1);
  b.Tensor("blk.0.ffn_down.weight", {96, 64}, GgmlType::kQ4_1);
  return b;
}

class WeightsTest : public ::testing::Test {
 protected:
  Result<ModelWeights> Load(const GgufBuilder& b) {
    bytes_ = b.Build();
    auto f = GgufFile::FromBytes(bytes_, "tiny.gguf");
    if (!f) return std::unexpected(f.error());
    file_ = std::move(*f);
    return LoadWeights(*file_, *backend_);
  }
  kernels::cpu::ThreadPool pool_{1};
  std::unique_ptr<Backend> backend_ = MakeCpuBackend(&pool_, kernels::cpu::Isa::kScalar);
  std::vector<uint8_t> bytes_;
  std::unique_ptr<GgufFile> file_;
};

TEST_F(WeightsTest, TinyModelLoadsAndRuns) {
  auto w = Load(TinyLlama());
  ASSERT_TRUE(w) << w.error().ToString();
  EXPECT_TRUE(w->tied_embeddings);
  EXPECT_EQ(w->dims.head_dim, 32);
  EXPECT_EQ(w->dims.kv_heads, 1);
  EXPECT_EQ(w->dims.vocab, 10);
  auto runner = ModelRunner::Create(*w, *backend_, KvCacheConfig{4, 16});
  ASSERT_TRUE(runner);
  EXPECT_EQ((*runner)->KvBytesPerToken(), 2 * 1 * 1 * 32 * 2);
  const int32_t ids[] = {3, 4}, pos[] = {0, 1}, qs[] = {0, 2}, ctx[] = {2}, table[] = {1};
  const int64_t slots[] = {16, 17};
  std::vector<float> logits;
  ASSERT_TRUE((*runner)->Forward(BatchMetadata{ids, pos, slots, qs, ctx, table, 1, 16},
                                 LogitsMode::kLastPerSequence, logits));
  ASSERT_EQ(logits.size(), 10u);
  for (float l : logits) EXPECT_TRUE(std::isfinite(l));
  // Token ids and metadata are checked before anything runs.
  const int32_t bad_ids[] = {3, 10};
  EXPECT_FALSE((*runner)->Forward(BatchMetadata{bad_ids, pos, slots, qs, ctx, table, 1, 16},
                                  LogitsMode::kLastPerSequence, logits));
  const int64_t bad_slots[] = {16, 40};
  EXPECT_FALSE((*runner)->Forward(BatchMetadata{ids, pos, bad_slots, qs, ctx, table, 1, 16},
                                  LogitsMode::kLastPerSequence, logits));
  const int32_t bad_table[] = {7};
  EXPECT_FALSE((*runner)->Forward(BatchMetadata{ids, pos, slots, qs, ctx, bad_table, 1, 16},
                                  LogitsMode::kLastPerSequence, logits));
}

TEST_F(WeightsTest, MalformedModelsAreErrors) {
  {
    auto b = TinyLlama();
    b.Str("general.architecture", "gpt2");  // a later duplicate key
    auto w = Load(b);
    EXPECT_FALSE(w);
  }
  {
    auto b = TinyLlama();
    b.Remove("blk.0.ffn_up.weight");
    auto w = Load(b);
    ASSERT_FALSE(w);
    EXPECT_NE(w.error().message.find("blk.0.ffn_up.weight"), std::string::npos) << w.error().message;
  }
  {
    auto b = TinyLlama();
    b.Remove("blk.0.attn_k.weight");
    b.Tensor("blk.0.attn_k.weight", {64, 64}, GgmlType::kQ4_1);  // wrong shape for 1 KV head
    auto w = Load(b);
    ASSERT_FALSE(w);
    EXPECT_NE(w.error().message.find("shape"), std::string::npos) << w.error().message;
  }
  {
    auto b = TinyLlama();
    b.SetType("blk.0.attn_q.weight", GgmlType::kF16);
    auto w = Load(b);
    ASSERT_FALSE(w);
    EXPECT_EQ(w.error().code, ErrorCode::kInvalidArgument);
  }
  {
    auto b = TinyLlama();
    b.U32("llama.attention.head_count_kv", 3);  // does not divide 2 heads (later key)
    EXPECT_FALSE(Load(b));
  }
}

}  // namespace
}  // namespace kvgate::engine
