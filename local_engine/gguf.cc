// GGUF reader: a bounds-checked cursor over the file's bytes. Every count read from the file is
// checked against the bytes that remain *before* anything is reserved, so a lying header cannot
// make the reader allocate more than a small multiple of the file size.
#include "local_engine/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <type_traits>
#include <unordered_set>

#include "common/str_cat.h"

namespace kvgate::engine {

std::string_view GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kQ4_0:
      return "Q4_0";
    case GgmlType::kQ4_1:
      return "Q4_1";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kQ6_K:
      return "Q6_K";
    case GgmlType::kBF16:
      return "BF16";
  }
  return "unknown";
}

std::optional<uint32_t> GgmlBlockElements(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 1;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ8_0:
      return 32;
    case GgmlType::kQ6_K:
      return 256;
  }
  return std::nullopt;
}

std::optional<uint32_t> GgmlBlockBytes(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 2;
    case GgmlType::kQ4_0:
      return 18;
    case GgmlType::kQ4_1:
      return 20;
    case GgmlType::kQ8_0:
      return 34;
    case GgmlType::kQ6_K:
      return 210;
  }
  return std::nullopt;
}

namespace {

using kvgate::StrCat;

// GGUF metadata value type ids.
enum : uint32_t {
  kTypeU8 = 0,
  kTypeI8 = 1,
  kTypeU16 = 2,
  kTypeI16 = 3,
  kTypeU32 = 4,
  kTypeI32 = 5,
  kTypeF32 = 6,
  kTypeBool = 7,
  kTypeString = 8,
  kTypeArray = 9,
  kTypeU64 = 10,
  kTypeI64 = 11,
  kTypeF64 = 12,
};

constexpr uint32_t kMaxArrayDepth = 8;  // tokenizer data needs 1; deeper is treated as hostile
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kDefaultAlignment = 32;

// Fewest bytes one encoded value of `type` can occupy; used to bound counts before allocating.
uint64_t MinEncodedSize(uint32_t type) {
  switch (type) {
    case kTypeU8:
    case kTypeI8:
    case kTypeBool:
      return 1;
    case kTypeU16:
    case kTypeI16:
      return 2;
    case kTypeU32:
    case kTypeI32:
    case kTypeF32:
      return 4;
    case kTypeU64:
    case kTypeI64:
    case kTypeF64:
    case kTypeString:
      return 8;
    case kTypeArray:
      return 12;  // u32 element type + u64 count
    default:
      return 0;
  }
}

class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  std::unexpected<Error> Fail(std::string_view what) const {
    return MakeError(ErrorCode::kCorruptData,
                     StrCat(name_, ": ", what, " (at byte offset ", pos_, ")"));
  }

