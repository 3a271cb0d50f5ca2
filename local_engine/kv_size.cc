#include "local_engine/kv_size.h"

namespace kvgate::engine {
namespace {

uint64_t SatMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

}  // namespace

uint64_t KvBytesPerToken(const ModelConfig& c, KvDtype dtype) {
  if (c.uses_mla()) {
    return KvBytesPerToken(c.n_layers, 1, uint64_t{c.kv_lora_rank} + c.qk_rope_head_dim, dtype);
  }
  return KvBytesPerTokenMha(c.n_layers, c.n_kv_heads, c.head_dim, dtype);
}

uint64_t KvBytesPerSession(const ModelConfig& c, KvDtype dtype, uint64_t tokens) {
  return SatMul(KvBytesPerToken(c, dtype), tokens);
}

uint64_t SessionsThatFit(uint64_t gpu_bytes, uint64_t weights_bytes, uint64_t session_bytes) {
  if (session_bytes == 0 || weights_bytes >= gpu_bytes) return 0;
  return (gpu_bytes - weights_bytes) / session_bytes;
}

}  // namespace kvgate::engine
