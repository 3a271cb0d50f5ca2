#include "gateway/alerting.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace kvgate::gateway {

using nlohmann::json;
namespace alerts = telemetry::alerts;

namespace {
// How soon a monitor changed through one replica's API is evaluated by the others.
constexpr int64_t kSharedMonitorsReloadMs = 5'000;
}  // namespace

Result<std::unique_ptr<Alerting>> Alerting::Start(const json& config,
                                                  const AlertStoreLocation& where,
                                                  const Clock& clock,
                                                  telemetry::GatewayMetrics* metrics) {
  if (!config.is_null() && !config.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "alerts must be a mapping");
  }
  std::vector<alerts::ChannelConfig> channels;
  std::vector<json> monitors;
  if (config.is_object()) {
    for (const auto& [key, _] : config.items()) {
      if (key != "channels" && key != "monitors") {
        return MakeError(ErrorCode::kInvalidArgument, "alerts: unknown key \"" + key + "\"");
      }
    }
    if (auto it = config.find("channels"); it != config.end() && !it->is_null()) {
      if (!it->is_array()) {
        return MakeError(ErrorCode::kInvalidArgument, "alerts.channels must be a list");
      }
      for (size_t i = 0; i < it->size(); ++i) {
        auto channel = alerts::ParseChannel((*it)[i]);
        if (!channel) {
          return MakeError(ErrorCode::kInvalidArgument, "alerts.channels[" + std::to_string(i) +
                                                            "]: " + channel.error().message);
        }
        channels.push_back(std::move(*channel));
      }
    }
    if (auto it = config.find("monitors"); it != config.end() && !it->is_null()) {
      if (!it->is_array()) {
        return MakeError(ErrorCode::kInvalidArgument, "alerts.monitors must be a list");
      }
      for (size_t i = 0; i < it->size(); ++i) {
        json monitor = (*it)[i];
        // Config monitors are identified by name, so a restart replaces rather than duplicates.
        if (monitor.is_object() && !monitor.contains("id") && monitor.contains("name") &&
            monitor["name"].is_string()) {
          monitor["id"] = "cfg_" + monitor["name"].get<std::string>();
        }
        // The YAML reader hands plain decimals over as text (prices must stay exact): a
        // threshold of 0.5 arrives as "0.5".
        if (monitor.is_object() && monitor.contains("threshold") && monitor["threshold"].is_string()) {
          const std::string& text = monitor["threshold"].get_ref<const std::string&>();
          char* end = nullptr;
          errno = 0;
          const double value = std::strtod(text.c_str(), &end);
          if (!text.empty() && errno == 0 && end == text.c_str() + text.size()) {
            monitor["threshold"] = value;
          }
        }
        // Checked here as well as by Upsert below, so that the error names the entry.
        if (auto rule = alerts::ParseRule(monitor); !rule) {
          return MakeError(ErrorCode::kInvalidArgument, "alerts.monitors[" + std::to_string(i) +
                                                            "]: " + rule.error().message);
        }
        monitors.push_back(std::move(monitor));
      }
    }
  }
  if (auto s = alerts::CurlGlobalInit(); !s) return std::unexpected(s.error());
  std::unique_ptr<Alerting> a(new Alerting());
  alerts::AlertEngineOptions options;
  if (!where.postgres.empty()) {
    auto store = alerts::PostgresAlertStore::Open(where.postgres);
    if (!store) return std::unexpected(store.error());
    a->store_ = std::move(*store);
    // Another replica may add, change or delete a monitor through its own admin API.
    options.reload_monitors_ms = kSharedMonitorsReloadMs;
  } else {
    auto store = alerts::SqliteAlertStore::Open(where.sqlite_path);
    if (!store) return std::unexpected(store.error());
    a->store_ = std::move(*store);
  }
  a->http_ = std::make_unique<alerts::CurlHttpSender>();
  a->smtp_ = std::make_unique<alerts::CurlSmtpSender>();
  a->engine_ = std::make_unique<alerts::AlertEngine>(clock, *a->store_, *a->http_, *a->smtp_,
                                                     std::move(channels), options, metrics);
  a->monitors_ = std::make_unique<alerts::MonitorService>(*a->store_, *a->engine_);
  if (auto s = a->engine_->Init(); !s) return std::unexpected(s.error());
  if (auto s = a->monitors_->Init(); !s) return std::unexpected(s.error());
  // A bad stored row (an older kvgate's, or a hand edit) costs that monitor, not the gateway: on
  // PostgreSQL a refusal here would keep every replica down.
  for (const alerts::InvalidMonitor& bad : a->monitors_->Invalid()) {
    std::fprintf(stderr,
                 "kvgate: warning: stored monitor %s is disabled: %s (replace it with PUT "
                 "/api/monitors/%s or remove it with DELETE)\n",
                 bad.id.c_str(), bad.error.c_str(), bad.id.c_str());
  }
  if (auto s = a->monitors_->Upsert(monitors); !s) {
    return MakeError(ErrorCode::kInvalidArgument, "alerts.monitors: " + s.error().message);
  }
  a->engine_->Start();
  return a;
}

Alerting::~Alerting() {
  if (engine_) engine_->Stop();
}

Result<json> Alerting::ListMonitors() const {
  json out = json::array();
  for (const auto& rule : monitors_->List()) out.push_back(alerts::ToJson(rule));
  // (As List read them.)
  json invalid = json::array();
  for (const auto& bad : monitors_->Invalid()) {
    invalid.push_back({{"id", bad.id}, {"enabled", false}, {"error", bad.error}});
  }
  return json{{"monitors", out}, {"invalid", invalid}};
}

Result<json> Alerting::GetMonitor(const std::string& id) const {
  auto rule = monitors_->Get(id);
  if (!rule) return std::unexpected(rule.error());
  return alerts::ToJson(*rule);
}

Result<json> Alerting::CreateMonitor(const json& body) {
  auto rule = monitors_->Create(body);
  if (!rule) return std::unexpected(rule.error());
  return alerts::ToJson(*rule);
}

Result<json> Alerting::UpdateMonitor(const std::string& id, const json& body) {
  auto rule = monitors_->Update(id, body);
  if (!rule) return std::unexpected(rule.error());
  return alerts::ToJson(*rule);
}

Result<json> Alerting::DeleteMonitor(const std::string& id) {
  if (auto s = monitors_->Delete(id); !s) return std::unexpected(s.error());
  return json{{"id", id}, {"deleted", true}};
}

Result<json> Alerting::ListAlerts(int limit) const {
  auto events = monitors_->ListAlerts(limit);
  if (!events) return std::unexpected(events.error());
  json out = json::array();
  for (const auto& event : *events) out.push_back(event.ToJson());
  return json{{"alerts", out}};
}

Result<json> Alerting::ListChannels() const {
  json out = json::array();
  for (const auto& channel : engine_->channels()) out.push_back(alerts::ToJson(channel));
  return json{{"channels", out}};
}

Result<json> Alerting::TestFire(const std::string& channel) {
  auto id = monitors_->TestFire(channel);
  if (!id) return std::unexpected(id.error());
  return json{{"alert_id", *id}, {"channel", channel}, {"queued", true}};
}

}  // namespace kvgate::gateway
