#include "local_engine/offload_tier.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvgate::engine {
namespace {

constexpr uint64_t kFileMagic = 0x315245495447564bull;  // "KVGTIER1" as little-endian bytes
constexpr uint64_t kSlotMagic = 0x31544f4c5347564bull;  // "KVGSLOT1"
constexpr uint32_t kFormatVersion = 1;
constexpr int64_t kPage = 4096;
constexpr int64_t kFileHeaderBytes = kPage;

// File header fields (byte offsets).
constexpr size_t kFhMagic = 0, kFhVersion = 8, kFhBlockSize = 12, kFhLayout = 16,
                 kFhBlockBytes = 24, kFhSlotBytes = 32, kFhSlots = 40, kFhChecksum = 48,
                 kFhBytes = 56;

// Slot header fields (byte offsets); the checksum covers [0, kShChecksum) and the block bytes.
constexpr size_t kShMagic = 0, kShLayout = 8, kShHash = 16, kShSalt = 24, kShStamp = 32,
                 kShTokens = 40, kShChecksum = kShTokens + kBlockSize * sizeof(int32_t);
constexpr size_t kSlotHeaderBytes = (kShChecksum + sizeof(uint64_t) + 63) / 64 * 64;

template <class T>
void Put(std::byte* base, size_t offset, T value) {
  std::memcpy(base + offset, &value, sizeof value);
}
template <class T>
T Get(const std::byte* base, size_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof value);
  return value;
}

uint64_t SlotChecksum(const std::byte* slot, size_t block_bytes) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, slot, kShChecksum);
  XXH3_64bits_update(&state, slot + kSlotHeaderBytes, block_bytes);
  return XXH3_64bits_digest(&state);
}

// Whole-buffer positional I/O; false on an error or a short transfer (a truncated file).
bool ReadAt(int fd, std::byte* out, size_t n, int64_t offset) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got, n -= static_cast<size_t>(got), offset += got;
  }
  return true;
}
bool WriteAt(int fd, const std::byte* in, size_t n, int64_t offset) {
  while (n > 0) {
    const ssize_t put = ::pwrite(fd, in, n, offset);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    in += put, n -= static_cast<size_t>(put), offset += put;
  }
  return true;
}

std::string Errno() { return std::strerror(errno); }

}  // namespace

int64_t OffloadTier::SlotBytes(size_t block_bytes) {
  const int64_t raw = static_cast<int64_t>(kSlotHeaderBytes + block_bytes);
  return (raw + kPage - 1) / kPage * kPage;
}

Result<std::unique_ptr<OffloadTier>> OffloadTier::Open(const OffloadTierOptions& options) {
  const std::string where = "offload tier " + options.path + ": ";
  if (options.path.empty()) return MakeError(ErrorCode::kInvalidArgument, "offload tier: no path");
  if (options.block_bytes == 0) {
    return MakeError(ErrorCode::kInvalidArgument, where + "block_bytes must be positive");
  }
  const int64_t slot_bytes = SlotBytes(options.block_bytes);
  if (options.capacity_bytes < slot_bytes) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + "offload.bytes " + std::to_string(options.capacity_bytes) +
                         " holds no KV block: one takes " + std::to_string(slot_bytes) +
                         " bytes of the file");
  }
  const int64_t slots64 = options.capacity_bytes / slot_bytes;
  if (slots64 > (int64_t{1} << 30)) {
    return MakeError(ErrorCode::kInvalidArgument, where + "offload.bytes is too large");
  }
  std::unique_ptr<OffloadTier> t(new OffloadTier());
  // Nothing else sees the tier yet: the lock only tells the analysis so (and costs nothing).
  MutexLock lock(&t->mu_);
  t->path_ = options.path;
  t->block_bytes_ = options.block_bytes;
  t->slot_bytes_ = slot_bytes;
  t->layout_key_ = options.layout_key;
  t->index_ = std::make_unique<TierIndex>(static_cast<int32_t>(slots64));
  t->buffer_.resize(static_cast<size_t>(slot_bytes));
  t->stats_.capacity_blocks = slots64;
  t->stats_.slot_bytes = slot_bytes;

  t->fd_ = ::open(options.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (t->fd_ < 0) return MakeError(ErrorCode::kUnavailable, where + "cannot open: " + Errno());
  // One process per file: two engines writing the same slots would serve each other torn data
  // (the checksum would catch it, as misses; refusing is clearer).
  if (::flock(t->fd_, LOCK_EX | LOCK_NB) != 0) {
    return MakeError(ErrorCode::kUnavailable,
                     where + "is in use by another process (" + Errno() + ")");
  }
  struct stat st {};
  if (::fstat(t->fd_, &st) != 0) return MakeError(ErrorCode::kUnavailable, where + Errno());
  if (!S_ISREG(st.st_mode)) {
    return MakeError(ErrorCode::kInvalidArgument, where + "is not a regular file");
  }
  if (st.st_size == 0) {
    if (auto s = t->Initialize(); !s) return std::unexpected(s.error());
    return t;
  }
  std::byte header[kFhBytes] = {};
  const bool read = ReadAt(t->fd_, header, sizeof header, 0);
  if (st.st_size < static_cast<off_t>(sizeof kFileMagic) ||
      Get<uint64_t>(header, kFhMagic) != kFileMagic) {
    // Someone else's file: never overwrite it.
    return MakeError(ErrorCode::kInvalidArgument,
                     where +
                         "exists and is not a kvgate KV tier file; remove it or choose "
                         "another offload.disk path");
  }
  const bool same = read && Get<uint32_t>(header, kFhVersion) == kFormatVersion &&
                    Get<uint32_t>(header, kFhBlockSize) == kBlockSize &&
                    Get<uint64_t>(header, kFhLayout) == t->layout_key_ &&
                    Get<uint64_t>(header, kFhBlockBytes) == t->block_bytes_ &&
                    Get<uint64_t>(header, kFhSlotBytes) == static_cast<uint64_t>(slot_bytes) &&
                    Get<uint64_t>(header, kFhSlots) == static_cast<uint64_t>(slots64) &&
                    Get<uint64_t>(header, kFhChecksum) == XXH3_64bits(header, kFhChecksum);
  if (!same) {
    // A tier file of another model, layout or size: its blocks are of no use here.
    if (auto s = t->Initialize(); !s) return std::unexpected(s.error());
    return t;
  }
  t->RebuildIndex();
  return t;
}