  template <class T>
  Result<T> Read(std::string_view what) {
    if (remaining() < sizeof(T)) {
      return Fail(StrCat("file ends inside ", what));
    }
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  Result<std::string> ReadString(std::string_view what) {
    auto len = Read<uint64_t>(what);
    if (!len) return std::unexpected(len.error());
    if (*len > remaining()) {
      return Fail(StrCat(what, " has length ", *len, " but only ", remaining(), " bytes remain"));
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), *len);
    pos_ += *len;
    return s;
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
};

Result<GgufValue> ReadValue(Cursor& in, uint32_t type, uint32_t depth, std::string_view key);

Result<GgufValue> ReadArray(Cursor& in, uint32_t depth, std::string_view key) {
  if (depth >= kMaxArrayDepth) {
    return in.Fail(StrCat("metadata '", key, "': arrays nested deeper than ", kMaxArrayDepth));
  }
  auto elem_type = in.Read<uint32_t>("array element type");
  if (!elem_type) return std::unexpected(elem_type.error());
  if (*elem_type > kTypeF64) {
    return in.Fail(StrCat("metadata '", key, "': unknown array element type ", *elem_type));
  }
  auto count = in.Read<uint64_t>("array length");
  if (!count) return std::unexpected(count.error());
  const uint64_t min_size = MinEncodedSize(*elem_type);
  if (*count > in.remaining() / min_size) {
    return in.Fail(StrCat("metadata '", key, "': array of ", *count, " elements cannot fit in the ",
                       in.remaining(), " bytes left"));
  }
  GgufArray items;
  items.reserve(*count);
  for (uint64_t i = 0; i < *count; ++i) {
    auto item = ReadValue(in, *elem_type, depth + 1, key);
    if (!item) return std::unexpected(item.error());
    items.push_back(std::move(*item));
  }
  return GgufValue{std::move(items), kTypeArray};
}

template <class Wire, class Stored>
Result<GgufValue> ReadScalar(Cursor& in, uint32_t type) {
  auto v = in.Read<Wire>("metadata value");
  if (!v) return std::unexpected(v.error());
  return GgufValue{static_cast<Stored>(*v), type};
}

Result<GgufValue> ReadValue(Cursor& in, uint32_t type, uint32_t depth, std::string_view key) {
  switch (type) {
    case kTypeU8:
      return ReadScalar<uint8_t, uint64_t>(in, type);
    case kTypeI8:
      return ReadScalar<int8_t, int64_t>(in, type);
    case kTypeU16:
      return ReadScalar<uint16_t, uint64_t>(in, type);
    case kTypeI16:
      return ReadScalar<int16_t, int64_t>(in, type);
    case kTypeU32:
      return ReadScalar<uint32_t, uint64_t>(in, type);
    case kTypeI32:
      return ReadScalar<int32_t, int64_t>(in, type);
    case kTypeU64:
      return ReadScalar<uint64_t, uint64_t>(in, type);
    case kTypeI64:
      return ReadScalar<int64_t, int64_t>(in, type);
    case kTypeF32:
      return ReadScalar<float, double>(in, type);
    case kTypeF64:
      return ReadScalar<double, double>(in, type);
    case kTypeBool: {
      auto b = in.Read<uint8_t>("metadata value");
      if (!b) return std::unexpected(b.error());
      if (*b > 1) return in.Fail(StrCat("metadata '", key, "': bool byte is ", *b));
      return GgufValue{*b == 1, type};
    }
    case kTypeString: {
      auto s = in.ReadString("metadata string");
      if (!s) return std::unexpected(s.error());
      return GgufValue{std::move(*s), type};
    }
    case kTypeArray:
      return ReadArray(in, depth, key);
    default:
      return in.Fail(StrCat("metadata '", key, "': unknown value type ", type));
  }
}

// a * b with overflow detection.
bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return MakeError(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnavailable,
                     StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return MakeError(ErrorCode::kUnavailable, StrCat(path, ": stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return MakeError(ErrorCode::kUnavailable, StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return MakeError(ErrorCode::kCorruptData, StrCat(path, ": empty file"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) {
    return MakeError(ErrorCode::kUnavailable, StrCat(path, ": mmap: ", std::strerror(map_err)));
  }
  auto file = FromBytes(std::span<const uint8_t>(static_cast<const uint8_t*>(map), size), path);
  if (!file) {
    ::munmap(map, size);
    return std::unexpected(file.error());
  }
  (*file)->mapping_ = map;
  (*file)->mapping_size_ = size;
  return file;
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::span<const uint8_t> bytes,
                                                      std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(name);
  Cursor in(bytes, file->path_);

  // Header.
  auto magic = in.Read<uint32_t>("magic");
  if (!magic) return std::unexpected(magic.error());
  if (std::memcmp(bytes.data(), "GGUF", 4) != 0) return in.Fail("bad magic (not a GGUF file)");
  auto version = in.Read<uint32_t>("version");
  if (!version) return std::unexpected(version.error());
  if (*version != 2 && *version != 3) {
    return in.Fail(StrCat("unsupported GGUF version ", *version, " (need 2 or 3)"));
  }
  file->version_ = *version;
  auto n_tensors = in.Read<uint64_t>("tensor count");
  if (!n_tensors) return std::unexpected(n_tensors.error());
  auto n_kv = in.Read<uint64_t>("metadata count");
  if (!n_kv) return std::unexpected(n_kv.error());
  // A key/value pair needs >= 8 (key length) + 4 (type) + 1 bytes; a tensor info >= 8 (name length)
  // + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset) bytes.
  constexpr uint64_t kMinKv = 13;
  constexpr uint64_t kMinTensorInfo = 32;
  if (*n_kv > in.remaining() / kMinKv || *n_tensors > in.remaining() / kMinTensorInfo ||
      *n_kv * kMinKv + *n_tensors * kMinTensorInfo > in.remaining()) {
    return in.Fail(StrCat(*n_kv, " metadata entries and ", *n_tensors, " tensors cannot fit in ",
                       in.remaining(), " bytes"));
  }

  // Metadata.
  file->metadata_.reserve(*n_kv);
  std::unordered_set<std::string> keys;
  for (uint64_t i = 0; i < *n_kv; ++i) {
    auto key = in.ReadString("metadata key");
    if (!key) return std::unexpected(key.error());
    if (!keys.insert(*key).second) return in.Fail(StrCat("duplicate metadata key '", *key, "'"));
    auto type = in.Read<uint32_t>("metadata value type");
    if (!type) return std::unexpected(type.error());
    auto value = ReadValue(in, *type, 0, *key);
    if (!value) return std::unexpected(value.error());
    file->metadata_.emplace_back(std::move(*key), std::move(*value));
  }

  for (size_t i = 0; i < file->metadata_.size(); ++i) {
    file->metadata_index_.emplace(file->metadata_[i].first, i);
  }

  uint64_t alignment = kDefaultAlignment;
  if (const GgufValue* a = file->Find("general.alignment")) {
    const auto* av = std::get_if<uint64_t>(&a->v);
    if (a->type != kTypeU32 || av == nullptr || *av == 0 || (*av & (*av - 1)) != 0) {
      return in.Fail("general.alignment must be a u32 power of two");
    }
    alignment = *av;
  }

  // Tensor infos.
  file->tensors_.reserve(*n_tensors);
  std::unordered_set<std::string> names;
  for (uint64_t i = 0; i < *n_tensors; ++i) {
    GgufTensor t;
    auto name_str = in.ReadString("tensor name");
    if (!name_str) return std::unexpected(name_str.error());
    t.name = std::move(*name_str);
    if (!names.insert(t.name).second) return in.Fail(StrCat("duplicate tensor '", t.name, "'"));
    auto n_dims = in.Read<uint32_t>("tensor n_dims");
    if (!n_dims) return std::unexpected(n_dims.error());
    if (*n_dims == 0 || *n_dims > kMaxDims) {
      return in.Fail(
          StrCat("tensor '", t.name, "' has ", *n_dims, " dimensions (need 1..", kMaxDims, ")"));
    }
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto dim = in.Read<uint64_t>("tensor dimension");
      if (!dim) return std::unexpected(dim.error());
      if (*dim == 0) return in.Fail(StrCat("tensor '", t.name, "' has a zero dimension"));
      if (MulOverflows(n_elements, *dim, &n_elements) || n_elements > (uint64_t{1} << 62)) {
        return in.Fail(StrCat("tensor '", t.name, "': element count overflows"));
      }
      t.dims.push_back(*dim);
    }
    auto type = in.Read<uint32_t>("tensor type");
    if (!type) return std::unexpected(type.error());
    const auto block_elems = GgmlBlockElements(*type);
    const auto block_bytes = GgmlBlockBytes(*type);
    if (!block_elems || !block_bytes) {
      return in.Fail(StrCat("tensor '", t.name, "' has unsupported type ", *type));
    }
    t.type = static_cast<GgmlType>(*type);
    if (t.dims[0] % *block_elems != 0) {
      return in.Fail(StrCat("tensor '", t.name, "': row length ", t.dims[0],
                         " is not a multiple of the ", GgmlTypeName(t.type), " block of ",
                         *block_elems));
    }
    auto offset = in.Read<uint64_t>("tensor offset");
    if (!offset) return std::unexpected(offset.error());
    if (*offset % alignment != 0) {
      return in.Fail(StrCat("tensor '", t.name, "': offset ", *offset,
                         " is not a multiple of the alignment ", alignment));
    }
    t.offset = *offset;
    t.n_elements = n_elements;
    if (MulOverflows(n_elements / *block_elems, *block_bytes, &t.n_bytes)) {
      return in.Fail(StrCat("tensor '", t.name, "': byte size overflows"));
    }
    file->tensors_.push_back(std::move(t));
  }

  // Data section: starts at the next multiple of the alignment after the tensor infos.
  const uint64_t header_end = in.pos();
  const uint64_t data_start = (header_end + alignment - 1) / alignment * alignment;
  const uint64_t file_size = bytes.size();
  if (!file->tensors_.empty() && data_start > file_size) {
    return in.Fail(StrCat("data section starts at ", data_start, " past the end of the ", file_size,
                       "-byte file"));
  }
  const uint64_t data_size = data_start <= file_size ? file_size - data_start : 0;
  for (GgufTensor& t : file->tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return in.Fail(StrCat("tensor '", t.name, "' (", t.n_bytes, " bytes at data offset ", t.offset,
                         ") runs past the end of the file (data section is ", data_size,
                         " bytes)"));
    }
    t.data = bytes.data() + data_start + t.offset;
  }
  std::vector<const GgufTensor*> by_offset;
  by_offset.reserve(file->tensors_.size());
  for (const GgufTensor& t : file->tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& prev = *by_offset[i - 1];
    if (prev.offset + prev.n_bytes > by_offset[i]->offset) {
      return in.Fail(StrCat("tensors '", prev.name, "' and '", by_offset[i]->name, "' overlap"));
    }
  }
  file->alignment_ = alignment;
  file->data_offset_ = data_start;
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    file->tensor_index_.emplace(file->tensors_[i].name, i);
  }
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

std::optional<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(&v->v)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v->v)) {
    if (*u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

std::optional<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* d = std::get_if<double>(&v->v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v->v)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&v->v)) return static_cast<double>(*u);
  return std::nullopt;
}

std::optional<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* s = std::get_if<std::string>(&v->v)) return *s;
  return std::nullopt;
}

std::optional<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&v->v)) return *b;
  return std::nullopt;
}

const GgufArray* GgufFile::GetArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return nullptr;
  return std::get_if<GgufArray>(&v->v);
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kvgate::engine
