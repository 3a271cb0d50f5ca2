// Read-only view of a GGUF file (memory-mapped): the header, metadata and tensor index of
// ggml's GGUF format, version 3.
// Every malformed file is rejected by Open() with an Error naming the file and the problem; after a
// successful Open every tensor's bytes lie inside the mapping and every string is valid to read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/error.h"

namespace kvgate::engine {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kQ6_K = 14,
  kBF16 = 30,
};

std::string_view GgmlTypeName(GgmlType type);
// Elements per block and bytes per block; nullopt for types kvgate does not support.
std::optional<uint32_t> GgmlBlockElements(uint32_t type);
std::optional<uint32_t> GgmlBlockBytes(uint32_t type);

struct GgufValue;
using GgufArray = std::vector<GgufValue>;

// A metadata value. Integers of every width are widened; arrays keep their element values.
struct GgufValue {
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> v;
  uint32_t type = 0;  // the GGUF value type id as stored (0..12)
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> dims;  // ne[0] (fastest varying) first, 1..4 entries
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // inside the mapping, valid while the GgufFile lives
};

class GgufFile {
 public:
  // Maps and validates the whole file. Errors: kNotFound / kUnavailable for I/O, kCorruptData for
  // every format violation (message starts with the path).
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Same validation over bytes in memory (for tests and the fuzzer); `bytes` must outlive the file.
  static Result<std::unique_ptr<GgufFile>> FromBytes(std::span<const uint8_t> bytes,
                                                     std::string name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  // general.alignment (default 32) and the file offset where the tensor data section starts.
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& path() const { return path_; }

  const GgufValue* Find(std::string_view key) const;
  std::optional<int64_t> GetInt(std::string_view key) const;   // any integer type
  std::optional<double> GetFloat(std::string_view key) const;  // f32/f64 (or integer)
  std::optional<std::string> GetString(std::string_view key) const;
  std::optional<bool> GetBool(std::string_view key) const;
  // Arrays of strings (tokenizer.ggml.tokens, .merges); nullptr when absent or of another type.
  const GgufArray* GetArray(std::string_view key) const;
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }

  const GgufTensor* FindTensor(std::string_view name) const;  // O(1); nullptr when absent
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

 private:
  GgufFile() = default;
  std::string path_;
  uint32_t version_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensor> tensors_;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  // Views into the names held by metadata_ / tensors_, which never change after construction.
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
  void* mapping_ = nullptr;  // munmap'd in the destructor when non-null
  size_t mapping_size_ = 0;
};

}  // namespace kvgate::engine
