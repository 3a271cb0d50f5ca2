#include "telemetry/journal.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unordered_map>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvgate::telemetry::internal {
namespace {

// An entry's frame: magic, body length, check; then the body, padded to kAlign.
constexpr uint32_t kMagic = 0x314a564b;  // "KVJ1" read as little-endian bytes
constexpr size_t kFrameBytes = 16;
constexpr size_t kAlign = 8;

size_t Padded(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Pages are made present and writable ahead of the appends, a chunk at a time, by one madvise()
// per chunk: a store into a page of the file that is not yet mapped writable costs a page fault
// (and, on ext4, a journal handle for the preallocated block), ~10 µs each, once per 4 KB.
constexpr size_t kPopulateChunk = 64 << 10;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels refuse it and take the faults instead
#endif

void PopulateAhead(char* base, size_t capacity, size_t from) {
  if (from >= capacity) return;
  ::madvise(base + from, std::min(kPopulateChunk, capacity - from), MADV_POPULATE_WRITE);
}

// The body's hash mixed with the segment number, so that an entry copied into another segment
// (a file renamed by hand, a recycled one) does not check out.
uint64_t Check(std::string_view body, Journal::Segment segment) {
  return XXH3_64bits_withSeed(body.data(), body.size(), segment);
}

void WriteFrame(char* at, std::string_view body, Journal::Segment segment) {
  const uint32_t length = static_cast<uint32_t>(body.size());
  const uint64_t check = Check(body, segment);
  // The body first and the frame last: a process that dies in between leaves no magic, which
  // the replay's scan passes over quickly.
  std::memcpy(at + kFrameBytes, body.data(), body.size());
  std::memcpy(at + 4, &length, 4);
  std::memcpy(at + 8, &check, 8);
  std::memcpy(at, &kMagic, 4);
}

// The segments an earlier process left, oldest first: (number, path).
std::vector<std::pair<uint64_t, std::string>> ExistingSegments(const std::string& base) {
  std::vector<std::pair<uint64_t, std::string>> out;
  const std::filesystem::path p(base);
  std::error_code ec;
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  const std::string prefix = p.filename().string() + ".";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string number = name.substr(prefix.size());
    if (number.empty() || number.size() > 19 ||
        number.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    out.emplace_back(std::stoull(number), entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A segment in the format before framing: one journal line per entry.
std::vector<RequestRecord> ReadLines(std::string_view bytes, JournalDamage& damage) {
  std::vector<RequestRecord> out;
  while (!bytes.empty()) {
    const size_t end = std::min(bytes.find('\n'), bytes.size());
    if (Result<RequestRecord> r = FromJournalLine(bytes.substr(0, end))) {
      out.push_back(std::move(*r));
    } else {
      ++damage.entries_skipped;
      damage.bytes_skipped += end;
    }
    bytes.remove_prefix(std::min(bytes.size(), end + 1));
  }
  return out;
}

// How many of these bytes are not zero (unused space in a preallocated segment is zeros).
size_t NonZeroBytes(std::string_view bytes) {
  return static_cast<size_t>(
      std::count_if(bytes.begin(), bytes.end(), [](char c) { return c != 0; }));
}

}  // namespace

std::string FrameJournalEntry(std::string_view body, Journal::Segment segment) {
  std::string out(Padded(kFrameBytes + body.size()), '\0');
  WriteFrame(out.data(), body, segment);
  return out;
}

std::vector<RequestRecord> ReadJournalSegment(std::string_view bytes, Journal::Segment segment,
                                              JournalDamage* damage) {
  JournalDamage ignored;
  JournalDamage& d = damage != nullptr ? *damage : ignored;
  if (!bytes.empty() && bytes.front() == '{') return ReadLines(bytes, d);
  std::vector<RequestRecord> out;
  size_t at = 0;
  while (at + kFrameBytes <= bytes.size()) {
    uint32_t magic = 0, length = 0;
    uint64_t check = 0;
    std::memcpy(&magic, bytes.data() + at, 4);
    if (magic != kMagic) {
      d.bytes_skipped += NonZeroBytes(bytes.substr(at, kAlign));
      at += kAlign;
      continue;
    }
    std::memcpy(&length, bytes.data() + at + 4, 4);
    std::memcpy(&check, bytes.data() + at + 8, 8);
    const size_t room = bytes.size() - at - kFrameBytes;
    const std::string_view body =
        length <= room ? bytes.substr(at + kFrameBytes, length) : std::string_view();
    if (length > room || Check(body, segment) != check) {
      // Torn or corrupt: look for the next entry. Its body's bytes count as skipped as the scan
      // passes over them.
      ++d.entries_skipped;
      d.bytes_skipped += kAlign;
      at += kAlign;
      continue;
    }
    if (Result<RequestRecord> r = DecodeJournalEntry(body)) {
      out.push_back(std::move(*r));
    } else {
      ++d.entries_skipped;
      d.bytes_skipped += Padded(kFrameBytes + length);
    }
    at += Padded(kFrameBytes + length);
  }
  d.bytes_skipped += NonZeroBytes(bytes.substr(at));  // a frame cut short at the very end
  return out;
}

Journal::Journal(std::string base, size_t segment_bytes)
    : base_(std::move(base)), segment_bytes_(Padded(std::max<size_t>(4096, segment_bytes))) {}

Journal::~Journal() {
  WriterMutexLock map(&map_mu_);
  MutexLock lock(&mu_);
  if (active_.base) ::munmap(active_.base, active_.capacity);
  // A clean shutdown leaves no file behind once everything in it is committed.
  for (const auto& [segment, open] : open_) {
    if (open == 0) ::unlink(PathOf(segment).c_str());
  }
}

std::string Journal::PathOf(Segment segment) const {
  return base_ + "." + std::to_string(segment);
}

Result<std::unique_ptr<Journal>> Journal::Open(std::string base, size_t segment_bytes,
                                               std::vector<RequestRecord>* recovered) {
  std::unique_ptr<Journal> journal(new Journal(std::move(base), segment_bytes));
  // Nothing else sees the journal yet: the locks only tell the analysis so (and cost nothing).
  WriterMutexLock map(&journal->map_mu_);
  MutexLock lock(&journal->mu_);
  std::unordered_map<std::string, size_t> index;  // request id -> position in *recovered
  for (const auto& [number, path] : ExistingSegments(journal->base_)) {
    journal->last_number_ = std::max(journal->last_number_, number);
    journal->recovered_files_.push_back({path, false});
    if (!recovered) continue;
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    JournalDamage damage;
    std::vector<RequestRecord> records = ReadJournalSegment(bytes, number, &damage);
    if (damage.any()) {
      journal->recovered_files_.back().damaged = true;
      std::fprintf(stderr,
                   "kvgate: telemetry journal: %s is damaged: %zu records read, %zu "
                   "entries and %zu bytes skipped; it is kept aside once its records are "
                   "committed\n",
                   path.c_str(), records.size(), damage.entries_skipped, damage.bytes_skipped);
    }
    for (RequestRecord& r : records) {
      auto [it, added] = index.emplace(r.request_id, recovered->size());
      if (added) {
        recovered->push_back(std::move(r));
      } else {
        (*recovered)[it->second] = std::move(r);  // a later entry of the same request wins
      }
    }
  }
  if (Status s = journal->RotateLocked(0); !s) return std::unexpected(s.error());
  return journal;
}

Status Journal::RotateLocked(size_t entry_bytes) {
  const Segment next = last_number_ + 1;
  const std::string path = PathOf(next);
  const size_t capacity = std::max(segment_bytes_, Padded(entry_bytes));
  auto fail = [&](const char* what) {
    const std::string message =
        "telemetry journal " + path + ": " + what + ": " + std::strerror(errno);
    ::unlink(path.c_str());
    return MakeError(ErrorCode::kUnavailable, message);
  };
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("open");
  // Blocks reserved now: a store into a mapped page that the disk has no room for would be a
  // SIGBUS, not an error.
  if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(capacity)); err != 0) {
    ::close(fd);
    errno = err;
    return fail("preallocate");
  }
  void* base = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (base == MAP_FAILED) return fail("map");

  const Mapping previous = active_;
  if (previous.base) ::munmap(previous.base, previous.capacity);
  active_ = Mapping{next, static_cast<char*>(base), capacity};
  PopulateAhead(active_.base, capacity, 0);
  PopulateAhead(active_.base, capacity, kPopulateChunk);
  last_number_ = next;
  reserved_.store(0, std::memory_order_relaxed);
  open_.emplace(next, 0);
  // The segment left behind goes as soon as nothing in it is open.
  if (auto it = open_.find(previous.number); previous.base && it != open_.end() && it->second == 0) {
    ::unlink(PathOf(previous.number).c_str());
    open_.erase(it);
  }
  return {};
}

Result<Journal::Segment> Journal::Append(const RequestRecord& record) {
  const std::string body = EncodeJournalEntry(record);
  const size_t bytes = Padded(kFrameBytes + body.size());
  for (;;) {
    Segment full = 0;
    {
      ReaderMutexLock map(&map_mu_);
      if (active_.base) {
        const size_t at = reserved_.fetch_add(bytes, std::memory_order_relaxed);
        if (at + bytes <= active_.capacity) {
          WriteFrame(active_.base + at, body, active_.number);
          // The append that enters a chunk populates the one after it.
          if (const size_t chunk = (at + bytes) / kPopulateChunk; chunk != at / kPopulateChunk) {
            PopulateAhead(active_.base, active_.capacity, (chunk + 1) * kPopulateChunk);
          }
          // Counted before the shared lock goes, so that no rotation can delete the segment
          // between the copy and the count.
          MutexLock lock(&mu_);
          ++open_[active_.number];
          bytes_appended_ += bytes;
          return active_.number;
        }
      }
      full = active_.number;
    }
    WriterMutexLock map(&map_mu_);
    MutexLock lock(&mu_);
    if (active_.number != full) continue;  // another append rotated first
    if (Status s = RotateLocked(bytes); !s) {
      // The full segment stays mapped, and later appends try again; said once, not every time.
      if (!rotation_failure_reported_) {
        std::fprintf(stderr, "kvgate: %s\n", s.error().message.c_str());
        rotation_failure_reported_ = true;
      }
      return std::unexpected(s.error());
    }
  }
}

void Journal::Release(const std::vector<Segment>& entries) {
  if (entries.empty()) return;
  MutexLock lock(&mu_);
  for (Segment segment : entries) {
    auto it = open_.find(segment);
    if (it == open_.end() || it->second == 0) continue;
    if (--it->second == 0 && segment != last_number_) {
      ::unlink(PathOf(segment).c_str());
      open_.erase(it);
    }
  }
}

void Journal::ReleaseRecovered() {
  MutexLock lock(&mu_);
  for (const RecoveredFile& file : recovered_files_) {
    if (!file.damaged) {
      ::unlink(file.path.c_str());
      continue;
    }
    // Kept under a name the next Open() does not read (it is not `<base>.<number>`).
    std::error_code ec;
    std::string aside;
    for (int k = 1;; ++k) {
      aside = file.path + ".damaged-" + std::to_string(k);
      if (!std::filesystem::exists(aside, ec)) break;
    }
    std::filesystem::rename(file.path, aside, ec);
    if (ec) {
      // Left where it is: the next start reads it again and skips the records already
      // committed (by request id).
      std::fprintf(stderr, "kvgate: telemetry journal: cannot keep %s aside as %s (%s)\n",
                   file.path.c_str(), aside.c_str(), ec.message().c_str());
    } else {
      std::fprintf(stderr, "kvgate: telemetry journal: the damaged segment is kept as %s\n",
                   aside.c_str());
    }
  }
  recovered_files_.clear();
}

uint64_t Journal::bytes_appended() const {
  MutexLock lock(&mu_);
  return bytes_appended_;
}

}  // namespace kvgate::telemetry::internal
