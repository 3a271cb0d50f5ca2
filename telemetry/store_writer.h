// Internal to the telemetry module: the write side both stores share (SQLite and PostgreSQL).
//
// Record() journals a record (journal.h) and queues it in memory; one writer thread takes the
// whole queue every group-commit interval and hands it to the store's BatchSink, which writes it
// in one transaction. A record's journal entry is released once its batch is written (or given
// up on). When the sink reports the database unavailable (unreachable, or a full disk, a lock or
// an I/O error), the writer hands the batch back to the front of the queue, retries it with a
// growing pause and meanwhile lets records queue up to StoreOptions::max_queued_records, dropping
// the oldest beyond it; the store reads as degraded (Stats::failing) until a batch is written. A
// shutdown during an outage leaves the unwritten records in the journal, so the next process
// writes them.
//
// Read-after-write: FindPending() gives a record that is handed over but not yet committed (in
// the queue or in the batch being written), so a store can answer for it before its commit. A
// record checkpointed but not yet handed over (its answer is going out) is announced by its ids,
// and FindPending waits for it.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "telemetry/journal.h"
#include "telemetry/store.h"

namespace kvgate::telemetry::internal {

// How a store writes one batch. Called by the writer thread only (and by BatchWriter::Start
// before the thread runs), never concurrently.
class BatchSink {
 public:
  struct Outcome {
    // Records not written and given up on: duplicates of stored request ids, or the whole
    // batch once the sink's own retries are spent.
    uint64_t failed = 0;
    // Nothing was written because the database cannot be reached now (a connection failure,
    // not a bad record): the writer keeps the batch and offers it again later.
    bool unavailable = false;
    std::string error;  // the last error, when failed > 0 or unavailable
  };
  virtual ~BatchSink() = default;
  virtual Outcome WriteBatch(std::deque<RequestRecord>& batch) = 0;
  // What the log lines name: the file, or the server.
  virtual std::string Describe() const = 0;
};

class BatchWriter {
 public:
  using JournalMark = TelemetryStore::JournalMark;

  // REQUIRES: `sink` and `clock` outlive the writer.
  BatchWriter(BatchSink& sink, const Clock& clock, const StoreOptions& options);
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;
  ~BatchWriter();  // Close()

  // Opens the crash journal at `journal_base` (none when empty), writes what an earlier process
  // left in it, then starts the writer thread. Called once. Errors: the journal's, or
  // kUnavailable when the recovered records could not be written for a reason other than an
  // unreachable database (those are queued and retried like any other).
  Status Start(const std::string& journal_base, size_t journal_segment_bytes);

  // TelemetryStore's contracts (store.h).
  std::optional<JournalMark> Checkpoint(const RequestRecord& record);
  void Record(RequestRecord record, std::optional<JournalMark> checkpoint);
  Status Flush();
  // A copy of the record with request id `id`, else of the newest with response id `id`, among
  // those handed over and not yet done (queued, or in the batch being written). When there is
  // none but a record with that id was checkpointed and not yet handed over (its answer is on
  // its way to the client, Record() follows), waits up to `wait` for it. nullopt: none (it may
  // have been committed meanwhile: the caller reads the database again).
  std::optional<RequestRecord> FindPending(std::string_view id,
                                           std::chrono::milliseconds wait) const;
  // Drains the queue (or, with the database unreachable, leaves it in the journal) and joins
  // the writer thread. Idempotent.
  void Close();
  TelemetryStore::Stats stats() const;

 private:
  // What is kept beside a queued record: the journal segments holding it (0: none), released
  // once it is written or dropped, and when it was queued (Clock::MonotonicNanos), for
  // Stats::oldest_queued_age_us.
  struct JournalRefs {
    uint64_t entry = 0, checkpoint = 0;
    int64_t queued_ns = 0;
  };

