// The `routers:` list and the `routing:` section of the config: parsed into RouterConfig /
// HealthOptions with errors that name the field.
#include <algorithm>
#include <cmath>
#include <set>

#include "common/str_cat.h"
#include "router/router.h"

namespace kvgate::router {
namespace {

using nlohmann::json;

Error Invalid(std::string message) { return Error{ErrorCode::kInvalidArgument, std::move(message)}; }

Status OnlyKeys(const json& object, const std::string& path,
                std::initializer_list<std::string_view> known) {
  for (const auto& [key, _] : object.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    return std::unexpected(Invalid(path + ": unknown key \"" + key + "\" (known: " + list + ")"));
  }
  return {};
}

// YAML plain scalars that look like decimals arrive as strings (the config keeps prices exact).
std::optional<double> AsNumber(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  const std::string text = v.get<std::string>();
  char* end = nullptr;
  const double d = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(d)) return std::nullopt;
  return d;
}

Result<int64_t> IntIn(const json& object, const char* key, const std::string& path,
                      int64_t fallback, int64_t min, int64_t max) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > max) {
    return std::unexpected(
        Invalid(StrCat(path, ".", key, " must be an integer from ", min, " to ", max)));
  }
  return it->get<int64_t>();
}

Result<double> NumberIn(const json& object, const char* key, const std::string& path,
                        double fallback, double min, double max) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  std::optional<double> v = AsNumber(*it);
  if (!v || *v < min || *v > max) {
    return std::unexpected(Invalid(path + "." + key + " must be a number from " +
                                   std::to_string(min) + " to " + std::to_string(max)));
  }
  return *v;
}

Result<std::optional<bool>> OptionalBool(const json& object, const char* key,
                                         const std::string& path) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<bool>{};
  if (!it->is_boolean()) return std::unexpected(Invalid(path + "." + key + " must be true or false"));
  return std::optional<bool>{it->get<bool>()};
}

Result<std::vector<std::string>> Names(const json& list, const std::string& path) {
  if (!list.is_array() || list.empty()) {
    return std::unexpected(Invalid(path + " must be a non-empty list of model names"));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& item = list[i];
    const json* name = &item;
    if (item.is_object() && item.contains("model")) name = &item["model"];
    if (!name->is_string() || name->get<std::string>().empty()) {
      return std::unexpected(Invalid(StrCat(path, "[", i, "] must be a model name")));
    }
    out.push_back(name->get<std::string>());
  }
  return out;
}

Result<WhenRule> ParseWhen(const json& j, const std::string& path) {
  if (!j.is_object()) return std::unexpected(Invalid(path + " must be a mapping"));
  if (Status s = OnlyKeys(j, path, {"match", "targets"}); !s) return std::unexpected(s.error());
  WhenRule rule;
  auto targets = Names(j.value("targets", json()), path + ".targets");
  if (!targets) return std::unexpected(targets.error());
  rule.targets = std::move(*targets);
  const json match = j.value("match", json::object());
  const std::string mpath = path + ".match";
  if (!match.is_object() || match.empty()) {
    return std::unexpected(Invalid(mpath + " must be a non-empty mapping of conditions"));
  }
  for (const auto& [key, value] : match.items()) {
    const std::string where = mpath + "." + key;
    if (key == "prompt_tokens") {
      if (!value.is_object() || value.empty()) {
        return std::unexpected(Invalid(where + " must be a mapping such as {above: 100000}"));
      }
      for (const auto& [op, bound] : value.items()) {
        if (!bound.is_number_integer() || bound.get<int64_t>() < 0) {
          return std::unexpected(Invalid(where + "." + op + " must be a non-negative integer"));
        }
        if (op == "above") {
          rule.prompt_tokens_above = bound.get<int64_t>();
        } else if (op == "below") {
          rule.prompt_tokens_below = bound.get<int64_t>();
        } else {
          return std::unexpected(Invalid(where + ": unknown bound \"" + op + "\" (known: above, below)"));
        }
      }
    } else if (key == "tools" || key == "images" || key == "stream") {
      if (!value.is_boolean()) return std::unexpected(Invalid(where + " must be true or false"));
      (key == "tools" ? rule.tools : key == "images" ? rule.images : rule.stream) = value.get<bool>();
    } else if (key.starts_with("metadata.") && key.size() > 9) {
      std::vector<std::string> allowed;
      const json values = value.is_array() ? value : json::array({value});
      for (const json& v : values) {
        if (v.is_string()) {
          allowed.push_back(v.get<std::string>());
        } else if (v.is_number_integer() || v.is_boolean()) {
          allowed.push_back(v.dump());
        } else {
          return std::unexpected(Invalid(where + " must be a string or a list of strings"));
        }
      }
      rule.metadata.emplace_back(key.substr(9), std::move(allowed));
    } else {
      return std::unexpected(Invalid(where + ": unknown condition (known: prompt_tokens, tools, "
                                             "images, stream, metadata.<key>)"));
    }
  }
  return rule;
}

