// The stores' shared write side: queue, crash journal, writer thread, group commit.
#include "telemetry/store_writer.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/thread_name.h"
#include "telemetry/store_rows.h"

namespace kvgate::telemetry::internal {
namespace {

// The pause before a batch is offered again to a database that could not be reached: doubled
// per attempt up to the maximum, so a restart of a few seconds is noticed within a second of its
// end while a long outage costs one connection attempt every few seconds.
constexpr std::chrono::milliseconds kFirstOutageRetry{50};
constexpr std::chrono::milliseconds kMaxOutageRetry{2'000};

}  // namespace

BatchWriter::BatchWriter(BatchSink& sink, const Clock& clock, const StoreOptions& options)
    : sink_(sink),
      clock_(clock),
      commit_interval_(std::max(std::chrono::milliseconds(0), options.commit_interval)),
      max_batch_records_(std::max<size_t>(1, options.max_batch_records)),
      max_queued_records_(std::max<size_t>(1, options.max_queued_records)) {}

BatchWriter::~BatchWriter() { Close(); }

Status BatchWriter::Start(const std::string& journal_base, size_t journal_segment_bytes) {
  std::deque<RequestRecord> requeue;
  if (!journal_base.empty()) {
    std::vector<RequestRecord> recovered;
    auto journal = Journal::Open(journal_base, journal_segment_bytes, &recovered);
    if (!journal) return std::unexpected(journal.error());
    journal_ = std::move(*journal);
    if (!recovered.empty()) {
      // What a killed process had answered but not committed (rows it did commit are skipped
      // by request id).
      std::deque<RequestRecord> batch(std::make_move_iterator(recovered.begin()),
                                      std::make_move_iterator(recovered.end()));
      BatchSink::Outcome outcome = sink_.WriteBatch(batch);
      if (outcome.unavailable) {
        // The database is away: the records go through the queue like new ones, journaled
        // again first, since their old segments are deleted below.
        requeue = std::move(batch);
      } else {
        const uint64_t failed = outcome.failed;
        if (failed == batch.size() && failed > 0 && !outcome.error.empty() &&
            outcome.error.find("duplicate") == std::string::npos) {
          return MakeError(ErrorCode::kUnavailable, "telemetry journal replay: " + outcome.error);
        }
        std::fprintf(stderr, "kvgate: telemetry journal: %zu records recovered from a process "
                     "that did not shut down cleanly (%llu were already committed)\n",
                     batch.size() - static_cast<size_t>(failed),
                     static_cast<unsigned long long>(failed));
      }
    }
  }
  {
    MutexLock lock(&mu_);
    started_ = true;
  }
  for (RequestRecord& record : requeue) Record(std::move(record), std::nullopt);
  if (journal_) journal_->ReleaseRecovered();
  if (!requeue.empty()) {
    std::fprintf(stderr, "kvgate: telemetry journal: %zu records recovered from a process that "
                 "did not shut down cleanly wait for %s\n", requeue.size(),
                 sink_.Describe().c_str());
  }
  MutexLock lock(&mu_);
  writer_ = std::thread([this] {
    NameThisThread("telemetry-write");
    WriterLoop();
  });
  return {};
}

std::optional<BatchWriter::JournalMark> BatchWriter::Checkpoint(const RequestRecord& record) {
  {
    // The answer's last bytes follow, and Record() only after them: a read for this id meanwhile
    // waits for it (FindPending) instead of finding nothing. Bounded, should a caller never
    // hand its record over.
    constexpr size_t kMaxAnnounced = 4096;
    MutexLock lock(&mu_);
    if (announced_.size() >= kMaxAnnounced) announced_.erase(announced_.begin());
    announced_.push_back({record.request_id, record.response_id});
  }
  if (!journal_) return std::nullopt;
  // Journaled as it stands, with no copy (the journal's writer replaces text that is not UTF-8
  // itself); only an unstamped record is copied to be stamped, as Record() would.
  Result<Journal::Segment> segment = [&] {
    if (record.created_at_us != 0) return journal_->Append(record);
    RequestRecord stamped = record;
    stamped.created_at_us = clock_.NowUnixMicros();
    return journal_->Append(stamped);
  }();
  if (!segment) return std::nullopt;  // the final Record() journals it instead
  return *segment;
}

void BatchWriter::Record(RequestRecord record, std::optional<JournalMark> checkpoint) {
  MakeTextValid(record);
  if (record.created_at_us == 0) record.created_at_us = clock_.NowUnixMicros();
  JournalRefs refs;
  if (checkpoint) refs.checkpoint = *checkpoint;
  // Journaled before it is queued: a crash in between leaves it in the journal. A checkpointed
  // record whose outcome stayed "ok" is already there.
  if (journal_ && (!checkpoint || record.status != "ok")) {
    if (auto segment = journal_->Append(record)) refs.entry = *segment;
  }
  refs.queued_ns = clock_.MonotonicNanos();
  bool wake = false, handed = false;
  std::vector<Journal::Segment> released;
  {
    MutexLock lock(&mu_);
    ++stats_.recorded;
    if (!announced_.empty()) {
      auto it = std::find_if(announced_.begin(), announced_.end(), [&](const Announced& a) {
        return a.request_id == record.request_id;
      });
      if (it != announced_.end()) {
        *it = std::move(announced_.back());
        announced_.pop_back();
      }
    }
    handed = pending_waiters_ > 0;
    if (stopping_) {
      ++stats_.write_errors;
      if (handed) handed_cv_.SignalAll();
      return;
    }
    queue_.push_back(std::move(record));
    queue_journal_.push_back(refs);
    ++enqueued_seq_;
    // Over the bound (the database has been away for long): the oldest go, with their journal
    // entries, so neither memory nor the journal grows without bound.
    if (DropOverflowLocked(&released) > 0 && flush_waiters_ > 0) written_cv_.SignalAll();
    // The writer needs a wake-up only to start a batch or to cut a full one short; any other
    // notify would be a futex call per request for nothing.
    wake = queue_.size() == 1 || queue_.size() == max_batch_records_;
  }
  if (journal_) journal_->Release(released);
  if (wake) work_cv_.Signal();
  if (handed) handed_cv_.SignalAll();
}

const RequestRecord* BatchWriter::FindPendingLocked(std::string_view id) const {
  // kvgate's id first, as the stores' queries prefer it; else the newest with the response id
  // (the queue's records are newer than the batch's).
  auto by_request = [&](const RequestRecord& r) { return r.request_id == id; };
  auto by_response = [&](const RequestRecord& r) { return r.response_id == id; };
  if (in_flight_) {
    if (auto it = std::find_if(in_flight_->begin(), in_flight_->end(), by_request);
        it != in_flight_->end()) {
      return &*it;
    }
  }
  if (auto it = std::find_if(queue_.begin(), queue_.end(), by_request); it != queue_.end()) {
    return &*it;
  }
  if (auto it = std::find_if(queue_.rbegin(), queue_.rend(), by_response); it != queue_.rend()) {
    return &*it;
  }
  if (in_flight_) {
    if (auto it = std::find_if(in_flight_->rbegin(), in_flight_->rend(), by_response);
        it != in_flight_->rend()) {
      return &*it;
    }
  }
  return nullptr;
}

std::optional<RequestRecord> BatchWriter::FindPending(std::string_view id,
                                                      std::chrono::milliseconds wait) const {
  if (id.empty()) return std::nullopt;  // as the stores' queries: "" names no response
  const auto deadline = std::chrono::steady_clock::now() + wait;
  MutexLock lock(&mu_);
  for (;;) {
    if (const RequestRecord* found = FindPendingLocked(id)) return *found;
    const bool announced =
        std::any_of(announced_.begin(), announced_.end(), [&](const Announced& a) {
          return a.request_id == id || a.response_id == id;
        });
    if (!announced || stopping_) return std::nullopt;
    ++pending_waiters_;
    const bool woken = handed_cv_.WaitUntil(&mu_, deadline);
    --pending_waiters_;
    if (!woken) {
      const RequestRecord* found = FindPendingLocked(id);
      return found ? std::optional<RequestRecord>(*found) : std::nullopt;
    }
  }
}

size_t BatchWriter::DropOverflowLocked(std::vector<Journal::Segment>* released) {
  // While the writer holds a batch, the oldest records are in it; it calls here again when it
  // hands the batch back or finishes it.
  if (batch_in_flight_ || queue_.size() <= max_queued_records_) return 0;
  const size_t n = queue_.size() - max_queued_records_;
  for (size_t i = 0; i < n; ++i) {
    const JournalRefs& r = queue_journal_.front();
    if (r.entry) released->push_back(r.entry);
    if (r.checkpoint) released->push_back(r.checkpoint);
    queue_.pop_front();
    queue_journal_.pop_front();
  }
  // The queue held records committed_seq_ + 1 ... enqueued_seq_, oldest first: the dropped ones
  // are done (and lost, which the next Flush() reports).
  committed_seq_ += n;
  failed_through_seq_ = committed_seq_;
  // Said first in the error, before the outage's cause (kept after it).
  constexpr std::string_view kFull = "the telemetry queue is full";
  if (!stats_.last_error.starts_with(kFull)) {
    stats_.last_error = std::string(kFull) + " (" + std::to_string(max_queued_records_) +
                        " records wait for " + sink_.Describe() + "): the oldest are dropped" +
                        (stats_.last_error.empty() ? "" : "; " + stats_.last_error);
  }
  stats_.dropped += n;
  stats_.write_errors += n;
  drops_unreported_ += n;
  return n;
}

Status BatchWriter::Flush() {
  MutexLock lock(&mu_);
  const uint64_t target = enqueued_seq_;
  ++flush_waiters_;
  work_cv_.Signal();  // cut the group-commit interval short
  while (committed_seq_ < target && !writer_exited_ && started_) written_cv_.Wait(&mu_);
  --flush_waiters_;
  if (committed_seq_ < target) {
    return MakeError(ErrorCode::kUnavailable, "telemetry store closed with records pending");
  }
  if (failed_through_seq_ > reported_failure_seq_) {
    reported_failure_seq_ = failed_through_seq_;
    return MakeError(ErrorCode::kUnavailable, "telemetry records lost: " + stats_.last_error);
  }
  return {};
}

void BatchWriter::Close() {
  MutexLock close_lock(&close_mu_);
  if (closed_) return;
  closed_ = true;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.SignalAll();
  handed_cv_.SignalAll();
  if (writer_.joinable()) writer_.join();  // the writer drains the queue before it exits
}

TelemetryStore::Stats BatchWriter::stats() const {
  MutexLock lock(&mu_);
  TelemetryStore::Stats s = stats_;
  s.queue_depth = enqueued_seq_ - committed_seq_;
  std::optional<int64_t> oldest_ns;
  if (batch_in_flight_) {
    oldest_ns = batch_oldest_ns_;
  } else if (!queue_journal_.empty()) {
    oldest_ns = queue_journal_.front().queued_ns;
  }
  if (oldest_ns) {
    s.oldest_queued_age_us = std::max<int64_t>(0, (clock_.MonotonicNanos() - *oldest_ns) / 1000);
  }
  return s;
}

void BatchWriter::WriterLoop() {
  std::chrono::milliseconds pause = kFirstOutageRetry;
  for (;;) {
    std::deque<RequestRecord> batch;
    std::deque<JournalRefs> journal_refs;
    uint64_t batch_end = 0;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) work_cv_.Wait(&mu_);
      if (queue_.empty()) break;  // stopping and drained
      // Group commit (StoreOptions::commit_interval).
      const auto deadline = std::chrono::steady_clock::now() + commit_interval_;
      while (!stopping_ && flush_waiters_ == 0 && queue_.size() < max_batch_records_ &&
             work_cv_.WaitUntil(&mu_, deadline)) {
      }
      batch.swap(queue_);
      journal_refs.swap(queue_journal_);
      batch_end = enqueued_seq_;
      batch_in_flight_ = true;
      in_flight_ = &batch;
      batch_oldest_ns_ = journal_refs.front().queued_ns;
    }
    BatchSink::Outcome outcome = sink_.WriteBatch(batch);
    if (!outcome.unavailable) {
      if (outage_reported_) {
        std::fprintf(stderr,
                     "kvgate: telemetry: %s can be written again; the queued records are "
                     "being written\n",
                     sink_.Describe().c_str());
        outage_reported_ = false;
      }
      pause = kFirstOutageRetry;
      Finish(batch.size(), batch_end, journal_refs, outcome, /*keep_journal=*/false);
      ReportDrops(/*force=*/false);
      continue;
    }
    if (Requeue(batch, journal_refs, outcome, pause)) {
      pause = std::min(pause * 2, kMaxOutageRetry);
      continue;
    }
    // Closing while the database cannot be written: whatever is queued stays in the journal for
    // the next process (Start() writes it), and counts as not written here.
    {
      MutexLock lock(&mu_);
      batch.swap(queue_);
      journal_refs.swap(queue_journal_);
      batch_end = enqueued_seq_;
    }
    outcome.failed = batch.size();
    outcome.error = sink_.Describe() + " unavailable at shutdown (" + outcome.error + "); " +
                    (journal_ ? "the records stay in the journal for the next start"
                              : "without a journal they are lost");
    Finish(batch.size(), batch_end, journal_refs, outcome, /*keep_journal=*/true);
    break;
  }
  ReportDrops(/*force=*/true);
  {
    MutexLock lock(&mu_);
    writer_exited_ = true;
  }
  written_cv_.SignalAll();
}

