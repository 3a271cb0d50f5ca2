#include "local_engine/model_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/engine_io/gguf_builder.h"

namespace kvgate::engine {
namespace {

std::string ModelPath() {
  return std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(ModelConfigTest, FromRealGguf) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "model not fetched";
  auto f = GgufFile::Open(ModelPath());
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto c = ModelConfigFromGguf(**f);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->n_layers, 30u);
  EXPECT_EQ(c->hidden, 576u);
  EXPECT_EQ(c->ffn, 1536u);
  EXPECT_EQ(c->n_heads, 9u);
  EXPECT_EQ(c->n_kv_heads, 3u);
  EXPECT_EQ(c->head_dim, 64u);
  EXPECT_EQ(c->rope_dim, 64u);
  EXPECT_EQ(c->vocab_size, 49152u);
  EXPECT_EQ(c->context_length, 8192u);
  EXPECT_DOUBLE_EQ(c->rope_freq_base, 100000.0);
  EXPECT_NEAR(c->rms_norm_eps, 1e-5, 1e-9);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_FALSE(c->uses_mla());
  // The built-in entry agrees with the file on everything the file states.
  const auto b = FindBuiltinModelConfig("SmolLM2-135M");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->n_layers, c->n_layers);
  EXPECT_EQ(b->n_kv_heads, c->n_kv_heads);
  EXPECT_EQ(b->head_dim, c->head_dim);
  EXPECT_EQ(b->vocab_size, c->vocab_size);
  EXPECT_EQ(b->tied_embeddings, c->tied_embeddings);
}

TEST(ModelConfigTest, FromGgufDefaultsAndErrors) {
  testing::GgufBuilder b;
  b.KvStr("general.architecture", "qwen2")
      .KvU32("qwen2.block_count", 4)
      .KvU32("qwen2.embedding_length", 256)
      .KvU32("qwen2.attention.head_count", 4)
      .KvStrArray("tokenizer.ggml.tokens", {"a", "b", "c"});
  b.Tensor("output.weight", {256, 3}, 0, 256 * 3 * 4);
  auto bytes = b.Build();
  auto f = GgufFile::FromBytes(bytes, "q.gguf");
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto c = ModelConfigFromGguf(**f);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->n_kv_heads, 4u);  // no head_count_kv: no GQA
  EXPECT_EQ(c->head_dim, 64u);   // hidden / heads
  EXPECT_EQ(c->vocab_size, 3u);  // from the token list
  EXPECT_FALSE(c->tied_embeddings);
  EXPECT_DOUBLE_EQ(c->rope_freq_base, 10000.0);

  testing::GgufBuilder m;
  m.KvStr("general.architecture", "llama").KvU32("llama.embedding_length", 64);
  bytes = m.Build();
  f = GgufFile::FromBytes(bytes, "m.gguf");
  ASSERT_TRUE(f.has_value());
  auto e = ModelConfigFromGguf(**f);
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().code, ErrorCode::kCorruptData);
  EXPECT_EQ(e.error().message, "m.gguf: llama.block_count is missing");

  testing::GgufBuilder s;
  s.KvStr("general.architecture", "llama")
      .KvStr("llama.block_count", "thirty")
      .KvU32("llama.embedding_length", 64);
  bytes = s.Build();
  f = GgufFile::FromBytes(bytes, "s.gguf");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(ModelConfigFromGguf(**f).error().message,
            "s.gguf: llama.block_count is not an integer");

  testing::GgufBuilder g;
  g.KvStr("general.architecture", "llama")
      .KvU32("llama.block_count", 2)
      .KvU32("llama.embedding_length", 64)
      .KvU32("llama.attention.head_count", 4)
      .KvU32("llama.attention.head_count_kv", 3)
      .KvU32("llama.vocab_size", 10);
  bytes = g.Build();
  f = GgufFile::FromBytes(bytes, "g.gguf");
  ASSERT_TRUE(f.has_value());
  EXPECT_NE(ModelConfigFromGguf(**f).error().message.find("KV head count must divide"),
            std::string::npos);
}

// Abridged from meta-llama/Llama-3.3-70B-Instruct's config.json.
constexpr const char* kLlama33Json = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
  "intermediate_size": 28672, "max_position_embeddings": 131072, "num_attention_heads": 64,
  "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}, "rope_theta": 500000.0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})";

// Abridged from deepseek-ai/DeepSeek-V3's config.json.
constexpr const char* kDeepSeekV3Json = R"({
  "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 163840, "num_attention_heads": 128,
  "num_hidden_layers": 61, "num_key_value_heads": 128, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "rms_norm_eps": 1e-06,
  "rope_theta": 10000, "tie_word_embeddings": false, "vocab_size": 129280})";

