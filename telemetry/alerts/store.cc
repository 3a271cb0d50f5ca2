// The alert store's statements, the same on SQLite and PostgreSQL (telemetry/sql_connection.h).
#include "telemetry/alerts/store.h"

#include "common/json_text.h"
#include "telemetry/sql_connection.h"

namespace kvgate::telemetry::alerts {
namespace {

using AlertSql = telemetry::internal::SqlConnection;
using telemetry::internal::SqlInt;

constexpr const char* kDeliveryColumns =
    "id, event_id, channel, status, attempts, next_attempt_us, last_error, updated_us";

DeliveryRecord ReadDelivery(const AlertSql::Row& r) {
  return DeliveryRecord{r[0], r[1], r[2], r[3], int(SqlInt(r[4])), SqlInt(r[5]), r[6], SqlInt(r[7])};
}

Status Run(AlertSql& sql, const std::string& statement, const std::vector<AlertSql::Value>& values) {
  auto rows = sql.Query(statement, values);
  if (!rows) return std::unexpected(rows.error());
  return {};
}

// Runs `body` in one transaction, rolled back when it fails.
template <typename Body>
Status InTransaction(AlertSql& sql, Body body) {
  if (Status s = sql.Begin(); !s) return s;
  if (Status s = body(); !s) {
    sql.Rollback();
    return s;
  }
  return sql.Commit();
}

Result<AlertEvent> ParseEvent(const std::string& text) {
  return AlertEvent::FromJson(nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false));
}

}  // namespace

SqlAlertStore::SqlAlertStore(std::unique_ptr<AlertSql> sql) : sql_(std::move(sql)) {}
SqlAlertStore::~SqlAlertStore() = default;

Status SqlAlertStore::UpsertDelivery(const DeliveryRecord& d) {
  // Every write of a delivery's state ends its lease (lease_until_us back to 0).
  return Run(*sql_,
             "INSERT INTO alert_deliveries (id, event_id, channel, status, attempts, "
             "next_attempt_us, last_error, updated_us, lease_until_us) "
             "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0) ON CONFLICT (id) DO UPDATE SET "
             "status = excluded.status, attempts = excluded.attempts, "
             "next_attempt_us = excluded.next_attempt_us, last_error = excluded.last_error, "
             "updated_us = excluded.updated_us, lease_until_us = 0",
             {d.id, d.event_id, d.channel, d.status, int64_t(d.attempts), d.next_attempt_us,
              d.last_error, d.updated_us});
}

Status SqlAlertStore::SaveEvent(const AlertEvent& event,
                                const std::vector<DeliveryRecord>& deliveries) {
  MutexLock lock(&mu_);
  return InTransaction(*sql_, [&]() -> Status {
    mu_.AssertHeld();  // InTransaction runs it right here
    if (Status s = Run(*sql_,
                       "INSERT INTO alert_events (id, incident_id, kind, rule_id, at_us, "
                       "event_json) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE "
                       "SET event_json = excluded.event_json",
                       {event.id, event.incident_id, event.kind, event.rule_id, event.at_us,
                        JsonText(event.ToJson())});
        !s) {
      return s;
    }
    for (const DeliveryRecord& d : deliveries) {
      if (Status s = UpsertDelivery(d); !s) return s;
    }
    return {};
  });
}

Status SqlAlertStore::RecordAttempt(const DeliveryAttempt& a, const DeliveryRecord& d) {
  MutexLock lock(&mu_);
  return InTransaction(*sql_, [&]() -> Status {
    mu_.AssertHeld();  // InTransaction runs it right here
    if (Status s = Run(*sql_,
                       "INSERT INTO alert_attempts (delivery_id, attempt, at_us, outcome, "
                       "http_status, error) VALUES ($1, $2, $3, $4, $5, $6) "
                       "ON CONFLICT (delivery_id, attempt) DO UPDATE SET at_us = excluded.at_us, "
                       "outcome = excluded.outcome, http_status = excluded.http_status, "
                       "error = excluded.error",
                       {a.delivery_id, int64_t(a.attempt), a.at_us, a.outcome,
                        int64_t(a.http_status), a.error});
        !s) {
      return s;
    }
    return UpsertDelivery(d);
  });
}

Result<std::vector<DeliveryRecord>> SqlAlertStore::QueryDeliveries(const std::string& sql,
                                                                   const std::string& arg) {
  MutexLock lock(&mu_);
  auto rows = sql_->Query(sql, {arg});
  if (!rows) return std::unexpected(rows.error());
  std::vector<DeliveryRecord> out;
  for (const auto& row : *rows) out.push_back(ReadDelivery(row));
  return out;
}

Result<std::vector<DeliveryRecord>> SqlAlertStore::LoadPendingDeliveries() {
  return QueryDeliveries(std::string("SELECT ") + kDeliveryColumns +
                             " FROM alert_deliveries WHERE status = $1 ORDER BY next_attempt_us",
                         "pending");
}

Result<std::vector<DeliveryRecord>> SqlAlertStore::ListDeliveries(const std::string& event_id) {
  return QueryDeliveries(std::string("SELECT ") + kDeliveryColumns +
                             " FROM alert_deliveries WHERE event_id = $1 ORDER BY channel",
                         event_id);
}

Result<std::optional<AlertEvent>> SqlAlertStore::LoadEvent(const std::string& id) {
  MutexLock lock(&mu_);
  auto rows = sql_->Query("SELECT event_json FROM alert_events WHERE id = $1", {id});
  if (!rows) return std::unexpected(rows.error());
  if (rows->empty()) return std::optional<AlertEvent>();
  auto event = ParseEvent((*rows)[0][0]);
  if (!event) return std::unexpected(event.error());
  return std::optional<AlertEvent>(std::move(*event));
}

