#include "gateway/config.h"

#include <openssl/evp.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <fstream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "gateway/config_internal.h"
#include "gateway/providers/provider.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
using config_internal::Millis;
using config_internal::OnlyKeys;
using config_internal::ParseKeepWarm;
using config_internal::ParseProvider;
using config_internal::Reader;
using config_internal::Threads;
using config_internal::ValidateProvider;

// YAML -> JSON. Plain scalars become bool/int/float when they read as such (YAML 1.2 core
// schema); quoted scalars stay strings.
json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() == "!") return text;  // quoted
      if (text == "true" || text == "True" || text == "TRUE") return true;
      if (text == "false" || text == "False" || text == "FALSE") return false;
      if (text == "null" || text == "~" || text.empty()) return nullptr;
      char* end = nullptr;
      errno = 0;
      long long as_int = std::strtoll(text.c_str(), &end, 10);
      if (errno == 0 && end && *end == '\0') return as_int;
      // Keep decimals as strings so prices parse exactly ("0.075" must not become 0.0749999...).
      return text;
    }
  }
  return nullptr;
}

Status ParseListen(const std::string& listen, GatewayConfig& config) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "server.listen must be HOST:PORT, got \"" + listen + "\"");
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  char* end = nullptr;
  long port = std::strtol(listen.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535 || host.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "server.listen must be HOST:PORT with a port 0-65535, got \"" + listen + "\"");
  }
  config.listen_host = host;
  config.listen_port = static_cast<uint16_t>(port);
  return {};
}

Result<telemetry::Price> ParsePricing(const json& pricing, const std::string& path) {
  if (!pricing.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, path + " must be a mapping");
  }
  telemetry::Price price;
  struct Field {
    const char* key;
    int64_t* slot;
  };
  const Field fields[] = {{"input", &price.base.input},
                          {"cached_input", &price.base.cached_input},
                          {"cache_write_5m", &price.base.cache_write_5m},
                          {"cache_write_1h", &price.base.cache_write_1h},
                          {"cache_write_no_ttl", &price.base.cache_write_no_ttl},
                          {"output", &price.base.output}};
  bool no_ttl_given = false;
  for (const auto& [key, value] : pricing.items()) {
    bool known = false;
    for (const Field& f : fields) {
      if (key != f.key) continue;
      known = true;
      auto parsed = telemetry::ParseMicroUsdPerMillion(value);
      if (!parsed) {
        return MakeError(ErrorCode::kInvalidArgument,
                         path + "." + key + ": " + parsed.error().message);
      }
      *f.slot = *parsed;
      no_ttl_given = no_ttl_given || f.slot == &price.base.cache_write_no_ttl;
    }
    if (!known) {
      return MakeError(ErrorCode::kInvalidArgument,
                       path + ": unknown price field \"" + key +
                           "\" (expected input, cached_input, cache_write_5m, cache_write_1h, "
                           "cache_write_no_ttl, output; USD per 1M tokens)");
    }
  }
  // Writes without a TTL cost what 5-minute writes cost unless priced apart.
  if (!no_ttl_given) price.base.cache_write_no_ttl = price.base.cache_write_5m;
  return price;
}

