// Monitors and alerts as the gateway runs them: built from the config's `alerts:` section, fed
// every finished request (off the request path: AlertEngine::Submit only queues), and managed
// through /api/monitors, /api/alerts and /api/channels/{name}/test.
// Thread safety: every method may be called from any thread (the services below lock inside).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/error.h"
#include "telemetry/alerts/channels.h"
#include "telemetry/alerts/engine.h"
#include "telemetry/alerts/monitors.h"
#include "telemetry/alerts/store.h"
#include "telemetry/metrics.h"

namespace kvgate::gateway {

// Where monitors, incidents and deliveries are kept: exactly one of the two is set.
struct AlertStoreLocation {
  std::string sqlite_path;
  std::string postgres;  // a libpq connection string: shared by every replica on it
};

class Alerting {
 public:
  // `alerts` is {"channels": [...], "monitors": [...]} (either may be absent). Config monitors
  // are keyed by their name. Errors name the bad channel or monitor.
  static Result<std::unique_ptr<Alerting>> Start(const nlohmann::json& alerts,
                                                 const AlertStoreLocation& where,
                                                 const Clock& clock,
                                                 telemetry::GatewayMetrics* metrics);
  ~Alerting();

  void Submit(const telemetry::RequestRecord& record) { engine_->Submit(record); }
  // Where monitors of metric `budget` read a key's spent fraction (AlertEngine::SetBudgetSource).
  void SetBudgetSource(telemetry::alerts::AlertEngine::BudgetSource source) {
    engine_->SetBudgetSource(std::move(source));
  }
  void Stop() { engine_->Stop(); }

  // The admin API. Each returns the JSON body of a 2xx answer, or an error whose code maps to
  // the HTTP status (kInvalidArgument 400, kNotFound 404).
  Result<nlohmann::json> ListMonitors() const;
  Result<nlohmann::json> GetMonitor(const std::string& id) const;
  Result<nlohmann::json> CreateMonitor(const nlohmann::json& body);
  Result<nlohmann::json> UpdateMonitor(const std::string& id, const nlohmann::json& body);
  Result<nlohmann::json> DeleteMonitor(const std::string& id);
  Result<nlohmann::json> ListAlerts(int limit) const;
  Result<nlohmann::json> ListChannels() const;
  Result<nlohmann::json> TestFire(const std::string& channel);

 private:
  Alerting() = default;
  std::unique_ptr<telemetry::alerts::AlertStore> store_;
  std::unique_ptr<telemetry::alerts::CurlHttpSender> http_;
  std::unique_ptr<telemetry::alerts::CurlSmtpSender> smtp_;
  std::unique_ptr<telemetry::alerts::AlertEngine> engine_;
  std::unique_ptr<telemetry::alerts::MonitorService> monitors_;
};

}  // namespace kvgate::gateway
