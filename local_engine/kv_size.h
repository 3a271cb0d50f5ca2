// KV cache size arithmetic (bytes of K/V cache per token), by kv_dtype.h's one formula:
//   ordinary attention:  bytes/token = 2 (K and V) x layers x KV heads x (head dim x bytes/value
//                        + scale bytes)
//   MLA (DeepSeek):      bytes/token = layers x ((kv_lora_rank + qk_rope_head_dim) x bytes/value
//                        + scale bytes) (one latent vector and one RoPE key per layer, no V)
// Scale bytes are 2 per vector for int8 and fp8 (kvgate's per-token scales), else 0; the engine's
// pool allocates exactly this per token.
// All functions are pure; results saturate at UINT64_MAX instead of overflowing.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string_view>

#include "common/error.h"
#include "local_engine/kv_dtype.h"
#include "local_engine/model_config.h"

namespace kvgate::engine {

// REQUIRES: ValidateModelConfig(config) succeeded.
uint64_t KvBytesPerToken(const ModelConfig& config, KvDtype dtype);
uint64_t KvBytesPerSession(const ModelConfig& config, KvDtype dtype, uint64_t tokens);
// Whole sessions of `session_bytes` that fit in `gpu_bytes` once `weights_bytes` are resident;
// 0 when the weights alone do not fit. REQUIRES: session_bytes > 0.
uint64_t SessionsThatFit(uint64_t gpu_bytes, uint64_t weights_bytes, uint64_t session_bytes);

// `kvgate kv-size`: argv[0] is the command name, then
//   --model NAME | --gguf PATH | --hf-config PATH   (none: every built-in model)
//   --dtype bf16|f16|int8|fp8|fp32 (default bf16)   --context N (default: the model's context length)
//   --gpu-mem-gib G   --weights-gib W (default: the built-in table / the GGUF file size)
// Prints a table to `out`; errors go to `err` with a non-zero return.
int RunKvSizeCommand(int argc, char** argv, std::ostream& out, std::ostream& err);
int RunKvSizeCommand(int argc, char** argv);  // std::cout / std::cerr

}  // namespace kvgate::engine
