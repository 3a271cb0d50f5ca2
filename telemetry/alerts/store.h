// Persistence of monitors, alert events and their deliveries, so that no alert is lost across a
// restart: a delivery is saved as "pending" together with its event before the first attempt, each
// attempt is recorded, and on start the engine resumes every delivery still pending.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "telemetry/alerts/rules.h"

namespace kvgate::telemetry::alerts {

struct DeliveryRecord {
  std::string id;  // "msg_...": the webhook-id / Message-ID, the same on every retry
  std::string event_id;
  std::string channel;  // channel name
  std::string status;   // "pending" | "delivered" | "failed"
  int attempts = 0;
  int64_t next_attempt_us = 0;  // wall clock; meaningful while pending
  std::string last_error;
  int64_t updated_us = 0;
};

struct DeliveryAttempt {
  std::string delivery_id;
  int attempt = 0;  // 1-based
  int64_t at_us = 0;
  std::string outcome;  // "delivered" | "retry" | "failed"
  int http_status = 0;  // 0 for SMTP or transport errors
  std::string error;
};

// One claim on the incident of (rule, scope key): see AlertStore::HoldIncident.
struct IncidentClaim {
  std::string rule_id;
  std::string scope_key;
  std::string incident_id;  // the caller's: a new one to open an incident, its own to keep it
  int64_t now_us = 0;
  int64_t cooldown_us = 0;  // a released incident may be opened again this long after it fired
  int64_t stale_us = 0;     // an open incident whose holder was silent this long may be taken
};

// A stored monitor that today's ParseRule refuses (written by an older kvgate, or by hand). It is
// left in the table, out of the rule set, so that one bad row never stops kvgate from starting.
struct InvalidMonitor {
  std::string id;
  std::string error;  // names the field: "monitor.window: ..."
};

// The monitors table as read: the rules, in insertion order, and the rows that are not rules.
struct StoredMonitors {
  std::vector<AlertRule> rules;
  std::vector<InvalidMonitor> invalid;
};

// Who may attempt a delivery now: AlertStore::LeaseDelivery.
enum class DeliveryLease {
  kLeased,   // the caller holds it until the lease's end, or until it records an attempt
  kBusy,     // another engine holds an unexpired lease: try again after it
  kSettled,  // delivered or failed (by another engine): drop it
  kUnknown,  // no such row (its save failed): the caller's own, to be tried
};

// Thread safety: implementations must be safe to call from any thread.
class AlertStore {
 public:
  virtual ~AlertStore() = default;
  // Saves the event and its (pending) deliveries atomically.
  virtual Status SaveEvent(const AlertEvent& event,
                           const std::vector<DeliveryRecord>& deliveries) = 0;
  // Appends the attempt and replaces the delivery's state, atomically; ends its lease.
  virtual Status RecordAttempt(const DeliveryAttempt& attempt, const DeliveryRecord& delivery) = 0;
  virtual Result<std::vector<DeliveryRecord>> LoadPendingDeliveries() = 0;
  virtual Result<std::optional<AlertEvent>> LoadEvent(const std::string& id) = 0;
  // Newest first; at most `limit`.
  virtual Result<std::vector<AlertEvent>> ListEvents(int limit) = 0;
  virtual Result<std::vector<DeliveryRecord>> ListDeliveries(const std::string& event_id) = 0;
  virtual Result<std::vector<DeliveryAttempt>> ListAttempts(const std::string& delivery_id) = 0;

  // Errors are the database's only: a row that does not parse is reported in `invalid`.
  virtual Result<StoredMonitors> LoadMonitors() = 0;
  virtual Status SaveMonitor(const AlertRule& rule) = 0;          // insert or replace by id
  virtual Result<bool> DeleteMonitor(const std::string& id) = 0;  // false when absent

