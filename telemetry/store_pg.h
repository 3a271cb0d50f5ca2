// Internal to the telemetry module: the PostgreSQL implementation of TelemetryStore.
// store_pg.cc: opening, migrations, the batch writes (the writer thread is store_writer.h's).
// store_pg_queries.cc: the read-only queries (their JSON is store_json.cc's, as SQLite's).
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "telemetry/pg_conn.h"
#include "telemetry/store.h"
#include "telemetry/store_rows.h"
#include "telemetry/store_writer.h"

namespace kvgate::telemetry::internal {

// Applies every migration (core + extra) not yet recorded in schema_migrations, each in its own
// transaction, under an advisory lock so that replicas starting together apply each once.
Status ApplyPostgresMigrations(PgConnection& db, std::span<const Migration> extra,
                               const Clock& clock);

// A result's rows, for store_json.cc.
class PgRows final : public RowCursor {
 public:
  explicit PgRows(PgResult result) : result_(std::move(result)) {}
  Result<bool> Step() override { return ++row_ < result_.rows(); }
  bool IsNull(int column) const override { return result_.IsNull(row_, column); }
  int64_t Int(int column) const override { return result_.Int(row_, column); }
  std::optional<int64_t> OptInt(int column) const override {
    if (IsNull(column)) return std::nullopt;
    return Int(column);
  }
  std::string Text(int column) const override { return std::string(result_.Text(row_, column)); }
  double Real(int column) const override { return result_.Real(row_, column); }

 private:
  PgResult result_;
  int row_ = -1;
};

class PostgresTelemetryStore final : public TelemetryStore, private BatchSink {
 public:
  PostgresTelemetryStore(std::string conninfo, const Clock& clock, const StoreOptions& options,
                         std::unique_ptr<PgConnection> writer_conn);
  ~PostgresTelemetryStore() override;

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

  // Replays the crash journal and starts the writer; called once by OpenPostgres().
  Status Start(const StoreOptions& options);

 private:
  // A connection checked out of the read pool; returned to it on destruction unless broken.
  class Reader {
   public:
    Reader(const PostgresTelemetryStore* store, std::unique_ptr<PgConnection> conn)
        : store_(store), conn_(std::move(conn)) {}
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    ~Reader();
    PgConnection& conn() { return *conn_; }

   private:
    const PostgresTelemetryStore* store_;
    std::unique_ptr<PgConnection> conn_;
  };
  Result<std::unique_ptr<Reader>> AcquireReader() const;
  // Runs a read statement on a pooled connection and hands back its rows.
  Result<PgRows> Read(std::string_view sql, const PgParams& params) const;
  // GetRequest's query: the committed row only (GetRequest adds the writer's pending records).
  Result<nlohmann::json> GetCommittedRequest(std::string_view id) const;

  // BatchSink, on the writer thread.
  Outcome WriteBatch(std::deque<RequestRecord>& batch) override;
  std::string Describe() const override { return described_; }
  // The batch in one transaction: request rows by multi-row INSERTs, then the aggregates of the
  // rows that were new. *duplicates counts the records whose request id was already stored.
  Status WriteTransaction(const std::deque<RequestRecord>& batch, uint64_t* duplicates,
                          std::string* duplicate_error);

  // Constant after construction.
  const std::string conninfo_;
  const std::string described_;  // conninfo without its password
  const size_t max_idle_readers_;

  // Used by the writer thread once Start() has run; replaced when the connection breaks.
  std::unique_ptr<PgConnection> writer_conn_;
  // Declared after writer_conn_: destroyed (its thread joined) before it.
  BatchWriter writer_;

  // reader_mu_ guards the idle read connections. Held only to push/pop, never during a query.
  mutable Mutex reader_mu_;
  mutable std::vector<std::unique_ptr<PgConnection>> idle_readers_ GUARDED_BY(reader_mu_);
  mutable bool readers_closed_ GUARDED_BY(reader_mu_) = false;
};

}  // namespace kvgate::telemetry::internal
