#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gateway/config_internal.h"
#include "local_engine/kv_dtype.h"
#include "telemetry/provider_traits.h"

namespace kvgate::gateway::config_internal {
namespace {

// `offload: {disk: PATH, bytes: N}` (a file of at most N bytes; device cpu) or
// `offload: {host_bytes: N}` (N bytes of host memory, page-locked on cuda) of a local provider.
// A disk tier needs both keys: without a size it would be unbounded, without a path it has nowhere
// to go. One tier per provider.
Status ParseOffload(const json& offload, const std::string& path, ProviderConfig& pc) {
  if (!offload.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     path + " must be a mapping {disk: PATH, bytes: N} or {host_bytes: N}");
  }
  if (Status s = OnlyKeys(offload, path, {"disk", "bytes", "host_bytes"}); !s) return s;
  const bool host = offload.contains("host_bytes");
  if (host && (offload.contains("disk") || offload.contains("bytes"))) {
    return MakeError(ErrorCode::kInvalidArgument,
                     path + ": give disk and bytes (a file) or host_bytes (host memory), not "
                            "both: one tier per provider");
  }
  if (host) {
    const json& n = offload["host_bytes"];
    if (!n.is_number_integer() || n.get<int64_t>() <= 0) {
      return MakeError(ErrorCode::kInvalidArgument,
                       path + ".host_bytes must be the tier's size in bytes, a positive integer");
    }
    pc.offload_host_bytes = n.get<int64_t>();
    return {};
  }
  const auto disk = offload.find("disk");
  if (disk == offload.end() || !disk->is_string() || disk->get<std::string>().empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     path + ".disk is required: the path of the tier's file (created if absent)");
  }
  const auto bytes = offload.find("bytes");
  if (bytes == offload.end() || !bytes->is_number_integer() || bytes->get<int64_t>() <= 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     path + ".bytes is required: the tier's size in bytes, a positive integer");
  }
  pc.offload_disk = disk->get<std::string>();
  pc.offload_bytes = bytes->get<int64_t>();
  return {};
}

// `prompt_cache_key: thread`, `anthropic_cache_diagnostics: true | false` and
// `anthropic_auto_cache: true | false | 5m | 1h | {ttl: ...}`.
Status ParseCacheHelpers(const json& p, const std::string& path, ProviderConfig& pc) {
  if (auto it = p.find("prompt_cache_key"); it != p.end() && !it->is_null()) {
    if (it->is_boolean() && !it->get<bool>()) {
      pc.prompt_cache_key_thread = false;
    } else if (it->is_string() && it->get<std::string>() == "thread") {
      pc.prompt_cache_key_thread = true;
    } else {
      return MakeError(ErrorCode::kInvalidArgument,
                       path + ".prompt_cache_key must be thread (or false: off)");
    }
  }
  if (auto d = p.find("anthropic_cache_diagnostics"); d != p.end() && !d->is_null()) {
    if (!d->is_boolean()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       path + ".anthropic_cache_diagnostics must be true or false");
    }
    pc.anthropic_cache_diagnostics = d->get<bool>();
  }
  auto it = p.find("anthropic_auto_cache");
  if (it == p.end() || it->is_null()) return {};
  const std::string where = path + ".anthropic_auto_cache";
  if (it->is_boolean()) {
    pc.anthropic_auto_cache_ttl = it->get<bool>() ? "5m" : "";
    return {};
  }
  json ttl = *it;
  if (it->is_object()) {
    if (Status s = OnlyKeys(*it, where, {"ttl"}); !s) return s;
    ttl = it->value("ttl", json("5m"));
  }
  if (!ttl.is_string() || (ttl != "5m" && ttl != "1h")) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + " must be true, false, 5m, 1h or {ttl: 5m | 1h}");
  }
  pc.anthropic_auto_cache_ttl = ttl.get<std::string>();
  return {};
}

}  // namespace

Result<std::chrono::milliseconds> Millis(const Reader& r, const char* key,
                                         std::chrono::milliseconds fallback) {
  auto v = r.Int(key, fallback.count());
  if (!v) return std::unexpected(v.error());
  if (*v <= 0) return MakeError(ErrorCode::kInvalidArgument, r.path + "." + key + " must be > 0");
  return std::chrono::milliseconds(*v);
}