Result<std::vector<AlertEvent>> SqlAlertStore::ListEvents(int limit) {
  MutexLock lock(&mu_);
  auto rows = sql_->Query("SELECT event_json FROM alert_events ORDER BY at_us DESC, " +
                              std::string(sql_->InsertionOrder()) + " DESC LIMIT $1",
                          {int64_t(limit)});
  if (!rows) return std::unexpected(rows.error());
  std::vector<AlertEvent> out;
  for (const auto& row : *rows) {
    auto event = ParseEvent(row[0]);
    if (!event) return std::unexpected(event.error());
    out.push_back(std::move(*event));
  }
  return out;
}

Result<std::vector<DeliveryAttempt>> SqlAlertStore::ListAttempts(const std::string& delivery_id) {
  MutexLock lock(&mu_);
  auto rows = sql_->Query(
      "SELECT delivery_id, attempt, at_us, outcome, http_status, error FROM alert_attempts "
      "WHERE delivery_id = $1 ORDER BY attempt",
      {delivery_id});
  if (!rows) return std::unexpected(rows.error());
  std::vector<DeliveryAttempt> out;
  for (const auto& r : *rows) {
    out.push_back(DeliveryAttempt{r[0], int(SqlInt(r[1])), SqlInt(r[2]), r[3], int(SqlInt(r[4])),
                                  r[5]});
  }
  return out;
}

Result<StoredMonitors> SqlAlertStore::LoadMonitors() {
  MutexLock lock(&mu_);
  auto rows = sql_->Query(
      "SELECT id, rule_json FROM monitors ORDER BY " + std::string(sql_->InsertionOrder()), {});
  if (!rows) return std::unexpected(rows.error());
  StoredMonitors out;
  for (const auto& row : *rows) {
    auto rule = ParseRule(nlohmann::json::parse(row[1], nullptr, /*allow_exceptions=*/false));
    if (!rule) {
      out.invalid.push_back({.id = row[0], .error = rule.error().message});
      continue;
    }
    rule->id = row[0];  // the key DELETE and PUT go by, whatever the JSON says
    out.rules.push_back(std::move(*rule));
  }
  return out;
}

Status SqlAlertStore::SaveMonitor(const AlertRule& rule) {
  MutexLock lock(&mu_);
  // An update keeps the row (and so the list order); a new id appends.
  return Run(*sql_,
             "INSERT INTO monitors (id, rule_json) VALUES ($1, $2) "
             "ON CONFLICT (id) DO UPDATE SET rule_json = excluded.rule_json",
             {rule.id, JsonText(ToJson(rule))});
}

Result<bool> SqlAlertStore::DeleteMonitor(const std::string& id) {
  MutexLock lock(&mu_);
  auto rows = sql_->Query("DELETE FROM monitors WHERE id = $1 RETURNING id", {id});
  if (!rows) return std::unexpected(rows.error());
  return !rows->empty();
}

Result<bool> SqlAlertStore::HoldIncident(const IncidentClaim& c) {
  MutexLock lock(&mu_);
  // One statement, so that two replicas racing for the same incident are ordered by the row's
  // lock: the loser's WHERE sees the winner's row and takes nothing.
  auto rows = sql_->Query(
      "INSERT INTO alert_incidents (rule_id, scope_key, incident_id, is_open, fired_us, seen_us) "
      "VALUES ($1, $2, $3, 1, $4, $4) ON CONFLICT (rule_id, scope_key) DO UPDATE SET "
      "fired_us = CASE WHEN alert_incidents.incident_id = excluded.incident_id "
      "THEN alert_incidents.fired_us ELSE excluded.fired_us END, "
      "incident_id = excluded.incident_id, is_open = 1, seen_us = excluded.seen_us "
      "WHERE (alert_incidents.is_open = 1 AND alert_incidents.incident_id = excluded.incident_id) "
      "OR (alert_incidents.is_open = 0 AND alert_incidents.fired_us <= $5) "
      "OR (alert_incidents.is_open = 1 AND alert_incidents.seen_us <= $6) "
      "RETURNING incident_id",
      {c.rule_id, c.scope_key, c.incident_id, c.now_us, c.now_us - c.cooldown_us,
       c.now_us - c.stale_us});
  if (!rows) return std::unexpected(rows.error());
  return !rows->empty();
}

Status SqlAlertStore::ReleaseIncident(const std::string& rule_id, const std::string& scope_key,
                                      const std::string& incident_id) {
  MutexLock lock(&mu_);
  return Run(*sql_,
             "UPDATE alert_incidents SET is_open = 0 "
             "WHERE rule_id = $1 AND scope_key = $2 AND incident_id = $3",
             {rule_id, scope_key, incident_id});
}

Result<DeliveryLease> SqlAlertStore::LeaseDelivery(const std::string& delivery_id, int64_t now_us,
                                                   int64_t until_us) {
  MutexLock lock(&mu_);
  auto leased = sql_->Query(
      "UPDATE alert_deliveries SET lease_until_us = $3 "
      "WHERE id = $1 AND status = 'pending' AND lease_until_us <= $2 RETURNING id",
      {delivery_id, now_us, until_us});
  if (!leased) return std::unexpected(leased.error());
  if (!leased->empty()) return DeliveryLease::kLeased;
  auto state = sql_->Query("SELECT status FROM alert_deliveries WHERE id = $1", {delivery_id});
  if (!state) return std::unexpected(state.error());
  if (state->empty()) return DeliveryLease::kUnknown;
  return (*state)[0][0] == "pending" ? DeliveryLease::kBusy : DeliveryLease::kSettled;
}

}  // namespace kvgate::telemetry::alerts