Result<RouterConfig> ParseRouter(const json& j, const std::string& path) {
  if (!j.is_object()) return std::unexpected(Invalid(path + " must be a mapping"));
  if (Status s = OnlyKeys(j, path,
                          {"name", "strategy", "cache_aware", "targets", "fallback_on", "retries",
                           "affinity", "horizon_turns", "when", "affinity_ttl_seconds",
                           "prefix_load_weight", "prefix_lookup_timeout_ms"});
      !s) {
    return std::unexpected(s.error());
  }
  RouterConfig r;
  if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty()) {
    return std::unexpected(Invalid(path + ".name is required (the model name clients send)"));
  }
  r.name = j["name"].get<std::string>();
  if (auto it = j.find("strategy"); it != j.end() && !it->is_null()) {
    const std::string s = it->is_string() ? it->get<std::string>() : "";
    if (s == "cost") {
      r.strategy = Strategy::kCost;
    } else if (s == "fallback") {
      r.strategy = Strategy::kFallback;
    } else if (s == "weighted") {
      r.strategy = Strategy::kWeighted;
    } else if (s == "latency") {
      r.strategy = Strategy::kLatency;
    } else {
      return std::unexpected(Invalid(path + ".strategy must be cost, fallback, weighted or latency"));
    }
  }
  auto cache_aware = OptionalBool(j, "cache_aware", path);
  if (!cache_aware) return std::unexpected(cache_aware.error());
  r.cache_aware = cache_aware->value_or(true);
  const json targets = j.value("targets", json());
  if (!targets.is_array() || targets.empty()) {
    return std::unexpected(Invalid(path + ".targets must be a non-empty list of {model: NAME}"));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::string tpath = StrCat(path, ".targets[", i, "]");
    const json& t = targets[i];
    RouterConfig::TargetRef ref;
    if (t.is_string()) {
      ref.model = t.get<std::string>();
    } else if (t.is_object()) {
      if (Status s = OnlyKeys(t, tpath, {"model", "weight"}); !s) return std::unexpected(s.error());
      if (!t.contains("model") || !t["model"].is_string()) {
        return std::unexpected(Invalid(tpath + ".model is required"));
      }
      ref.model = t["model"].get<std::string>();
      auto weight = IntIn(t, "weight", tpath, 1, 0, 1'000'000);
      if (!weight) return std::unexpected(weight.error());
      ref.weight = static_cast<int>(*weight);
    } else {
      return std::unexpected(Invalid(tpath + " must be {model: NAME, weight: N}"));
    }
    if (ref.model.empty()) return std::unexpected(Invalid(tpath + ".model is required"));
    if (!seen.insert(ref.model).second) {
      return std::unexpected(Invalid(tpath + ".model: " + ref.model + " is listed twice"));
    }
    r.targets.push_back(std::move(ref));
  }
  if (r.strategy == Strategy::kWeighted &&
      std::all_of(r.targets.begin(), r.targets.end(), [](const auto& t) { return t.weight == 0; })) {
    return std::unexpected(Invalid(path + ".targets: strategy weighted needs a weight above 0"));
  }
  if (auto it = j.find("fallback_on"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) {
      return std::unexpected(Invalid(path + ".fallback_on must be a list of HTTP statuses, "
                                            "timeout and connect"));
    }
    r.fallback_statuses.clear();
    r.fallback_on_timeout = r.fallback_on_connect = false;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& v = (*it)[i];
      if (v.is_number_integer() && v.get<int>() >= 400 && v.get<int>() <= 599) {
        r.fallback_statuses.push_back(v.get<int>());
      } else if (v == "timeout") {
        r.fallback_on_timeout = true;
      } else if (v == "connect") {
        r.fallback_on_connect = true;
      } else {
        return std::unexpected(Invalid(StrCat(path, ".fallback_on[", i, "] must be an HTTP status "
                                              "400-599, timeout or connect")));
      }
    }
  }
  auto retries = IntIn(j, "retries", path, r.retries, 0, 10);
  if (!retries) return std::unexpected(retries.error());
  r.retries = static_cast<int>(*retries);
  if (auto it = j.find("affinity"); it != j.end() && !it->is_null()) {
    const std::string a = it->is_string() ? it->get<std::string>() : "";
    if (a == "none") {
      r.affinity = Affinity::kNone;
    } else if (a == "thread") {
      r.affinity = Affinity::kThread;
    } else if (a == "prefix") {
      r.affinity = Affinity::kPrefix;
    } else {
      return std::unexpected(Invalid(path + ".affinity must be none, thread or prefix"));
    }
  }
  if (auto it = j.find("horizon_turns"); it != j.end() && it->is_string() && *it == "auto") {
    r.horizon_auto = true;
  } else {
    auto horizon = IntIn(j, "horizon_turns", path, r.horizon_turns, 1, 1000);
    if (!horizon) {
      return std::unexpected(Invalid(path + ".horizon_turns must be an integer from 1 to 1000 or auto"));
    }
    r.horizon_turns = static_cast<int>(*horizon);
  }
  auto ttl = IntIn(j, "affinity_ttl_seconds", path, r.affinity_ttl_seconds, 1, 30 * 86'400);
  if (!ttl) return std::unexpected(ttl.error());
  r.affinity_ttl_seconds = *ttl;
  auto weight = NumberIn(j, "prefix_load_weight", path, r.prefix_load_weight, 0, 1e6);
  if (!weight) return std::unexpected(weight.error());
  r.prefix_load_weight = *weight;
  auto lookup = IntIn(j, "prefix_lookup_timeout_ms", path, r.prefix_lookup_timeout_ms, 1, 1000);
  if (!lookup) return std::unexpected(lookup.error());
  r.prefix_lookup_timeout_ms = static_cast<int>(*lookup);
  if (auto it = j.find("when"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return std::unexpected(Invalid(path + ".when must be a list of rules"));
    for (size_t i = 0; i < it->size(); ++i) {
      auto rule = ParseWhen((*it)[i], StrCat(path, ".when[", i, "]"));
      if (!rule) return std::unexpected(rule.error());
      r.when.push_back(std::move(*rule));
    }
  }
  return r;
}

}  // namespace