OffloadTier::~OffloadTier() {
  if (fd_ >= 0) ::close(fd_);  // also releases the flock
}

Status OffloadTier::Initialize() {
  const std::string where = "offload tier " + path_ + ": ";
  const int64_t size = kFileHeaderBytes + int64_t{index_->slots()} * slot_bytes_;
  // Truncating to 0 first drops every old slot; the new size is sparse until slots are written.
  if (::ftruncate(fd_, 0) != 0 || ::ftruncate(fd_, size) != 0) {
    return MakeError(ErrorCode::kUnavailable, where + "cannot size the file: " + Errno());
  }
  std::byte header[kFhBytes] = {};
  Put<uint64_t>(header, kFhMagic, kFileMagic);
  Put<uint32_t>(header, kFhVersion, kFormatVersion);
  Put<uint32_t>(header, kFhBlockSize, kBlockSize);
  Put<uint64_t>(header, kFhLayout, layout_key_);
  Put<uint64_t>(header, kFhBlockBytes, block_bytes_);
  Put<uint64_t>(header, kFhSlotBytes, static_cast<uint64_t>(slot_bytes_));
  Put<uint64_t>(header, kFhSlots, static_cast<uint64_t>(index_->slots()));
  Put<uint64_t>(header, kFhChecksum, XXH3_64bits(header, kFhChecksum));
  if (!WriteAt(fd_, header, sizeof header, 0)) {
    return MakeError(ErrorCode::kUnavailable, where + "cannot write the header: " + Errno());
  }
  index_ = std::make_unique<TierIndex>(index_->slots());
  return {};
}

void OffloadTier::RebuildIndex() {
  // Only the slot headers are read here; a slot's checksum is checked when it is loaded.
  std::unordered_map<uint64_t, TierIndex::Held> newest;  // by hash: an old copy whose index entry
                                                         // was lost loses to the newer one
  std::byte header[kSlotHeaderBytes];
  for (int32_t s = 0; s < index_->slots(); ++s) {
    if (!ReadAt(fd_, header, sizeof header, SlotOffset(s)) ||
        Get<uint64_t>(header, kShMagic) != kSlotMagic ||
        Get<uint64_t>(header, kShLayout) != layout_key_) {
      continue;
    }
    TierIndex::Held h{.slot = s,
                      .hash = Get<uint64_t>(header, kShHash),
                      .salt = Get<uint64_t>(header, kShSalt),
                      .stamp = Get<uint64_t>(header, kShStamp),
                      .tokens = std::vector<int32_t>(kBlockSize)};
    std::memcpy(h.tokens.data(), header + kShTokens, kBlockSize * sizeof(int32_t));
    next_stamp_ = std::max(next_stamp_, h.stamp + 1);
    auto [it, inserted] = newest.try_emplace(h.hash, h);
    if (!inserted && it->second.stamp < h.stamp) it->second = std::move(h);
  }
  // LRU order across a restart: store order (hits are not written back, so they are forgotten).
  std::vector<TierIndex::Held> held;
  for (auto& [hash, h] : newest) held.push_back(std::move(h));
  std::sort(held.begin(), held.end(),
            [](const TierIndex::Held& a, const TierIndex::Held& b) { return a.stamp < b.stamp; });
  index_->Restore(held);
  stats_.reused_blocks = static_cast<int64_t>(held.size());
}

int64_t OffloadTier::SlotOffset(int32_t slot) const {
  return kFileHeaderBytes + static_cast<int64_t>(slot) * slot_bytes_;
}