// Unknown keys are errors: a typo (admin_tokne, api_key for api_keys) must not silently leave
// the admin API or the gateway open.
Result<GatewayConfig> FromJson(const json& root, std::string source) {
  GatewayConfig config;
  config.source = std::move(source);
  if (root.is_null()) return config;
  if (!root.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, config.source + ": top level must be a mapping");
  }
  static const std::set<std::string> kTopLevel = {"server",  "storage", "providers",
                                                  "models",  "alerts",  "pricing",
                                                  "routers", "routing", "diagnosis",
                                                  "threads", "telemetry"};
  for (const auto& [key, _] : root.items()) {
    if (!kTopLevel.contains(key)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       config.source + ": unknown top-level section \"" + key + "\"");
    }
  }
  if (auto it = root.find("server"); it != root.end() && !it->is_null()) {
    Reader r{*it, "server"};
    if (!it->is_object()) return MakeError(ErrorCode::kInvalidArgument, "server must be a mapping");
    if (Status s = OnlyKeys(*it, "server",
                            {"listen", "admin_token", "api_keys", "threads", "body_limit_bytes",
                             "upstream_timeout_ms", "upstream_connect_timeout_ms",
                             "upstream_pool_idle_timeout_ms", "drain_timeout_ms"});
        !s) {
      return std::unexpected(s.error());
    }
    auto listen = r.String("listen", "127.0.0.1:8080");
    if (!listen) return std::unexpected(listen.error());
    if (auto s = ParseListen(*listen, config); !s) return std::unexpected(s.error());
    auto admin = r.String("admin_token");
    if (!admin) return std::unexpected(admin.error());
    config.admin_token = *admin;
    auto threads = Threads(r);
    if (!threads) return std::unexpected(threads.error());
    config.threads = *threads;
    auto body = r.Int("body_limit_bytes", static_cast<int64_t>(config.body_limit));
    if (!body) return std::unexpected(body.error());
    if (*body <= 0) {
      return MakeError(ErrorCode::kInvalidArgument, r.path + ".body_limit_bytes must be > 0");
    }
    config.body_limit = static_cast<size_t>(*body);
    auto up = Millis(r, "upstream_timeout_ms", config.upstream_timeout);
    if (!up) return std::unexpected(up.error());
    config.upstream_timeout = *up;
    auto conn = Millis(r, "upstream_connect_timeout_ms", config.upstream_connect_timeout);
    if (!conn) return std::unexpected(conn.error());
    config.upstream_connect_timeout = *conn;
    auto pool_idle = Millis(r, "upstream_pool_idle_timeout_ms", config.upstream_pool_idle_timeout);
    if (!pool_idle) return std::unexpected(pool_idle.error());
    config.upstream_pool_idle_timeout = *pool_idle;
    auto drain = Millis(r, "drain_timeout_ms", config.drain_timeout);
    if (!drain) return std::unexpected(drain.error());
    config.drain_timeout = *drain;
    if (auto keys = it->find("api_keys"); keys != it->end() && !keys->is_null()) {
      auto parsed = ParseApiKeys(*keys);
      if (!parsed) return std::unexpected(parsed.error());
      config.api_keys = std::move(*parsed);
      for (const ApiKeyConfig& key : config.api_keys) config.api_key_hashes.push_back(key.key_hash);
    }
  }
  if (auto it = root.find("threads"); it != root.end() && !it->is_null()) {
    if (!it->is_object()) return MakeError(ErrorCode::kInvalidArgument, "threads must be a mapping");
    if (Status s = OnlyKeys(*it, "threads", {"auto"}); !s) return std::unexpected(s.error());
    Reader r{*it, "threads"};
    auto inferred = r.Bool("auto", config.auto_threads);
    if (!inferred) return std::unexpected(inferred.error());
    config.auto_threads = *inferred;
  }
  if (auto it = root.find("storage"); it != root.end() && !it->is_null()) {
    Reader r{*it, "storage"};
    if (Status s = OnlyKeys(*it, "storage", {"sqlite", "postgres", "journal_path",
                                             "commit_interval_ms", "journal", "shared_threads"});
        !s) {
      return std::unexpected(s.error());
    }
    // One telemetry database: a local SQLite file or a PostgreSQL server, never both.
    if (it->contains("sqlite") && it->contains("postgres")) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "storage: set either sqlite or postgres, not both (sqlite names a local "
                       "file, postgres a server shared by replicas)");
    }
    auto path = r.String("sqlite", config.sqlite_path);
    if (!path) return std::unexpected(path.error());
    config.sqlite_path = *path;
    auto postgres = r.String("postgres", config.postgres);
    if (!postgres) return std::unexpected(postgres.error());
    if (it->contains("postgres") && postgres->empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "storage.postgres must be a connection string, e.g. "
                       "\"postgresql://kvgate@db.internal/kvgate\"");
    }
    config.postgres = *postgres;
    auto journal_path = r.String("journal_path", config.journal_path);
    if (!journal_path) return std::unexpected(journal_path.error());
    config.journal_path = *journal_path;
    auto interval = r.Int("commit_interval_ms", config.commit_interval.count());
    if (!interval) return std::unexpected(interval.error());
    if (*interval < 0 || *interval > 10'000) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "storage.commit_interval_ms must be between 0 and 10000");
    }
    config.commit_interval = std::chrono::milliseconds(*interval);
    auto journal = r.Bool("journal", config.journal);
    if (!journal) return std::unexpected(journal.error());
    config.journal = *journal;
    if (it->contains("shared_threads") && !it->contains("postgres")) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "storage.shared_threads applies to storage.postgres (replicas sharing one "
                       "database); a SQLite store has one process");
    }
    auto shared = r.Bool("shared_threads", config.shared_threads);
    if (!shared) return std::unexpected(shared.error());
    config.shared_threads = *shared;
  }
  if (auto it = root.find("telemetry"); it != root.end()) {
    auto otlp = config_internal::ParseTelemetry(*it);
    if (!otlp) return std::unexpected(otlp.error());
    config.otlp = std::move(*otlp);
  }
  if (auto it = root.find("diagnosis"); it != root.end() && !it->is_null()) {
    Reader r{*it, "diagnosis"};
    if (!it->is_object()) {
      return MakeError(ErrorCode::kInvalidArgument, "diagnosis must be a mapping");
    }
    if (Status s = OnlyKeys(*it, "diagnosis", {"excerpts"}); !s) return std::unexpected(s.error());
    auto excerpts = r.Bool("excerpts", config.diagnosis_excerpts);
    if (!excerpts) return std::unexpected(excerpts.error());
    config.diagnosis_excerpts = *excerpts;
  }
  if (auto it = root.find("pricing"); it != root.end() && !it->is_null()) {
    Reader r{*it, "pricing"};
    if (!it->is_object()) return MakeError(ErrorCode::kInvalidArgument, "pricing must be a mapping");
    if (Status s = OnlyKeys(*it, "pricing", {"catalog", "caching_rules"}); !s) {
      return std::unexpected(s.error());
    }
    auto path = r.String("catalog");
    if (!path) return std::unexpected(path.error());
    config.price_catalog_path = *path;
    if (auto rules = it->find("caching_rules"); rules != it->end() && !rules->is_null()) {
      if (!rules->is_object()) {
        return MakeError(ErrorCode::kInvalidArgument, "pricing.caching_rules must be a mapping");
      }
      for (const auto& [name, rule] : rules->items()) {
        const std::optional<providers::ProviderType> type = providers::ProviderTypeFromName(name);
        if (!type) {
          return MakeError(ErrorCode::kInvalidArgument,
                           "pricing.caching_rules." + name + ": not a provider type");
        }
        // The engine's KV cache has no TTL: a block leaves it only when it is evicted. A TTL here
        // would make the diagnosis call misses "expired" that were evictions.
        if (telemetry::IsBuiltInEngine(*type) && rule.is_object() && rule.contains("ttl_seconds")) {
          return MakeError(ErrorCode::kInvalidArgument,
                           "pricing.caching_rules.local.ttl_seconds: the built-in engine's cache "
                           "never expires (blocks leave it only when evicted); remove the key");
        }
      }
      config.caching_rules = *rules;
    }
  }
  if (auto it = root.find("providers"); it != root.end() && !it->is_null()) {
    if (!it->is_array()) return MakeError(ErrorCode::kInvalidArgument, "providers must be a list");
    for (size_t i = 0; i < it->size(); ++i) {
      auto pc = ParseProvider((*it)[i], "providers[" + std::to_string(i) + "]");
      if (!pc) return std::unexpected(pc.error());
      config.providers.push_back(std::move(*pc));
    }
  }
  if (auto it = root.find("models"); it != root.end() && !it->is_null()) {
    if (!it->is_array()) return MakeError(ErrorCode::kInvalidArgument, "models must be a list");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& m = (*it)[i];
      Reader r{m, "models[" + std::to_string(i) + "]"};
      if (!m.is_object()) return MakeError(ErrorCode::kInvalidArgument, r.path + " must be a mapping");
      if (Status s = OnlyKeys(m, r.path, {"name", "provider", "upstream_model", "pricing",
                                          "context_window", "supports", "keep_warm", "api"});
          !s) {
        return std::unexpected(s.error());
      }
      ModelConfig mc;
      auto name = r.String("name");
      auto provider = r.String("provider");
      if (!name) return std::unexpected(name.error());
      if (!provider) return std::unexpected(provider.error());
      mc.name = *name;
      mc.provider = *provider;
      auto upstream = r.String("upstream_model", mc.name);
      if (!upstream) return std::unexpected(upstream.error());
      mc.upstream_model = upstream->empty() ? mc.name : *upstream;
      auto api = r.String("api", "");
      if (!api) return std::unexpected(api.error());
      mc.api = *api;
      if (auto pr = m.find("pricing"); pr != m.end() && pr->is_object() && pr->contains("as")) {
        // A comparison price: the catalog's price of another model (BuildTargets looks it up).
        const json& as = (*pr)["as"];
        if (!as.is_string() || as.get<std::string>().empty() || pr->size() != 1) {
          return MakeError(ErrorCode::kInvalidArgument,
                           r.path + ".pricing.as must be a model name from the price catalog, "
                                    "alone (e.g. pricing: {as: gpt-4o-mini})");
        }
        mc.price_as = as.get<std::string>();
      } else if (pr != m.end() && !pr->is_null()) {
        auto price = ParsePricing(*pr, r.path + ".pricing");
        if (!price) return std::unexpected(price.error());
        mc.pricing = *price;
      }
      auto window = r.Int("context_window", 0);
      if (!window) return std::unexpected(window.error());
      if (*window < 0) {
        return MakeError(ErrorCode::kInvalidArgument, r.path + ".context_window must be >= 0");
      }
      mc.context_window = *window;
      if (auto sup = m.find("supports"); sup != m.end() && !sup->is_null()) {
        if (!sup->is_object()) {
          return MakeError(ErrorCode::kInvalidArgument,
                           r.path + ".supports must be a mapping {tools, images, "
                                    "response_format, responses, embeddings}");
        }
        if (Status s = OnlyKeys(*sup, r.path + ".supports",
                                {"tools", "images", "response_format", "responses", "embeddings"});
            !s) {
          return std::unexpected(s.error());
        }
        Reader sr{*sup, r.path + ".supports"};
        for (auto [key, slot] : {std::pair{"tools", &mc.supports_tools},
                                 {"images", &mc.supports_images},
                                 {"response_format", &mc.supports_response_format},
                                 {"responses", &mc.supports_responses},
                                 {"embeddings", &mc.supports_embeddings}}) {
          if (!sup->contains(key)) continue;
          auto v = sr.Bool(key, true);
          if (!v) return std::unexpected(v.error());
          *slot = *v;
        }
      }
      if (auto kw = m.find("keep_warm"); kw != m.end() && !kw->is_null()) {
        auto keep_warm = ParseKeepWarm(*kw, r.path);
        if (!keep_warm) return std::unexpected(keep_warm.error());
        config.keep_warm[mc.name] = *keep_warm;
      }
      config.models.push_back(std::move(mc));
    }
  }
  if (auto it = root.find("alerts"); it != root.end()) config.alerts = *it;
  {
    const json none;
    auto routers = root.find("routers");
    auto routing = root.find("routing");
    // A router's keep_warm is the gateway's (the router module knows nothing of pings): read
    // here and taken out of what the router module parses.
    json routers_for_router = routers == root.end() ? none : *routers;
    if (routers_for_router.is_array()) {
      for (size_t i = 0; i < routers_for_router.size(); ++i) {
        json& entry = routers_for_router[i];
        if (!entry.is_object()) continue;
        auto kw = entry.find("keep_warm");
        if (kw == entry.end()) continue;
        if (!kw->is_null()) {
          const std::string path = "routers[" + std::to_string(i) + "]";
          auto keep_warm = ParseKeepWarm(*kw, path);
          if (!keep_warm) return std::unexpected(keep_warm.error());
          auto name = entry.find("name");
          if (name == entry.end() || !name->is_string()) {
            return MakeError(ErrorCode::kInvalidArgument, path + ".name must be a string");
          }
          config.keep_warm[name->get<std::string>()] = *keep_warm;
        }
        entry.erase("keep_warm");
      }
    }
    auto parsed = router::ParseRoutingConfig(routers_for_router,
                                             routing == root.end() ? none : *routing);
    if (!parsed) return std::unexpected(parsed.error());
    config.routing = std::move(*parsed);
  }
  return config;
}

