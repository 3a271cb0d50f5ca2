// The stores' shared write side: queue, crash journal, writer thread, group commit.
#include "telemetry/store_writer.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <utility>
#include <vector>

#include "common/thread_name.h"

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
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
  }
  for (RequestRecord& record : requeue) Record(std::move(record), std::nullopt);
  if (journal_) journal_->ReleaseRecovered();
  if (!requeue.empty()) {
    std::fprintf(stderr, "kvgate: telemetry journal: %zu records recovered from a process that "
                 "did not shut down cleanly wait for %s\n", requeue.size(),
                 sink_.Describe().c_str());
  }
  std::lock_guard<std::mutex> lock(mu_);
  writer_ = std::thread([this] {
    NameThisThread("telemetry-write");
    WriterLoop();
  });
  return {};
}

std::optional<BatchWriter::JournalMark> BatchWriter::Checkpoint(const RequestRecord& record) {
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
  // Over the bound (the database has been away for long): discarded before it is journaled, so
  // the journal cannot grow without bound either. A checkpointed record stays in the journal
  // and is written by the next process.
  if (pending_.load(std::memory_order_relaxed) >= max_queued_records_) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.recorded;
    ++stats_.write_errors;
    stats_.last_error = "the telemetry queue is full (" + std::to_string(max_queued_records_) +
                        " records wait for " + sink_.Describe() + "): records are discarded";
    return;
  }
  MakeTextValid(record);
  if (record.created_at_us == 0) record.created_at_us = clock_.NowUnixMicros();
  JournalRefs refs;
  if (checkpoint) refs.checkpoint = *checkpoint;
  // Journaled before it is queued: a crash in between leaves it in the journal. A checkpointed
  // record whose outcome stayed "ok" is already there.
  if (journal_ && (!checkpoint || record.status != "ok")) {
    if (auto segment = journal_->Append(record)) refs.entry = *segment;
  }
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.recorded;
    if (stopping_) {
      ++stats_.write_errors;
      return;
    }
    queue_.push_back(std::move(record));
    queue_journal_.push_back(refs);
    ++enqueued_seq_;
    pending_.fetch_add(1, std::memory_order_relaxed);
    // The writer needs a wake-up only to start a batch or to cut a full one short; any other
    // notify would be a futex call per request for nothing.
    wake = queue_.size() == 1 || queue_.size() == max_batch_records_;
  }
  if (wake) work_cv_.notify_one();
}

Status BatchWriter::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_seq_;
  ++flush_waiters_;
  work_cv_.notify_one();  // cut the group-commit interval short
  written_cv_.wait(lock, [&] { return committed_seq_ >= target || writer_exited_ || !started_; });
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
  std::lock_guard<std::mutex> close_lock(close_mu_);
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (writer_.joinable()) writer_.join();  // the writer drains the queue before it exits
}

TelemetryStore::Stats BatchWriter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  TelemetryStore::Stats s = stats_;
  s.queue_depth = enqueued_seq_ - committed_seq_;
  return s;
}

void BatchWriter::WriterLoop() {
  for (;;) {
    std::deque<RequestRecord> batch;
    std::deque<JournalRefs> journal_refs;
    uint64_t batch_end = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) break;  // stopping and drained
      // Group commit (StoreOptions::commit_interval).
      work_cv_.wait_for(lock, commit_interval_, [&] {
        return stopping_ || flush_waiters_ > 0 || queue_.size() >= max_batch_records_;
      });
      batch.swap(queue_);
      journal_refs.swap(queue_journal_);
      batch_end = enqueued_seq_;
    }
    BatchSink::Outcome outcome = WriteWithRetries(batch);
    if (!outcome.unavailable) {
      Finish(batch.size(), batch_end, journal_refs, outcome, /*keep_journal=*/false);
      continue;
    }
    // Closing while the database is unreachable: this batch and whatever is still queued stay
    // in the journal for the next process (Start() writes them), and count as not written here.
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (RequestRecord& r : queue_) batch.push_back(std::move(r));
      for (JournalRefs& r : queue_journal_) journal_refs.push_back(r);
      queue_.clear();
      queue_journal_.clear();
      batch_end = enqueued_seq_;
    }
    outcome.failed = batch.size();
    outcome.error = sink_.Describe() + " unavailable at shutdown (" + outcome.error + "); " +
                    (journal_ ? "the records stay in the journal for the next start"
                              : "without a journal they are lost");
    Finish(batch.size(), batch_end, journal_refs, outcome, /*keep_journal=*/true);
    break;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    writer_exited_ = true;
  }
  written_cv_.notify_all();
}

BatchSink::Outcome BatchWriter::WriteWithRetries(std::deque<RequestRecord>& batch) {
  BatchSink::Outcome outcome = sink_.WriteBatch(batch);
  std::chrono::milliseconds pause = kFirstOutageRetry;
  while (outcome.unavailable) {
    size_t queued = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      stats_.failing = true;
      stats_.last_error = outcome.error;
      queued = batch.size() + queue_.size();
      // Woken early only by Close(); new records just wait with this batch.
      work_cv_.wait_for(lock, pause, [&] { return stopping_; });
      if (stopping_) return outcome;
    }
    ReportUnavailable(queued, outcome.error);
    pause = std::min(pause * 2, kMaxOutageRetry);
    outcome = sink_.WriteBatch(batch);
  }
  if (outage_reported_) {
    std::fprintf(stderr, "kvgate: telemetry: %s is reachable again; the queued records are being "
                 "written\n", sink_.Describe().c_str());
    outage_reported_ = false;
  }
  return outcome;
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.written += batch_size - failed;
    stats_.write_errors += failed;
    ++stats_.batches;
    committed_seq_ = batch_end;
    pending_.fetch_sub(batch_size, std::memory_order_relaxed);
    was_failing = stats_.failing;
    stats_.failing = failed > 0;
    if (failed > 0) {
      failed_through_seq_ = batch_end;
      stats_.last_error = outcome.error;
    }
  }
  written_cv_.notify_all();
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
  std::fprintf(stderr, "kvgate: telemetry: %s cannot be reached (%s); %zu records wait in memory "
               "and in the journal, retrying\n", sink_.Describe().c_str(), error.c_str(), queued);
  outage_reported_ = true;
  last_failure_report_ = now;
}

}  // namespace kvgate::telemetry::internal
