// Routing: where each request goes, and in which order to try the alternatives.
//
// The router owns the table of configured targets (a client-visible model name -> provider,
// upstream model, price, caching rules, limits), the routers of the config (names that spread a
// conversation's turns over several targets: cost, fallback, weighted or latency strategies with
// affinity), the health of every target (EWMA latency, error rate, a circuit breaker, Retry-After
// cool-downs), and the cost planner that weighs the cached prefix a conversation would lose before
// it moves it. Its cache model is telemetry::ExpectCached, the one the cache-miss diagnosis uses,
// so what kvgate predicts and what it explains afterwards agree.
//
// It knows no HTTP and no gateway types: the gateway hands it the facts of a request and the
// thread's memory (telemetry::ThreadView), gets back an ordered list of candidates, makes the
// attempts itself and reports each outcome back (ReportAttempt).
//
// Thread safety: every method may be called from any thread concurrently. The table and the
// routers are constant after Create(); health and the learned token ratios are per target, each
// under its own small mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/error.h"
#include "telemetry/diagnosis.h"
#include "telemetry/metrics.h"
#include "telemetry/pricing.h"
#include "telemetry/provider_traits.h"

namespace kvgate::router {

// What a target can do; requests that need more are not sent to it.
struct Capabilities {
  bool tools = true;            // tools / functions
  bool images = true;           // image (and other non-text) content parts
  bool response_format = true;  // response_format other than text
  bool responses = true;        // the OpenAI Responses API (POST /v1/responses) passes through
  bool embeddings = true;       // POST /v1/embeddings passes through
};

// One configured model (models[].name). Constant after construction.
struct Target {
  std::string name;            // what clients send as "model"
  std::string provider;        // providers[].name
  telemetry::ProviderType type = telemetry::ProviderType::kOpenAI;  // its provider's type
  std::string upstream_model;  // what is sent upstream
  std::optional<telemetry::Price> price;  // nullopt: unknown price (cost marked incomplete)
  // The catalog model whose price `price` is when it is a comparison price (`pricing: {as: ...}`:
  // a self-hosted model priced as an API model), "" otherwise.
  std::string price_as;
  telemetry::CacheRules cache_rules;
  int64_t context_window = 0;  // tokens; 0 = unknown (every prompt fits)
  Capabilities capabilities;
  int keys = 1;                // API keys of its provider (1 when it has one or none)
  // The provider's anthropic_auto_cache TTL ("5m" | "1h"; "" off): kvgate marks breakpoints on a
  // request that carries none, so such a turn writes its new input to the cache as a client's
  // breakpoints at the end of the conversation would.
  std::string auto_cache_ttl;
  // Bedrock models: the API they are called through, "converse" or "invoke" ("" otherwise).
  std::string bedrock_api;
};

// The caching rules of a provider type for a model, from the catalog (under the type's
// ProviderTraits::cache_rules_key).
telemetry::CacheRules CacheRulesFor(const telemetry::PriceCatalog& catalog,
                                    telemetry::ProviderType type, std::string_view model);

enum class Strategy { kCost, kFallback, kWeighted, kLatency };
enum class Affinity { kNone, kThread, kPrefix };
std::string_view StrategyName(Strategy strategy);
std::string_view AffinityName(Affinity affinity);

// A restriction of the targets for the turns that match: every condition must hold. Conditions on
// request features: the estimated prompt tokens, whether the request has tools / images, whether
// it streams, and metadata.KEY values (the request's `metadata` object, strings compared exactly).
struct WhenRule {
  std::optional<int64_t> prompt_tokens_above, prompt_tokens_below;  // strict bounds
  std::optional<bool> tools, images, stream;
  std::vector<std::pair<std::string, std::vector<std::string>>> metadata;  // key, allowed values
  std::vector<std::string> targets;  // the only targets such a turn may use, in this order
};

struct RouterConfig {
  std::string name;                 // a model name clients send; listed in /v1/models
  Strategy strategy = Strategy::kFallback;
  bool cache_aware = true;          // strategy cost: price the cached prefix before switching
  struct TargetRef {
    std::string model;              // a models[].name
    int weight = 1;                 // strategy weighted
  };
  std::vector<TargetRef> targets;   // order = preference (fallback order, ties)
  std::vector<int> fallback_statuses = {429, 500, 502, 503, 504, 529};
  bool fallback_on_timeout = true;
  bool fallback_on_connect = true;
  int retries = 1;                  // same target, before falling back
  Affinity affinity = Affinity::kThread;
  int horizon_turns = 4;            // turns ahead the cost planner weighs
  // horizon_turns: auto. A conversation that has run n turns is expected to run about as many
  // more: the planner weighs max(4, n) turns ahead (at most 32), so long threads move to the
  // target that is cheapest warm, young ones do not pay a switch they will not recover.
  bool horizon_auto = false;
  std::vector<WhenRule> when;       // the first rule that matches restricts the targets
  // affinity thread: how long a thread stays bound to its target and key after its last turn.
  int64_t affinity_ttl_seconds = 3600;
  // affinity prefix: score = cached blocks - prefix_load_weight * requests queued or running on
  // the replica (the form the NVIDIA Dynamo KV router uses); lookups slower than
  // prefix_lookup_timeout_ms are given up (the least-loaded replica wins then).
  double prefix_load_weight = 4.0;
  int prefix_lookup_timeout_ms = 5;
};

// Circuit breaker, error window and retry timing, shared by every target.
struct HealthOptions {
  int failures_to_open = 5;          // consecutive failures that open a target's circuit
  double error_rate_to_open = 0.5;   // or this error rate over the window...
  int min_requests = 10;             // ...once the window holds at least this many attempts
  std::chrono::seconds window{60};
  std::chrono::milliseconds cooldown{30'000};  // open -> half-open (one probe)
  double ewma_weight = 0.2;          // weight of a new latency sample
  std::chrono::milliseconds backoff{200};      // first retry's base delay, doubled each retry
  // A Retry-After longer than this is not waited for: the target cools down for that long and
  // the request falls back to the next target at once.
  std::chrono::milliseconds max_retry_wait{2'000};
};

struct RoutingConfig {
  std::vector<RouterConfig> routers;
  HealthOptions health;
};

// Parses the config's `routers:` list and `routing:` section (both may be null). Errors name the
// field ("routers[0].targets[1].model: ..."). Target names are checked against the table by
// CheckTargets / Router::Create.
Result<RoutingConfig> ParseRoutingConfig(const nlohmann::json& routers,
                                         const nlohmann::json& routing);
// Every router target (and when-rule target) must name a configured model that is not itself a
// router; router names must not clash with model names or each other.
Status CheckTargets(const RoutingConfig& config, const std::vector<std::string>& model_names);

// An exact answer from an engine (the built-in one, or a kvgate engine replica) about this
// prompt, gathered by the gateway before routing.
struct EngineProbe {
  size_t target = 0;           // index in Router::targets()
  int64_t prompt_tokens = 0;   // the prompt, tokenized by the engine
  int64_t cached_tokens = 0;   // how much of it the engine's prefix cache holds right now
  int64_t load = 0;            // requests running + waiting on it
  // The engine's KV block size in tokens, the unit its prefix cache reuses (prefix affinity
  // scores replicas in blocks); 0 when the engine did not say (cached tokens then count one each).
  int64_t block_tokens = 0;
};

// What the router needs to know about a request. Cheap to build: the gateway fills the feature
// flags from the raw body; fingerprint and probes only for routers that use them.
struct RequestFacts {
  std::string_view model;          // what the client asked for
  std::string_view thread_id;      // "" when none
  std::string_view pinned_target;  // header x-kvgate-route-target, "" when none
  int64_t now_us = 0;              // wall clock
  bool stream = false;
  bool tools = false;
  bool images = false;
  bool response_format = false;    // a response_format other than text
  bool responses_api = false;      // a Responses API request (needs Capabilities::responses)
  bool embeddings_api = false;     // an embeddings request (needs Capabilities::embeddings)
  bool cache_breakpoints = false;  // cache_control markers (breakpoint caches cache only those)
  int64_t max_output_tokens = 0;   // 0 when the request sets none
  uint64_t prompt_bytes = 0;       // bytes of the prompt (fingerprint total, else the body)
  // The prompt's fingerprint, for routers with a thread (cache estimates); may be null.
  std::shared_ptr<const telemetry::PromptFingerprint> fingerprint;
  std::vector<std::pair<std::string, std::string>> metadata;  // string values of `metadata`
  std::vector<EngineProbe> probes;
};

// One place the request may go.
struct Candidate {
  size_t target = 0;   // index in Router::targets()
  int key = 0;         // which API key of the target's provider
  bool eligible = true;
  std::string why_not;                     // when not eligible, in words
  std::optional<int64_t> prompt_tokens;    // estimated (exact from an engine probe)
  std::optional<int64_t> cached_tokens;    // estimated cache reads there
  std::optional<int64_t> cost_pico;        // estimated cost of this turn there
  // Where prompt_tokens came from: "tokenizer" (the engine counted it), "learned" (the target's
  // own bytes-per-token ratio), "thread" (the ratio the thread's text showed on the target it
  // was on), "other_targets" (the ratios the other targets learned), "default"; "" when nothing
  // was estimated.
  std::string_view ratio_source;
  // What this turn would be there: "warm" (the thread's last turn there is within the TTL),
  // "after_expiry" (it is not), "first_use" (the thread has not been there); "" when unknown.
  std::string_view turn;
};

struct RouteDecision {
  const RouterConfig* router = nullptr;  // null: the client named a plain model
  // Eligible candidates first, in the order to try them; then the ineligible ones (for the
  // record). Never empty for a known model.
  std::vector<Candidate> candidates;
  size_t eligible = 0;
  std::string reason;       // in words, e.g. "stayed on sonnet: moving to gpt-4o-mini would ..."
  std::string reason_code;  // a short label for metrics ("only_target", "stayed_warm", ...)
  bool moved = false;       // the first choice differs from the thread's bound target
  bool pinned = false;      // the x-kvgate-route-target header chose it
};

// How an attempt ended, as far as health and fallback care.
enum class Failure {
  kNone,     // answered
  kStatus,   // the upstream answered an error status (see status)
  kTimeout,  // no answer in time
  kConnect,  // could not connect / TLS / reset before answering
  kOther,    // nothing another target could do better (the request itself is at fault)
};

struct AttemptOutcome {
  size_t target = 0;
  Failure failure = Failure::kNone;
  int status = 0;                           // the upstream's status, 0 when none
  std::optional<int64_t> retry_after_ms;    // the upstream's Retry-After
  int64_t latency_us = 0;
  std::optional<int64_t> ttft_us;
};

class Router {
 public:
  // `targets` is the table (names unique); `config` must pass CheckTargets against it.
  // `registry` (optional) gets the routing metrics: kvgate_route_decisions_total{router,
  // strategy,reason}, kvgate_upstream_attempts_total{target,outcome}, kvgate_circuit_open{target},
  // kvgate_route_prediction_error_ratio{router,turn} (|estimated - billed| / billed per routed
  // turn; turn: warm, after_expiry or first_use, as Candidate::turn).
  static Result<std::unique_ptr<Router>> Create(std::vector<Target> targets, RoutingConfig config,
                                                const Clock& clock,
                                                telemetry::MetricsRegistry* registry = nullptr);
  ~Router();

  const std::vector<Target>& targets() const;
  const std::vector<RouterConfig>& routers() const;
  // The target or router a client-visible name means (nullptr / nullopt when it means nothing).
  std::optional<size_t> FindTarget(std::string_view name) const;
  const RouterConfig* FindRouter(std::string_view name) const;
  // True when routing `model` can use the prompt's fingerprint or engine probes (a router with
  // a cost strategy or prefix affinity): the gateway computes them only then.
  bool WantsFingerprint(std::string_view model) const;
  bool WantsProbes(std::string_view model) const;
  // The targets whose engines a prefix-affinity router would ask (empty for anything else).
  std::vector<size_t> ProbeTargets(std::string_view model) const;

  // Errors: kNotFound for an unknown model; kInvalidArgument for a pinned target that is not one
  // of the router's targets (message names the header). A decision with no eligible candidate
  // is not an error: the gateway answers 503 with the reasons.
  Result<RouteDecision> Route(const RequestFacts& facts, const telemetry::ThreadView& thread) const;

  // Health. Just before an attempt on `target`: false when its circuit is half-open and another
  // request already took the probe (skip it). Every BeginAttempt is followed by ReportAttempt
  // with the outcome.
  // `probe_gate` false: counted in flight, never refused (a plain model has nowhere else to go).
  bool BeginAttempt(size_t target, bool probe_gate = true);
  void ReportAttempt(const AttemptOutcome& outcome);
  // Whether a failed attempt should be tried again elsewhere (or on the same target) under
  // `router`'s fallback_on. A plain model (router == nullptr) retries nothing.
  bool ShouldFallBack(const RouterConfig* router, const AttemptOutcome& outcome) const;
  // How long to wait before retry number `retry` (1-based) on the same target: the backoff with
  // jitter, or the Retry-After when it is shorter than HealthOptions::max_retry_wait; nullopt
  // when the Retry-After is longer (fall back instead).
  std::optional<std::chrono::milliseconds> RetryDelay(int retry,
                                                      std::optional<int64_t> retry_after_ms) const;

  // Learning from a recorded turn on `target`: its bytes-per-token ratio (prompt bytes / input
  // tokens), and, for a routed turn, the planner's prediction error against the billed cost.
  void Learn(size_t target, uint64_t prompt_bytes, const telemetry::RequestRecord& record);

  // The decision as stored with the turn (RequestRecord::route): JSON text.
  std::string DecisionText(const RouteDecision& decision) const;
  // What the gateway reads back from the decision once the turn is over, `answered_by` being
  // the target that answered (RequestRecord::route_facts).
  telemetry::RequestRecord::RouteFacts Facts(const RouteDecision& decision,
                                             std::string_view answered_by) const;
  // GET /api/routes: every target's health (circuit, EWMA latency, error rate, cool-down) and
  // every router's configuration.
  nlohmann::json Describe() const;

 private:
  struct State;
  explicit Router(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvgate::router
