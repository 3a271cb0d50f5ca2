// Monitor rules, alert events and notification channels: the vocabulary of telemetry/alerts/.
// Everything here is plain data plus JSON parsing with validation (the config loader turns YAML
// into JSON first). Parsing never throws; errors are kInvalidArgument with a message naming the
// offending field, e.g. "monitor.window: expected a duration like \"30s\", \"5m\", \"1h\"".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kvgate::telemetry::alerts {

// What a monitor measures over its window, per scope key:
//   cost            USD spent (sum of priced requests' cost)
//   latency_p95     95th percentile of request duration, seconds
//   ttft_p95        95th percentile of time to first token, seconds (requests that have one)
//   error_rate      fraction of requests whose status is not "ok"/"client_disconnected"
//   cache_hit_rate  cache-read tokens / input tokens, over requests whose input is fully known
//   cache_drop      number of turns the thread tracker diagnosed a cache drop for
//   budget          (scope api_key only) the fraction of the key's budget spent in its current
//                   budget period, 0.8 = 80 %, read from the gateway's key limits when evaluated
//                   (keys without a budget give no value); the window only says which keys were
//                   active
enum class Metric { kCost, kLatencyP95, kTtftP95, kErrorRate, kCacheHitRate, kCacheDrop, kBudget };
enum class Scope { kGlobal, kModel, kProvider, kThread, kApiKey };
enum class Condition { kAbove, kBelow };

std::string_view MetricName(Metric m);
std::string_view ScopeName(Scope s);
std::string_view ConditionName(Condition c);

struct AlertRule {
  std::string id;    // assigned by MonitorService on create ("mon_..."); may be set in config
  std::string name;  // required, human
  Metric metric = Metric::kCost;
  Scope scope = Scope::kGlobal;
  Condition condition = Condition::kAbove;
  double threshold = 0;
  int64_t window_seconds = 300;    // "window": "5m"
  // Fewer requests in the window: no judgement. Defaults to DefaultMinRequests(metric).
  int64_t min_requests = 1;
  int64_t cooldown_seconds = 900;  // "cooldown": at most one alert per scope key per cooldown
  // "for": how long the condition must hold, judged on every evaluation, before the monitor
  // fires (0: at once). A value that wobbles around the threshold never holds that long.
  int64_t pending_seconds = 0;
  // "resolve_threshold": a firing incident resolves only once the value is back past this (at or
  // below it for `above`, at or above it for `below`), so a value hovering at the threshold does
  // not fire and resolve over and over. nullopt: the threshold itself.
  std::optional<double> resolve_threshold;
  std::vector<std::string> channels;
  bool enabled = true;
};

// Bounds on what a monitor may say, the same for the config file, the admin API and the rows
// read back from the database (one parser for all three). A window or cooldown of more than a
// year has no use, and the bound keeps every duration far from overflowing once in microseconds.
inline constexpr int64_t kMaxMonitorDurationSeconds = 366 * 86400;
inline constexpr int64_t kMaxMinRequests = 1'000'000'000;

// The min_requests a monitor gets when it names none: 20 for a rate or a percentile
// (error_rate, cache_hit_rate, latency_p95, ttft_p95), which two requests cannot judge (a
// hit-rate monitor would fire on the second request ever); 1 for sums and counts (cost,
// cache_drop) and for budget, where one request is already an answer.
inline constexpr int64_t kRateMinRequests = 20;
int64_t DefaultMinRequests(Metric metric);

// Parses "45s", "5m", "2h", "1d" or a bare number of seconds (string or JSON integer), between 1 s
// and kMaxMonitorDurationSeconds.
Result<int64_t> ParseDurationSeconds(const nlohmann::json& value);

// {"id"?, "name", "metric", "scope"?, "condition", "threshold", "window"?, "min_requests"?,
//  "cooldown"?, "for"?, "resolve_threshold"?, "channels"?, "enabled"?}. A resolve_threshold lies
// on the resolved side of the threshold (at or below it for `above`, at or above for `below`). Unknown keys are rejected (typos should not pass
// silently). Channel names are not checked here (MonitorService checks them against the config).
Result<AlertRule> ParseRule(const nlohmann::json& json);
nlohmann::json ToJson(const AlertRule& rule);

// One notification: a monitor firing or resolving, or a test fire.
struct AlertEvent {
  std::string id;           // "alrt_..."
  std::string incident_id;  // the firing event's id; equal to id for firing and test events
  std::string kind;         // "firing" | "resolved" | "test"
  std::string rule_id, rule_name;
  std::string metric, scope, scope_key, condition;
  double value = 0;
  double threshold = 0;
  int64_t requests = 0;  // requests in the window when evaluated
  int64_t window_seconds = 0;
  int64_t at_us = 0;  // wall clock when raised
  std::vector<std::string> channels;
  std::string summary;  // one line for humans

  nlohmann::json ToJson() const;
  static Result<AlertEvent> FromJson(const nlohmann::json& json);
};

// Where alerts go. Secrets are kept here in memory only; ToJson redacts them.
struct ChannelConfig {
  enum class Type { kSlack, kWebhook, kEmail };
  std::string name;
  Type type = Type::kWebhook;
  std::string url;     // Slack/webhook URL, or smtp://host:port / smtps://host:port for email
  std::string secret;  // webhook signing secret "whsec_<base64>"
  // Email only.
  std::string username, password;  // AUTH after TLS; empty username: no AUTH
  std::string from;
  std::vector<std::string> to;
  std::string ca_file;  // extra CA bundle for the SMTP server's certificate (self-hosted relays)
  // smtp:// always upgrades with STARTTLS and fails if the server cannot (CURLUSESSL_ALL);
  // smtps:// is implicit TLS. There is no plaintext mode.
};

// {"name","type":"slack"|"webhook"|"email","url", "secret" (webhook, required, "whsec_..."),
//  "username","password","from","to":[...] (email), "ca_file"}.
Result<ChannelConfig> ParseChannel(const nlohmann::json& json);
nlohmann::json ToJson(const ChannelConfig& channel);  // secrets shown as "***"
std::string_view ChannelTypeName(ChannelConfig::Type type);

}  // namespace kvgate::telemetry::alerts
