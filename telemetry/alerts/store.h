// Persistence of monitors, alert events and their deliveries, so that no alert is lost across a
// restart: a delivery is saved as "pending" together with its event before the first attempt, each
// attempt is recorded, and on start the engine resumes every delivery still pending.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "telemetry/alerts/rules.h"

struct sqlite3;

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

// Thread safety: implementations must be safe to call from any thread.
class AlertStore {
 public:
  virtual ~AlertStore() = default;
  // Saves the event and its (pending) deliveries atomically.
  virtual Status SaveEvent(const AlertEvent& event,
                           const std::vector<DeliveryRecord>& deliveries) = 0;
  // Appends the attempt and replaces the delivery's state, atomically.
  virtual Status RecordAttempt(const DeliveryAttempt& attempt, const DeliveryRecord& delivery) = 0;
  virtual Result<std::vector<DeliveryRecord>> LoadPendingDeliveries() = 0;
  virtual Result<std::optional<AlertEvent>> LoadEvent(const std::string& id) = 0;
  // Newest first; at most `limit`.
  virtual Result<std::vector<AlertEvent>> ListEvents(int limit) = 0;
  virtual Result<std::vector<DeliveryRecord>> ListDeliveries(const std::string& event_id) = 0;
  virtual Result<std::vector<DeliveryAttempt>> ListAttempts(const std::string& delivery_id) = 0;

  virtual Result<std::vector<AlertRule>> LoadMonitors() = 0;
  virtual Status SaveMonitor(const AlertRule& rule) = 0;          // insert or replace by id
  virtual Result<bool> DeleteMonitor(const std::string& id) = 0;  // false when absent
};

// SQLite implementation in its own tables (alert_events, alert_deliveries, alert_attempts,
// monitors) with its own schema version table (alerts_schema_version), so it can share the
// telemetry store's database file through a separate connection: WAL mode, busy_timeout 5 s.
// Thread safety: one connection guarded by a mutex.
class SqliteAlertStore final : public AlertStore {
 public:
  // Opens (creating if needed) `path` and migrates the alert tables to the current version.
  static Result<std::unique_ptr<SqliteAlertStore>> Open(const std::string& path);
  ~SqliteAlertStore() override;

  Status SaveEvent(const AlertEvent& event, const std::vector<DeliveryRecord>& deliveries) override;
  Status RecordAttempt(const DeliveryAttempt& attempt, const DeliveryRecord& delivery) override;
  Result<std::vector<DeliveryRecord>> LoadPendingDeliveries() override;
  Result<std::optional<AlertEvent>> LoadEvent(const std::string& id) override;
  Result<std::vector<AlertEvent>> ListEvents(int limit) override;
  Result<std::vector<DeliveryRecord>> ListDeliveries(const std::string& event_id) override;
  Result<std::vector<DeliveryAttempt>> ListAttempts(const std::string& delivery_id) override;
  Result<std::vector<AlertRule>> LoadMonitors() override;
  Status SaveMonitor(const AlertRule& rule) override;
  Result<bool> DeleteMonitor(const std::string& id) override;

  static constexpr int kSchemaVersion = 1;

 private:
  explicit SqliteAlertStore(sqlite3* db) : db_(db) {}
  Status Migrate();
  Status UpsertDelivery(const DeliveryRecord& d);  // REQUIRES: mu_ held
  Result<std::vector<DeliveryRecord>> QueryDeliveries(const char* sql, const std::string& arg);

  std::mutex mu_;
  sqlite3* db_;  // GUARDED_BY(mu_)
};

}  // namespace kvgate::telemetry::alerts