bool BatchWriter::Requeue(std::deque<RequestRecord>& batch, std::deque<JournalRefs>& refs,
                          const BatchSink::Outcome& outcome, std::chrono::milliseconds pause) {
  std::vector<Journal::Segment> released;
  size_t queued = 0;
  {
    MutexLock lock(&mu_);
    // The records that arrived during the attempt go behind the batch's.
    for (RequestRecord& r : queue_) batch.push_back(std::move(r));
    for (const JournalRefs& r : queue_journal_) refs.push_back(r);
    queue_.swap(batch);
    queue_journal_.swap(refs);
    in_flight_ = nullptr;  // before the batch changes (it did above, under mu_ too)
    batch.clear();
    refs.clear();
    batch_in_flight_ = false;
    stats_.failing = true;
    stats_.last_error = outcome.error;
    if (DropOverflowLocked(&released) > 0 && flush_waiters_ > 0) written_cv_.SignalAll();
    queued = queue_.size();
  }
  if (journal_) journal_->Release(released);
  ReportUnavailable(queued, outcome.error);
  ReportDrops(/*force=*/false);
  MutexLock lock(&mu_);
  const auto deadline = std::chrono::steady_clock::now() + pause;
  // Woken early only by Close(); new records just wait with the others.
  while (!stopping_ && work_cv_.WaitUntil(&mu_, deadline)) {
  }
  return !stopping_;
}

