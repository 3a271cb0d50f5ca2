#include "local_engine/kv_size.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "common/ascii.h"

namespace kvgate::engine {
namespace {

uint64_t SatMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t SatAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

// One layer's share of a token: every layer of a ModelConfig has the same KV geometry.
uint64_t KvBytesPerLayerToken(const ModelConfig& c, KvDtype dtype) {
  if (c.uses_mla()) {
    return KvBytesPerToken(1, 1, uint64_t{c.kv_lora_rank} + c.qk_rope_head_dim, dtype);
  }
  return KvBytesPerTokenMha(1, c.n_kv_heads, c.head_dim, dtype);
}

std::string Fixed(double v, int decimals) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(decimals) << v;
  return s.str();
}

std::string Lower(std::string_view s) { return AsciiLowered(s); }

}  // namespace

uint64_t KvBytesPerToken(const ModelConfig& c, KvDtype dtype) {
  return SatMul(KvBytesPerLayerToken(c, dtype), c.n_layers);
}

uint64_t KvBytesPerSession(const ModelConfig& c, KvDtype dtype, uint64_t tokens) {
  const uint64_t sliding = c.n_sliding_layers();
  const uint64_t full = c.n_layers - sliding;
  const uint64_t capped = std::min<uint64_t>(tokens, c.sliding_window);
  const uint64_t layer_tokens = SatAdd(SatMul(full, tokens), SatMul(sliding, capped));
  return SatMul(KvBytesPerLayerToken(c, dtype), layer_tokens);
}

uint64_t SessionsThatFit(uint64_t gpu_bytes, uint64_t weights_bytes, uint64_t session_bytes) {
  if (session_bytes == 0 || weights_bytes >= gpu_bytes) return 0;
  return (gpu_bytes - weights_bytes) / session_bytes;
}

KvPoolPlan PlanKvPool(uint64_t gpu_bytes, double utilization, uint64_t weights_bytes,
                      uint64_t session_bytes) {
  KvPoolPlan plan;
  // gpu_bytes <= 1 PiB < 2^53, so the product is exact to well under a byte.
  const double usable = std::floor(static_cast<double>(gpu_bytes) * utilization);
  plan.usable_bytes = std::min(gpu_bytes, static_cast<uint64_t>(std::max(usable, 0.0)));
  plan.weights_fit = weights_bytes < plan.usable_bytes;
  if (!plan.weights_fit) return plan;
  plan.pool_bytes = plan.usable_bytes - weights_bytes;
  plan.sessions = SessionsThatFit(plan.usable_bytes, weights_bytes, session_bytes);
  return plan;
}

Result<uint64_t> ParseByteSize(std::string_view text) {
  constexpr std::string_view kUnits = "GB, GiB, MB or MiB";
  double number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || !std::isfinite(number)) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "needs a number and a unit (" + std::string(kUnits) + "), got '" + std::string(text) + "'");
  }
  std::string_view unit = text.substr(static_cast<size_t>(end - text.data()));
  if (unit.starts_with(' ')) unit.remove_prefix(1);
  if (unit.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "needs a unit: " + std::string(kUnits) +
                                                      " (as in 80GB or 141GiB), got '" +
                                                      std::string(text) + "'");
  }
  const std::string u = Lower(unit);
  double scale = 0;
  if (u == "gb") scale = 1e9;
  if (u == "gib") scale = 1024.0 * 1024 * 1024;
  if (u == "mb") scale = 1e6;
  if (u == "mib") scale = 1024.0 * 1024;
  if (scale == 0) {
    return MakeError(ErrorCode::kInvalidArgument, "has an unknown unit '" + std::string(unit) +
                                                      "' in '" + std::string(text) + "': use " +
                                                      std::string(kUnits));
  }
  const double bytes = number * scale;
  if (bytes < 0 || bytes > static_cast<double>(kMaxSizeBytes)) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "needs a size from 0 to 1 PiB (1125899.91 GB), got '" + std::string(text) + "'");
  }
  return static_cast<uint64_t>(bytes);
}

Result<double> ParseGpuMemoryUtilization(std::string_view text) {
  double f = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), f);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(f) || f <= 0 ||
      f > 1) {
    constexpr std::string_view kRange =
        "needs a fraction in (0, 1], as vLLM's gpu_memory_utilization (default 0.9), got '";
    return MakeError(ErrorCode::kInvalidArgument, std::string(kRange) + std::string(text) + "'");
  }
  return f;
}

std::string FormatGibGb(uint64_t bytes, int decimals) {
  const double b = static_cast<double>(bytes);
  return Fixed(b / (1024.0 * 1024 * 1024), decimals) + " GiB (" + Fixed(b / 1e9, decimals) + " GB)";
}

}  // namespace kvgate::engine