bool IsNameChar(char c, bool first) {
  return c == '_' || std::isalpha(static_cast<unsigned char>(c)) ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

namespace {

// Where a ${...} reference stands in the YAML text, which decides how its value is written.
enum class YamlContext { kPlain, kDoubleQuoted, kSingleQuoted, kComment };

// The value as it must appear inside a quoted scalar to read back as itself (a password with a
// quote or a backslash).
// In a double-quoted scalar every control character is escaped: a raw line break would be
// folded into a space, and YAML allows no other raw control character there.
void AppendQuotedValue(YamlContext context, std::string_view value, std::string& out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (const char c : value) {
    if (context == YamlContext::kDoubleQuoted) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '\n') { out += "\\n"; continue; }
      if (c == '\t') { out += "\\t"; continue; }
      if (c == '\r') { out += "\\r"; continue; }
      if (u < 0x20 || u == 0x7f) {
        out += "\\x";
        out.push_back(kHex[u >> 4]);
        out.push_back(kHex[u & 0xf]);
        continue;
      }
      if (c == '"' || c == '\\') out.push_back('\\');
    }
    if (context == YamlContext::kSingleQuoted && c == '\'') out.push_back('\'');
    out.push_back(c);
  }
}

// True when `value`, written as a plain (unquoted) scalar, would not read back as itself: YAML
// would see a comment, a mapping, a flow collection, an anchor, a tag or a block scalar in it.
// (A password with a '#' would silently lose everything after it.)
bool NeedsQuotes(std::string_view value) {
  if (value.empty()) return false;
  if (value.front() == ' ' || value.back() == ' ' || value.front() == '-' || value.front() == '?') {
    return true;
  }
  return value.find_first_of(":#{}[],\"'\n\r\t&*!|>%@`") != std::string_view::npos;
}

