// kvgate's configuration: the YAML file of `kvgate serve --config FILE`, or defaults from the
// environment when no file is given. Loading is pure: it reads the file and the environment it is
// handed and returns a value or a precise error; nothing is started here.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "router/router.h"
#include "telemetry/otlp/exporter.h"
#include "telemetry/pricing.h"

namespace kvgate::gateway {

struct ProviderConfig {
  std::string name;      // unique, referenced by models
  std::string type;      // a provider type's name (telemetry::ProviderTypeName): openai |
                         // anthropic | deepseek | vllm | sglang | llamacpp | openrouter |
                         // gemini-openai | local
  std::string base_url;  // e.g. https://api.openai.com/v1 (empty for local)
  std::string api_key;   // may be empty (local servers)
  // Several keys of one provider (api_keys: [...]; api_key is then empty): a thread sticks to the
  // key that served it (router affinity), others are spread over them.
  std::vector<std::string> api_keys;
  // Only for type bedrock: the AWS region (signing scope; the default base_url
  // https://bedrock-runtime.{region}.amazonaws.com) and the credentials SigV4 signs with. Left
  // empty in the config, they come from the AWS environment variables, else the shared
  // credentials file (ResolveAwsCredentials). An api_key instead is a Bedrock API key, sent as a
  // bearer token with no signature.
  std::string region;
  std::string aws_access_key_id;
  std::string aws_secret_access_key;
  std::string aws_session_token;
  // Only for type local: the GGUF model file, the KV pool size in tokens (0: 8192 on cpu; on cuda
  // gpu_memory_fraction of the GPU memory left after the weights), the device (cpu | cuda) and the
  // CPU threads (0: one per core).
  std::string model_path;
  int64_t kv_cache_tokens = 0;
  // Only for type local: the KV cache's element type, f16 | bf16 | int8 | fp8 (int8 and fp8 hold
  // about twice the tokens in the same memory; docs/engine.md has their measured quality). The
  // cuda backend serves f16 only.
  std::string kv_cache_dtype = "f16";
  std::string device = "cpu";
  double gpu_memory_fraction = 0.9;  // (0, 1]
  // device cuda only: record decode steps as CUDA graphs (EngineOptions::cuda_graphs). Off by
  // default: built and unit-tested without a GPU, not yet run on one.
  bool cuda_graphs = false;
  // device cuda only: MatMul in FP8 (EngineOptions::fp8_gemm). Off by default: built, never run
  // on a GPU; its accuracy on the bundled model is in docs/engine.md.
  bool fp8_gemm = false;
  int threads = 0;
  // Only for type local: the KV offload tier, which keeps the blocks the KV pool evicts
  // (engine.h): `offload: {disk: PATH, bytes: N}`, a file of at most N bytes, or
  // `offload: {host_bytes: N}`, host memory (pinned on cuda). Empty path and 0: none.
  std::string offload_disk;
  int64_t offload_bytes = 0;
  int64_t offload_host_bytes = 0;
  // Only for type local: the completion tokens of a request without max_tokens, at most; it also
  // stops at the end of the model's context. 0: the rest of the context, as OpenAI.
  int64_t max_output_tokens_default = 4096;
  // Only for type local: whether the gateway keys share one prefix cache. Off (the default), each
  // key's prompts are cached under a salt of its own (local_provider.h, PrefixCacheSalt), so a key
  // cannot learn from its cache hits what another key's prompts were; on, every key reuses every
  // other's cached prefixes (a team that trusts itself and wants the hits).
  bool share_prefix_cache_across_keys = false;
  // Cache helpers (docs/configuration.md), off by default. `prompt_cache_key: thread` (type
  // openai): a thread's requests that carry no prompt_cache_key get one derived from the thread
  // id. `anthropic_auto_cache: true | 5m | 1h | {ttl: 5m | 1h}` (type anthropic): a request with
  // no cache_control gets breakpoints at the end of its system prompt and last message; the TTL
  // ("" = off) is 5m for `true`.
  bool prompt_cache_key_thread = false;
  std::string anthropic_auto_cache_ttl;
  // `anthropic_cache_diagnostics: true` (type anthropic): each request of a thread names the
  // thread's previous message on this provider (`diagnostics: {previous_message_id}`), so that
  // Anthropic reports why its cache missed; stored beside kvgate's own diagnosis.
  bool anthropic_cache_diagnostics = false;
};

// The provider's type, nullopt for a name that is none (ValidateConfig refuses those).
std::optional<telemetry::ProviderType> TypeOf(const ProviderConfig& p);
// Whether the provider is the built-in engine (type local): this process hosts it.
bool HostsEngine(const ProviderConfig& p);

struct ModelConfig {
  std::string name;            // what clients send as "model"
  std::string provider;        // a ProviderConfig::name
  std::string upstream_model;  // what is sent upstream (defaults to name)
  // Only for bedrock providers: "converse" (the default) or "invoke" (InvokeModel with
  // Anthropic's body); "" for other types.
  std::string api;
  std::optional<telemetry::Price> pricing;  // overrides the catalog
  // `pricing: {as: MODEL}`: priced at the catalog's price of another model, a comparison price
  // (what the same tokens would cost there; a self-hosted model has no per-token price). "" when
  // not set.
  std::string price_as;
  int64_t context_window = 0;  // tokens; 0: the catalog's (or the engine's), else unknown
  // What the model can do, where it differs from its provider type's defaults (routers send a
  // request only where it can be served). responses / embeddings: whether its provider serves
  // POST /v1/responses / /v1/embeddings (embeddings never for anthropic and local providers,
  // which serve the Responses API by translation).
  std::optional<bool> supports_tools, supports_images, supports_response_format;
  std::optional<bool> supports_responses, supports_embeddings;
};

// The limits of one gateway key (server.api_keys objects, keys made through /api/keys). Zero
// means "no limit" for the counts; no max_budget means no budget.
// keep_warm: of a model or a router (docs/keep-warm.md): pings kvgate sends shortly before a
// thread's cached prefix expires, when the next turn is likely enough to come to pay for them.
struct KeepWarmConfig {
  bool enabled = false;
  // The most all pings of this model or router may cost per UTC day (pings are skipped rather than
  // going over it).
  double max_usd_per_day = 5.0;
  // Pings in a row without a client turn of the thread between them, after which the thread is
  // taken to have ended and gets no more.
  int max_pings_per_thread = 3;
  // Where the provider offers a longer cache TTL at a higher write rate (Anthropic's 1 hour),
  // kvgate chooses per thread, from the same gap evidence, whether its requests write with it
  // (keep_warm_policy.h, ExpectedWriteCosts): their cache breakpoints that name no TTL get the
  // long one. A request whose breakpoints name a TTL is left as the client sent it.
  bool choose_write_ttl = true;
};

struct KeyLimits {
  std::vector<std::string> models;        // client-facing model or router names; empty: any
  std::optional<int64_t> max_budget_pico;  // pico-USD per budget period (lifetime without one)
  int64_t budget_duration_s = 0;          // 0: the budget never resets
  int64_t rpm = 0, tpm = 0, max_parallel = 0;
  bool limited() const {
    return max_budget_pico.has_value() || rpm > 0 || tpm > 0 || max_parallel > 0;
  }
};

// One entry of server.api_keys: a bare string (no name, no limits) or an object.
struct ApiKeyConfig {
  std::string name;      // "" for a bare string key
  std::string key_hash;  // HashApiKey(key): the secret itself is not kept
  KeyLimits limits;
};

struct GatewayConfig {
  // server
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 8080;
  int threads = 0;                        // 0 = one per core
  std::string admin_token;                // empty: /api/* is open (only safe on loopback)
  std::vector<std::string> api_key_hashes;  // SHA-256 hex of gateway keys; empty: keys off
  std::vector<ApiKeyConfig> api_keys;       // the same keys in order, with names and limits
  size_t body_limit = 8 * 1024 * 1024;
  std::chrono::milliseconds upstream_timeout{600'000};   // request sent -> response headers
  std::chrono::milliseconds upstream_connect_timeout{10'000};
  std::chrono::milliseconds upstream_pool_idle_timeout{60'000};  // unused keep-alive -> closed
  std::chrono::milliseconds drain_timeout{30'000};
  // storage: the telemetry database is the SQLite file at sqlite_path unless `postgres` (a libpq
  // connection string) is set; the config refuses both at once.
  std::string sqlite_path = "./kvgate.db";
  std::string postgres;
  // Where the crash journal's files go (telemetry::StoreOptions::journal_path): "" = beside the
  // SQLite file; with PostgreSQL "" means "./kvgate-journal" (a local path, one per process).
  std::string journal_path;
  // Group commit: how long the telemetry writer gathers records before one transaction
  // (telemetry::StoreOptions::commit_interval). 0 commits as soon as the writer wakes.
  std::chrono::milliseconds commit_interval{20};
  // The crash journal (telemetry::StoreOptions::journal): on unless the operator turns it off.
  bool journal = true;
  // With postgres: read a thread's latest stored turn before routing or diagnosing it, so that
  // replicas see each other's turns (gateway::Recorder shared_threads; docs/deployment.md). Off
  // saves a database read per threaded turn where the load balancer keeps a thread on one replica.
  bool shared_threads = true;
  // diagnosis: `excerpts` keeps the start of each threaded turn's prompt (secrets redacted) to
  // show what changed in a prompt_changed diagnosis (gateway::Recorder::KeepPromptTexts); false
  // keeps and stores no prompt text at all.
  bool diagnosis_excerpts = true;
  // `threads: {auto: ...}`: requests that name no thread join the thread whose last turn they
  // continue (gateway/auto_threads.h); false turns the inference off.
  bool auto_threads = true;
  // catalog
  std::string price_catalog_path;  // optional extra JSON catalog (kvgate or LiteLLM field names)
  // Optional overrides of the catalog's caching rules per provider type (`pricing.caching_rules`),
  // e.g. {"openai": {"ttl_seconds": 86400}} for prompt_cache_retention: 24h. Null when absent.
  nlohmann::json caching_rules;
  std::vector<ProviderConfig> providers;
  std::vector<ModelConfig> models;
  // keep_warm of the models and routers that set it, by their name (enabled or not).
  std::map<std::string, KeepWarmConfig> keep_warm;
  // The `routers:` list and the `routing:` section, parsed (router/router.h).
  router::RoutingConfig routing;
  // telemetry.otlp: OpenTelemetry export (docs/observability.md); nullopt: off.
  std::optional<telemetry::otlp::ExporterOptions> otlp;
  // The `alerts:` section as JSON, handed to the monitors module unchanged.
  nlohmann::json alerts;
  // Where the config came from, and what the operator should be told at startup.
  std::string source = "<defaults>";
  std::vector<std::string> warnings;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup ProcessEnv();

// Replaces ${NAME} and ${NAME:-default} in `text`. An unset variable without a default becomes ""
// and its name is appended to `unset` (the caller warns: a config listing three providers should
// still start when only one key is set). A malformed reference ("${", "${1X}") is an error.
// Values always read back as themselves: escaped inside a quoted scalar; written as typed in an
// unquoted one, unless they contain YAML syntax (a password with '#' or ': '), which makes an
// unquoted reference that is the whole value a double-quoted scalar, and one inside a longer
// unquoted value an error.
Result<std::string> InterpolateEnv(const std::string& text, const EnvLookup& env,
                                   std::vector<std::string>* unset = nullptr);

// Parses YAML text (after interpolation) into a config. Errors name the field path.
Result<GatewayConfig> ParseConfig(const std::string& yaml_text, const EnvLookup& env,
                                  std::string source = "<string>");
Result<GatewayConfig> LoadConfigFile(const std::string& path, const EnvLookup& env);

// The API model the bundled model is priced as in the default config (a comparison price).
inline constexpr std::string_view kBundledComparisonModel = "gpt-4o-mini";

// No config file: listen on 127.0.0.1:8080, ./kvgate.db, a provider for each of OPENAI_API_KEY,
// ANTHROPIC_API_KEY, DEEPSEEK_API_KEY, OPENROUTER_API_KEY, GEMINI_API_KEY that is set (with the
// catalog's models of that provider), and the bundled model on the built-in engine when
// `bundled_model_path` exists.
GatewayConfig DefaultConfig(const EnvLookup& env, const std::string& bundled_model_path);

// Validates cross references (models -> providers, router targets -> models, unique names, known
// types, URLs).
Status ValidateConfig(const GatewayConfig& config);

// Bounds on a key's limits, the same for the config file, POST /api/keys and the keys read back
// from the database: budgets fit pico-USD in an int64, periods fit microseconds, and the counts
// stay exact as doubles (the token buckets') and far from int64's end.
inline constexpr double kMaxKeyBudgetUsd = 1'000'000;
inline constexpr int64_t kMaxBudgetDurationSeconds = 3650 * 86400;
inline constexpr int64_t kMaxKeyRpm = 1'000'000'000;
inline constexpr int64_t kMaxKeyTpm = 1'000'000'000'000;
inline constexpr int64_t kMaxKeyParallel = 1'000'000;

// The limit fields of a key object (models, max_budget_usd, budget_duration, rpm, tpm,
// max_parallel; config_keys.cc), the form POST /api/keys takes too. `known_extra` are further
// keys the caller reads itself (name, key); any other key is an error. Errors name
// "<path>.<field>".
Result<KeyLimits> ParseKeyLimits(const nlohmann::json& object, const std::string& path,
                                 std::initializer_list<std::string_view> known_extra);
// server.api_keys: strings and objects ({name?, key, limits...}), errors naming the entry.
Result<std::vector<ApiKeyConfig>> ParseApiKeys(const nlohmann::json& list);
// "45s", "30m", "1h", "30d" -> seconds, at most kMaxBudgetDurationSeconds; kInvalidArgument
// otherwise.
Result<int64_t> ParseBudgetDuration(const nlohmann::json& value, const std::string& path);
// A key's optional name (config and POST /api/keys alike): 1-64 letters, digits, '-', '_' or
// '.', since names appear in metric labels, URLs and logs. Errors name "<path>".
Status ValidateKeyName(const std::string& name, const std::string& path);

// SHA-256 hex of a gateway API key, the form stored in memory and logged as key id prefix.
std::string HashApiKey(std::string_view key);

}  // namespace kvgate::gateway
