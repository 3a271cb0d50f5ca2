#include "local_engine/model_config.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <variant>

#include "common/ascii.h"

namespace kvgate::engine {
namespace {

std::string Lower(std::string_view s) { return AsciiLowered(s); }

// An unsigned 32-bit field of a JSON object: nullopt when absent or null, an error when present but
// not a non-negative integer that fits.
Result<std::optional<uint32_t>> JsonU32(const nlohmann::json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<uint32_t>{};
  if (!it->is_number_integer() || *it < 0 || *it > UINT32_MAX) {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string("config.json: ") + key + " must be a non-negative 32-bit integer");
  }
  return std::optional<uint32_t>{it->get<uint32_t>()};
}

Result<std::optional<double>> JsonNumber(const nlohmann::json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<double>{};
  if (!it->is_number()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string("config.json: ") + key + " must be a number");
  }
  return std::optional<double>{it->get<double>()};
}

ModelConfig Builtin(std::string name, std::string arch, uint32_t layers, uint32_t hidden,
                    uint32_t ffn, uint32_t heads, uint32_t kv_heads, uint32_t head_dim,
                    uint32_t vocab, uint32_t context, double rope_base, double eps, bool tied,
                    double weights_gib) {
  ModelConfig c;
  c.name = std::move(name);
  c.architecture = std::move(arch);
  c.n_layers = layers;
  c.hidden = hidden;
  c.ffn = ffn;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.rope_dim = head_dim;
  c.vocab_size = vocab;
  c.context_length = context;
  c.rope_freq_base = rope_base;
  c.rms_norm_eps = eps;
  c.tied_embeddings = tied;
  c.weights_gib = weights_gib;
  return c;
}

// Records the window and which layers use it; a pattern with no sliding layer is no window at all,
// so the rest of kvgate sees one form of "full attention everywhere".
void SetSliding(ModelConfig& c, uint32_t window, std::vector<bool> layers) {
  c.sliding_window = window;
  c.sliding_layers = std::move(layers);
  if (c.sliding_window == 0 || c.n_sliding_layers() == 0) {
    c.sliding_window = 0;
    c.sliding_layers.clear();
  }
}

// The period of an architecture's sliding layers when the file does not spell them out (the
// models' reference implementations hard-code it).
uint32_t DefaultSlidingPeriod(std::string_view arch) {
  if (arch == "gemma2") return 2;
  if (arch.starts_with("gemma3")) return 6;
  return 0;  // Mistral and the rest: every layer
}

// HF `layer_types`: one "sliding_attention" or "full_attention" per layer. Any other kind (chunked,
// linear, ...) is an error: guessing its cache size would make kv-size's figures wrong silently.
Result<std::vector<bool>> HfLayerTypes(const nlohmann::json& types, uint32_t n_layers) {
  auto fail = [](const std::string& what) {
    return MakeError(ErrorCode::kInvalidArgument, "config.json: layer_types" + what);
  };
  if (!types.is_array() || types.size() != n_layers) {
    return fail(" must be a list of num_hidden_layers (" + std::to_string(n_layers) + ") strings");
  }
  std::vector<bool> sliding;
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string kind = types[i].is_string() ? types[i].get<std::string>() : types[i].dump();
    if (kind != "sliding_attention" && kind != "full_attention") {
      return fail("[" + std::to_string(i) + "] is '" + kind +
                  "'; kv-size knows sliding_attention and full_attention");
    }
    sliding.push_back(kind == "sliding_attention");
  }
  return sliding;
}

