// The alert store on a SQLite file: the connection SqlAlertStore runs its statements on, and the
// alert tables' migrations.
#include <sqlite3.h>

#include "telemetry/alerts/store.h"
#include "telemetry/alerts/store_sql.h"

namespace kvgate::telemetry::alerts {
namespace {

Error DbError(sqlite3* db, std::string_view what) {
  return Error{ErrorCode::kUnavailable,
               std::string(what) + ": " + (db ? sqlite3_errmsg(db) : "no database")};
}

Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string message = err ? err : "unknown";
    sqlite3_free(err);
    return MakeError(ErrorCode::kUnavailable, std::string("sqlite: ") + message);
  }
  return {};
}

class SqliteAlertSql final : public internal::AlertSql {
 public:
  explicit SqliteAlertSql(sqlite3* db) : db_(db) {}
  ~SqliteAlertSql() override { sqlite3_close(db_); }

  Result<std::vector<Row>> Query(const std::string& sql,
                                 const std::vector<Value>& values) override {
    // PostgreSQL's $n is SQLite's ?n: the same numbered parameter.
    std::string text = sql;
    for (char& c : text) {
      if (c == '$') c = '?';
    }
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, text.c_str(), int(text.size()), &stmt, nullptr) != SQLITE_OK) {
      return std::unexpected(DbError(db_, "prepare"));
    }
    std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> owned(stmt, sqlite3_finalize);
    int i = 1;
    for (const Value& v : values) {
      int rc = SQLITE_OK;
      if (const auto* n = std::get_if<int64_t>(&v)) {
        rc = sqlite3_bind_int64(stmt, i, *n);
      } else {
        const std::string& s = std::get<std::string>(v);
        rc = sqlite3_bind_text(stmt, i, s.data(), int(s.size()), SQLITE_TRANSIENT);
      }
      if (rc != SQLITE_OK) return std::unexpected(DbError(db_, "bind"));
      ++i;
    }
    std::vector<Row> rows;
    while (true) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) return rows;
      if (rc != SQLITE_ROW) return std::unexpected(DbError(db_, "step"));
      Row row;
      for (int col = 0; col < sqlite3_column_count(stmt); ++col) {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, col));
        row.push_back(p ? std::string(p, size_t(sqlite3_column_bytes(stmt, col))) : "");
      }
      rows.push_back(std::move(row));
    }
  }
  Status Begin() override { return Exec(db_, "BEGIN IMMEDIATE"); }
  Status Commit() override { return Exec(db_, "COMMIT"); }
  void Rollback() override { (void)Exec(db_, "ROLLBACK"); }
  std::string_view InsertionOrder() const override { return "rowid"; }

  sqlite3* db() const { return db_; }

 private:
  sqlite3* db_;
};

constexpr const char* kMigrationV1 = R"sql(
CREATE TABLE IF NOT EXISTS alert_events (
  id TEXT PRIMARY KEY,
  incident_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  rule_id TEXT NOT NULL,
  at_us INTEGER NOT NULL,
  event_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alert_events_at ON alert_events(at_us);
CREATE TABLE IF NOT EXISTS alert_deliveries (
  id TEXT PRIMARY KEY,
  event_id TEXT NOT NULL REFERENCES alert_events(id),
  channel TEXT NOT NULL,
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  next_attempt_us INTEGER NOT NULL,
  last_error TEXT NOT NULL,
  updated_us INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS alert_deliveries_status ON alert_deliveries(status);
CREATE INDEX IF NOT EXISTS alert_deliveries_event ON alert_deliveries(event_id);
CREATE TABLE IF NOT EXISTS alert_attempts (
  delivery_id TEXT NOT NULL REFERENCES alert_deliveries(id),
  attempt INTEGER NOT NULL,
  at_us INTEGER NOT NULL,
  outcome TEXT NOT NULL,
  http_status INTEGER NOT NULL,
  error TEXT NOT NULL,
  PRIMARY KEY (delivery_id, attempt)
);
CREATE TABLE IF NOT EXISTS monitors (
  id TEXT PRIMARY KEY,
  rule_json TEXT NOT NULL
);
)sql";

// Incidents held across engines, and leases on deliveries (store.h: HoldIncident, LeaseDelivery).
constexpr const char* kMigrationV2 = R"sql(
ALTER TABLE alert_deliveries ADD COLUMN lease_until_us INTEGER NOT NULL DEFAULT 0;
CREATE TABLE alert_incidents (
  rule_id TEXT NOT NULL,
  scope_key TEXT NOT NULL,
  incident_id TEXT NOT NULL,
  is_open INTEGER NOT NULL,
  fired_us INTEGER NOT NULL,
  seen_us INTEGER NOT NULL,
  PRIMARY KEY (rule_id, scope_key)
);
)sql";

Status Migrate(SqliteAlertSql& sql) {
  sqlite3* db = sql.db();
  if (Status s = Exec(db, "CREATE TABLE IF NOT EXISTS alerts_schema_version (version INTEGER)");
      !s) {
    return s;
  }
  if (Status s = sql.Begin(); !s) return s;
  auto migrate = [&]() -> Status {
    auto rows = sql.Query("SELECT COALESCE(MAX(version), 0) FROM alerts_schema_version", {});
    if (!rows) return std::unexpected(rows.error());
    const int64_t version = rows->empty() ? 0 : std::stoll((*rows)[0][0]);
    if (version > SqlAlertStore::kSchemaVersion) {
      return MakeError(ErrorCode::kCorruptData,
                       "alert tables are at schema version " + std::to_string(version) +
                           ", newer than this kvgate (" +
                           std::to_string(SqlAlertStore::kSchemaVersion) + ")");
    }
    const char* steps[] = {kMigrationV1, kMigrationV2};
    for (int64_t v = version + 1; v <= SqlAlertStore::kSchemaVersion; ++v) {
      if (Status s = Exec(db, steps[v - 1]); !s) return s;
      auto recorded =
          sql.Query("INSERT INTO alerts_schema_version (version) VALUES ($1)", {v});
      if (!recorded) return std::unexpected(recorded.error());
    }
    return {};
  };
  if (Status s = migrate(); !s) {
    sql.Rollback();
    return s;
  }
  return sql.Commit();
}

}  // namespace

SqliteAlertStore::SqliteAlertStore(std::unique_ptr<internal::AlertSql> sql)
    : SqlAlertStore(std::move(sql)) {}

Result<std::unique_ptr<SqliteAlertStore>> SqliteAlertStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Error e = DbError(db, "open " + path);
    sqlite3_close(db);
    return std::unexpected(e);
  }
  auto sql = std::make_unique<SqliteAlertSql>(db);
  sqlite3_busy_timeout(db, 5000);
  if (Status s = Exec(db,
                      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                      "PRAGMA foreign_keys=ON;");
      !s) {
    return std::unexpected(s.error());
  }
  if (Status s = Migrate(*sql); !s) return std::unexpected(s.error());
  return std::unique_ptr<SqliteAlertStore>(new SqliteAlertStore(std::move(sql)));
}

}  // namespace kvgate::telemetry::alerts
