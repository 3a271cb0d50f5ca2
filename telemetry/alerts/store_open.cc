// Opening the alert store: a SQLite or PostgreSQL connection, and the alert tables' migrations
// (alerts_schema_version), taken on PostgreSQL under an advisory lock so that replicas starting
// together migrate once.
#include <span>

#include "telemetry/alerts/store.h"
#include "telemetry/sql_connection.h"

namespace kvgate::telemetry::alerts {
namespace {

using telemetry::internal::SqlConnection;

// Any 64-bit number the other users of the database do not take ("kvgate", 2: the telemetry
// store's migrations hold 1).
constexpr int64_t kAlertMigrationLockKey = 0x6b76676174650002;

constexpr const char* kSqliteV1 = R"sql(
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
constexpr const char* kSqliteV2 = R"sql(
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

// The SQLite tables at version 2 in PostgreSQL's types, with a `seq` column where SQLite orders
// by rowid. There was no PostgreSQL alert store before version 2.
constexpr const char* kPostgresV2 = R"sql(
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

struct Step {
  int64_t version;
  const char* sql;
};
constexpr Step kSqliteSteps[] = {{1, kSqliteV1}, {2, kSqliteV2}};
constexpr Step kPostgresSteps[] = {{2, kPostgresV2}};

Status MigrateLocked(SqlConnection& sql) {
  if (Status s = sql.Exec("CREATE TABLE IF NOT EXISTS alerts_schema_version (version BIGINT)");
      !s) {
    return s;
  }
  if (Status s = sql.Begin(); !s) return s;
  auto migrate = [&]() -> Status {
    auto rows = sql.Query("SELECT COALESCE(MAX(version), 0) FROM alerts_schema_version", {});
    if (!rows) return std::unexpected(rows.error());
    const int64_t version = rows->empty() ? 0 : internal::SqlInt((*rows)[0][0]);
    if (version > SqlAlertStore::kSchemaVersion) {
      return MakeError(ErrorCode::kCorruptData,
                       "alert tables are at schema version " + std::to_string(version) +
                           ", newer than this kvgate (" +
                           std::to_string(SqlAlertStore::kSchemaVersion) + ")");
    }
    auto steps = sql.postgres() ? std::span<const Step>(kPostgresSteps)
                                : std::span<const Step>(kSqliteSteps);
    for (const Step& step : steps) {
      if (step.version <= version) continue;
      if (Status s = sql.Exec(step.sql); !s) return s;
      auto recorded =
          sql.Query("INSERT INTO alerts_schema_version (version) VALUES ($1)", {step.version});
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

Status Migrate(SqlConnection& sql) {
  if (!sql.postgres()) return MigrateLocked(sql);
  if (auto locked = sql.Query("SELECT pg_advisory_lock($1)", {kAlertMigrationLockKey}); !locked) {
    return std::unexpected(locked.error());
  }
  Status result = MigrateLocked(sql);
  (void)sql.Query("SELECT pg_advisory_unlock($1)", {kAlertMigrationLockKey});
  return result;
}

}  // namespace

SqliteAlertStore::SqliteAlertStore(std::unique_ptr<SqlConnection> sql)
    : SqlAlertStore(std::move(sql)) {}

PostgresAlertStore::PostgresAlertStore(std::unique_ptr<SqlConnection> sql)
    : SqlAlertStore(std::move(sql)) {}

Result<std::unique_ptr<SqliteAlertStore>> SqliteAlertStore::Open(const std::string& path) {
  auto sql = internal::ConnectSqlite(path);
  if (!sql) return std::unexpected(sql.error());
  if (Status s = Migrate(**sql); !s) return std::unexpected(s.error());
  return std::unique_ptr<SqliteAlertStore>(new SqliteAlertStore(std::move(*sql)));
}

Result<std::unique_ptr<PostgresAlertStore>> PostgresAlertStore::Open(const std::string& conninfo) {
  auto sql = internal::ConnectPostgres(conninfo);
  if (!sql) return std::unexpected(sql.error());
  if (Status s = Migrate(**sql); !s) return std::unexpected(s.error());
  return std::unique_ptr<PostgresAlertStore>(new PostgresAlertStore(std::move(*sql)));
}

}  // namespace kvgate::telemetry::alerts