void ExpectSameShape(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.ffn, b.ffn);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.context_length, b.context_length);
  EXPECT_DOUBLE_EQ(a.rope_freq_base, b.rope_freq_base);
  EXPECT_DOUBLE_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank);
  EXPECT_EQ(a.qk_rope_head_dim, b.qk_rope_head_dim);
}

TEST(ModelConfigTest, FromHfJsonMatchesBuiltins) {
  auto llama = ModelConfigFromHfJson(kLlama33Json);
  ASSERT_TRUE(llama.has_value()) << llama.error().message;
  EXPECT_EQ(llama->architecture, "llama");
  EXPECT_EQ(llama->head_dim, 128u);
  ExpectSameShape(*llama, *FindBuiltinModelConfig("llama-3.3-70b"));

  auto ds = ModelConfigFromHfJson(kDeepSeekV3Json);
  ASSERT_TRUE(ds.has_value()) << ds.error().message;
  EXPECT_TRUE(ds->uses_mla());
  EXPECT_EQ(ds->head_dim, 192u);  // qk_nope + qk_rope
  EXPECT_EQ(ds->rope_dim, 64u);
  ExpectSameShape(*ds, *FindBuiltinModelConfig("deepseek-v3"));
}

TEST(ModelConfigTest, FromHfJsonTextConfigAndHeadDim) {
  auto c = ModelConfigFromHfJson(R"({"model_type": "gemma3", "text_config": {
      "num_hidden_layers": 2, "hidden_size": 640, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 1000}})");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_EQ(c->head_dim, 256u);  // explicit head_dim wins over hidden / heads
  EXPECT_EQ(c->n_kv_heads, 1u);
}

TEST(ModelConfigTest, FromHfJsonErrors) {
  auto expect_invalid = [](std::string_view json, std::string_view needle) {
    auto c = ModelConfigFromHfJson(json);
    ASSERT_FALSE(c.has_value()) << json;
    EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(c.error().message.find(needle), std::string::npos) << c.error().message;
  };
  expect_invalid("{not json", "not a JSON object");
  expect_invalid("[1, 2]", "not a JSON object");
  expect_invalid(R"({"hidden_size": 8})", "missing num_hidden_layers");
  expect_invalid(
      R"({"num_hidden_layers": -1, "hidden_size": 8, "num_attention_heads": 1, "vocab_size": 2})",
      "num_hidden_layers must be");
  expect_invalid(
      R"({"num_hidden_layers": 1, "hidden_size": 8.5, "num_attention_heads": 1, "vocab_size": 2})",
      "hidden_size must be");
  expect_invalid(R"({"num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 1,
                     "vocab_size": 2, "rope_theta": "big"})",
                 "rope_theta must be a number");
  expect_invalid(R"({"num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 1,
                     "vocab_size": 2, "num_hidden_layers": 99999999999})",
                 "num_hidden_layers");
  auto missing = ModelConfigFromHfConfigFile("/nonexistent/config.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

TEST(ModelConfigTest, FromHfConfigFile) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("kvgate_config_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << kLlama33Json;
  auto c = ModelConfigFromHfConfigFile(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->n_layers, 80u);
}

// The geometry of a sliding-window HF config; `extra` adds or overrides fields.
std::string SlidingJson(std::string_view model_type, int layers, std::string_view extra) {
  return std::string(R"({"model_type": ")") + std::string(model_type) +
         R"(", "num_hidden_layers": )" + std::to_string(layers) +
         R"(, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 64, "vocab_size": 100, "max_position_embeddings": 8192)" +
         std::string(extra) + "}";
}

std::vector<bool> Pattern(std::string_view marks) {  // "s" sliding, "f" full
  std::vector<bool> v;
  for (char m : marks) v.push_back(m == 's');
  return v;
}

ModelConfig FromJson(const std::string& json) {
  auto c = ModelConfigFromHfJson(json);
  EXPECT_TRUE(c.has_value()) << json << "\n" << (c ? "" : c.error().message);
  return c.value_or(ModelConfig{});
}

TEST(ModelConfigSlidingTest, LayersEveryPeriod) {
  EXPECT_EQ(SlidingLayersEvery(4, 0), Pattern("ssss"));            // Mistral: every layer
  EXPECT_EQ(SlidingLayersEvery(5, 2), Pattern("sfsfs"));           // Gemma 2: local first
  EXPECT_EQ(SlidingLayersEvery(13, 6), Pattern("sssssfsssssfs"));  // Gemma 3: 5 local, 1 global
  EXPECT_EQ(SlidingLayersEvery(3, 1), Pattern("fff"));
}