void BatchWriter::Finish(size_t batch_size, uint64_t batch_end, std::deque<JournalRefs>& refs,
                         const BatchSink::Outcome& outcome, bool keep_journal) {
  // Written (or given up on after retries, and counted as lost): their journal entries go.
  if (journal_ && !keep_journal) {
    std::vector<Journal::Segment> done;
    done.reserve(refs.size());
    for (const JournalRefs& r : refs) {
      if (r.entry) done.push_back(r.entry);
      if (r.checkpoint) done.push_back(r.checkpoint);
    }
    journal_->Release(done);
  }
  const uint64_t failed = outcome.failed;
  bool was_failing = false;
  std::vector<Journal::Segment> released;
  {
    MutexLock lock(&mu_);
    stats_.written += batch_size - failed;
    stats_.write_errors += failed;
    ++stats_.batches;
    committed_seq_ = batch_end;
    batch_in_flight_ = false;
    in_flight_ = nullptr;  // the batch is freed after this
    // Records that arrived during a long attempt may have passed the bound.
    DropOverflowLocked(&released);
    was_failing = stats_.failing;
    stats_.failing = failed > 0;
    if (failed > 0) {
      failed_through_seq_ = batch_end;
      stats_.last_error = outcome.error;
    }
  }
  written_cv_.SignalAll();
  if (journal_) journal_->Release(released);
  ReportWriteOutcome(failed, batch_size, was_failing, outcome.error);
}

