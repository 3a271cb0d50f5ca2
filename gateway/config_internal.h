// The config loader's own helpers, shared by its files (config.cc, config_providers.cc): typed
// reads of one mapping with errors that name the key's path, and the provider section's parser
// and checks. Not part of the gateway's API.
#pragma once

#include <chrono>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/error.h"
#include "gateway/config.h"

namespace kvgate::gateway::config_internal {

using nlohmann::json;

// Reads the keys of one mapping; errors say "<path>.<key> must be ...".
struct Reader {
  const json& object;
  std::string path;  // e.g. "providers[1]"

  Result<std::string> String(const char* key, std::string fallback = "") const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
    return MakeError(ErrorCode::kInvalidArgument, path + "." + key + " must be a string");
  }
  Result<int64_t> Int(const char* key, int64_t fallback) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (it->is_number_integer()) return it->get<int64_t>();
    return MakeError(ErrorCode::kInvalidArgument, path + "." + key + " must be an integer");
  }
  Result<bool> Bool(const char* key, bool fallback) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (it->is_boolean()) return it->get<bool>();
    return MakeError(ErrorCode::kInvalidArgument, path + "." + key + " must be true or false");
  }
  // YAML decimals arrive as strings (ToJson keeps them exact for prices); parsed whole here.
  Result<double> Number(const char* key, double fallback) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (it->is_number()) return it->get<double>();
    if (it->is_string()) {
      const std::string text = it->get<std::string>();
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(text.c_str(), &end);
      if (!text.empty() && errno == 0 && end && *end == '\0' && std::isfinite(v)) return v;
    }
    return MakeError(ErrorCode::kInvalidArgument, path + "." + key + " must be a number");
  }
};

// A positive duration in milliseconds.
Result<std::chrono::milliseconds> Millis(const Reader& r, const char* key,
                                         std::chrono::milliseconds fallback);
// A thread count: 0 (the default) means one per core.
Result<int> Threads(const Reader& r);
// An error naming the first key of `object` not in `known` (and listing those).
Status OnlyKeys(const json& object, const std::string& path,
                std::initializer_list<std::string_view> known);

// `keep_warm:` of the model or router at `path` ("models[0]"): its keys read and checked, the caps'
// defaults filled in.
Result<KeepWarmConfig> ParseKeepWarm(const json& k, const std::string& path);

// The `telemetry:` section: OTLP export options, nullopt when `otlp` is absent (export off).
Result<std::optional<telemetry::otlp::ExporterOptions>> ParseTelemetry(const json& section);

// One entry of `providers:` at `path` ("providers[2]"): its keys read and typed.
Result<ProviderConfig> ParseProvider(const json& p, const std::string& path);
// The checks that need the whole entry (type, what each type allows), errors naming `where`.
Status ValidateProvider(const ProviderConfig& p, const std::string& where);
// A bedrock provider without credentials in its config takes them from the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else from the shared
// credentials file (AWS_SHARED_CREDENTIALS_FILE, else $HOME/.aws/credentials; profile
// AWS_PROFILE, else default). Other types, and a provider with an api_key, are left as they are.
void ResolveAwsCredentials(ProviderConfig& p, const EnvLookup& env);

}  // namespace kvgate::gateway::config_internal
