#include "local_engine/kv_dtype.h"

#include <string>

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

}  // namespace

Result<KvDtype> ParseKvDtype(std::string_view name) {
  if (name == "fp32" || name == "f32") return KvDtype::kFp32;
  if (auto d = ParseKvCacheDtype(name)) return *d;
  return MakeError(ErrorCode::kInvalidArgument, "unknown KV dtype '" + std::string(name) +
                                                    "' (" + std::string(kKvCacheDtypes) + ", fp32)");
}

Result<KvDtype> ParseKvCacheDtype(std::string_view name) {
  if (name == "f16" || name == "fp16") return KvDtype::kFp16;
  if (name == "bf16") return KvDtype::kBf16;
  if (name == "int8") return KvDtype::kInt8;
  if (name == "fp8") return KvDtype::kFp8;
  return MakeError(ErrorCode::kInvalidArgument, "must be one of " + std::string(kKvCacheDtypes) +
                                                    " (got '" + std::string(name) + "')");
}

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFp16:
      return "f16";
    case KvDtype::kBf16:
      return "bf16";
    case KvDtype::kInt8:
      return "int8";
    case KvDtype::kFp8:
      return "fp8";
    case KvDtype::kFp32:
      return "fp32";
  }
  return "?";
}

uint32_t KvValueBytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFp32:
      return 4;
    case KvDtype::kFp16:
    case KvDtype::kBf16:
      return 2;
    case KvDtype::kInt8:
    case KvDtype::kFp8:
      return 1;
  }
  return 0;
}

uint32_t KvScaleBytes(KvDtype dtype) {
  return dtype == KvDtype::kInt8 || dtype == KvDtype::kFp8 ? 2 : 0;
}

std::optional<kernels::cpu::KvFormat> CpuKvFormat(KvDtype dtype) {
  using kernels::cpu::KvFormat;
  switch (dtype) {
    case KvDtype::kFp16:
      return KvFormat::kF16;
    case KvDtype::kBf16:
      return KvFormat::kBf16;
    case KvDtype::kInt8:
      return KvFormat::kInt8;
    case KvDtype::kFp8:
      return KvFormat::kFp8;
    case KvDtype::kFp32:
      return std::nullopt;
  }
  return std::nullopt;
}

uint64_t KvBytesPerToken(uint64_t layers, uint64_t vectors, uint64_t values, KvDtype dtype) {
  const uint64_t per_vector = SatAdd(SatMul(values, KvValueBytes(dtype)), KvScaleBytes(dtype));
  return SatMul(SatMul(layers, vectors), per_vector);
}

uint64_t KvBytesPerTokenMha(uint64_t layers, uint64_t kv_heads, uint64_t head_dim, KvDtype dtype) {
  return KvBytesPerToken(layers, SatMul(2, kv_heads), head_dim, dtype);
}

}  // namespace kvgate::engine