  // The arbitration that sends an alert once when several engines (replicas on one database,
  // or one engine and its own past before a restart) watch the same traffic. True when the
  // caller holds the incident of (rule, scope key) after the call: nobody held one; or the
  // caller's incident_id is the one held (a heartbeat, which refreshes it); or the last one was
  // released and fired at least `cooldown_us` ago; or its holder has been silent `stale_us`
  // (a replica that died with its incident open).
  virtual Result<bool> HoldIncident(const IncidentClaim& claim) = 0;
  // Ends the caller's incident (the resolve notice is its holder's to send). No-op when another
  // incident is held.
  virtual Status ReleaseIncident(const std::string& rule_id, const std::string& scope_key,
                                 const std::string& incident_id) = 0;
  // Takes a pending delivery for one attempt until `until_us`, so that two engines which both
  // loaded it (both restarted) do not both send it.
  virtual Result<DeliveryLease> LeaseDelivery(const std::string& delivery_id, int64_t now_us,
                                              int64_t until_us) = 0;
};

}  // namespace kvgate::telemetry::alerts

namespace kvgate::telemetry::internal {
class SqlConnection;
}

namespace kvgate::telemetry::alerts {

// Both implementations: the same tables (alert_events, alert_deliveries, alert_attempts,
// alert_incidents, monitors) and the same statements, on a SQLite file or a PostgreSQL
// database (telemetry/sql_connection.h); only the migrations differ (store_open.cc).
// Thread safety: one connection guarded by a mutex.
class SqlAlertStore : public AlertStore {
 public:
  ~SqlAlertStore() override;

  Status SaveEvent(const AlertEvent& event, const std::vector<DeliveryRecord>& deliveries) override;
  Status RecordAttempt(const DeliveryAttempt& attempt, const DeliveryRecord& delivery) override;
  Result<std::vector<DeliveryRecord>> LoadPendingDeliveries() override;
  Result<std::optional<AlertEvent>> LoadEvent(const std::string& id) override;
  Result<std::vector<AlertEvent>> ListEvents(int limit) override;
  Result<std::vector<DeliveryRecord>> ListDeliveries(const std::string& event_id) override;
  Result<std::vector<DeliveryAttempt>> ListAttempts(const std::string& delivery_id) override;
  Result<StoredMonitors> LoadMonitors() override;
  Status SaveMonitor(const AlertRule& rule) override;
  Result<bool> DeleteMonitor(const std::string& id) override;
  Result<bool> HoldIncident(const IncidentClaim& claim) override;
  Status ReleaseIncident(const std::string& rule_id, const std::string& scope_key,
                         const std::string& incident_id) override;
  Result<DeliveryLease> LeaseDelivery(const std::string& delivery_id, int64_t now_us,
                                      int64_t until_us) override;

  // The alert tables' schema version (alerts_schema_version), the same in both databases.
  static constexpr int kSchemaVersion = 2;

 protected:
  explicit SqlAlertStore(std::unique_ptr<telemetry::internal::SqlConnection> sql);

 private:
  Status UpsertDelivery(const DeliveryRecord& d) REQUIRES(mu_);
  Result<std::vector<DeliveryRecord>> QueryDeliveries(const std::string& sql,
                                                      const std::string& arg);

  Mutex mu_;
  std::unique_ptr<telemetry::internal::SqlConnection> sql_ GUARDED_BY(mu_);
};

// A SQLite file; it may be the telemetry store's own database, through a separate connection
// (WAL mode, busy_timeout 5 s).
class SqliteAlertStore final : public SqlAlertStore {
 public:
  // Opens (creating if needed) `path` and migrates the alert tables to the current version.
  static Result<std::unique_ptr<SqliteAlertStore>> Open(const std::string& path);

 private:
  explicit SqliteAlertStore(std::unique_ptr<telemetry::internal::SqlConnection> sql);
};

// A PostgreSQL database shared by every replica: monitors, events, deliveries and incidents are
// the same for all of them. A lost connection is replaced at the next call.
class PostgresAlertStore final : public SqlAlertStore {
 public:
  // Connects and migrates; kUnavailable when the server cannot be reached.
  static Result<std::unique_ptr<PostgresAlertStore>> Open(const std::string& conninfo);

 private:
  explicit PostgresAlertStore(std::unique_ptr<telemetry::internal::SqlConnection> sql);
};

}  // namespace kvgate::telemetry::alerts
