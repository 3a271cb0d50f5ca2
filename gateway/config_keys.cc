// server.api_keys: bare key strings and key objects with a name, a model allow-list, a budget
// and rate limits. The same limit fields are what POST /api/keys takes, so both are read here.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <tuple>

#include "gateway/config.h"
#include "gateway/config_internal.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
using config_internal::Reader;

Error Invalid(std::string message) { return Error{ErrorCode::kInvalidArgument, std::move(message)}; }

// Names appear in metric labels, URLs and logs: kept to a plain alphabet.
bool PlainName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Result<int64_t> PositiveCount(const Reader& r, const char* key, int64_t max) {
  const std::string what =
      r.path + "." + key + " must be a positive integer, at most " + std::to_string(max);
  auto v = r.Int(key, 0);
  if (!v) return std::unexpected(Invalid(what));
  // (A JSON integer above INT64_MAX reads as negative here.)
  if (r.object.contains(key) && !r.object[key].is_null() && (*v <= 0 || *v > max)) {
    return std::unexpected(Invalid(what + ", got " + r.object[key].dump()));
  }
  return *v;
}

}  // namespace

Result<int64_t> ParseBudgetDuration(const json& value, const std::string& path) {
  auto bad = [&] {
    return std::unexpected(Invalid(path + " must be a duration like \"1h\", \"1d\" or \"30d\" "
                                          "(a positive number with s, m, h or d)"));
  };
  if (!value.is_string()) return bad();
  const std::string text = value.get<std::string>();
  if (text.size() < 2 || text.size() > 10) return bad();
  int64_t n = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return bad();
    n = n * 10 + (text[i] - '0');
  }
  int64_t scale = 0;
  switch (text.back()) {
    case 's': scale = 1; break;
    case 'm': scale = 60; break;
    case 'h': scale = 3600; break;
    case 'd': scale = 86400; break;
    default: return bad();
  }
  if (n <= 0 || n > kMaxBudgetDurationSeconds / scale) return bad();
  return n * scale;
}

Status ValidateKeyName(const std::string& name, const std::string& path) {
  if (!PlainName(name)) {
    return std::unexpected(
        Invalid(path + " must be 1-64 letters, digits, '-', '_' or '.', got " + json(name).dump()));
  }
  return {};
}

Result<KeyLimits> ParseKeyLimits(const json& object, const std::string& path,
                                 std::initializer_list<std::string_view> known_extra) {
  if (!object.is_object()) return std::unexpected(Invalid(path + " must be a mapping"));
  static constexpr std::string_view kFields[] = {"models", "max_budget_usd", "budget_duration",
                                                 "rpm",    "tpm",            "max_parallel"};
  for (const auto& [key, _] : object.items()) {
    const bool known = std::find(std::begin(kFields), std::end(kFields), key) != std::end(kFields) ||
                       std::find(known_extra.begin(), known_extra.end(), key) != known_extra.end();
    if (known) continue;
    std::string list;
    for (std::string_view k : known_extra) list += std::string(k) + ", ";
    for (std::string_view k : kFields) list += std::string(k) + (k == "max_parallel" ? "" : ", ");
    return std::unexpected(Invalid(path + ": unknown key \"" + key + "\" (known: " + list + ")"));
  }
  Reader r{object, path};
  KeyLimits limits;
  if (auto it = object.find("models"); it != object.end() && !it->is_null()) {
    if (!it->is_array()) return std::unexpected(Invalid(path + ".models must be a list of model names"));
    for (size_t i = 0; i < it->size(); ++i) {
      const json& m = (*it)[i];
      if (!m.is_string() || m.get<std::string>().empty()) {
        return std::unexpected(Invalid(path + ".models[" + std::to_string(i) +
                                       "] must be a non-empty model name"));
      }
      limits.models.push_back(m.get<std::string>());
    }
  }
  if (object.contains("max_budget_usd") && !object["max_budget_usd"].is_null()) {
    const json& raw = object["max_budget_usd"];
    auto usd = r.Number("max_budget_usd", 0);
    if (!usd || raw.is_boolean()) {
      return std::unexpected(Invalid(path + ".max_budget_usd must be a number of USD"));
    }
    if (!std::isfinite(*usd) || *usd < 0 || *usd > kMaxKeyBudgetUsd) {
      return std::unexpected(Invalid(path + ".max_budget_usd must be between 0 and 1000000"));
    }
    limits.max_budget_pico = std::llround(*usd * 1e12);
  }
  if (auto it = object.find("budget_duration"); it != object.end() && !it->is_null()) {
    auto seconds = ParseBudgetDuration(*it, path + ".budget_duration");
    if (!seconds) return std::unexpected(seconds.error());
    if (!limits.max_budget_pico) {
      return std::unexpected(Invalid(path + ".budget_duration needs max_budget_usd (the budget "
                                            "it resets)"));
    }
    limits.budget_duration_s = *seconds;
  }
  for (auto [key, slot, max] : {std::tuple{"rpm", &limits.rpm, kMaxKeyRpm},
                                {"tpm", &limits.tpm, kMaxKeyTpm},
                                {"max_parallel", &limits.max_parallel, kMaxKeyParallel}}) {
    auto v = PositiveCount(r, key, max);
    if (!v) return std::unexpected(v.error());
    *slot = *v;
  }
  return limits;
}

Result<std::vector<ApiKeyConfig>> ParseApiKeys(const json& list) {
  if (!list.is_array()) return std::unexpected(Invalid("server.api_keys must be a list"));
  std::vector<ApiKeyConfig> keys;
  std::set<std::string> names, hashes;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& entry = list[i];
    const std::string path = "server.api_keys[" + std::to_string(i) + "]";
    ApiKeyConfig key;
    if (entry.is_string()) {
      if (entry.get<std::string>().empty()) {
        return std::unexpected(Invalid(path + " must be a non-empty key (is its environment "
                                              "variable set?)"));
      }
      key.key_hash = HashApiKey(entry.get<std::string>());
    } else if (entry.is_object()) {
      auto limits = ParseKeyLimits(entry, path, {"name", "key"});
      if (!limits) return std::unexpected(limits.error());
      key.limits = std::move(*limits);
      auto it = entry.find("key");
      if (it == entry.end() || it->is_null() ||
          (it->is_string() && it->get<std::string>().empty())) {
        return std::unexpected(Invalid(path + ".key is required (a non-empty string; is its "
                                              "environment variable set?)"));
      }
      Reader r{entry, path};
      auto secret = r.String("key");
      if (!secret) return std::unexpected(secret.error());
      key.key_hash = HashApiKey(*secret);
      auto name = r.String("name");
      if (!name) return std::unexpected(name.error());
      if (entry.contains("name")) {
        if (Status s = ValidateKeyName(*name, path + ".name"); !s) {
          return std::unexpected(s.error());
        }
      }
      key.name = std::move(*name);
    } else {
      return std::unexpected(Invalid(path + " must be a key string or a mapping with \"key\""));
    }
    if (!key.name.empty() && !names.insert(key.name).second) {
      return std::unexpected(Invalid(path + ".name: duplicate key name \"" + key.name + "\""));
    }
    if (!hashes.insert(key.key_hash).second) {
      return std::unexpected(Invalid(path + ": the same key is listed twice"));
    }
    keys.push_back(std::move(key));
  }
  return keys;
}

}  // namespace kvgate::gateway
