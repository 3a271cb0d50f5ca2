// The KV cache's element types and what one token of cache costs: the one definition that the
// engine's pool (ModelRunner), `kv_cache_dtype` in the config and `kvgate kv-size` all use, so
// that kv-size's figures and the pool's allocation cannot disagree.
//
//   bytes/token = layers x vectors per layer x (values per vector x value bytes + scale bytes)
//   ordinary attention: 2 (K and V) x KV heads vectors of head dim values per layer;
//   MLA (DeepSeek):     1 latent vector of kv_lora_rank + qk_rope_head_dim values per layer.
// int8 and fp8 carry one f16 scale per vector (per token and kv head; kernels/cpu/kv_quant.h says
// why), 2 bytes; the other types none.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/error.h"
#include "kernels/cpu/kv_quant.h"

namespace kvgate::engine {

// kFp32 exists for kv-size's arithmetic only (other engines' caches); the engine's cache is one of
// f16, bf16, int8, fp8.
enum class KvDtype { kFp16, kBf16, kInt8, kFp8, kFp32 };

// kv-size's --dtype: "f16"/"fp16", "bf16", "int8", "fp8", "f32"/"fp32". kInvalidArgument names the
// valid ones.
Result<KvDtype> ParseKvDtype(std::string_view name);
// A local provider's kv_cache_dtype: "f16" (also "fp16"), "bf16", "int8", "fp8". kInvalidArgument
// with the message "must be one of f16, bf16, int8, fp8 (got 'NAME')".
Result<KvDtype> ParseKvCacheDtype(std::string_view name);
inline constexpr std::string_view kKvCacheDtypes = "f16, bf16, int8, fp8";
// "f16", "bf16", "int8", "fp8", "fp32".
std::string_view KvDtypeName(KvDtype dtype);
uint32_t KvValueBytes(KvDtype dtype);
uint32_t KvScaleBytes(KvDtype dtype);  // per vector: 2 for int8 and fp8, else 0
// The CPU kernels' format of an engine dtype; nullopt for kFp32.
std::optional<kernels::cpu::KvFormat> CpuKvFormat(KvDtype dtype);

// Bytes of KV cache one token takes: `layers` x `vectors` (per layer) x `values` (per vector).
// Saturates at UINT64_MAX.
uint64_t KvBytesPerToken(uint64_t layers, uint64_t vectors, uint64_t values, KvDtype dtype);
// Ordinary attention: 2 x layers x kv_heads vectors of head_dim values.
uint64_t KvBytesPerTokenMha(uint64_t layers, uint64_t kv_heads, uint64_t head_dim, KvDtype dtype);

}  // namespace kvgate::engine
