// Internal to the telemetry module: the crash journal in front of the store's writer.
//
// The store commits records in groups (StoreOptions::commit_interval), so a process killed with
// SIGKILL would lose the records of the last interval, answers the clients already have. The
// journal closes that gap without a disk wait, and without a system call, on the request path:
// each segment is a preallocated file mapped into memory (MAP_SHARED), and an append is a copy
// into it. A process crash leaves what was copied in the page cache, which belongs to the kernel,
// so the next process reads it back (a power loss is not covered). The writer thread commits
// records as before, and a segment whose records are all committed is deleted, usually before
// the kernel has written any of it to disk.
//
// Why not write(): one write() per record cost about 8 µs of system time (the inode lock, the
// page cache lookup, the mtime update), more than the rest of the journal together.
//
// Files: `<base>.<n>` for n = 1, 2, ...; the newest is appended to, and the next one starts once
// it is full. Each entry is framed: {magic, length, XXH3-64 of the body and segment number},
// then the body (EncodeJournalEntry, record_codec.cc), padded to 8 bytes. At replay an entry whose
// frame does not check out (the entry being copied when the process died) is skipped, and the
// scan goes on at the next 8-byte boundary, so one torn entry cannot hide the entries after it.
// Segments in the format before this one (JSON lines) are still read. A segment in which anything
// was skipped is not deleted once its records are committed but kept aside as
// `<base>.<n>.damaged-<k>` (k: the first free number), and said on stderr with the counts, so that
// the bytes that could not be read are there to be looked at.
//
// Thread safety: every method may be called from any thread. Appends reserve their space with
// one atomic add and copy concurrently; only a rotation waits for them.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "telemetry/record.h"

namespace kvgate::telemetry::internal {

class Journal {
 public:
  // Opens the journal at `base` (its first segment is created and mapped at once) and reads back
  // what an earlier process left: each request id's last entry, oldest first, in *recovered.
  // Those segments are deleted by ReleaseRecovered().
  static Result<std::unique_ptr<Journal>> Open(std::string base, size_t segment_bytes,
                                               std::vector<RequestRecord>* recovered);
  ~Journal();

  // Where an entry went: its segment.
  using Segment = uint64_t;
  // Appends one entry and counts it open in its segment until Release().
  // Errors: kUnavailable when no segment could be made (the disk is full, say): the record then
  // lives in memory only.
  Result<Segment> Append(const RequestRecord& record);
  // These entries are committed (or replaced by later entries that will be), one Segment per
  // entry: when every entry of a segment that is no longer appended to is released, its file is
  // deleted. The writer releases a whole batch at once, taking the lock once.
  void Release(const std::vector<Segment>& entries);
  // The recovered records are committed: their files go.
  void ReleaseRecovered();

  uint64_t bytes_appended() const;

 private:
  struct Mapping {
    Segment number = 0;
    char* base = nullptr;
    size_t capacity = 0;
  };

  Journal(std::string base, size_t segment_bytes);
  // Creates, preallocates and maps the next
  // segment, large enough for an entry of `entry_bytes`, and retires the active one.
  Status RotateLocked(size_t entry_bytes) REQUIRES(map_mu_, mu_);
  std::string PathOf(Segment segment) const;

  // A recovered segment and whether anything in it was skipped (then it is kept aside).
  struct RecoveredFile {
    std::string path;
    bool damaged = false;
  };

  const std::string base_;
  const size_t segment_bytes_;
  // Appends hold map_mu_ shared while they copy; a rotation holds it exclusively. mu_ guards the
  // bookkeeping, briefly, after the copy.
  SharedMutex map_mu_;
  mutable Mutex mu_;
  Mapping active_ GUARDED_BY(map_mu_);
  std::atomic<size_t> reserved_{0};   // bytes of active_ handed out (may pass its capacity)
  // The highest segment number used (the active one once a segment is mapped). Written holding
  // both locks, so read under either.
  Segment last_number_ = 0;
  std::map<Segment, uint64_t> open_ GUARDED_BY(mu_);  // entries not yet released, per segment
  std::vector<RecoveredFile> recovered_files_ GUARDED_BY(mu_);
  uint64_t bytes_appended_ GUARDED_BY(mu_) = 0;
  bool rotation_failure_reported_ GUARDED_BY(mu_) = false;
};

// What a segment's scan had to skip: entries whose frame or body did not check out (or lines
// that did not parse), and the bytes outside any readable entry that are not the zeros of unused
// space.
struct JournalDamage {
  size_t entries_skipped = 0;
  size_t bytes_skipped = 0;
  bool any() const { return entries_skipped > 0 || bytes_skipped > 0; }
};

// The framing, exposed for tests: an entry's bytes in a segment numbered `segment`, and the
// records a segment's bytes hold (torn or corrupt entries skipped, and counted in *damage when
// given).
std::string FrameJournalEntry(std::string_view body, Journal::Segment segment);
std::vector<RequestRecord> ReadJournalSegment(std::string_view bytes, Journal::Segment segment,
                                              JournalDamage* damage = nullptr);

}  // namespace kvgate::telemetry::internal