// True when a scalar may start after `last_significant`, the last non-blank character before it
// on its line (a line start, a key's ':', a list '-', a flow collection's '[', '{' or ',').
bool StartsScalar(char last_significant) {
  return last_significant == '\n' || last_significant == ':' || last_significant == '-' ||
         last_significant == '[' || last_significant == '{' || last_significant == ',' ||
         last_significant == '?';
}

// True when a reference ending just before text[end] is a whole scalar: it starts where a scalar
// starts and nothing but blanks, a comment or the end of a flow item follows it on its line.
bool WholeScalar(const std::string& text, size_t end, char last_significant) {
  if (!StartsScalar(last_significant)) return false;
  size_t j = end;
  while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
  if (j == text.size()) return true;
  const char c = text[j];
  return c == '\n' || c == '\r' || c == ',' || c == ']' || c == '}' || (c == '#' && j > end);
}

}  // namespace

Result<std::string> InterpolateEnv(const std::string& text, const EnvLookup& env,
                                   std::vector<std::string>* unset) {
  std::string out;
  out.reserve(text.size());
  YamlContext context = YamlContext::kPlain;
  char last_significant = '\n';  // the last non-blank character before this one on its line
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '$' && i + 1 < text.size() && text[i + 1] == '{' && context != YamlContext::kComment) {
      size_t close = text.find('}', i + 2);
      if (close == std::string::npos) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "unterminated ${...} at offset " + std::to_string(i));
      }
      std::string inner = text.substr(i + 2, close - i - 2);
      std::string name = inner;
      std::optional<std::string> fallback;
      if (auto dash = inner.find(":-"); dash != std::string::npos) {
        name = inner.substr(0, dash);
        fallback = inner.substr(dash + 2);
      }
      bool valid = !name.empty();
      for (size_t k = 0; k < name.size() && valid; ++k) valid = IsNameChar(name[k], k == 0);
      if (!valid) {
        return MakeError(ErrorCode::kInvalidArgument, "bad variable reference ${" + inner + "}");
      }
      auto value = env(name);
      std::optional<std::string> text_value;
      if (value && !value->empty()) {
        text_value = std::move(*value);
      } else if (fallback) {
        text_value = std::move(*fallback);
      } else if (unset) {
        unset->push_back(name);
      }
      if (text_value && context == YamlContext::kSingleQuoted &&
          text_value->find_first_of("\r\n") != std::string::npos) {
        // A single-quoted scalar has no escapes: YAML would fold the line break into a space.
        return MakeError(ErrorCode::kInvalidArgument,
                         "the value of ${" + name + "} contains a line break, which a single-"
                         "quoted YAML scalar cannot hold; use double quotes around it in the "
                         "config");
      }
      if (text_value && context != YamlContext::kPlain) {
        AppendQuotedValue(context, *text_value, out);
      } else if (text_value && !NeedsQuotes(*text_value)) {
        out += *text_value;  // as typed: numbers stay numbers, http://${HOST}:8080 works
      } else if (text_value) {
        // A value with YAML syntax in it is written as a double-quoted scalar, which reads back
        // as exactly that text; inside a longer plain scalar that cannot be done.
        if (!WholeScalar(text, close + 1, last_significant)) {
          return MakeError(ErrorCode::kInvalidArgument,
                           "the value of ${" + name + "} contains YAML syntax (one of :#{}[],\"'"
                           " and the like) inside a longer unquoted value; put the whole value in "
                           "double quotes in the config");
        }
        out.push_back('"');
        AppendQuotedValue(YamlContext::kDoubleQuoted, *text_value, out);
        out.push_back('"');
      }
      i = close;
      last_significant = 'x';
      continue;
    }
    out.push_back(c);
    // Track quoting and comments, so that values are escaped where needed and commented-out
    // references are left alone (and not reported as unset).
    switch (context) {
      case YamlContext::kComment:
        if (c == '\n') context = YamlContext::kPlain;
        break;
      case YamlContext::kDoubleQuoted:
        if (c == '\\' && i + 1 < text.size()) {
          out.push_back(text[++i]);  // an escape: the next character does not close
        } else if (c == '"') {
          context = YamlContext::kPlain;
        }
        break;
      case YamlContext::kSingleQuoted:
        if (c == '\'') {
          if (i + 1 < text.size() && text[i + 1] == '\'') {
            out.push_back(text[++i]);  // '' is a quote inside the scalar
          } else {
            context = YamlContext::kPlain;
          }
        }
        break;
      case YamlContext::kPlain: {
        // A quote opens a scalar only where one starts (don't is plain text); # starts a
        // comment at the start of a line or after a blank.
        const bool scalar_start = StartsScalar(last_significant);
        if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
          context = YamlContext::kComment;
        } else if (c == '"' && scalar_start) {
          context = YamlContext::kDoubleQuoted;
        } else if (c == '\'' && scalar_start) {
          context = YamlContext::kSingleQuoted;
        }
        break;
      }
    }
    if (c == '\n') {
      last_significant = '\n';
      if (context == YamlContext::kComment) context = YamlContext::kPlain;
    } else if (c != ' ' && c != '\t') {
      last_significant = c;
    }
  }
  return out;
}