Result<int> Threads(const Reader& r) {
  auto v = r.Int("threads", 0);
  if (!v) return std::unexpected(v.error());
  if (*v < 0 || *v > 1024) {
    return MakeError(ErrorCode::kInvalidArgument,
                     r.path + ".threads must be between 0 (one per core) and 1024");
  }
  return static_cast<int>(*v);
}

Status OnlyKeys(const json& object, const std::string& path,
                std::initializer_list<std::string_view> known) {
  if (!object.is_object()) return {};
  for (const auto& [key, _] : object.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (std::string_view k : known) {
      if (!list.empty()) list += ", ";
      list += k;
    }
    return MakeError(ErrorCode::kInvalidArgument,
                     path + ": unknown key \"" + key + "\" (known: " + list + ")");
  }
  return {};
}

Result<ProviderConfig> ParseProvider(const json& p, const std::string& path) {
  Reader r{p, path};
  if (!p.is_object()) return MakeError(ErrorCode::kInvalidArgument, r.path + " must be a mapping");
  if (Status s = OnlyKeys(
          p, r.path,
          {"name", "type", "base_url", "api_key", "api_keys", "model_path", "device",
           "kv_cache_tokens", "kv_cache_dtype", "threads", "gpu_memory_fraction", "cuda_graphs",
           "fp8_gemm", "offload", "max_output_tokens_default", "share_prefix_cache_across_keys",
           "prompt_cache_key", "anthropic_auto_cache", "anthropic_cache_diagnostics", "region",
           "aws_access_key_id", "aws_secret_access_key", "aws_session_token"});
      !s) {
    return std::unexpected(s.error());
  }
  ProviderConfig pc;
  for (auto [slot, key] : {std::pair{&pc.name, "name"}, {&pc.type, "type"},
                           {&pc.base_url, "base_url"}, {&pc.api_key, "api_key"},
                           {&pc.model_path, "model_path"}, {&pc.device, "device"},
                           {&pc.kv_cache_dtype, "kv_cache_dtype"}, {&pc.region, "region"},
                           {&pc.aws_access_key_id, "aws_access_key_id"},
                           {&pc.aws_secret_access_key, "aws_secret_access_key"},
                           {&pc.aws_session_token, "aws_session_token"}}) {
    auto v = r.String(key, *slot);
    if (!v) return std::unexpected(v.error());
    *slot = *v;
  }
  auto kv = r.Int("kv_cache_tokens", 0);
  if (!kv) return std::unexpected(kv.error());
  if (*kv < 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     r.path + ".kv_cache_tokens must be >= 0 (0: the default pool)");
  }
  pc.kv_cache_tokens = *kv;
  auto max_output = r.Int("max_output_tokens_default", pc.max_output_tokens_default);
  if (!max_output) return std::unexpected(max_output.error());
  if (*max_output < 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     r.path + ".max_output_tokens_default must be >= 0 (0: the rest of the "
                              "context)");
  }
  pc.max_output_tokens_default = *max_output;
  auto threads = Threads(r);
  if (!threads) return std::unexpected(threads.error());
  pc.threads = *threads;
  auto fraction = r.Number("gpu_memory_fraction", pc.gpu_memory_fraction);
  if (!fraction) return std::unexpected(fraction.error());
  pc.gpu_memory_fraction = *fraction;
  auto graphs = r.Bool("cuda_graphs", pc.cuda_graphs);
  if (!graphs) return std::unexpected(graphs.error());
  pc.cuda_graphs = *graphs;
  auto fp8 = r.Bool("fp8_gemm", pc.fp8_gemm);
  if (!fp8) return std::unexpected(fp8.error());
  pc.fp8_gemm = *fp8;
  auto share = r.Bool("share_prefix_cache_across_keys", pc.share_prefix_cache_across_keys);
  if (!share) return std::unexpected(share.error());
  pc.share_prefix_cache_across_keys = *share;
  if (auto offload = p.find("offload"); offload != p.end() && !offload->is_null()) {
    if (auto s = ParseOffload(*offload, r.path + ".offload", pc); !s) {
      return std::unexpected(s.error());
    }
  }
  if (auto keys = p.find("api_keys"); keys != p.end() && !keys->is_null()) {
    if (!keys->is_array() || keys->empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       r.path + ".api_keys must be a non-empty list of keys");
    }
    if (!pc.api_key.empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       r.path + ": give api_key or api_keys, not both");
    }
    for (size_t k = 0; k < keys->size(); ++k) {
      const json& key = (*keys)[k];
      if (!key.is_string() || key.get<std::string>().empty()) {
        return MakeError(ErrorCode::kInvalidArgument,
                         r.path + ".api_keys[" + std::to_string(k) + "] must be a non-empty string");
      }
      pc.api_keys.push_back(key.get<std::string>());
    }
  }
  if (pc.type == "bedrock" && pc.base_url.empty() && !pc.region.empty()) {
    pc.base_url = "https://bedrock-runtime." + pc.region + ".amazonaws.com";
  }
  while (!pc.base_url.empty() && pc.base_url.back() == '/') pc.base_url.pop_back();
  if (Status s = ParseCacheHelpers(p, path, pc); !s) return std::unexpected(s.error());
  return pc;
}

