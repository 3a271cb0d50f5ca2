// Monitor CRUD for the admin API (/api/monitors, /api/alerts): validates, persists through the
// AlertStore and pushes the resulting rule set to the AlertEngine. Every call reads the store's
// monitors first, so replicas sharing one database answer alike.
//
// Thread safety: all methods are safe to call from any thread (one mutex around the rule list;
// store and engine calls are themselves thread safe).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "telemetry/alerts/engine.h"
#include "telemetry/alerts/rules.h"
#include "telemetry/alerts/store.h"

namespace kvgate::telemetry::alerts {

class MonitorService {
 public:
  // `store` and `engine` must outlive this object.
  MonitorService(AlertStore& store, AlertEngine& engine) : store_(store), engine_(engine) {}

  // Loads stored monitors and hands them to the engine. Call once at start. A stored row that
  // does not validate is left out (see Invalid()), never an error: errors are the store's.
  Status Init();

  std::vector<AlertRule> List() const;
  // The stored rows left out because they do not validate (InvalidMonitor), as of the last read
  // of the store (Init, List, Get and the changes read it). PUT replaces one with a valid
  // monitor; DELETE removes it.
  std::vector<InvalidMonitor> Invalid() const;
  Result<AlertRule> Get(const std::string& id) const;  // kNotFound
  // Validates (ParseRule, then: every channel exists) and stores. An "id" in the body is kept if
  // unused (kInvalidArgument if taken), else one is minted ("mon_...").
  Result<AlertRule> Create(const nlohmann::json& body);
  // Replaces the monitor `id` with `body` (an "id" in the body must match or be absent).
  Result<AlertRule> Update(const std::string& id, const nlohmann::json& body);
  Status Delete(const std::string& id);  // kNotFound
  // Config-defined monitors: created or replaced by id (each must carry one), others untouched.
  Status Upsert(const std::vector<nlohmann::json>& bodies);

  // A test notification to one configured channel; the alert event id.
  Result<std::string> TestFire(const std::string& channel_name) {
    return engine_.TestFire(channel_name);
  }
  // Newest alert events first (firing, resolved, test), at most `limit` (1..1000).
  Result<std::vector<AlertEvent>> ListAlerts(int limit) const;

 private:
  Result<AlertRule> Validate(const nlohmann::json& body) const;
  Status Store(AlertRule rule) REQUIRES(mu_);
  void RefreshLocked() const REQUIRES(mu_);  // rules_ from the store

  AlertStore& store_;
  AlertEngine& engine_;
  mutable Mutex mu_;
  mutable std::vector<AlertRule> rules_ GUARDED_BY(mu_);         // in creation order; the store's
  mutable std::vector<InvalidMonitor> invalid_ GUARDED_BY(mu_);  // the store's
};

}  // namespace kvgate::telemetry::alerts