Result<GatewayConfig> ParseConfig(const std::string& yaml_text, const EnvLookup& env,
                                  std::string source) {
  std::vector<std::string> unset;
  auto text = InterpolateEnv(yaml_text, env, &unset);
  if (!text) {
    return MakeError(ErrorCode::kInvalidArgument, source + ": " + text.error().message);
  }
  json root;
  try {
    root = YamlToJson(YAML::Load(*text));
  } catch (const YAML::Exception& e) {
    return MakeError(ErrorCode::kInvalidArgument, source + ": invalid YAML: " + e.what());
  }
  auto config = FromJson(root, source);
  if (!config) {
    // Every error names the file, then the field.
    const std::string& message = config.error().message;
    if (message.rfind(source + ":", 0) == 0) return config;
    return MakeError(config.error().code, source + ": " + message);
  }
  for (const auto& name : unset) {
    // An unset optional session token is the usual case, not worth a warning.
    if (name == "AWS_SESSION_TOKEN") continue;
    config->warnings.push_back("environment variable " + name + " is not set; using \"\"");
  }
  for (ProviderConfig& p : config->providers) config_internal::ResolveAwsCredentials(p, env);
  if (auto s = ValidateConfig(*config); !s) {
    return MakeError(s.error().code, source + ": " + s.error().message);
  }
  return config;
}