std::string_view StrategyName(Strategy strategy) {
  switch (strategy) {
    case Strategy::kCost: return "cost";
    case Strategy::kFallback: return "fallback";
    case Strategy::kWeighted: return "weighted";
    case Strategy::kLatency: return "latency";
  }
  return "fallback";
}

std::string_view AffinityName(Affinity affinity) {
  switch (affinity) {
    case Affinity::kNone: return "none";
    case Affinity::kThread: return "thread";
    case Affinity::kPrefix: return "prefix";
  }
  return "none";
}

Result<RoutingConfig> ParseRoutingConfig(const json& routers, const json& routing) {
  RoutingConfig config;
  if (!routers.is_null()) {
    if (!routers.is_array()) return std::unexpected(Invalid("routers must be a list"));
    for (size_t i = 0; i < routers.size(); ++i) {
      auto r = ParseRouter(routers[i], StrCat("routers[", i, "]"));
      if (!r) return std::unexpected(r.error());
      config.routers.push_back(std::move(*r));
    }
  }
  if (!routing.is_null()) {
    if (!routing.is_object()) return std::unexpected(Invalid("routing must be a mapping"));
    if (Status s = OnlyKeys(routing, "routing", {"health"}); !s) return std::unexpected(s.error());
    const json health = routing.value("health", json::object());
    if (!health.is_object()) return std::unexpected(Invalid("routing.health must be a mapping"));
    const std::string path = "routing.health";
    if (Status s = OnlyKeys(health, path,
                            {"failures_to_open", "error_rate_to_open", "min_requests",
                             "window_seconds", "cooldown_ms", "ewma_weight", "backoff_ms",
                             "max_retry_wait_ms"});
        !s) {
      return std::unexpected(s.error());
    }
    HealthOptions& h = config.health;
    auto failures = IntIn(health, "failures_to_open", path, h.failures_to_open, 1, 1000);
    auto rate = NumberIn(health, "error_rate_to_open", path, h.error_rate_to_open, 0.01, 1.0);
    auto min_requests = IntIn(health, "min_requests", path, h.min_requests, 1, 100'000);
    auto window = IntIn(health, "window_seconds", path, h.window.count(), 1, 3600);
    auto cooldown = IntIn(health, "cooldown_ms", path, h.cooldown.count(), 1, 3'600'000);
    auto ewma = NumberIn(health, "ewma_weight", path, h.ewma_weight, 0.001, 1.0);
    auto backoff = IntIn(health, "backoff_ms", path, h.backoff.count(), 0, 60'000);
    auto max_wait = IntIn(health, "max_retry_wait_ms", path, h.max_retry_wait.count(), 0, 600'000);
    for (const auto* r : {&failures, &min_requests, &window, &cooldown, &backoff, &max_wait}) {
      if (!*r) return std::unexpected(r->error());
    }
    if (!rate) return std::unexpected(rate.error());
    if (!ewma) return std::unexpected(ewma.error());
    h.failures_to_open = static_cast<int>(*failures);
    h.error_rate_to_open = *rate;
    h.min_requests = static_cast<int>(*min_requests);
    h.window = std::chrono::seconds(*window);
    h.cooldown = std::chrono::milliseconds(*cooldown);
    h.ewma_weight = *ewma;
    h.backoff = std::chrono::milliseconds(*backoff);
    h.max_retry_wait = std::chrono::milliseconds(*max_wait);
  }
  return config;
}

Status CheckTargets(const RoutingConfig& config, const std::vector<std::string>& model_names) {
  const std::set<std::string> models(model_names.begin(), model_names.end());
  std::set<std::string> routers;
  for (size_t i = 0; i < config.routers.size(); ++i) {
    const RouterConfig& r = config.routers[i];
    const std::string path = StrCat("routers[", i, "]");
    if (models.contains(r.name)) {
      return std::unexpected(Invalid(path + ".name: " + r.name + " is already a model name"));
    }
    if (!routers.insert(r.name).second) {
      return std::unexpected(Invalid(path + ".name: a second router named " + r.name));
    }
  }
  for (size_t i = 0; i < config.routers.size(); ++i) {
    const RouterConfig& r = config.routers[i];
    auto check = [&](const std::string& name, const std::string& where) -> Status {
      if (routers.contains(name)) {
        return std::unexpected(
            Invalid(where + ": " + name + " is a router; a router's targets are models"));
      }
      if (!models.contains(name)) {
        return std::unexpected(Invalid(where + ": unknown model \"" + name +
                                       "\" (targets name entries of models:)"));
      }
      return {};
    };
    for (size_t t = 0; t < r.targets.size(); ++t) {
      if (Status s = check(r.targets[t].model, StrCat("routers[", i, "].targets[", t, "].model"));
          !s) {
        return s;
      }
    }
    for (size_t w = 0; w < r.when.size(); ++w) {
      for (size_t t = 0; t < r.when[w].targets.size(); ++t) {
        const std::string& name = r.when[w].targets[t];
        const std::string where = StrCat("routers[", i, "].when[", w, "].targets[", t, "]");
        if (Status s = check(name, where); !s) return s;
        const bool listed = std::any_of(r.targets.begin(), r.targets.end(),
                                        [&](const auto& ref) { return ref.model == name; });
        if (!listed) {
          return std::unexpected(
              Invalid(where + ": " + name + " is not one of the router's targets"));
        }
      }
    }
  }
  return {};
}

}  // namespace kvgate::router
