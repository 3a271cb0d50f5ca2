// The shape of a transformer, as far as kvgate needs it: to run it (the built-in engine reads the
// llama.* keys of a GGUF) and to size its KV cache (kv_size.h), including models kvgate only
// proxies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "local_engine/gguf.h"

namespace kvgate::engine {

struct ModelConfig {
  std::string name;          // built-in table key, GGUF general.name or HF model_type
  std::string architecture;  // "llama", "qwen3", "deepseek_v3", ...
  uint32_t n_layers = 0;
  uint32_t hidden = 0;      // embedding width
  uint32_t ffn = 0;         // dense FFN width (MoE experts may differ)
  uint32_t n_heads = 0;     // query heads
  uint32_t n_kv_heads = 0;  // key/value heads (== n_heads without GQA)
  uint32_t head_dim = 0;    // per-head width of K and V
  uint32_t rope_dim = 0;    // rotated dimensions per head (== head_dim unless partial RoPE)
  uint32_t vocab_size = 0;
  uint32_t context_length = 0;  // trained maximum
  double rope_freq_base = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tied_embeddings = false;  // output projection reuses token_embd
  // Multi-head latent attention (DeepSeek V2/V3): each layer caches one latent vector of
  // kv_lora_rank values plus a shared RoPE key of qk_rope_head_dim values. 0 = ordinary attention.
  uint32_t kv_lora_rank = 0;
  uint32_t qk_rope_head_dim = 0;
  // Size of the published weights in GiB (built-in table only; 0 = unknown).
  double weights_gib = 0.0;
  // Sliding-window attention (Mistral, Gemma 2/3): a sliding layer attends to, and so caches, only
  // the last `sliding_window` tokens, which caps its share of a long session's KV cache.
  // sliding_layers[i] marks layer i; both are empty/0 when every layer is full attention.
  uint32_t sliding_window = 0;
  std::vector<bool> sliding_layers;

  bool uses_mla() const { return kv_lora_rank > 0; }
  uint32_t n_sliding_layers() const;
};

// Which of `n_layers` layers slide when every `period`-th one is full attention (layer i slides
// unless (i + 1) % period == 0): Gemma 2's alternation is period 2, Gemma 3's default 6 (five local
// layers, then one global). period 0: every layer slides (Mistral).
std::vector<bool> SlidingLayersEvery(uint32_t n_layers, uint32_t period);

// Checks the invariants every consumer relies on: non-zero layers/hidden/heads/head_dim/vocab,
// n_kv_heads dividing n_heads (or MLA), one sliding_layers entry per layer when sliding_window is
// set. Errors: kInvalidArgument naming the field.
Status ValidateModelConfig(const ModelConfig& config);

// From a GGUF's `{general.architecture}.*` keys; tied_embeddings when there is no output.weight.
// `ARCH.attention.sliding_window` sets the window; which layers slide comes from
// `ARCH.attention.sliding_window_pattern` (a bool per layer, or a period as SlidingLayersEvery),
// else from the architecture (gemma2: period 2, gemma3: 6, any other: every layer).
// Errors: kCorruptData (message starts with the path) for missing or out-of-range keys.
Result<ModelConfig> ModelConfigFromGguf(const GgufFile& file);

// From a Hugging Face config.json (text, or a file path). Reads num_hidden_layers, hidden_size,
// intermediate_size, num_attention_heads, num_key_value_heads, head_dim, vocab_size,
// max_position_embeddings, rope_theta, rms_norm_eps, tie_word_embeddings, kv_lora_rank,
// qk_rope_head_dim; a nested "text_config" (multimodal models) is used when present.
// Sliding windows: `sliding_window` (null or absent: none; `use_sliding_window: false`, as Qwen
// configs carry, turns it off). Which layers slide, most precise first: `layer_types`
// ("sliding_attention" / "full_attention", one per layer); `sliding_window_pattern` (a period, as
// SlidingLayersEvery); with use_sliding_window true, `max_window_layers` (Qwen 2: layers from that
// index on slide); else by model_type: gemma2 period 2, gemma3* period 6, any other every layer.
// Errors: kInvalidArgument for bad JSON or missing/invalid fields, kNotFound for a missing file.
Result<ModelConfig> ModelConfigFromHfJson(std::string_view json_text);
Result<ModelConfig> ModelConfigFromHfConfigFile(const std::string& path);

// Built-in configs: llama-3.3-70b, llama-3.1-405b, qwen3-8b, qwen3-235b-a22b, deepseek-v3,
// smollm2-135m (values from the models' published config.json files).
std::vector<ModelConfig> BuiltinModelConfigs();
// Case-insensitive lookup by name; nullopt when unknown.
std::optional<ModelConfig> FindBuiltinModelConfig(std::string_view name);

}  // namespace kvgate::engine
