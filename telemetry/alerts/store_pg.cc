// The alert store on PostgreSQL: the connection SqlAlertStore runs its statements on (replaced
// when lost), and the alert tables' migrations, taken under an advisory lock so that replicas
// starting together migrate once.
#include "telemetry/alerts/store.h"
#include "telemetry/alerts/store_sql.h"
#include "telemetry/pg_conn.h"

namespace kvgate::telemetry::alerts {
namespace {

using telemetry::internal::PgConnection;
using telemetry::internal::PgParams;

// Any 64-bit number the other users of the database do not take ("kvgate", 2: the telemetry
// store's migrations hold 1).
constexpr int64_t kAlertMigrationLockKey = 0x6b76676174650002;

class PostgresAlertSql final : public internal::AlertSql {
 public:
  PostgresAlertSql(std::string conninfo, std::unique_ptr<PgConnection> conn)
      : conninfo_(std::move(conninfo)), conn_(std::move(conn)) {}

  Result<std::vector<Row>> Query(const std::string& sql,
                                 const std::vector<Value>& values) override {
    PgParams params;
    for (const Value& v : values) {
      if (const auto* n = std::get_if<int64_t>(&v)) {
        params.Int(*n);
      } else {
        params.Text(std::get<std::string>(v));
      }
    }
    // A connection lost between calls is replaced once; one lost inside a transaction is not
    // (the transaction is gone with it, and the caller's Commit reports that).
    for (int attempt = 0;; ++attempt) {
      if (conn_ == nullptr || conn_->Broken()) {
        if (in_transaction_) {
          return MakeError(ErrorCode::kUnavailable, "PostgreSQL: connection lost in a transaction");
        }
        auto conn = PgConnection::Connect(conninfo_);
        if (!conn) return std::unexpected(conn.error());
        conn_ = std::move(*conn);
      }
      auto result = conn_->Query(sql, params);
      if (!result) {
        if (attempt == 0 && !in_transaction_ && conn_->Broken()) continue;
        return std::unexpected(result.error());
      }
      std::vector<Row> rows(size_t(result->rows()));
      for (int r = 0; r < result->rows(); ++r) {
        for (int c = 0; c < result->columns(); ++c) {
          rows[size_t(r)].emplace_back(result->Text(r, c));
        }
      }
      return rows;
    }
  }
  Status Begin() override {
    if (conn_ == nullptr || conn_->Broken()) {
      auto conn = PgConnection::Connect(conninfo_);
      if (!conn) return std::unexpected(conn.error());
      conn_ = std::move(*conn);
    }
    if (Status s = conn_->Exec("BEGIN"); !s) return s;
    in_transaction_ = true;
    return {};
  }
  Status Commit() override {
    in_transaction_ = false;
    if (conn_ == nullptr) return MakeError(ErrorCode::kUnavailable, "PostgreSQL: no connection");
    return conn_->Exec("COMMIT");
  }
  void Rollback() override {
    in_transaction_ = false;
    if (conn_ != nullptr && !conn_->Broken()) (void)conn_->Exec("ROLLBACK");
  }
  std::string_view InsertionOrder() const override { return "seq"; }


 private:
  const std::string conninfo_;
  std::unique_ptr<PgConnection> conn_;
  bool in_transaction_ = false;
};

// The SQLite tables (store_sqlite.cc) in PostgreSQL's types, with a `seq` column where SQLite
// orders by rowid. Version 2's additions are part of version 1 here: there was no PostgreSQL
// alert store before it.
constexpr const char* kMigrationV2 = R"sql(
CREATE TABLE IF NOT EXISTS alert_events (
  id TEXT PRIMARY KEY,
  seq BIGSERIAL,
  incident_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  rule_id TEXT NOT NULL,
  at_us BIGINT NOT NULL,
  event_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alert_events_at ON alert_events(at_us);
CREATE TABLE IF NOT EXISTS alert_deliveries (
  id TEXT PRIMARY KEY,
  event_id TEXT NOT NULL REFERENCES alert_events(id),
  channel TEXT NOT NULL,
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  next_attempt_us BIGINT NOT NULL,
  last_error TEXT NOT NULL,
  updated_us BIGINT NOT NULL,
  lease_until_us BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS alert_deliveries_status ON alert_deliveries(status);
CREATE INDEX IF NOT EXISTS alert_deliveries_event ON alert_deliveries(event_id);
CREATE TABLE IF NOT EXISTS alert_attempts (
  delivery_id TEXT NOT NULL REFERENCES alert_deliveries(id),
  attempt INTEGER NOT NULL,
  at_us BIGINT NOT NULL,
  outcome TEXT NOT NULL,
  http_status INTEGER NOT NULL,
  error TEXT NOT NULL,
  PRIMARY KEY (delivery_id, attempt)
);
CREATE TABLE IF NOT EXISTS monitors (
  id TEXT PRIMARY KEY,
  seq BIGSERIAL,
  rule_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS alert_incidents (
  rule_id TEXT NOT NULL,
  scope_key TEXT NOT NULL,
  incident_id TEXT NOT NULL,
  is_open INTEGER NOT NULL,
  fired_us BIGINT NOT NULL,
  seen_us BIGINT NOT NULL,
  PRIMARY KEY (rule_id, scope_key)
);
)sql";

Status Migrate(PgConnection& db) {
  PgParams key;
  key.Int(kAlertMigrationLockKey);
  if (auto locked = db.Query("SELECT pg_advisory_lock($1)", key); !locked) {
    return std::unexpected(locked.error());
  }
  auto apply = [&]() -> Status {
    if (Status s = db.Exec("CREATE TABLE IF NOT EXISTS alerts_schema_version (version BIGINT)");
        !s) {
      return s;
    }
    auto rows = db.Query("SELECT COALESCE(MAX(version), 0) FROM alerts_schema_version", {});
    if (!rows) return std::unexpected(rows.error());
    const int64_t version = rows->Int(0, 0);
    if (version > SqlAlertStore::kSchemaVersion) {
      return MakeError(ErrorCode::kCorruptData,
                       "alert tables are at schema version " + std::to_string(version) +
                           ", newer than this kvgate (" +
                           std::to_string(SqlAlertStore::kSchemaVersion) + ")");
    }
    if (version >= 2) return {};
    if (Status s = db.Exec("BEGIN"); !s) return s;
    Status done = db.Exec(kMigrationV2);
    if (done) done = db.Exec("INSERT INTO alerts_schema_version (version) VALUES (2)");
    if (done) done = db.Exec("COMMIT");
    if (!done) (void)db.Exec("ROLLBACK");
    return done;
  };
  Status result = apply();
  (void)db.Query("SELECT pg_advisory_unlock($1)", key);
  return result;
}

}  // namespace

PostgresAlertStore::PostgresAlertStore(std::unique_ptr<internal::AlertSql> sql)
    : SqlAlertStore(std::move(sql)) {}

Result<std::unique_ptr<PostgresAlertStore>> PostgresAlertStore::Open(const std::string& conninfo) {
  auto conn = PgConnection::Connect(conninfo);
  if (!conn) return std::unexpected(conn.error());
  if (Status s = Migrate(**conn); !s) return std::unexpected(s.error());
  return std::unique_ptr<PostgresAlertStore>(new PostgresAlertStore(
      std::make_unique<PostgresAlertSql>(conninfo, std::move(*conn))));
}

}  // namespace kvgate::telemetry::alerts