bool OffloadTier::Contains(const TierKey& key) const {
  MutexLock lock(&mu_);
  return index_->Find(key) >= 0;
}

void OffloadTier::Touch(const TierKey& key) {
  MutexLock lock(&mu_);
  if (const int32_t s = index_->Find(key); s >= 0) index_->Touch(s);
}

bool OffloadTier::Pin(const TierKey& key) {
  MutexLock lock(&mu_);
  const int32_t s = index_->Find(key);
  if (s >= 0) index_->Pin(s);
  return s >= 0;
}

void OffloadTier::UnpinAll() {
  MutexLock lock(&mu_);
  index_->UnpinAll();
}

void OffloadTier::Store(const TierKey& key, std::span<const std::byte> bytes) {
  if (bytes.size() != block_bytes_ || key.tokens.size() != kBlockSize) return;
  int32_t s = -1;
  uint64_t stamp = 0;
  {
    MutexLock lock(&mu_);
    if (const int32_t held = index_->Find(key); held >= 0) {
      index_->Touch(held);
      return;
    }
    bool evicted = false;
    s = index_->Take(&evicted);  // neither free nor indexed while it is written
    if (s < 0) {
      ++stats_.dropped_blocks;
      return;
    }
    if (evicted) ++stats_.evictions;
    stamp = next_stamp_++;
  }
  std::byte* b = buffer_.data();
  std::memset(b, 0, kSlotHeaderBytes);
  Put<uint64_t>(b, kShMagic, kSlotMagic);
  Put<uint64_t>(b, kShLayout, layout_key_);
  Put<uint64_t>(b, kShHash, key.hash);
  Put<uint64_t>(b, kShSalt, key.salt);
  Put<uint64_t>(b, kShStamp, stamp);
  std::memcpy(b + kShTokens, key.tokens.data(), kBlockSize * sizeof(int32_t));
  std::memcpy(b + kSlotHeaderBytes, bytes.data(), block_bytes_);
  Put<uint64_t>(b, kShChecksum, SlotChecksum(b, block_bytes_));
  const size_t n = kSlotHeaderBytes + block_bytes_;
  errno = 0;
  const bool written = WriteAt(fd_, b, n, SlotOffset(s));
  const std::string why = written ? std::string() : (errno != 0 ? Errno() : "short write");
  MutexLock lock(&mu_);
  if (!written) {
    ++stats_.write_errors;
    index_->Release(s);
    // The block is only dropped (the tier is a cache), but a disk that refuses writes makes the
    // tier useless: said at the first error, then at most once a minute while errors go on.
    const auto now = std::chrono::steady_clock::now();
    if (!last_write_error_report_ || now - *last_write_error_report_ >= std::chrono::minutes(1)) {
      std::fprintf(stderr,
                   "kvgate: offload tier %s: a block could not be written (%s); %llu "
                   "write errors so far (%llu since the last report), those blocks are dropped\n",
                   path_.c_str(), why.c_str(), static_cast<unsigned long long>(stats_.write_errors),
                   static_cast<unsigned long long>(stats_.write_errors - write_errors_reported_));
      last_write_error_report_ = now;
      write_errors_reported_ = stats_.write_errors;
    }
    return;
  }
  index_->Commit(s, key, stamp);
  ++stats_.stored_blocks;
  stats_.bytes_written += n;
}

bool OffloadTier::Load(const TierKey& key, std::span<std::byte> out) {
  if (out.size() != block_bytes_) return false;
  int32_t s = -1;
  {
    MutexLock lock(&mu_);
    s = index_->Find(key);
  }
  if (s < 0) return false;
  // Only the caller's thread changes which block a slot holds, so it still holds `key` here.
  std::byte* b = buffer_.data();
  const size_t n = kSlotHeaderBytes + block_bytes_;
  const bool ok =
      ReadAt(fd_, b, n, SlotOffset(s)) && Get<uint64_t>(b, kShMagic) == kSlotMagic &&
      Get<uint64_t>(b, kShLayout) == layout_key_ && Get<uint64_t>(b, kShHash) == key.hash &&
      Get<uint64_t>(b, kShSalt) == key.salt &&
      std::memcmp(b + kShTokens, key.tokens.data(), kBlockSize * sizeof(int32_t)) == 0 &&
      Get<uint64_t>(b, kShChecksum) == SlotChecksum(b, block_bytes_);
  if (ok) std::memcpy(out.data(), b + kSlotHeaderBytes, block_bytes_);
  MutexLock lock(&mu_);
  if (!ok) {
    ++stats_.corrupt_blocks;
    index_->Drop(s);
    return false;
  }
  index_->Touch(s);
  ++stats_.loaded_blocks;
  stats_.bytes_read += n;
  return true;
}

OffloadTierStats OffloadTier::stats() const {
  MutexLock lock(&mu_);
  OffloadTierStats out = stats_;
  out.used_blocks = index_->used();
  return out;
}

}  // namespace kvgate::engine
