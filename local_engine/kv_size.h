// KV cache size arithmetic (bytes of K/V cache per token):
//   ordinary attention:  bytes/token = 2 (K and V) x layers x KV heads x head dim x bytes/value
//   MLA (DeepSeek):      bytes/token = layers x (kv_lora_rank + qk_rope_head_dim) x bytes/value
//                        (one latent vector and one RoPE key per layer, no separate V)
// All functions are pure; results saturate at UINT64_MAX instead of overflowing.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string_view>

#include "common/error.h"
#include "local_engine/model_config.h"

namespace kvgate::engine {

enum class KvDtype { kFp32, kBf16, kFp16, kFp8 };

// "fp32"/"f32", "bf16", "fp16"/"f16", "fp8". Errors: kInvalidArgument.
Result<KvDtype> ParseKvDtype(std::string_view name);
std::string_view KvDtypeName(KvDtype dtype);
uint32_t KvDtypeBytes(KvDtype dtype);

// REQUIRES: ValidateModelConfig(config) succeeded.
uint64_t KvBytesPerToken(const ModelConfig& config, KvDtype dtype);
uint64_t KvBytesPerSession(const ModelConfig& config, KvDtype dtype, uint64_t tokens);
// Whole sessions of `session_bytes` that fit in `gpu_bytes` once `weights_bytes` are resident;
// 0 when the weights alone do not fit. REQUIRES: session_bytes > 0.
uint64_t SessionsThatFit(uint64_t gpu_bytes, uint64_t weights_bytes, uint64_t session_bytes);

// `kvgate kv-size`: argv[0] is the command name, then
//   --model NAME | --gguf PATH | --hf-config PATH   (none: every built-in model)
//   --dtype bf16|fp16|fp8|fp32 (default bf16)   --context N (default: the model's context length)
//   --gpu-mem-gib G   --weights-gib W (default: the built-in table / the GGUF file size)
// Prints a table to `out`; errors go to `err` with a non-zero return.
int RunKvSizeCommand(int argc, char** argv, std::ostream& out, std::ostream& err);
int RunKvSizeCommand(int argc, char** argv);  // std::cout / std::cerr

}  // namespace kvgate::engine
