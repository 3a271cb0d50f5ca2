#include "telemetry/alerts/rules.h"

#include <array>
#include <cmath>
#include <set>
#include <utility>

#include "common/redact.h"
#include "telemetry/alerts/channels.h"

namespace kvgate::telemetry::alerts {
namespace {

constexpr std::array<std::pair<Metric, std::string_view>, 7> kMetrics = {{
    {Metric::kCost, "cost"},
    {Metric::kLatencyP95, "latency_p95"},
    {Metric::kTtftP95, "ttft_p95"},
    {Metric::kErrorRate, "error_rate"},
    {Metric::kCacheHitRate, "cache_hit_rate"},
    {Metric::kCacheDrop, "cache_drop"},
    {Metric::kBudget, "budget"},
}};
constexpr std::array<std::pair<Scope, std::string_view>, 5> kScopes = {{
    {Scope::kGlobal, "global"},
    {Scope::kModel, "model"},
    {Scope::kProvider, "provider"},
    {Scope::kThread, "thread"},
    {Scope::kApiKey, "api_key"},
}};
constexpr std::array<std::pair<Condition, std::string_view>, 2> kConditions = {{
    {Condition::kAbove, "above"},
    {Condition::kBelow, "below"},
}};
constexpr std::array<std::pair<ChannelConfig::Type, std::string_view>, 3> kChannelTypes = {{
    {ChannelConfig::Type::kSlack, "slack"},
    {ChannelConfig::Type::kWebhook, "webhook"},
    {ChannelConfig::Type::kEmail, "email"},
}};

template <class E, size_t N>
std::string_view NameOf(const std::array<std::pair<E, std::string_view>, N>& table, E e) {
  for (const auto& [value, name] : table) {
    if (value == e) return name;
  }
  return "?";
}

template <class E, size_t N>
Result<E> Lookup(const std::array<std::pair<E, std::string_view>, N>& table,
                 const nlohmann::json& value, std::string_view field) {
  std::string choices;
  for (const auto& [e, name] : table) {
    if (value.is_string() && value.get<std::string>() == name) return e;
    choices += choices.empty() ? "" : ", ";
    choices += name;
  }
  return MakeError(ErrorCode::kInvalidArgument, std::string(field) + ": must be one of " + choices);
}

Error Invalid(std::string message) {
  return Error{ErrorCode::kInvalidArgument, std::move(message)};
}

Result<std::string> RequireString(const nlohmann::json& j, const char* key,
                                  std::string_view where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string() || it->get<std::string>().empty()) {
    return std::unexpected(Invalid(std::string(where) + "." + key + ": required, a string"));
  }
  return it->get<std::string>();
}

Result<std::string> OptionalString(const nlohmann::json& j, const char* key,
                                   std::string_view where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::string();
  if (!it->is_string()) {
    return std::unexpected(Invalid(std::string(where) + "." + key + ": must be a string"));
  }
  return it->get<std::string>();
}

Result<std::vector<std::string>> StringList(const nlohmann::json& j, const char* key,
                                            std::string_view where) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) {
    return std::unexpected(Invalid(std::string(where) + "." + key + ": must be a list of strings"));
  }
  for (const auto& v : *it) {
    if (!v.is_string() || v.get<std::string>().empty()) {
      return std::unexpected(
          Invalid(std::string(where) + "." + key + ": must be a list of non-empty strings"));
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

std::string_view MetricName(Metric m) { return NameOf(kMetrics, m); }
std::string_view ScopeName(Scope s) { return NameOf(kScopes, s); }
std::string_view ConditionName(Condition c) { return NameOf(kConditions, c); }
std::string_view ChannelTypeName(ChannelConfig::Type t) { return NameOf(kChannelTypes, t); }

int64_t DefaultMinRequests(Metric metric) {
  switch (metric) {
    case Metric::kErrorRate:
    case Metric::kCacheHitRate:
    case Metric::kLatencyP95:
    case Metric::kTtftP95:
      return kRateMinRequests;
    case Metric::kCost:
    case Metric::kCacheDrop:
    case Metric::kBudget:
      return 1;
  }
  return 1;
}

Result<int64_t> ParseDurationSeconds(const nlohmann::json& value) {
  auto bad = [] {
    return MakeError(ErrorCode::kInvalidArgument,
                     "expected a duration like \"30s\", \"5m\", \"1h\", \"1d\" or seconds, "
                     "from 1s to 366d");
  };
  if (value.is_number_integer()) {
    // (A JSON integer above INT64_MAX reads as negative here.)
    const int64_t v = value.get<int64_t>();
    if (v <= 0 || v > kMaxMonitorDurationSeconds) return bad();
    return v;
  }
  if (!value.is_string()) return bad();
  const std::string s = value.get<std::string>();
  if (s.empty() || s.size() > 12) return bad();
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0) return bad();
  const int64_t n = std::stoll(s.substr(0, digits));  // at most 12 digits: no overflow
  const std::string unit = s.substr(digits);
  int64_t scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "m") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  } else if (unit == "d") {
    scale = 86400;
  } else {
    return bad();
  }
  // Compared before multiplying, so that no product can overflow.
  if (n <= 0 || n > kMaxMonitorDurationSeconds / scale) return bad();
  return n * scale;
}