Result<GatewayConfig> LoadConfigFile(const std::string& path, const EnvLookup& env) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return MakeError(ErrorCode::kInvalidArgument, "config file " + path + " is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeError(ErrorCode::kNotFound, "cannot open config file " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseConfig(buffer.str(), env, path);
}

GatewayConfig DefaultConfig(const EnvLookup& env, const std::string& bundled_model_path) {
  GatewayConfig config;
  struct Known {
    const char* env;
    const char* name;
    providers::ProviderType type;
    const char* base_url;
    std::vector<const char*> models;
  };
  const Known known[] = {
      {"OPENAI_API_KEY",
       "openai",
       providers::ProviderType::kOpenAI,
       "https://api.openai.com/v1",
       {"gpt-4.1", "gpt-4.1-mini", "gpt-4o", "gpt-4o-mini", "gpt-5", "gpt-5-mini", "o3",
        "o4-mini"}},
      {"ANTHROPIC_API_KEY",
       "anthropic",
       providers::ProviderType::kAnthropic,
       "https://api.anthropic.com",
       {"claude-opus-4-1", "claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5"}},
      {"DEEPSEEK_API_KEY",
       "deepseek",
       providers::ProviderType::kDeepSeek,
       "https://api.deepseek.com/v1",
       {"deepseek-chat"}},
      {"GEMINI_API_KEY",
       "gemini",
       providers::ProviderType::kGeminiOpenAI,
       "https://generativelanguage.googleapis.com/v1beta/openai",
       {"gemini-2.5-pro", "gemini-2.5-flash"}},
      {"OPENROUTER_API_KEY",
       "openrouter",
       providers::ProviderType::kOpenRouter,
       "https://openrouter.ai/api/v1",
       {}},
  };
  for (const Known& k : known) {
    auto key = env(k.env);
    if (!key || key->empty()) continue;
    config.providers.push_back({.name = k.name,
                                .type = std::string(providers::ProviderTypeName(k.type)),
                                .base_url = k.base_url,
                                .api_key = *key});
    for (const char* model : k.models) {
      config.models.push_back({.name = model, .provider = k.name, .upstream_model = model});
    }
  }
  std::error_code ec;
  if (!bundled_model_path.empty() && std::filesystem::exists(bundled_model_path, ec)) {
    config.providers.push_back(
        {.name = "local",
         .type = std::string(providers::ProviderTypeName(providers::ProviderType::kLocal)),
         .model_path = bundled_model_path,
         .kv_cache_tokens = 16384});
    // Priced as a small API model, for comparison (the engine itself charges nothing): the
    // first run then shows what the cache saves in dollars.
    config.models.push_back({.name = "smollm2",
                             .provider = "local",
                             .upstream_model = "smollm2",
                             .price_as = std::string(kBundledComparisonModel)});
  } else {
    config.warnings.push_back("bundled model not found at " + bundled_model_path +
                              " (run scripts/fetch_model.sh); the built-in engine is off");
  }
  if (config.providers.empty()) {
    config.warnings.push_back("no provider configured: set OPENAI_API_KEY, ANTHROPIC_API_KEY, "
                              "DEEPSEEK_API_KEY, ... or pass --config FILE");
  }
  return config;
}