// The sliding-window fields of an HF config (model_config.h lists the precedence).
Status ReadHfSlidingWindow(const nlohmann::json& doc, ModelConfig& c) {
  auto window = JsonU32(doc, "sliding_window");
  if (!window) return std::unexpected(window.error());
  const auto use = doc.find("use_sliding_window");
  const bool use_set = use != doc.end() && use->is_boolean();
  if (use_set && !use->get<bool>()) return {};  // Qwen: the field is there, the window is not used
  const auto types = doc.find("layer_types");
  const bool has_types = types != doc.end() && !types->is_null();
  if (!window->value_or(0)) {
    if (has_types) {
      auto t = HfLayerTypes(*types, c.n_layers);
      if (!t) return std::unexpected(t.error());
      if (std::find(t->begin(), t->end(), true) != t->end()) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "config.json: layer_types has sliding_attention layers but "
                         "sliding_window is missing");
      }
    }
    return {};
  }
  if (has_types) {
    auto t = HfLayerTypes(*types, c.n_layers);
    if (!t) return std::unexpected(t.error());
    SetSliding(c, **window, std::move(*t));
    return {};
  }
  auto pattern = JsonU32(doc, "sliding_window_pattern");
  if (!pattern) return std::unexpected(pattern.error());
  auto max_window_layers = JsonU32(doc, "max_window_layers");
  if (!max_window_layers) return std::unexpected(max_window_layers.error());
  std::vector<bool> layers;
  if (*pattern) {
    layers = SlidingLayersEvery(c.n_layers, **pattern);
  } else if (use_set && *max_window_layers) {
    for (uint32_t i = 0; i < c.n_layers; ++i) layers.push_back(i >= **max_window_layers);
  } else {
    layers = SlidingLayersEvery(c.n_layers, DefaultSlidingPeriod(c.architecture));
  }
  SetSliding(c, **window, std::move(layers));
  return {};
}

// The sliding-window keys of a GGUF (model_config.h). Errors are messages for the caller's
// "PATH: " prefix.
Status ReadGgufSlidingWindow(const GgufFile& file, const std::string& prefix, ModelConfig& c) {
  const std::string window_key = prefix + "attention.sliding_window";
  const std::string pattern_key = prefix + "attention.sliding_window_pattern";
  if (file.Find(window_key) == nullptr) return {};
  const auto window = file.GetInt(window_key);
  if (!window || *window < 0 || *window > UINT32_MAX) {
    return MakeError(ErrorCode::kCorruptData, window_key + " is not a 32-bit count");
  }
  std::vector<bool> layers;
  if (const GgufArray* per_layer = file.GetArray(pattern_key)) {
    if (per_layer->size() != c.n_layers) {
      return MakeError(ErrorCode::kCorruptData, pattern_key + " needs one entry per layer");
    }
    for (const GgufValue& v : *per_layer) {
      const bool* b = std::get_if<bool>(&v.v);
      if (b == nullptr) return MakeError(ErrorCode::kCorruptData, pattern_key + " is not bools");
      layers.push_back(*b);
    }
  } else if (const auto period = file.GetInt(pattern_key)) {
    if (*period < 0 || *period > UINT32_MAX) {
      return MakeError(ErrorCode::kCorruptData, pattern_key + " is out of range");
    }
    layers = SlidingLayersEvery(c.n_layers, static_cast<uint32_t>(*period));
  } else if (file.Find(pattern_key) != nullptr) {
    return MakeError(ErrorCode::kCorruptData, pattern_key + " is neither bools nor a period");
  } else {
    layers = SlidingLayersEvery(c.n_layers, DefaultSlidingPeriod(c.architecture));
  }
  SetSliding(c, static_cast<uint32_t>(*window), std::move(layers));
  return {};
}

}  // namespace

uint32_t ModelConfig::n_sliding_layers() const {
  return static_cast<uint32_t>(std::count(sliding_layers.begin(), sliding_layers.end(), true));
}

std::vector<bool> SlidingLayersEvery(uint32_t n_layers, uint32_t period) {
  std::vector<bool> layers(n_layers, true);
  if (period == 0) return layers;
  for (uint32_t i = 0; i < n_layers; ++i) layers[i] = (i + 1) % period != 0;
  return layers;
}

Status ValidateModelConfig(const ModelConfig& c) {
  auto bad = [](std::string_view what) {
    return MakeError(ErrorCode::kInvalidArgument, "model config: " + std::string(what));
  };
  if (c.n_layers == 0) return bad("layer count is 0");
  if (c.hidden == 0) return bad("hidden size is 0");
  if (c.n_heads == 0) return bad("head count is 0");
  if (c.vocab_size == 0) return bad("vocabulary size is 0");
  if (c.sliding_window > 0 && c.sliding_layers.size() != c.n_layers) {
    return bad("sliding_layers needs one entry per layer");
  }
  if (c.sliding_window == 0 && c.n_sliding_layers() > 0) {
    return bad("sliding layers without a window");
  }
  if (c.uses_mla()) {
    if (c.qk_rope_head_dim == 0) return bad("MLA without qk_rope_head_dim");
    return {};
  }
  if (c.head_dim == 0) return bad("head dim is 0");
  if (c.n_kv_heads == 0 || c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0) {
    return bad("KV head count must divide the head count");
  }
  return {};
}