// Mistral 7B v0.1's config.json fields that size its cache: every layer slides over 4096 tokens.
TEST(ModelConfigSlidingTest, MistralSlidesEveryLayer) {
  const ModelConfig c = FromJson(R"({"model_type": "mistral", "num_hidden_layers": 32,
      "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
      "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
      "sliding_window": 4096, "rope_theta": 10000.0})");
  EXPECT_EQ(c.sliding_window, 4096u);
  EXPECT_EQ(c.n_sliding_layers(), 32u);
  // Later Mistral configs say "sliding_window": null: full attention.
  const ModelConfig v3 = FromJson(SlidingJson("mistral", 4, R"(, "sliding_window": null)"));
  EXPECT_EQ(v3.sliding_window, 0u);
  EXPECT_TRUE(v3.sliding_layers.empty());
}

TEST(ModelConfigSlidingTest, GemmaPatterns) {
  // Gemma 2 (9B: 42 layers) has no pattern field: it alternates, local first.
  const ModelConfig g2 = FromJson(SlidingJson("gemma2", 42, R"(, "sliding_window": 4096)"));
  EXPECT_EQ(g2.n_sliding_layers(), 21u);
  EXPECT_TRUE(g2.sliding_layers[0]);
  EXPECT_FALSE(g2.sliding_layers[1]);
  // Gemma 3 (27B: 62 layers), nested in text_config: 5 local then 1 global, by default or by
  // sliding_window_pattern.
  const std::string g3 = R"({"model_type": "gemma3", "text_config": )" +
                         SlidingJson("gemma3_text", 62, R"(, "sliding_window": 1024)") + "}";
  const ModelConfig c3 = FromJson(g3);
  EXPECT_EQ(c3.sliding_window, 1024u);
  EXPECT_EQ(c3.n_sliding_layers(), 52u);  // 62 - 10 global layers (5, 11, ..., 59)
  EXPECT_FALSE(c3.sliding_layers[5]);
  EXPECT_TRUE(c3.sliding_layers[61]);
  const ModelConfig p4 = FromJson(
      SlidingJson("gemma3_text", 8, R"(, "sliding_window": 512, "sliding_window_pattern": 4)"));
  EXPECT_EQ(p4.sliding_layers, Pattern("sssfsssf"));
}