Status ValidateConfig(const GatewayConfig& config) {
  std::set<std::string> providers;
  for (size_t i = 0; i < config.providers.size(); ++i) {
    const auto& p = config.providers[i];
    std::string where = "providers[" + std::to_string(i) + "]";
    if (p.name.empty()) return MakeError(ErrorCode::kInvalidArgument, where + ".name is required");
    if (!providers.insert(p.name).second) {
      return MakeError(ErrorCode::kInvalidArgument, "duplicate provider name \"" + p.name + "\"");
    }
    if (Status s = ValidateProvider(p, where); !s) return s;
  }
  std::set<std::string> models;
  for (size_t i = 0; i < config.models.size(); ++i) {
    const auto& m = config.models[i];
    std::string where = "models[" + std::to_string(i) + "]";
    if (m.name.empty()) return MakeError(ErrorCode::kInvalidArgument, where + ".name is required");
    if (!models.insert(m.name).second) {
      return MakeError(ErrorCode::kInvalidArgument, "duplicate model name \"" + m.name + "\"");
    }
    if (!providers.contains(m.provider)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + ".provider \"" + m.provider + "\" is not a configured provider");
    }
    if (!m.api.empty()) {
      const auto p = std::find_if(config.providers.begin(), config.providers.end(),
                                  [&m](const ProviderConfig& pc) { return pc.name == m.provider; });
      if (p->type != "bedrock") {
        return MakeError(ErrorCode::kInvalidArgument,
                         where + ".api is only for models of bedrock providers");
      }
      if (m.api != "converse" && m.api != "invoke") {
        return MakeError(ErrorCode::kInvalidArgument,
                         where + ".api must be converse or invoke, not \"" + m.api + "\"");
      }
    }
  }
  std::vector<std::string> model_names;
  for (const auto& m : config.models) model_names.push_back(m.name);
  // A key's allow-list names what clients send: configured models and routers.
  std::set<std::string> client_names(model_names.begin(), model_names.end());
  for (const auto& r : config.routing.routers) client_names.insert(r.name);
  for (size_t i = 0; i < config.api_keys.size(); ++i) {
    const auto& allowed = config.api_keys[i].limits.models;
    for (size_t j = 0; j < allowed.size(); ++j) {
      if (client_names.contains(allowed[j])) continue;
      return MakeError(ErrorCode::kInvalidArgument,
                       "server.api_keys[" + std::to_string(i) + "].models[" + std::to_string(j) +
                           "]: \"" + allowed[j] + "\" is not a configured model or router");
    }
  }
  return router::CheckTargets(config.routing, model_names);
}

std::string HashApiKey(std::string_view key) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  EVP_Digest(key.data(), key.size(), digest.data(), &length, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

}  // namespace kvgate::gateway