// Telemetry that cannot be written must not go unnoticed (the gateway keeps serving meanwhile):
// the first failed batch is logged, then one line a minute while failures go on, and the recovery.
void BatchWriter::ReportWriteOutcome(uint64_t failed, size_t batch_size, bool was_failing,
                                     const std::string& error) {
  const auto now = std::chrono::steady_clock::now();
  if (failed == 0) {
    if (was_failing) {
      std::fprintf(stderr, "kvgate: telemetry: writing to %s works again\n",
                   sink_.Describe().c_str());
    }
    failures_since_report_ = 0;
    return;
  }
  failures_since_report_ += failed;
  if (was_failing && now - last_failure_report_ < std::chrono::minutes(1)) return;
  std::fprintf(stderr,
               "kvgate: telemetry: %llu of %zu records could not be written to %s (%llu since the "
               "last report): %s\n",
               static_cast<unsigned long long>(failed), batch_size, sink_.Describe().c_str(),
               static_cast<unsigned long long>(failures_since_report_), error.c_str());
  failures_since_report_ = 0;
  last_failure_report_ = now;
}

void BatchWriter::ReportUnavailable(size_t queued, const std::string& error) {
  const auto now = std::chrono::steady_clock::now();
  if (outage_reported_ && now - last_failure_report_ < std::chrono::minutes(1)) return;
  std::fprintf(stderr,
               "kvgate: telemetry: %s cannot be written now (%s); %zu records wait in "
               "memory and in the journal, retrying\n",
               sink_.Describe().c_str(), error.c_str(), queued);
  outage_reported_ = true;
  last_failure_report_ = now;
}