// layer_types is the most precise source: it wins over sliding_window_pattern.
TEST(ModelConfigSlidingTest, LayerTypesWin) {
  const ModelConfig c = FromJson(SlidingJson("gemma3_text", 4, R"(, "sliding_window": 512,
      "sliding_window_pattern": 6, "layer_types": ["sliding_attention", "full_attention",
      "full_attention", "sliding_attention"])"));
  EXPECT_EQ(c.sliding_layers, Pattern("sffs"));
  // All full: no window at all.
  const ModelConfig full = FromJson(SlidingJson("gpt", 2, R"(, "sliding_window": 128,
      "layer_types": ["full_attention", "full_attention"])"));
  EXPECT_EQ(full.sliding_window, 0u);
}

// Qwen configs carry a sliding_window they do not use (use_sliding_window: false); with it on,
// layers from max_window_layers on slide.
TEST(ModelConfigSlidingTest, QwenUseSlidingWindow) {
  const ModelConfig off = FromJson(SlidingJson(
      "qwen2", 4,
      R"(, "sliding_window": 131072, "use_sliding_window": false, "max_window_layers": 2)"));
  EXPECT_EQ(off.sliding_window, 0u);
  const ModelConfig on = FromJson(SlidingJson(
      "qwen2", 4,
      R"(, "sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 2)"));
  EXPECT_EQ(on.sliding_layers, Pattern("ffss"));
}

TEST(ModelConfigSlidingTest, HfErrors) {
  auto error = [](const std::string& json) {
    auto c = ModelConfigFromHfJson(json);
    EXPECT_FALSE(c.has_value()) << json;
    return c ? std::string() : c.error().message;
  };
  EXPECT_NE(error(SlidingJson("x", 2, R"(, "sliding_window": 64,
                "layer_types": ["full_attention"])"))
                .find("layer_types must be a list of num_hidden_layers (2) strings"),
            std::string::npos);
  EXPECT_NE(error(SlidingJson("x", 2, R"(, "sliding_window": 64,
                "layer_types": ["full_attention", "chunked_attention"])"))
                .find("layer_types[1] is 'chunked_attention'"),
            std::string::npos);
  EXPECT_NE(error(SlidingJson("x", 1, R"(, "layer_types": ["sliding_attention"])"))
                .find("sliding_window is missing"),
            std::string::npos);
  EXPECT_NE(error(SlidingJson("x", 1, R"(, "sliding_window": -4)")).find("sliding_window must be"),
            std::string::npos);
}

Result<ModelConfig> FromGguf(const testing::GgufBuilder& b) {
  const auto bytes = b.Build();
  auto f = GgufFile::FromBytes(bytes, "s.gguf");
  if (!f) return std::unexpected(f.error());
  return ModelConfigFromGguf(**f);
}

testing::GgufBuilder SlidingGguf(const std::string& arch, uint32_t layers) {
  testing::GgufBuilder b;
  b.KvStr("general.architecture", arch)
      .KvU32(arch + ".block_count", layers)
      .KvU32(arch + ".embedding_length", 256)
      .KvU32(arch + ".attention.head_count", 4)
      .KvStrArray("tokenizer.ggml.tokens", {"a", "b"});
  return b;
}

TEST(ModelConfigSlidingTest, FromGguf) {
  auto b = SlidingGguf("gemma3", 12);
  b.KvU32("gemma3.attention.sliding_window", 1024);
  auto g3 = FromGguf(b);
  ASSERT_TRUE(g3.has_value()) << g3.error().message;
  EXPECT_EQ(g3->sliding_window, 1024u);
  EXPECT_EQ(g3->sliding_layers, Pattern("sssssfsssssf"));

  b = SlidingGguf("gemma2", 4);
  b.KvU32("gemma2.attention.sliding_window", 4096);
  EXPECT_EQ(FromGguf(b)->sliding_layers, Pattern("sfsf"));

  b = SlidingGguf("llama", 3);  // a Mistral converted as llama
  b.KvU32("llama.attention.sliding_window", 4096);
  EXPECT_EQ(FromGguf(b)->sliding_layers, Pattern("sss"));

  b = SlidingGguf("gemma4", 3);  // a per-layer pattern in the file wins
  b.KvU32("gemma4.attention.sliding_window", 512)
      .KvBoolArray("gemma4.attention.sliding_window_pattern", {true, false, true});
  EXPECT_EQ(FromGguf(b)->sliding_layers, Pattern("sfs"));

  b = SlidingGguf("x", 4);  // or a period
  b.KvU32("x.attention.sliding_window", 512).KvU32("x.attention.sliding_window_pattern", 2);
  EXPECT_EQ(FromGguf(b)->sliding_layers, Pattern("sfsf"));

  b = SlidingGguf("x", 4);  // no window key: full attention, whatever the pattern
  b.KvU32("x.attention.sliding_window_pattern", 2);
  EXPECT_EQ(FromGguf(b)->sliding_window, 0u);

  b = SlidingGguf("x", 4);
  b.KvU32("x.attention.sliding_window", 512)
      .KvBoolArray("x.attention.sliding_window_pattern", {true, false});
  auto bad = FromGguf(b);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message,
            "s.gguf: x.attention.sliding_window_pattern needs one entry per layer");
}

TEST(ModelConfigSlidingTest, Validation) {
  ModelConfig c = *FindBuiltinModelConfig("qwen3-8b");
  c.sliding_window = 4096;
  EXPECT_FALSE(ValidateModelConfig(c).has_value());  // no per-layer marks
  c.sliding_layers = SlidingLayersEvery(c.n_layers, 0);
  EXPECT_TRUE(ValidateModelConfig(c).has_value());
  c.sliding_window = 0;
  EXPECT_FALSE(ValidateModelConfig(c).has_value());  // marks without a window
}

TEST(ModelConfigTest, BuiltinTableIsValidAndComplete) {
  const auto all = BuiltinModelConfigs();
  std::vector<std::string> names;
  for (const ModelConfig& c : all) {
    EXPECT_TRUE(ValidateModelConfig(c).has_value()) << c.name;
    EXPECT_GT(c.weights_gib, 0.0) << c.name;
    names.push_back(c.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"llama-3.3-70b", "llama-3.1-405b", "qwen3-8b",
                                             "qwen3-235b-a22b", "deepseek-v3", "smollm2-135m"}));
  EXPECT_TRUE(FindBuiltinModelConfig("Qwen3-8B").has_value());
  EXPECT_FALSE(FindBuiltinModelConfig("gpt-5").has_value());
}

}  // namespace
}  // namespace kvgate::engine
