#include "telemetry/alerts/store.h"

#include <sqlite3.h>

#include <variant>

#include "common/json_text.h"

namespace kvgate::telemetry::alerts {
namespace {

Error DbError(sqlite3* db, std::string_view what) {
  return Error{ErrorCode::kUnavailable,
               std::string(what) + ": " + (db ? sqlite3_errmsg(db) : "no database")};
}

// A prepared statement bound from a list of values; finalized on scope exit.
class Stmt {
 public:
  using Value = std::variant<int64_t, std::string>;
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Status Bind(std::initializer_list<Value> values) {
    if (rc_ != SQLITE_OK) return std::unexpected(DbError(db_, "prepare"));
    int i = 1;
    for (const Value& v : values) {
      int rc = SQLITE_OK;
      if (const auto* n = std::get_if<int64_t>(&v)) {
        rc = sqlite3_bind_int64(stmt_, i, *n);
      } else {
        const std::string& s = std::get<std::string>(v);
        rc = sqlite3_bind_text(stmt_, i, s.data(), int(s.size()), SQLITE_TRANSIENT);
      }
      if (rc != SQLITE_OK) return std::unexpected(DbError(db_, "bind"));
      ++i;
    }
    return {};
  }
  // SQLITE_ROW -> true, SQLITE_DONE -> false.
  Result<bool> Step() {
    if (rc_ != SQLITE_OK) return std::unexpected(DbError(db_, "prepare"));
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return std::unexpected(DbError(db_, "step"));
  }
  Status Run(std::initializer_list<Value> values) {
    if (Status s = Bind(values); !s) return s;
    auto r = Step();
    if (!r) return std::unexpected(r.error());
    return {};
  }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  std::string Text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string(p, size_t(sqlite3_column_bytes(stmt_, col))) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string message = err ? err : "unknown";
    sqlite3_free(err);
    return MakeError(ErrorCode::kUnavailable, std::string("sqlite: ") + message);
  }
  return {};
}

// BEGIN IMMEDIATE ... COMMIT, rolled back unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) { status_ = Exec(db, "BEGIN IMMEDIATE"); }
  ~Transaction() {
    if (status_ && !done_) (void)Exec(db_, "ROLLBACK");
  }
  const Status& begun() const { return status_; }
  Status Commit() {
    done_ = true;
    return Exec(db_, "COMMIT");
  }

 private:
  sqlite3* db_;
  Status status_;
  bool done_ = false;
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

constexpr const char* kDeliveryColumns =
    "id, event_id, channel, status, attempts, next_attempt_us, last_error, updated_us";

DeliveryRecord ReadDelivery(const Stmt& s) {
  return DeliveryRecord{s.Text(0),     s.Text(1), s.Text(2), s.Text(3),
                        int(s.Int(4)), s.Int(5),  s.Text(6), s.Int(7)};
}

}  // namespace

Result<std::unique_ptr<SqliteAlertStore>> SqliteAlertStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Error e = DbError(db, "open " + path);
    sqlite3_close(db);
    return std::unexpected(e);
  }
  auto store = std::unique_ptr<SqliteAlertStore>(new SqliteAlertStore(db));
  sqlite3_busy_timeout(db, 5000);
  if (Status s = Exec(db,
                      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                      "PRAGMA foreign_keys=ON;");
      !s) {
    return std::unexpected(s.error());
  }
  if (Status s = store->Migrate(); !s) return std::unexpected(s.error());
  return store;
}

SqliteAlertStore::~SqliteAlertStore() { sqlite3_close(db_); }

Status SqliteAlertStore::Migrate() {
  std::lock_guard lock(mu_);
  if (Status s = Exec(db_, "CREATE TABLE IF NOT EXISTS alerts_schema_version (version INTEGER)");
      !s) {
    return s;
  }
  Transaction tx(db_);
  if (!tx.begun()) return tx.begun();
  int64_t version = 0;
  {
    Stmt q(db_, "SELECT COALESCE(MAX(version), 0) FROM alerts_schema_version");
    auto row = q.Step();
    if (!row) return std::unexpected(row.error());
    if (*row) version = q.Int(0);
  }
  if (version > kSchemaVersion) {
    return MakeError(ErrorCode::kCorruptData,
                     "alert tables are at schema version " + std::to_string(version) +
                         ", newer than this kvgate (" + std::to_string(kSchemaVersion) + ")");
  }
  if (version < 1) {
    if (Status s = Exec(db_, kMigrationV1); !s) return s;
    if (Status s = Stmt(db_, "INSERT INTO alerts_schema_version (version) VALUES (1)").Run({});
        !s) {
      return s;
    }
  }
  return tx.Commit();
}