Status ValidateProvider(const ProviderConfig& p, const std::string& where) {
  const std::optional<telemetry::ProviderType> type = TypeOf(p);
  const telemetry::ProviderTraits* traits = type ? &telemetry::TraitsOf(*type) : nullptr;
  if (p.prompt_cache_key_thread && !(traits && traits->prompt_cache_key)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ".prompt_cache_key is OpenAI's parameter: only for type openai");
  }
  if (!p.anthropic_auto_cache_ttl.empty() && !(traits && traits->anthropic_cache_helpers)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ".anthropic_auto_cache is only for type anthropic");
  }
  const bool bedrock = type == telemetry::ProviderType::kBedrock;
  if (!bedrock && (!p.region.empty() || !p.aws_access_key_id.empty() ||
                   !p.aws_secret_access_key.empty() || !p.aws_session_token.empty())) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ": region and aws_* credentials are only for type bedrock");
  }
  if (bedrock) {
    if (p.region.empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + ".region is required for type bedrock (e.g. us-east-1)");
    }
    if (p.anthropic_cache_diagnostics) {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + ".anthropic_cache_diagnostics is Anthropic's own API: not for "
                               "type bedrock");
    }
    const bool key = !p.api_key.empty() || !p.api_keys.empty();
    const bool aws = !p.aws_access_key_id.empty() && !p.aws_secret_access_key.empty();
    if (!key && !aws) {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + ": no AWS credentials for type bedrock: give aws_access_key_id "
                               "and aws_secret_access_key (or api_key, a Bedrock API key), or set "
                               "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put them in the "
                               "shared credentials file (AWS_SHARED_CREDENTIALS_FILE or "
                               "~/.aws/credentials, profile AWS_PROFILE or default)");
    }
    if (key && aws) {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + ": give api_key (a Bedrock API key) or aws_* credentials, not both");
    }
  }
  if (p.anthropic_cache_diagnostics && !(traits && traits->anthropic_cache_helpers)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ".anthropic_cache_diagnostics is only for type anthropic");
  }
  if (!type) {
    std::string names;
    for (const telemetry::ProviderTraits& row : telemetry::AllProviderTraits()) {
      names += (names.empty() ? "" : ", ") + std::string(row.name);
    }
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ".type \"" + p.type + "\" is not one of " + names);
  }
  if (telemetry::IsBuiltInEngine(*type)) {
    if (p.model_path.empty()) {
      return MakeError(ErrorCode::kInvalidArgument, where + ".model_path is required for local");
    }
    if (p.device != "cpu" && p.device != "cuda") {
      return MakeError(ErrorCode::kInvalidArgument, where + ".device must be cpu or cuda");
    }
    if (!(p.gpu_memory_fraction > 0.0 && p.gpu_memory_fraction <= 1.0)) {
      char got[32];
      std::snprintf(got, sizeof got, "%g", p.gpu_memory_fraction);
      return MakeError(ErrorCode::kInvalidArgument,
                       where + ".gpu_memory_fraction must be in (0, 1], got " + got);
    }
    if (p.cuda_graphs && p.device != "cuda") {
      return MakeError(ErrorCode::kInvalidArgument, where + ".cuda_graphs needs device: cuda");
    }
    if (p.fp8_gemm && p.device != "cuda") {
      return MakeError(ErrorCode::kInvalidArgument, where + ".fp8_gemm needs device: cuda");
    }
    if (!p.offload_disk.empty() && p.device != "cpu") {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + ".offload (the disk tier) needs device: cpu; on " + p.device +
                           " use offload: {host_bytes: N}");
    }
    const auto dtype = engine::ParseKvCacheDtype(p.kv_cache_dtype);
    if (!dtype) {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + ".kv_cache_dtype " + dtype.error().message);
    }
    if (*dtype != engine::KvDtype::kFp16 && p.device != "cpu") {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + ".kv_cache_dtype " + p.kv_cache_dtype +
                           " needs device: cpu (the cuda backend's KV cache is f16)");
    }
  } else if (p.share_prefix_cache_across_keys) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where +
                         ".share_prefix_cache_across_keys is only for type local (the "
                         "built-in engine)");
  } else if (!p.offload_disk.empty() || p.offload_host_bytes > 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ".offload is only for type local (the built-in engine)");
  } else if (p.kv_cache_dtype != "f16") {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ".kv_cache_dtype is only for type local (the built-in engine)");
  } else if (p.base_url.rfind("http://", 0) != 0 && p.base_url.rfind("https://", 0) != 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ".base_url must start with http:// or https://");
  }
  return {};
}