Result<ModelConfig> ModelConfigFromGguf(const GgufFile& file) {
  auto fail = [&](std::string_view what) {
    return MakeError(ErrorCode::kCorruptData, file.path() + ": " + std::string(what));
  };
  ModelConfig c;
  const auto arch = file.GetString("general.architecture");
  if (!arch || arch->empty()) return fail("general.architecture is missing");
  c.architecture = *arch;
  c.name = file.GetString("general.name").value_or(*arch);
  const std::string p = *arch + ".";
  auto u32 = [&](std::string_view key, bool required, uint32_t fallback) -> Result<uint32_t> {
    const std::string full = p + std::string(key);
    const auto v = file.GetInt(full);
    if (!v) {
      if (!required && file.Find(full) == nullptr) return fallback;
      return fail(full + (file.Find(full) ? " is not an integer" : " is missing"));
    }
    if (*v < 0 || *v > UINT32_MAX) return fail(full + " is out of range");
    return static_cast<uint32_t>(*v);
  };
  struct Field {
    const char* key;
    uint32_t* dst;
    bool required;
  };
  const Field fields[] = {
      {"block_count", &c.n_layers, true},
      {"embedding_length", &c.hidden, true},
      {"feed_forward_length", &c.ffn, false},
      {"attention.head_count", &c.n_heads, true},
      {"context_length", &c.context_length, false},
      {"attention.kv_lora_rank", &c.kv_lora_rank, false},
  };
  for (const Field& f : fields) {
    auto v = u32(f.key, f.required, 0);
    if (!v) return std::unexpected(v.error());
    *f.dst = *v;
  }
  auto kv = u32("attention.head_count_kv", false, c.n_heads);
  if (!kv) return std::unexpected(kv.error());
  c.n_kv_heads = *kv;
  const uint32_t default_head_dim = c.n_heads ? c.hidden / c.n_heads : 0;
  auto hd = u32("attention.key_length", false, default_head_dim);
  if (!hd) return std::unexpected(hd.error());
  c.head_dim = *hd;
  auto rd = u32("rope.dimension_count", false, c.head_dim);
  if (!rd) return std::unexpected(rd.error());
  c.rope_dim = *rd;
  if (c.uses_mla()) c.qk_rope_head_dim = c.rope_dim;
  if (const auto v = file.GetInt(p + "vocab_size"); v && *v > 0 && *v <= UINT32_MAX) {
    c.vocab_size = static_cast<uint32_t>(*v);
  } else if (const GgufArray* tokens = file.GetArray("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<uint32_t>(std::min<size_t>(tokens->size(), UINT32_MAX));
  }
  c.rope_freq_base = file.GetFloat(p + "rope.freq_base").value_or(10000.0);
  c.rms_norm_eps = file.GetFloat(p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
  c.tied_embeddings = file.FindTensor("output.weight") == nullptr;
  if (auto sw = ReadGgufSlidingWindow(file, p, c); !sw) return fail(sw.error().message);
  if (auto st = ValidateModelConfig(c); !st) return fail(st.error().message);
  return c;
}

Result<ModelConfig> ModelConfigFromHfJson(std::string_view json_text) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "config.json: not a JSON object");
  }
  if (const auto it = doc.find("text_config"); it != doc.end() && it->is_object()) {
    nlohmann::json text = *it;
    if (!text.contains("model_type") && doc.contains("model_type")) {
      text["model_type"] = doc["model_type"];
    }
    doc = std::move(text);
  }
  ModelConfig c;
  if (const auto it = doc.find("model_type"); it != doc.end() && it->is_string()) {
    c.architecture = it->get<std::string>();
    c.name = c.architecture;
  }
  struct Field {
    const char* key;
    uint32_t* dst;
    bool required;
  };
  const Field fields[] = {
      {"num_hidden_layers", &c.n_layers, true},
      {"hidden_size", &c.hidden, true},
      {"intermediate_size", &c.ffn, false},
      {"num_attention_heads", &c.n_heads, true},
      {"vocab_size", &c.vocab_size, true},
      {"max_position_embeddings", &c.context_length, false},
      {"kv_lora_rank", &c.kv_lora_rank, false},
      {"qk_rope_head_dim", &c.qk_rope_head_dim, false},
  };
  for (const Field& f : fields) {
    auto v = JsonU32(doc, f.key);
    if (!v) return std::unexpected(v.error());
    if (!*v && f.required) {
      return MakeError(ErrorCode::kInvalidArgument, std::string("config.json: missing ") + f.key);
    }
    *f.dst = v->value_or(0);
  }
  auto kv = JsonU32(doc, "num_key_value_heads");
  if (!kv) return std::unexpected(kv.error());
  c.n_kv_heads = kv->value_or(c.n_heads);
  auto hd = JsonU32(doc, "head_dim");
  if (!hd) return std::unexpected(hd.error());
  auto nope = JsonU32(doc, "qk_nope_head_dim");
  if (!nope) return std::unexpected(nope.error());
  if (*hd) {
    c.head_dim = **hd;
  } else if (c.uses_mla() && *nope) {
    c.head_dim = **nope + c.qk_rope_head_dim;
  } else {
    c.head_dim = c.n_heads ? c.hidden / c.n_heads : 0;
  }
  c.rope_dim = c.uses_mla() ? c.qk_rope_head_dim : c.head_dim;
  if (c.kv_lora_rank == 0) c.qk_rope_head_dim = 0;
  auto theta = JsonNumber(doc, "rope_theta");
  if (!theta) return std::unexpected(theta.error());
  c.rope_freq_base = theta->value_or(10000.0);
  auto eps = JsonNumber(doc, "rms_norm_eps");
  if (!eps) return std::unexpected(eps.error());
  c.rms_norm_eps = eps->value_or(1e-5);
  if (const auto it = doc.find("tie_word_embeddings"); it != doc.end() && it->is_boolean()) {
    c.tied_embeddings = it->get<bool>();
  }
  if (auto sw = ReadHfSlidingWindow(doc, c); !sw) return std::unexpected(sw.error());
  if (auto st = ValidateModelConfig(c); !st) {
    return MakeError(ErrorCode::kInvalidArgument, "config.json: " + st.error().message);
  }
  return c;
}