Result<AlertRule> ParseRule(const nlohmann::json& j) {
  if (!j.is_object()) return std::unexpected(Invalid("monitor: must be an object"));
  static const std::set<std::string> kKeys = {"id",        "name",      "metric", "scope",
                                              "condition", "threshold", "window", "min_requests",
                                              "cooldown",  "channels",  "enabled",
                                              "for",       "resolve_threshold"};
  for (const auto& [key, _] : j.items()) {
    if (!kKeys.contains(key)) return std::unexpected(Invalid("monitor." + key + ": unknown field"));
  }
  AlertRule rule;
  auto id = OptionalString(j, "id", "monitor");
  if (!id) return std::unexpected(id.error());
  rule.id = *id;
  auto name = RequireString(j, "name", "monitor");
  if (!name) return std::unexpected(name.error());
  rule.name = *name;
  if (!j.contains("metric")) return std::unexpected(Invalid("monitor.metric: required"));
  auto metric = Lookup(kMetrics, j["metric"], "monitor.metric");
  if (!metric) return std::unexpected(metric.error());
  rule.metric = *metric;
  rule.min_requests = DefaultMinRequests(rule.metric);
  if (j.contains("scope")) {
    auto scope = Lookup(kScopes, j["scope"], "monitor.scope");
    if (!scope) return std::unexpected(scope.error());
    rule.scope = *scope;
  }
  if (!j.contains("condition")) return std::unexpected(Invalid("monitor.condition: required"));
  auto condition = Lookup(kConditions, j["condition"], "monitor.condition");
  if (!condition) return std::unexpected(condition.error());
  rule.condition = *condition;
  if (rule.metric == Metric::kBudget && rule.scope != Scope::kApiKey) {
    return std::unexpected(Invalid("monitor.scope: metric budget is per gateway key, so its "
                                   "scope must be api_key"));
  }
  auto t = j.find("threshold");
  if (t == j.end() || !t->is_number() || !std::isfinite(t->get<double>())) {
    return std::unexpected(Invalid("monitor.threshold: required, a finite number"));
  }
  rule.threshold = t->get<double>();
  if (rule.threshold < 0) return std::unexpected(Invalid("monitor.threshold: must be >= 0"));
  if ((rule.metric == Metric::kErrorRate || rule.metric == Metric::kCacheHitRate) &&
      rule.threshold > 1) {
    return std::unexpected(Invalid("monitor.threshold: a rate is between 0 and 1"));
  }
  if (j.contains("window")) {
    auto w = ParseDurationSeconds(j["window"]);
    if (!w) return std::unexpected(Invalid("monitor.window: " + w.error().message));
    rule.window_seconds = *w;
  }
  if (j.contains("cooldown")) {
    auto c = ParseDurationSeconds(j["cooldown"]);
    if (!c) return std::unexpected(Invalid("monitor.cooldown: " + c.error().message));
    rule.cooldown_seconds = *c;
  }
  if (auto f = j.find("for"); f != j.end()) {
    // 0 is allowed here (fire at once), unlike a window or a cooldown.
    if (!(f->is_number_integer() && f->get<int64_t>() == 0) &&
        !(f->is_string() && (f->get<std::string>() == "0" || f->get<std::string>() == "0s"))) {
      auto pending = ParseDurationSeconds(*f);
      if (!pending) return std::unexpected(Invalid("monitor.for: " + pending.error().message));
      rule.pending_seconds = *pending;
    }
  }
  if (auto r = j.find("resolve_threshold"); r != j.end() && !r->is_null()) {
    if (!r->is_number() || !std::isfinite(r->get<double>()) || r->get<double>() < 0) {
      return std::unexpected(Invalid("monitor.resolve_threshold: a finite number, 0 or more"));
    }
    const double resolve = r->get<double>();
    const bool resolved_side = rule.condition == Condition::kAbove ? resolve <= rule.threshold
                                                                  : resolve >= rule.threshold;
    if (!resolved_side) {
      return std::unexpected(Invalid(std::string("monitor.resolve_threshold: must be ") +
                                     (rule.condition == Condition::kAbove ? "at or below" : "at or above") +
                                     " the threshold, or the incident would resolve while the "
                                     "condition still holds"));
    }
    rule.resolve_threshold = resolve;
  }
  if (auto m = j.find("min_requests"); m != j.end()) {
    if (!m->is_number_integer() || m->get<int64_t>() < 1 || m->get<int64_t>() > kMaxMinRequests) {
      return std::unexpected(Invalid("monitor.min_requests: must be an integer from 1 to " +
                                     std::to_string(kMaxMinRequests)));
    }
    rule.min_requests = m->get<int64_t>();
  }
  auto channels = StringList(j, "channels", "monitor");
  if (!channels) return std::unexpected(channels.error());
  rule.channels = *channels;
  if (auto e = j.find("enabled"); e != j.end()) {
    if (!e->is_boolean()) return std::unexpected(Invalid("monitor.enabled: must be true or false"));
    rule.enabled = e->get<bool>();
  }
  return rule;
}

