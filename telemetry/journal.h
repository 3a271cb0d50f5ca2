// Internal to the telemetry module: the crash journal in front of the store's writer.
//
// The store commits records in groups (StoreOptions::commit_interval), so a process killed with
// SIGKILL would lose the records of the last interval, answers the clients already have. The
// journal closes that gap without a disk wait on the request path: each record is appended with
// one write() to an append-only file (the page cache keeps it across a process crash; a power
// loss is not covered), the writer thread commits records as before, and a segment whose records
// are all committed is deleted. At startup the records left in the segments are read back and
// committed (duplicates of committed rows are ignored by request id).
//
// Files: `<base>.<n>` for n = 1, 2, ...; the newest is appended to and a new one starts once it
// holds `segment_bytes`. A line that does not parse (the record being written when the process
// died) is skipped.
//
// Thread safety: every method may be called from any thread. Appends from several threads write
// concurrently (the file is opened O_APPEND, and Linux writes each write() to a regular file
// whole, without interleaving another); only a rotation waits for them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "telemetry/record.h"

namespace kvgate::telemetry::internal {

class Journal {
 public:
  // Opens the journal at `base` (creating nothing until the first append) and reads back what an
  // earlier process left: each request id's last entry, oldest first, in *recovered. Those
  // segments are deleted by ReleaseRecovered().
  static Result<std::unique_ptr<Journal>> Open(std::string base, size_t segment_bytes,
                                               std::vector<RequestRecord>* recovered);
  ~Journal();

  // Where an entry went: its segment.
  using Segment = uint64_t;
  // Appends one entry in one write() and counts it open in its segment until Release().
  // Errors: kUnavailable when the write failed (the record then lives in memory only).
  Result<Segment> Append(const RequestRecord& record);
  // These entries are committed (or replaced by later entries that will be), one Segment per
  // entry: when every entry of a segment that is no longer appended to is released, its file is
  // deleted. The writer releases a whole batch at once, taking the lock once.
  void Release(const std::vector<Segment>& entries);
  // The recovered records are committed: their files go.
  void ReleaseRecovered();

  uint64_t bytes_appended() const;

 private:
  Journal(std::string base, size_t segment_bytes);
  // REQUIRES: file_mu_ held exclusively and mu_ held. Opens the next segment file.
  Status RotateLocked();
  std::string PathOf(Segment segment) const;

  const std::string base_;
  const size_t segment_bytes_;
  // Appends hold file_mu_ shared while they write; a rotation holds it exclusively. mu_ guards
  // the bookkeeping, briefly, after the write.
  std::shared_mutex file_mu_;
  mutable std::mutex mu_;
  int fd_ = -1;                       // GUARDED_BY(file_mu_): the active segment's file
  Segment active_ = 0;                // GUARDED_BY(file_mu_; written also under mu_)
  size_t active_size_ = 0;            // GUARDED_BY(mu_)
  std::map<Segment, uint64_t> open_;  // GUARDED_BY(mu_): entries not yet released, per segment
  std::vector<std::string> recovered_files_;  // GUARDED_BY(mu_)
  uint64_t bytes_appended_ = 0;       // GUARDED_BY(mu_)
  bool rotation_failure_reported_ = false;  // GUARDED_BY(mu_)
};

}  // namespace kvgate::telemetry::internal
