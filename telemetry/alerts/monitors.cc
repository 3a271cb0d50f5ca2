#include "telemetry/alerts/monitors.h"

#include <algorithm>

#include "common/ids.h"

namespace kvgate::telemetry::alerts {

Status MonitorService::Init() {
  auto stored = store_.LoadMonitors();
  if (!stored) return std::unexpected(stored.error());
  MutexLock lock(&mu_);
  rules_ = std::move(stored->rules);
  invalid_ = std::move(stored->invalid);
  engine_.SetRules(rules_);
  return {};
}

void MonitorService::RefreshLocked() const {
  // Another replica on the same database may have changed them; a store that cannot answer
  // leaves the last known set.
  if (auto stored = store_.LoadMonitors()) {
    rules_ = std::move(stored->rules);
    invalid_ = std::move(stored->invalid);
  }
}

std::vector<AlertRule> MonitorService::List() const {
  MutexLock lock(&mu_);
  RefreshLocked();
  return rules_;
}

std::vector<InvalidMonitor> MonitorService::Invalid() const {
  MutexLock lock(&mu_);
  return invalid_;
}

Result<AlertRule> MonitorService::Get(const std::string& id) const {
  MutexLock lock(&mu_);
  RefreshLocked();
  for (const AlertRule& r : rules_) {
    if (r.id == id) return r;
  }
  for (const InvalidMonitor& m : invalid_) {
    if (m.id == id) {
      return MakeError(ErrorCode::kNotFound,
                       "monitor '" + id + "' is stored but disabled, invalid: " + m.error);
    }
  }
  return MakeError(ErrorCode::kNotFound, "no monitor with id '" + id + "'");
}

Result<AlertRule> MonitorService::Validate(const nlohmann::json& body) const {
  auto rule = ParseRule(body);
  if (!rule) return rule;
  for (const std::string& channel : rule->channels) {
    if (!engine_.FindChannel(channel)) {
      std::string known;
      for (const ChannelConfig& c : engine_.channels())
        known += (known.empty() ? "" : ", ") + c.name;
      return MakeError(ErrorCode::kInvalidArgument,
                       "monitor.channels: no alert channel named '" + channel +
                           "' (configured: " + (known.empty() ? "none" : known) + ")");
    }
  }
  return rule;
}

Status MonitorService::Store(AlertRule rule) {
  if (Status s = store_.SaveMonitor(rule); !s) return s;
  std::erase_if(invalid_, [&](const InvalidMonitor& m) { return m.id == rule.id; });
  auto it = std::find_if(rules_.begin(), rules_.end(),
                         [&](const AlertRule& r) { return r.id == rule.id; });
  if (it != rules_.end()) {
    *it = std::move(rule);
  } else {
    rules_.push_back(std::move(rule));
  }
  engine_.SetRules(rules_);
  return {};
}

Result<AlertRule> MonitorService::Create(const nlohmann::json& body) {
  auto rule = Validate(body);
  if (!rule) return rule;
  MutexLock lock(&mu_);
  RefreshLocked();
  if (rule->id.empty()) {
    rule->id = NewId("mon");
  } else if (std::any_of(rules_.begin(), rules_.end(),
                         [&](const AlertRule& r) { return r.id == rule->id; }) ||
             std::any_of(invalid_.begin(), invalid_.end(),
                         [&](const InvalidMonitor& m) { return m.id == rule->id; })) {
    return MakeError(ErrorCode::kInvalidArgument, "monitor.id: '" + rule->id + "' already exists");
  }
  if (Status s = Store(*rule); !s) return std::unexpected(s.error());
  return rule;
}

Result<AlertRule> MonitorService::Update(const std::string& id, const nlohmann::json& body) {
  auto rule = Validate(body);
  if (!rule) return rule;
  if (!rule->id.empty() && rule->id != id) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "monitor.id: '" + rule->id + "' does not match the monitor being updated");
  }
  rule->id = id;
  MutexLock lock(&mu_);
  RefreshLocked();
  // A stored row that does not validate may be replaced too: that is how it is repaired.
  if (std::none_of(rules_.begin(), rules_.end(), [&](const AlertRule& r) { return r.id == id; }) &&
      std::none_of(invalid_.begin(), invalid_.end(),
                   [&](const InvalidMonitor& m) { return m.id == id; })) {
    return MakeError(ErrorCode::kNotFound, "no monitor with id '" + id + "'");
  }
  if (Status s = Store(*rule); !s) return std::unexpected(s.error());
  return rule;
}

Status MonitorService::Delete(const std::string& id) {
  MutexLock lock(&mu_);
  RefreshLocked();
  auto deleted = store_.DeleteMonitor(id);
  if (!deleted) return std::unexpected(deleted.error());
  const size_t before = rules_.size();
  std::erase_if(rules_, [&](const AlertRule& r) { return r.id == id; });
  std::erase_if(invalid_, [&](const InvalidMonitor& m) { return m.id == id; });
  if (!*deleted && before == rules_.size()) {
    return MakeError(ErrorCode::kNotFound, "no monitor with id '" + id + "'");
  }
  engine_.SetRules(rules_);
  return {};
}

Status MonitorService::Upsert(const std::vector<nlohmann::json>& bodies) {
  std::vector<AlertRule> parsed;
  for (const nlohmann::json& body : bodies) {
    auto rule = Validate(body);
    if (!rule) return std::unexpected(rule.error());
    if (rule->id.empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "monitor '" + rule->name + "': monitors from the config need an id");
    }
    parsed.push_back(std::move(*rule));
  }
  MutexLock lock(&mu_);
  for (AlertRule& rule : parsed) {
    if (Status s = Store(std::move(rule)); !s) return s;
  }
  return {};
}

Result<std::vector<AlertEvent>> MonitorService::ListAlerts(int limit) const {
  if (limit < 1 || limit > 1000) {
    return MakeError(ErrorCode::kInvalidArgument, "limit: must be between 1 and 1000");
  }
  return store_.ListEvents(limit);
}

}  // namespace kvgate::telemetry::alerts
