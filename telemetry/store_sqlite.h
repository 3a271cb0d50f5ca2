// Internal to the telemetry module: the SQLite implementation of TelemetryStore.
// store_sqlite.cc: opening, the writer thread, Record/Flush/Close.
// store_queries.cc: the read-only queries and their JSON.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "telemetry/journal.h"
#include "telemetry/sqlite_db.h"
#include "telemetry/store.h"

namespace kvgate::telemetry::internal {

// Applies every migration (core + extra) not yet recorded in schema_migrations.
Status ApplyMigrations(Db& db, std::span<const Migration> extra, const Clock& clock);

// The SQL of the two list queries for a query's filters (store_queries.cc): what ListThreads and
// ListRequests run, and what the test of their query plans explains.
// `sort_after_filter`: read the threads the filters select through their own index and sort
// them, instead of walking the sort's index until `limit` of them pass (ListThreads picks it
// when the `since` window holds few threads).
std::string ThreadListSql(const ThreadQuery& query, bool has_cursor,
                          bool sort_after_filter = false);
std::string RequestListSql(const RequestQuery& query, bool has_cursor);
// The overview's statement (store_overview.cc).
std::string_view OverviewSql();

struct ThreadDelta;  // store_sqlite.cc
struct MinuteDelta;  // store_sqlite.cc

class SqliteTelemetryStore final : public TelemetryStore {
 public:
  SqliteTelemetryStore(std::string path, const Clock& clock, const StoreOptions& options,
                       std::unique_ptr<Db> writer_db);
  ~SqliteTelemetryStore() override;

  void Record(RequestRecord record) override;
  std::optional<JournalMark> Checkpoint(const RequestRecord& record) override;
  void Record(RequestRecord record, std::optional<JournalMark> checkpoint) override;
  Status Flush() override;
  void Close() override;

  Result<nlohmann::json> ListThreads(const ThreadQuery& query) const override;
  Result<nlohmann::json> GetThread(std::string_view thread_id) const override;
  Result<nlohmann::json> ListRequests(const RequestQuery& query) const override;
  Result<nlohmann::json> GetRequest(std::string_view id) const override;
  Result<nlohmann::json> Overview(int64_t since_us, int64_t until_us,
                                  int64_t bucket_seconds) const override;
  Result<nlohmann::json> Live(std::string_view thread_id) const override;
  Result<std::vector<RequestRecord>> LatestThreadTurns(int64_t since_us, int max_threads,
                                                       int* skipped_corrupt) const override;
  Stats stats() const override;

  // Opens the crash journal (when options.journal), commits what an earlier process left in it,
  // then starts the writer thread; called once by Open().
  Status Start(const StoreOptions& options);

 private:
  // A read-only connection checked out of the pool; returned to it on destruction.
  class Reader {
   public:
    Reader(const SqliteTelemetryStore* store, std::unique_ptr<Db> db) : store_(store), db_(std::move(db)) {}
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    ~Reader();
    Db& db() { return *db_; }

   private:
    const SqliteTelemetryStore* store_;
    std::unique_ptr<Db> db_;
  };
  Result<std::unique_ptr<Reader>> AcquireReader() const;

  void WriterLoop();
  // Writes one batch in one transaction, retrying the transaction a few times on failure.
  // Returns how many records could not be written; *error gets the last error message.
  uint64_t WriteBatch(std::deque<RequestRecord>& batch, std::string* error);
  // Logs a failed batch to stderr (rate-limited) and the recovery after failures. Writer thread.
  void ReportWriteOutcome(uint64_t failed, size_t batch_size, bool was_failing,
                          const std::string& error);
  // One request row; kInvalidArgument for a duplicate request_id (the row is left as it was).
  Status InsertRequest(const RequestRecord& record);
  // Adds a batch's turns of one thread to its aggregates and model list.
  Status UpsertThread(std::string_view thread_id, const ThreadDelta& delta);
  // Adds a batch's requests of one minute, model and provider to usage_by_minute.
  Status UpsertMinute(const std::tuple<int64_t, std::string_view, std::string_view>& key,
                      const MinuteDelta& delta);

  // Constant after construction.
  const std::string path_;
  const Clock& clock_;
  const size_t max_idle_readers_;
  const std::chrono::milliseconds commit_interval_;
  const size_t max_batch_records_;

  // Owned by the writer thread once Start() has run (by the constructor and Close() otherwise).
  std::unique_ptr<Db> writer_db_;
  std::unique_ptr<Journal> journal_;  // constant after Start(); null without a journal
  std::thread writer_;
  uint64_t failures_since_report_ = 0;  // see ReportWriteOutcome
  std::chrono::steady_clock::time_point last_failure_report_;

  // mu_ guards the queue, the lifecycle flags and the counters. Held only to move records in or out
  // of the queue and to update counters: never across disk I/O.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;     // signalled: queue became non-empty or full, a flush
                                        // waits, or stopping_
  std::condition_variable written_cv_;  // signalled: committed_seq_ advanced, or writer exited
  std::deque<RequestRecord> queue_;     // GUARDED_BY(mu_)
  // Parallel to queue_: the journal segments holding each record (0: none), released once the
  // record is committed.
  struct JournalRefs {
    uint64_t entry = 0, checkpoint = 0;
  };
  std::deque<JournalRefs> queue_journal_;  // GUARDED_BY(mu_)
  bool started_ = false;                // GUARDED_BY(mu_)
  bool stopping_ = false;               // GUARDED_BY(mu_): no more Record() accepted
  bool writer_exited_ = false;          // GUARDED_BY(mu_)
  int flush_waiters_ = 0;               // GUARDED_BY(mu_): Flush() callers waiting
  uint64_t enqueued_seq_ = 0;           // GUARDED_BY(mu_): records accepted so far
  uint64_t committed_seq_ = 0;          // GUARDED_BY(mu_): records done (written or failed)
  uint64_t failed_through_seq_ = 0;     // GUARDED_BY(mu_): seq end of the last failed batch
  uint64_t reported_failure_seq_ = 0;   // GUARDED_BY(mu_): failure already returned by Flush()
  Stats stats_;                         // GUARDED_BY(mu_), except queue_depth (derived)

  // close_mu_ serialises Close() callers (joining the writer), taken before mu_, never after.
  std::mutex close_mu_;
  bool closed_ = false;  // GUARDED_BY(close_mu_)

  // reader_mu_ guards the idle read connections. Held only to push/pop, never during a query.
  mutable std::mutex reader_mu_;
  mutable std::vector<std::unique_ptr<Db>> idle_readers_;  // GUARDED_BY(reader_mu_)
  mutable bool readers_closed_ = false;                    // GUARDED_BY(reader_mu_)
};

}  // namespace kvgate::telemetry::internal