// Records dropped to the queue's bound are the one loss an outage causes by design: said at
// once, then at most every ten seconds while drops go on, with how many.
void BatchWriter::ReportDrops(bool force) {
  const auto now = std::chrono::steady_clock::now();
  uint64_t dropped = 0, total = 0;
  {
    MutexLock lock(&mu_);
    if (drops_unreported_ == 0) return;
    if (!force && last_drop_report_ && now - *last_drop_report_ < std::chrono::seconds(10)) return;
    dropped = drops_unreported_;
    total = stats_.dropped;
    drops_unreported_ = 0;
  }
  last_drop_report_ = now;
  std::fprintf(stderr,
               "kvgate: telemetry: %llu records dropped, the oldest first (%llu in all): "
               "%zu records (the most the queue holds) wait for %s\n",
               static_cast<unsigned long long>(dropped), static_cast<unsigned long long>(total),
               max_queued_records_, sink_.Describe().c_str());
}

Result<nlohmann::json> GetRequestAfterWrite(
    const BatchWriter& writer, std::string_view id,
    const std::function<Result<nlohmann::json>(std::string_view)>& committed) {
  // How long a read waits for a record whose answer is going out (checkpointed, not yet handed
  // over): the request path hands it over right after its last write, so well under this.
  constexpr std::chrono::milliseconds kAnnouncedWait{1'000};
  Result<nlohmann::json> stored = committed(id);
  if (stored || stored.error().code != ErrorCode::kNotFound) return stored;
  if (std::optional<RequestRecord> pending = writer.FindPending(id, kAnnouncedWait)) {
    return PendingRequestJson(*pending);
  }
  return committed(id);
}

}  // namespace kvgate::telemetry::internal
