// Internal to the telemetry module: the SQLite implementation of TelemetryStore.
// store_sqlite.cc: opening, the batch writes (the writer thread is store_writer.h's).
// store_queries.cc, store_overview.cc: the read-only queries (their JSON is store_json.cc's).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "common/mutex.h"
#include "telemetry/sqlite_db.h"
#include "telemetry/store.h"
#include "telemetry/store_rows.h"
#include "telemetry/store_writer.h"

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

struct ThreadDelta;  // store_batch.h
struct MinuteDelta;  // store_batch.h

// The statements' rows, for store_json.cc.
class SqliteRows final : public RowCursor {
 public:
  explicit SqliteRows(Stmt& stmt) : s_(stmt) {}
  Result<bool> Step() override { return s_.Step(); }
  bool IsNull(int column) const override { return s_.IsNull(column); }
  int64_t Int(int column) const override { return s_.Int(column); }
  std::optional<int64_t> OptInt(int column) const override { return s_.OptInt(column); }
  std::string Text(int column) const override { return s_.Text(column); }
  double Real(int column) const override { return s_.Real(column); }

 private:
  Stmt& s_;
};

class SqliteTelemetryStore final : public TelemetryStore, private BatchSink {
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
  Result<std::optional<RequestRecord>> LatestThreadTurn(std::string_view thread_id) const override;
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
  // GetRequest's query: the committed row only (GetRequest adds the writer's pending records).
  Result<nlohmann::json> GetCommittedRequest(std::string_view id) const;

  // BatchSink, on the writer thread: the batch in one transaction, retried a few times. An
  // error that IsOutage() (disk full, a lock held elsewhere, an I/O error) makes it report the
  // database unavailable at once, so the writer keeps the batch and offers it again later.
  Outcome WriteBatch(std::deque<RequestRecord>& batch) override;
  std::string Describe() const override { return path_; }
  // One request row; kInvalidArgument for a duplicate request_id (the row is left as it was).
  Status InsertRequest(const RequestRecord& record);
  // Adds a batch's turns of one thread to its aggregates and model list.
  Status UpsertThread(std::string_view thread_id, const ThreadDelta& delta);
  // Adds a batch's requests of one minute, model and provider to usage_by_minute.
  Status UpsertMinute(const std::tuple<int64_t, std::string_view, std::string_view>& key,
                      const MinuteDelta& delta);

  // Constant after construction.
  const std::string path_;
  const size_t max_idle_readers_;

  // Used by the writer thread once Start() has run (by the constructor and Close() otherwise).
  std::unique_ptr<Db> writer_db_;
  // Declared after writer_db_: destroyed (its thread joined) before it.
  BatchWriter writer_;

  // reader_mu_ guards the idle read connections. Held only to push/pop, never during a query.
  mutable Mutex reader_mu_;
  mutable std::vector<std::unique_ptr<Db>> idle_readers_ GUARDED_BY(reader_mu_);
  mutable bool readers_closed_ GUARDED_BY(reader_mu_) = false;
};

}  // namespace kvgate::telemetry::internal