nlohmann::json ToJson(const AlertRule& r) {
  return {{"id", r.id},
          {"name", r.name},
          {"metric", MetricName(r.metric)},
          {"scope", ScopeName(r.scope)},
          {"condition", ConditionName(r.condition)},
          {"threshold", r.threshold},
          {"window", std::to_string(r.window_seconds) + "s"},
          {"min_requests", r.min_requests},
          {"cooldown", std::to_string(r.cooldown_seconds) + "s"},
          {"for", std::to_string(r.pending_seconds) + "s"},
          {"resolve_threshold",
           r.resolve_threshold ? nlohmann::json(*r.resolve_threshold) : nlohmann::json()},
          {"channels", r.channels},
          {"enabled", r.enabled}};
}

nlohmann::json AlertEvent::ToJson() const {
  return {{"id", id},
          {"incident_id", incident_id},
          {"kind", kind},
          {"rule_id", rule_id},
          {"rule_name", rule_name},
          {"metric", metric},
          {"scope", scope},
          {"scope_key", scope_key},
          {"condition", condition},
          {"value", value},
          {"threshold", threshold},
          {"requests", requests},
          {"window_seconds", window_seconds},
          {"at_us", at_us},
          {"channels", channels},
          {"summary", summary}};
}

Result<AlertEvent> AlertEvent::FromJson(const nlohmann::json& j) {
  try {
    AlertEvent e;
    e.id = j.at("id").get<std::string>();
    e.incident_id = j.at("incident_id").get<std::string>();
    e.kind = j.at("kind").get<std::string>();
    e.rule_id = j.at("rule_id").get<std::string>();
    e.rule_name = j.at("rule_name").get<std::string>();
    e.metric = j.at("metric").get<std::string>();
    e.scope = j.at("scope").get<std::string>();
    e.scope_key = j.at("scope_key").get<std::string>();
    e.condition = j.at("condition").get<std::string>();
    e.value = j.at("value").get<double>();
    e.threshold = j.at("threshold").get<double>();
    e.requests = j.at("requests").get<int64_t>();
    e.window_seconds = j.at("window_seconds").get<int64_t>();
    e.at_us = j.at("at_us").get<int64_t>();
    e.channels = j.at("channels").get<std::vector<std::string>>();
    e.summary = j.at("summary").get<std::string>();
    return e;
  } catch (const std::exception& ex) {
    return MakeError(ErrorCode::kCorruptData, std::string("alert event: ") + ex.what());
  }
}