namespace {

// The [profile] section's key from an INI-style AWS credentials file, "" when absent.
std::string CredentialsFileValue(const std::string& text, const std::string& profile,
                                 const std::string& key) {
  std::istringstream in(text);
  std::string line;
  bool in_profile = false;
  auto trim = [](std::string s) {
    const auto first = s.find_first_not_of(" \t\r");
    if (first == std::string::npos) return std::string();
    const auto last = s.find_last_not_of(" \t\r");
    return s.substr(first, last - first + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      in_profile = trim(line.substr(1, line.size() - 2)) == profile;
      continue;
    }
    if (!in_profile) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    if (trim(line.substr(0, eq)) == key) return trim(line.substr(eq + 1));
  }
  return "";
}

}  // namespace

void ResolveAwsCredentials(ProviderConfig& p, const EnvLookup& env) {
  if (p.type != "bedrock") return;
  if (!p.api_key.empty() || !p.api_keys.empty()) return;
  if (!p.aws_access_key_id.empty() && !p.aws_secret_access_key.empty()) return;
  auto get = [&env](const char* name) { return env(name).value_or(""); };
  if (!get("AWS_ACCESS_KEY_ID").empty() && !get("AWS_SECRET_ACCESS_KEY").empty()) {
    p.aws_access_key_id = get("AWS_ACCESS_KEY_ID");
    p.aws_secret_access_key = get("AWS_SECRET_ACCESS_KEY");
    p.aws_session_token = get("AWS_SESSION_TOKEN");
    return;
  }
  std::string file = get("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty() && !get("HOME").empty()) file = get("HOME") + "/.aws/credentials";
  if (file.empty()) return;
  std::ifstream in(file, std::ios::binary);
  if (!in) return;
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string profile = get("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  const std::string id = CredentialsFileValue(buffer.str(), profile, "aws_access_key_id");
  const std::string secret = CredentialsFileValue(buffer.str(), profile, "aws_secret_access_key");
  if (id.empty() || secret.empty()) return;
  p.aws_access_key_id = id;
  p.aws_secret_access_key = secret;
  p.aws_session_token = CredentialsFileValue(buffer.str(), profile, "aws_session_token");
}

}  // namespace kvgate::gateway::config_internal

namespace kvgate::gateway {

std::optional<telemetry::ProviderType> TypeOf(const ProviderConfig& p) {
  return telemetry::ProviderTypeFromName(p.type);
}

bool HostsEngine(const ProviderConfig& p) {
  const std::optional<telemetry::ProviderType> type = TypeOf(p);
  return type && telemetry::IsBuiltInEngine(*type);
}

}  // namespace kvgate::gateway
