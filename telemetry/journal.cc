#include "telemetry/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>

namespace kvgate::telemetry::internal {
namespace {

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
    if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos) continue;
    out.emplace_back(std::stoull(number), entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Journal::Journal(std::string base, size_t segment_bytes)
    : base_(std::move(base)), segment_bytes_(std::max<size_t>(4096, segment_bytes)) {}

Journal::~Journal() {
  std::unique_lock file(file_mu_);
  std::lock_guard lock(mu_);
  if (fd_ >= 0) ::close(fd_);
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
  const auto segments = ExistingSegments(journal->base_);
  std::unordered_map<std::string, size_t> index;  // request id -> position in *recovered
  for (const auto& [number, path] : segments) {
    journal->active_ = std::max(journal->active_, number);
    journal->recovered_files_.push_back(path);
    std::ifstream in(path, std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      Result<RequestRecord> r = FromJournalLine(line);
      if (!r) continue;  // the line being written when the process died
      auto [it, added] = index.emplace(r->request_id, recovered ? recovered->size() : 0);
      if (!recovered) continue;
      if (added) {
        recovered->push_back(std::move(*r));
      } else {
        (*recovered)[it->second] = std::move(*r);  // a later entry of the same request wins
      }
    }
  }
  std::unique_lock file(journal->file_mu_);
  std::lock_guard lock(journal->mu_);
  if (Status s = journal->RotateLocked(); !s) return std::unexpected(s.error());
  return journal;
}

Status Journal::RotateLocked() {
  const Segment next = active_ + 1;
  const std::string path = PathOf(next);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return MakeError(ErrorCode::kUnavailable,
                     "telemetry journal " + path + ": " + std::strerror(errno));
  }
  const Segment previous = active_;
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  active_ = next;
  active_size_ = 0;
  open_.emplace(next, 0);
  // The segment left behind goes as soon as nothing in it is open.
  if (auto it = open_.find(previous); it != open_.end() && it->second == 0) {
    ::unlink(PathOf(previous).c_str());
    open_.erase(it);
  }
  return {};
}

Result<Journal::Segment> Journal::Append(const RequestRecord& record) {
  const std::string line = ToJournalLine(record);
  Segment segment = 0;
  bool full = false;
  {
    // One write() per record, concurrent with other appends: O_APPEND places each whole, and
    // the call costs a copy into the page cache, never a disk wait. (A short write happens only
    // when the disk is full; the torn line is skipped at replay.)
    std::shared_lock file(file_mu_);
    segment = active_;
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return MakeError(ErrorCode::kUnavailable,
                         std::string("telemetry journal write: ") + std::strerror(errno));
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    // Counted before the shared lock goes, so that no rotation can delete the segment between
    // the write and the count.
    std::lock_guard lock(mu_);
    ++open_[segment];
    bytes_appended_ += line.size();
    active_size_ += line.size();
    full = active_size_ >= segment_bytes_;
  }
  if (full) {
    std::unique_lock file(file_mu_);
    std::lock_guard lock(mu_);
    // Another append may have rotated first.
    if (active_size_ >= segment_bytes_) {
      // On failure the full segment stays in use; said once, not on every append.
      if (Status s = RotateLocked(); !s && !rotation_failure_reported_) {
        std::fprintf(stderr, "kvgate: %s\n", s.error().message.c_str());
        rotation_failure_reported_ = true;
      }
    }
  }
  return segment;
}

void Journal::Release(const std::vector<Segment>& entries) {
  if (entries.empty()) return;
  std::lock_guard lock(mu_);
  for (Segment segment : entries) {
    auto it = open_.find(segment);
    if (it == open_.end() || it->second == 0) continue;
    if (--it->second == 0 && segment != active_) {
      ::unlink(PathOf(segment).c_str());
      open_.erase(it);
    }
  }
}

void Journal::ReleaseRecovered() {
  std::lock_guard lock(mu_);
  for (const std::string& path : recovered_files_) ::unlink(path.c_str());
  recovered_files_.clear();
}

uint64_t Journal::bytes_appended() const {
  std::lock_guard lock(mu_);
  return bytes_appended_;
}

}  // namespace kvgate::telemetry::internal
