// KV cache size arithmetic (bytes of K/V cache per token), by kv_dtype.h's one formula:
//   ordinary attention:  bytes/token = 2 (K and V) x layers x KV heads x (head dim x bytes/value
//                        + scale bytes)
//   MLA (DeepSeek):      bytes/token = layers x ((kv_lora_rank + qk_rope_head_dim) x bytes/value
//                        + scale bytes) (one latent vector and one RoPE key per layer, no V)
// Scale bytes are 2 per vector for int8 and fp8 (kvgate's per-token scales), else 0; the engine's
// pool allocates exactly this per token.
// Sliding-window layers (ModelConfig::sliding_layers) hold at most sliding_window tokens, so a
// session's bytes are not bytes/token x tokens once the context passes the window.
// All functions are pure; results saturate at UINT64_MAX instead of overflowing.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

#include "common/error.h"
#include "local_engine/kv_dtype.h"
#include "local_engine/model_config.h"

namespace kvgate::engine {

// What a token costs across every layer, the window ignored (the rate while a session is no
// longer than the window). REQUIRES: ValidateModelConfig(config) succeeded.
uint64_t KvBytesPerToken(const ModelConfig& config, KvDtype dtype);
// A session of `tokens`: full-attention layers hold all of them, sliding layers
// min(tokens, sliding_window).
uint64_t KvBytesPerSession(const ModelConfig& config, KvDtype dtype, uint64_t tokens);
// Whole sessions of `session_bytes` that fit in `gpu_bytes` once `weights_bytes` are resident;
// 0 when the weights alone do not fit. REQUIRES: session_bytes > 0.
uint64_t SessionsThatFit(uint64_t gpu_bytes, uint64_t weights_bytes, uint64_t session_bytes);

// A KV pool sized the way vLLM sizes it with gpu_memory_utilization: the engine may use
// utilization x the GPU's memory, the weights come out of that, the KV pool is the rest (vLLM
// also takes its measured activation peak out; kv-size cannot measure that, so its pool is an
// upper bound).
struct KvPoolPlan {
  uint64_t usable_bytes = 0;  // floor(gpu_bytes x utilization)
  uint64_t pool_bytes = 0;    // usable_bytes - weights, 0 when the weights do not fit
  uint64_t sessions = 0;      // whole sessions in pool_bytes
  bool weights_fit = false;   // weights < usable_bytes
};
// REQUIRES: 0 < utilization <= 1 (ParseGpuMemoryUtilization).
KvPoolPlan PlanKvPool(uint64_t gpu_bytes, double utilization, uint64_t weights_bytes,
                      uint64_t session_bytes);

// The largest size the size flags take: 1 PiB, so that byte counts stay far inside 64 bits.
inline constexpr uint64_t kMaxSizeBytes = uint64_t{1} << 50;
// A size with its unit: a non-negative number, then GB (10^9), GiB (2^30), MB (10^6) or MiB
// (2^20), case-insensitive, optionally after one space: "80GB", "141GiB", "512 MiB", "1.5GB".
// A bare number is an error (which unit was meant is the very ambiguity the flag removes).
// Errors: kInvalidArgument, naming the accepted units.
Result<uint64_t> ParseByteSize(std::string_view text);
// A fraction in (0, 1]: "0.9". Errors: kInvalidArgument saying the range.
Result<double> ParseGpuMemoryUtilization(std::string_view text);
// "11.50 GiB (12.35 GB)", with `decimals` places in both.
std::string FormatGibGb(uint64_t bytes, int decimals = 2);

// `kvgate kv-size`: argv[0] is the command name, then
//   --model NAME | --gguf PATH | --hf-config PATH   (none: every built-in model)
//   --dtype bf16|f16|int8|fp8|fp32 (default bf16)   --context N (default: the model's context length)
//   --gpu-mem SIZE (or --gpu-mem-gib G)   --gpu-memory-utilization F (default 0.9)
//   --weights SIZE (or --weights-gib W; default: the built-in table / the GGUF file size)
// Prints a table to `out`; warnings (weights that do not fit) and errors go to `err`, errors with
// a non-zero return.
int RunKvSizeCommand(int argc, char** argv, std::ostream& out, std::ostream& err);
int RunKvSizeCommand(int argc, char** argv);  // std::cout / std::cerr

}  // namespace kvgate::engine