Result<ChannelConfig> ParseChannel(const nlohmann::json& j) {
  if (!j.is_object()) return std::unexpected(Invalid("channel: must be an object"));
  ChannelConfig c;
  auto name = RequireString(j, "name", "channel");
  if (!name) return std::unexpected(name.error());
  c.name = *name;
  const std::string where = "channel " + c.name;
  if (!j.contains("type")) return std::unexpected(Invalid(where + ".type: required"));
  auto type = Lookup(kChannelTypes, j["type"], where + ".type");
  if (!type) return std::unexpected(type.error());
  c.type = *type;
  auto url = RequireString(j, "url", where);
  if (!url) return std::unexpected(url.error());
  c.url = *url;
  for (auto [key, field] : {std::pair{"secret", &c.secret},
                            {"username", &c.username},
                            {"password", &c.password},
                            {"from", &c.from},
                            {"ca_file", &c.ca_file}}) {
    auto v = OptionalString(j, key, where);
    if (!v) return std::unexpected(v.error());
    *field = *v;
  }
  auto to = StringList(j, "to", where);
  if (!to) return std::unexpected(to.error());
  c.to = *to;
  switch (c.type) {
    case ChannelConfig::Type::kSlack:
    case ChannelConfig::Type::kWebhook:
      if (!c.url.starts_with("https://") && !c.url.starts_with("http://")) {
        return std::unexpected(Invalid(where + ".url: must be an http(s) URL"));
      }
      if (c.type == ChannelConfig::Type::kWebhook && !c.secret.starts_with("whsec_")) {
        return std::unexpected(Invalid(where + ".secret: required, \"whsec_<base64>\""));
      }
      // Checked with the signer deliveries use: a secret it refuses would make every delivery
      // fail for good, long after the config was accepted.
      if (c.type == ChannelConfig::Type::kWebhook && !SignWebhook(c.secret, "probe", 0, "")) {
        return std::unexpected(Invalid(where + ".secret: the part after whsec_ must be "
                                               "non-empty standard base64 (A-Z a-z 0-9 + /, "
                                               "'=' padding)"));
      }
      break;
    case ChannelConfig::Type::kEmail:
      if (!c.url.starts_with("smtp://") && !c.url.starts_with("smtps://")) {
        return std::unexpected(Invalid(where + ".url: must be smtp://host:587 (STARTTLS) or "
                                               "smtps://host:465 (implicit TLS)"));
      }
      if (c.from.empty() || c.to.empty()) {
        return std::unexpected(Invalid(where + ": email needs \"from\" and \"to\""));
      }
      break;
  }
  return c;
}

nlohmann::json ToJson(const ChannelConfig& c) {
  nlohmann::json j = {{"name", c.name}, {"type", ChannelTypeName(c.type)}};
  // Slack webhook URLs are bearer secrets themselves; show only the host part.
  if (c.type == ChannelConfig::Type::kSlack) {
    const size_t host_end = c.url.find('/', c.url.find("//") + 2);
    j["url"] = c.url.substr(0, host_end) + "/***";
  } else {
    j["url"] = RedactUrlCredentials(c.url);
  }
  if (!c.secret.empty()) j["secret"] = "***";
  if (c.type == ChannelConfig::Type::kEmail) {
    j["from"] = c.from;
    j["to"] = c.to;
    if (!c.username.empty()) j["username"] = c.username;
  }
  return j;
}

}  // namespace kvgate::telemetry::alerts
