// Test helper: writes GGUF files byte by byte so tests can build valid files and precise
// malformations without any file on disk.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::engine::testing {

// Little-endian byte sink.
class ByteWriter {
 public:
  ByteWriter& U8(uint8_t v) { return Raw(&v, 1); }
  ByteWriter& U32(uint32_t v) { return Raw(&v, 4); }
  ByteWriter& I32(int32_t v) { return Raw(&v, 4); }
  ByteWriter& U64(uint64_t v) { return Raw(&v, 8); }
  ByteWriter& F32(float v) { return Raw(&v, 4); }
  ByteWriter& Str(std::string_view s) {
    U64(s.size());
    return Raw(s.data(), s.size());
  }
  ByteWriter& Raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return *this;
  }
  ByteWriter& PadTo(size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
    return *this;
  }
  std::vector<uint8_t> bytes;
};

// A GGUF file assembled from parts; fields are public so a test can lie about any of them.
struct GgufBuilder {
  struct TensorSpec {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type = 0;
    uint64_t n_bytes = 0;          // data bytes written for this tensor
    int64_t offset_override = -1;  // -1: next aligned position
  };

  uint32_t magic = 0x46554747;  // "GGUF"
  uint32_t version = 3;
  int64_t tensor_count_override = -1;
  int64_t kv_count_override = -1;
  uint64_t alignment = 32;
  // Each entry is a complete encoded key/value pair (key, type, value).
  std::vector<std::vector<uint8_t>> kvs;
  std::vector<TensorSpec> tensors;
  size_t truncate_data_by = 0;

  GgufBuilder& Kv(std::string_view key, uint32_t type, const ByteWriter& value) {
    ByteWriter w;
    w.Str(key).U32(type);
    w.bytes.insert(w.bytes.end(), value.bytes.begin(), value.bytes.end());
    kvs.push_back(std::move(w.bytes));
    return *this;
  }
  GgufBuilder& KvU32(std::string_view key, uint32_t v) { return Kv(key, 4, ByteWriter().U32(v)); }
  GgufBuilder& KvF32(std::string_view key, float v) { return Kv(key, 6, ByteWriter().F32(v)); }
  GgufBuilder& KvStr(std::string_view key, std::string_view v) {
    return Kv(key, 8, ByteWriter().Str(v));
  }
  GgufBuilder& KvStrArray(std::string_view key, const std::vector<std::string>& v) {
    ByteWriter w;
    w.U32(8).U64(v.size());
    for (const auto& s : v) w.Str(s);
    return Kv(key, 9, w);
  }
  GgufBuilder& KvI32Array(std::string_view key, const std::vector<int32_t>& v) {
    ByteWriter w;
    w.U32(5).U64(v.size());
    for (int32_t x : v) w.I32(x);
    return Kv(key, 9, w);
  }
  GgufBuilder& KvBoolArray(std::string_view key, const std::vector<bool>& v) {
    ByteWriter w;
    w.U32(7).U64(v.size());
    for (bool x : v) w.U8(x ? 1 : 0);
    return Kv(key, 9, w);
  }
  // n_bytes is computed by the caller (it is what the file claims, not checked here).
  GgufBuilder& Tensor(std::string name, std::vector<uint64_t> dims, uint32_t type, uint64_t n_bytes,
                      int64_t offset = -1) {
    tensors.push_back({std::move(name), std::move(dims), type, n_bytes, offset});
    return *this;
  }

  std::vector<uint8_t> Build() const {
    ByteWriter w;
    w.U32(magic).U32(version);
    w.U64(tensor_count_override >= 0 ? static_cast<uint64_t>(tensor_count_override)
                                     : tensors.size());
    w.U64(kv_count_override >= 0 ? static_cast<uint64_t>(kv_count_override) : kvs.size());
    for (const auto& kv : kvs) w.Raw(kv.data(), kv.size());
    uint64_t next = 0;
    uint64_t data_end = 0;
    for (const auto& t : tensors) {
      w.Str(t.name).U32(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) w.U64(d);
      w.U32(t.type);
      const uint64_t offset =
          t.offset_override >= 0 ? static_cast<uint64_t>(t.offset_override) : next;
      w.U64(offset);
      next = (offset + t.n_bytes + alignment - 1) / alignment * alignment;
      data_end = std::max(data_end, offset + t.n_bytes);
    }
    w.PadTo(alignment);
    const size_t data_start = w.bytes.size();
    w.bytes.resize(data_start + data_end);
    for (uint64_t i = 0; i < data_end; ++i) {
      w.bytes[data_start + i] = static_cast<uint8_t>(i * 7 + 3);
    }
    w.bytes.resize(w.bytes.size() - std::min(truncate_data_by, static_cast<size_t>(data_end)));
    return w.bytes;
  }
};

}  // namespace kvgate::engine::testing
