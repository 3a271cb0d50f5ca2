#include "local_engine/kv_size.h"

namespace kvgate::engine {
namespace {

uint64_t SatMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

}  // namespace

Result<KvDtype> ParseKvDtype(std::string_view name) {
  if (name == "fp32" || name == "f32") return KvDtype::kFp32;
  if (name == "bf16") return KvDtype::kBf16;
  if (name == "fp16" || name == "f16") return KvDtype::kFp16;
  if (name == "fp8") return KvDtype::kFp8;
  return MakeError(ErrorCode::kInvalidArgument,
                   "unknown KV dtype '" + std::string(name) + "' (bf16, fp16, fp8, fp32)");
}

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFp32:
      return "fp32";
    case KvDtype::kBf16:
      return "bf16";
    case KvDtype::kFp16:
      return "fp16";
    case KvDtype::kFp8:
      return "fp8";
  }
  return "?";
}

uint32_t KvDtypeBytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFp32:
      return 4;
    case KvDtype::kBf16:
    case KvDtype::kFp16:
      return 2;
    case KvDtype::kFp8:
      return 1;
  }
  return 0;
}

uint64_t KvBytesPerToken(const ModelConfig& c, KvDtype dtype) {
  const uint64_t bytes = KvDtypeBytes(dtype);
  if (c.uses_mla()) {
    return SatMul(SatMul(c.n_layers, uint64_t{c.kv_lora_rank} + c.qk_rope_head_dim), bytes);
  }
  return SatMul(SatMul(SatMul(2ull * c.n_layers, c.n_kv_heads), c.head_dim), bytes);
}

uint64_t KvBytesPerSession(const ModelConfig& c, KvDtype dtype, uint64_t tokens) {
  return SatMul(KvBytesPerToken(c, dtype), tokens);
}

uint64_t SessionsThatFit(uint64_t gpu_bytes, uint64_t weights_bytes, uint64_t session_bytes) {
  if (session_bytes == 0 || weights_bytes >= gpu_bytes) return 0;
  return (gpu_bytes - weights_bytes) / session_bytes;
}

}  // namespace kvgate::engine