Status SqliteAlertStore::UpsertDelivery(const DeliveryRecord& d) {
  return Stmt(db_,
              "INSERT OR REPLACE INTO alert_deliveries (id, event_id, channel, status, attempts, "
              "next_attempt_us, last_error, updated_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
      .Run({d.id, d.event_id, d.channel, d.status, int64_t(d.attempts), d.next_attempt_us,
            d.last_error, d.updated_us});
}

Status SqliteAlertStore::SaveEvent(const AlertEvent& event,
                                   const std::vector<DeliveryRecord>& deliveries) {
  std::lock_guard lock(mu_);
  Transaction tx(db_);
  if (!tx.begun()) return tx.begun();
  if (Status s = Stmt(db_,
                      "INSERT OR REPLACE INTO alert_events (id, incident_id, kind, rule_id, at_us, "
                      "event_json) VALUES (?, ?, ?, ?, ?, ?)")
                     .Run({event.id, event.incident_id, event.kind, event.rule_id, event.at_us,
                           JsonText(event.ToJson())});
      !s) {
    return s;
  }
  for (const DeliveryRecord& d : deliveries) {
    if (Status s = UpsertDelivery(d); !s) return s;
  }
  return tx.Commit();
}

Status SqliteAlertStore::RecordAttempt(const DeliveryAttempt& a, const DeliveryRecord& d) {
  std::lock_guard lock(mu_);
  Transaction tx(db_);
  if (!tx.begun()) return tx.begun();
  if (Status s =
          Stmt(db_,
               "INSERT OR REPLACE INTO alert_attempts (delivery_id, attempt, at_us, outcome, "
               "http_status, error) VALUES (?, ?, ?, ?, ?, ?)")
              .Run({a.delivery_id, int64_t(a.attempt), a.at_us, a.outcome, int64_t(a.http_status),
                    a.error});
      !s) {
    return s;
  }
  if (Status s = UpsertDelivery(d); !s) return s;
  return tx.Commit();
}

Result<std::vector<DeliveryRecord>> SqliteAlertStore::QueryDeliveries(const char* sql,
                                                                      const std::string& arg) {
  std::lock_guard lock(mu_);
  Stmt q(db_, sql);
  if (Status s = q.Bind({arg}); !s) return std::unexpected(s.error());
  std::vector<DeliveryRecord> out;
  while (true) {
    auto row = q.Step();
    if (!row) return std::unexpected(row.error());
    if (!*row) break;
    out.push_back(ReadDelivery(q));
  }
  return out;
}

Result<std::vector<DeliveryRecord>> SqliteAlertStore::LoadPendingDeliveries() {
  static const std::string sql = std::string("SELECT ") + kDeliveryColumns +
                                 " FROM alert_deliveries WHERE status = ? ORDER BY next_attempt_us";
  return QueryDeliveries(sql.c_str(), "pending");
}

Result<std::vector<DeliveryRecord>> SqliteAlertStore::ListDeliveries(const std::string& event_id) {
  static const std::string sql = std::string("SELECT ") + kDeliveryColumns +
                                 " FROM alert_deliveries WHERE event_id = ? ORDER BY channel";
  return QueryDeliveries(sql.c_str(), event_id);
}

Result<std::optional<AlertEvent>> SqliteAlertStore::LoadEvent(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt q(db_, "SELECT event_json FROM alert_events WHERE id = ?");
  if (Status s = q.Bind({id}); !s) return std::unexpected(s.error());
  auto row = q.Step();
  if (!row) return std::unexpected(row.error());
  if (!*row) return std::optional<AlertEvent>();
  auto json = nlohmann::json::parse(q.Text(0), nullptr, /*allow_exceptions=*/false);
  auto event = AlertEvent::FromJson(json);
  if (!event) return std::unexpected(event.error());
  return std::optional<AlertEvent>(std::move(*event));
}

Result<std::vector<AlertEvent>> SqliteAlertStore::ListEvents(int limit) {
  std::lock_guard lock(mu_);
  Stmt q(db_, "SELECT event_json FROM alert_events ORDER BY at_us DESC, rowid DESC LIMIT ?");
  if (Status s = q.Bind({int64_t(limit)}); !s) return std::unexpected(s.error());
  std::vector<AlertEvent> out;
  while (true) {
    auto row = q.Step();
    if (!row) return std::unexpected(row.error());
    if (!*row) break;
    auto event =
        AlertEvent::FromJson(nlohmann::json::parse(q.Text(0), nullptr, /*allow_exceptions=*/false));
    if (!event) return std::unexpected(event.error());
    out.push_back(std::move(*event));
  }
  return out;
}

Result<std::vector<DeliveryAttempt>> SqliteAlertStore::ListAttempts(
    const std::string& delivery_id) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "SELECT delivery_id, attempt, at_us, outcome, http_status, error FROM alert_attempts "
         "WHERE delivery_id = ? ORDER BY attempt");
  if (Status s = q.Bind({delivery_id}); !s) return std::unexpected(s.error());
  std::vector<DeliveryAttempt> out;
  while (true) {
    auto row = q.Step();
    if (!row) return std::unexpected(row.error());
    if (!*row) break;
    out.push_back(
        DeliveryAttempt{q.Text(0), int(q.Int(1)), q.Int(2), q.Text(3), int(q.Int(4)), q.Text(5)});
  }
  return out;
}

Result<std::vector<AlertRule>> SqliteAlertStore::LoadMonitors() {
  std::lock_guard lock(mu_);
  Stmt q(db_, "SELECT rule_json FROM monitors ORDER BY rowid");
  std::vector<AlertRule> out;
  while (true) {
    auto row = q.Step();
    if (!row) return std::unexpected(row.error());
    if (!*row) break;
    auto rule = ParseRule(nlohmann::json::parse(q.Text(0), nullptr, /*allow_exceptions=*/false));
    if (!rule) {
      return MakeError(ErrorCode::kCorruptData, "stored monitor: " + rule.error().message);
    }
    out.push_back(std::move(*rule));
  }
  return out;
}

Status SqliteAlertStore::SaveMonitor(const AlertRule& rule) {
  std::lock_guard lock(mu_);
  // An update keeps the row (and so the list order); a new id appends.
  return Stmt(db_,
              "INSERT INTO monitors (id, rule_json) VALUES (?, ?) "
              "ON CONFLICT(id) DO UPDATE SET rule_json = excluded.rule_json")
      .Run({rule.id, JsonText(ToJson(rule))});
}

Result<bool> SqliteAlertStore::DeleteMonitor(const std::string& id) {
  std::lock_guard lock(mu_);
  if (Status s = Stmt(db_, "DELETE FROM monitors WHERE id = ?").Run({id}); !s) {
    return std::unexpected(s.error());
  }
  return sqlite3_changes(db_) > 0;
}

}  // namespace kvgate::telemetry::alerts