Result<ModelConfig> ModelConfigFromHfConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeError(ErrorCode::kNotFound, path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  auto c = ModelConfigFromHfJson(text.str());
  if (!c) return MakeError(c.error().code, path + ": " + c.error().message);
  return c;
}

std::vector<ModelConfig> BuiltinModelConfigs() {
  std::vector<ModelConfig> t;
  // name, arch, layers, hidden, ffn, heads, kv heads, head dim, vocab, context, rope, eps, tied,
  // weights GiB (BF16 except DeepSeek V3, published in FP8).
  t.push_back(Builtin("llama-3.3-70b", "llama", 80, 8192, 28672, 64, 8, 128, 128256, 131072,
                      500000.0, 1e-5, false, 131.4));
  t.push_back(Builtin("llama-3.1-405b", "llama", 126, 16384, 53248, 128, 8, 128, 128256, 131072,
                      500000.0, 1e-5, false, 756.0));
  t.push_back(Builtin("qwen3-8b", "qwen3", 36, 4096, 12288, 32, 8, 128, 151936, 40960, 1e6, 1e-6,
                      false, 15.3));
  t.push_back(Builtin("qwen3-235b-a22b", "qwen3_moe", 94, 4096, 12288, 64, 4, 128, 151936, 40960,
                      1e6, 1e-6, false, 437.9));
  ModelConfig ds = Builtin("deepseek-v3", "deepseek_v3", 61, 7168, 18432, 128, 128, 192, 129280,
                           163840, 10000.0, 1e-6, false, 625.0);
  ds.kv_lora_rank = 512;
  ds.qk_rope_head_dim = 64;
  ds.rope_dim = 64;
  t.push_back(std::move(ds));
  t.push_back(Builtin("smollm2-135m", "llama", 30, 576, 1536, 9, 3, 64, 49152, 8192, 100000.0, 1e-5,
                      true, 0.25));
  return t;
}

std::optional<ModelConfig> FindBuiltinModelConfig(std::string_view name) {
  const std::string key = Lower(name);
  for (ModelConfig& c : BuiltinModelConfigs()) {
    if (c.name == key) return std::move(c);
  }
  return std::nullopt;
}

}  // namespace kvgate::engine