  void WriterLoop();
  // The sink could not write `batch` now: it goes back to the front of the queue (the oldest
  // records first again) and the writer waits `pause` before the next attempt. Returns false
  // when Close() was called meanwhile: then the whole queue, this batch included, is left in the
  // journal for the next process and counted as not written.
  bool Requeue(std::deque<RequestRecord>& batch, std::deque<JournalRefs>& refs,
               const BatchSink::Outcome& outcome, std::chrono::milliseconds pause);
  // Releases the batch's journal entries (unless `keep_journal`) and advances the counters.
  void Finish(size_t batch_size, uint64_t batch_end, std::deque<JournalRefs>& refs,
              const BatchSink::Outcome& outcome, bool keep_journal);
  // Applies max_queued_records while the writer holds no batch (the queue
  // then holds every record not yet done, oldest first): drops the oldest beyond it, counting
  // them done and lost, and appends their journal entries to *released for the caller to
  // release once mu_ is dropped. Returns how many were dropped.
  size_t DropOverflowLocked(std::vector<Journal::Segment>* released) REQUIRES(mu_);
  // FindPending's search; the record stays valid while mu_ is held.
  const RequestRecord* FindPendingLocked(std::string_view id) const REQUIRES(mu_);
  // Rate-limited stderr lines for failures, outages, drops and the recovery. Writer thread.
  void ReportWriteOutcome(uint64_t failed, size_t batch_size, bool was_failing,
                          const std::string& error);
  void ReportUnavailable(size_t queued, const std::string& error);
  // `force`: report drops not yet reported even if the last report was recent.
  void ReportDrops(bool force);

  // Constant after construction.
  BatchSink& sink_;
  const Clock& clock_;
  const std::chrono::milliseconds commit_interval_;
  const size_t max_batch_records_;
  const size_t max_queued_records_;

  std::unique_ptr<Journal> journal_;  // constant after Start(); null without a journal
  std::thread writer_;
  // Writer thread only.
  uint64_t failures_since_report_ = 0;
  std::chrono::steady_clock::time_point last_failure_report_;
  bool outage_reported_ = false;
  std::optional<std::chrono::steady_clock::time_point> last_drop_report_;

  // mu_ guards the queue, the lifecycle flags and the counters. Held only to move records in or
  // out of the queue and to update counters: never across I/O.
  mutable Mutex mu_;
  CondVar work_cv_;     // signalled: queue became non-empty or full, a flush waits, or stopping_
  CondVar written_cv_;  // signalled: committed_seq_ advanced, or writer exited
  std::deque<RequestRecord> queue_ GUARDED_BY(mu_);
  std::deque<JournalRefs> queue_journal_ GUARDED_BY(mu_);  // parallel to queue_
  // The writer's batch while batch_in_flight_ (null otherwise), for FindPending. The writer
  // thread reads it without mu_ only as const (the sink), and changes or frees it only after it
  // cleared this under mu_, so readers under mu_ see it whole.
  const std::deque<RequestRecord>* in_flight_ PT_GUARDED_BY(mu_) GUARDED_BY(mu_) = nullptr;
  // The ids of records checkpointed and not yet handed to Record(), for FindPending to wait on
  // (a few: the answers going out right now).
  struct Announced {
    std::string request_id, response_id;
  };
  std::vector<Announced> announced_ GUARDED_BY(mu_);
  mutable int pending_waiters_ GUARDED_BY(mu_) = 0;  // FindPending callers waiting on handed_cv_
  mutable CondVar handed_cv_;  // signalled: a record was handed over (with waiters), or stopping_
  // Whether the writer has taken a batch out of the queue and not yet finished or handed it
  // back, and when the batch's oldest record was queued.
  bool batch_in_flight_ GUARDED_BY(mu_) = false;
  int64_t batch_oldest_ns_ GUARDED_BY(mu_) = 0;
  uint64_t drops_unreported_ GUARDED_BY(mu_) = 0;  // dropped records not yet logged
  bool started_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;  // no more Record() accepted
  bool writer_exited_ GUARDED_BY(mu_) = false;
  int flush_waiters_ GUARDED_BY(mu_) = 0;              // Flush() callers waiting
  uint64_t enqueued_seq_ GUARDED_BY(mu_) = 0;          // records accepted so far
  uint64_t committed_seq_ GUARDED_BY(mu_) = 0;         // records done (written or failed)
  uint64_t failed_through_seq_ GUARDED_BY(mu_) = 0;    // seq end of the last failed batch
  uint64_t reported_failure_seq_ GUARDED_BY(mu_) = 0;  // failure already returned by Flush()
  // All but queue_depth and oldest_queued_age_us (derived in stats()).
  TelemetryStore::Stats stats_ GUARDED_BY(mu_);

  // close_mu_ serialises Close() callers (joining the writer), taken before mu_, never after.
  Mutex close_mu_;
  bool closed_ GUARDED_BY(close_mu_) = false;
};

// Both stores' GetRequest: the committed row (`committed`, the store's query), else the record
// still pending in `writer` (the same JSON), else the committed row again (it may have been
// committed between the two looks). The writer is asked only when the database has no row.
Result<nlohmann::json> GetRequestAfterWrite(
    const BatchWriter& writer, std::string_view id,
    const std::function<Result<nlohmann::json>(std::string_view)>& committed);

}  // namespace kvgate::telemetry::internal
