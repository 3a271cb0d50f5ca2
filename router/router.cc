#include "router/router.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include "common/json_writer.h"
#include "common/mutex.h"
#include "router/eligibility.h"
#include "router/state.h"
#include "router/strategy.h"

namespace kvgate::router {

using nlohmann::json;
using internal::TargetHealth;

telemetry::CacheRules CacheRulesFor(const telemetry::PriceCatalog& catalog,
                                    telemetry::ProviderType type, std::string_view model) {
  telemetry::CacheRules rules;
  auto rule = catalog.FindCachingRule(telemetry::TraitsOf(type).cache_rules_key);
  if (!rule) return rules;
  rules.automatic = rule->automatic;
  rules.min_tokens = rule->MinCacheableTokensFor(model);
  rules.granularity = std::max<int64_t>(1, rule->granularity_tokens);
  // nullopt for caches without time-based expiry (self-hosted engines): never "expired".
  rules.ttl_seconds = rule->ttl_seconds;
  if (rule->max_ttl_seconds) rules.long_ttl_seconds = *rule->max_ttl_seconds;
  return rules;
}

// The state lives in router/state.h, where eligibility and the strategies can read it.
struct Router::State : internal::RouterState {
  using RouterState::RouterState;
};

Router::Router(std::unique_ptr<State> state) : state_(std::move(state)) {}
Router::~Router() = default;

Result<std::unique_ptr<Router>> Router::Create(std::vector<Target> targets, RoutingConfig config,
                                               const Clock& clock,
                                               telemetry::MetricsRegistry* registry) {
  std::vector<std::string> names;
  for (const Target& t : targets) names.push_back(t.name);
  if (Status s = CheckTargets(config, names); !s) return std::unexpected(s.error());
  auto state = std::make_unique<State>(clock, std::move(targets), std::move(config));
  for (size_t i = 0; i < state->targets.size(); ++i) {
    if (!state->target_index.emplace(state->targets[i].name, i).second) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "two models are named " + state->targets[i].name);
    }
    state->health.push_back(std::make_unique<TargetHealth>(state->health_options));
    state->learned.push_back(std::make_unique<internal::Learned>());
  }
  for (size_t r = 0; r < state->routers.size(); ++r) {
    state->router_index.emplace(state->routers[r].name, r);
    std::vector<size_t> indices;
    for (const auto& ref : state->routers[r].targets) {
      indices.push_back(state->target_index.at(ref.model));
    }
    state->router_targets.push_back(std::move(indices));
  }
  if (registry != nullptr) {
    auto decisions = registry->AddCounter("kvgate_route_decisions_total",
                                          "Routing decisions of routers, by the reason of the "
                                          "first choice.",
                                          {"router", "strategy", "reason"});
    auto attempts = registry->AddCounter("kvgate_upstream_attempts_total",
                                         "Upstream attempts per target and how they ended (ok, "
                                         "http_<status>, timeout, connect, other).",
                                         {"target", "outcome"});
    auto error = registry->AddHistogram(
        "kvgate_route_prediction_error_ratio",
        "Cost planner: |estimated - billed| / billed cost of each routed turn, by the kind of "
        "turn on the target that answered (warm, after_expiry, first_use).",
        {"router", "turn"},
        {0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0});
    if (!decisions) return std::unexpected(decisions.error());
    if (!attempts) return std::unexpected(attempts.error());
    if (!error) return std::unexpected(error.error());
    state->decisions = *decisions;
    state->attempts = *attempts;
    state->prediction_error = *error;
    // Circuit states move with time (open -> half-open), so they are read at scrape time.
    registry->AddSection([s = state.get()](std::string& out) {
      out += "# HELP kvgate_circuit_open 1 while a target's circuit is open or half-open.\n"
             "# TYPE kvgate_circuit_open gauge\n";
      const int64_t now = s->Now();
      for (size_t i = 0; i < s->targets.size(); ++i) {
        const bool open = s->health[i]->snapshot(now).circuit != TargetHealth::Circuit::kClosed;
        out += "kvgate_circuit_open{target=\"" + telemetry::EscapeLabelValue(s->targets[i].name) +
               "\"} " + (open ? "1" : "0") + "\n";
      }
    });
  }
  return std::unique_ptr<Router>(new Router(std::move(state)));
}

const std::vector<Target>& Router::targets() const { return state_->targets; }
const std::vector<RouterConfig>& Router::routers() const { return state_->routers; }

std::optional<size_t> Router::FindTarget(std::string_view name) const {
  auto it = state_->target_index.find(std::string(name));
  if (it == state_->target_index.end()) return std::nullopt;
  return it->second;
}

const RouterConfig* Router::FindRouter(std::string_view name) const {
  auto it = state_->router_index.find(std::string(name));
  return it == state_->router_index.end() ? nullptr : &state_->routers[it->second];
}

bool Router::WantsFingerprint(std::string_view model) const { return FindRouter(model) != nullptr; }

std::vector<size_t> Router::ProbeTargets(std::string_view model) const {
  std::vector<size_t> out;
  auto it = state_->router_index.find(std::string(model));
  if (it == state_->router_index.end()) return out;
  const RouterConfig& r = state_->routers[it->second];
  for (size_t t : state_->router_targets[it->second]) {
    // Prefix affinity asks every replica; the cost planner asks the built-in engines, whose
    // answer is exact and costs microseconds.
    if (r.affinity == Affinity::kPrefix || telemetry::IsBuiltInEngine(state_->targets[t].type)) {
      out.push_back(t);
    }
  }
  return out;
}

bool Router::WantsProbes(std::string_view model) const { return !ProbeTargets(model).empty(); }

Result<RouteDecision> Router::Route(const RequestFacts& facts,
                                    const telemetry::ThreadView& thread) const {
  const State& s = *state_;
  Result<internal::Sifted> sifted = internal::Sift(s, facts, thread);
  if (!sifted) return std::unexpected(sifted.error());
  if (sifted->decided) return std::move(*sifted->decided);
  const RouterConfig& r = *sifted->router;
  internal::Slate& slate = sifted->slate;
  const std::vector<Candidate>& ineligible = sifted->ineligible;
  RouteDecision d;
  d.router = &r;
  if (!slate.eligible.empty()) {
    const internal::StrategyContext ctx{.router = r,
                                        .facts = facts,
                                        .thread = thread,
                                        .targets = s.targets,
                                        .health = s.health,
                                        .counter = s.counter};
    internal::Ranking ranking = internal::RankSlate(ctx, sifted->bound, slate);
    d.reason_code = std::move(ranking.reason_code);
    d.reason = std::move(ranking.reason);
    if (!ineligible.empty() && d.reason_code != "affinity") {
      d.reason +=
          "; skipped " + s.targets[ineligible[0].target].name + ": " + ineligible[0].why_not;
    }
  } else {
    d.reason_code = "none_eligible";
    d.reason = "no target can serve this request";
  }
  d.eligible = slate.eligible.size();
  d.candidates = std::move(slate.eligible);
  d.candidates.insert(d.candidates.end(), std::make_move_iterator(sifted->ineligible.begin()),
                      std::make_move_iterator(sifted->ineligible.end()));
  d.moved = d.eligible > 0 && thread.latest &&
            thread.latest->target != s.targets[d.candidates[0].target].name;
  if (s.decisions != nullptr) {
    if (auto* c = s.decisions->WithLabels({r.name, StrategyName(r.strategy), d.reason_code}))
      c->Inc();
  }
  return d;
}

bool Router::BeginAttempt(size_t target, bool probe_gate) {
  return state_->health[target]->Begin(state_->Now(), probe_gate);
}

void Router::ReportAttempt(const AttemptOutcome& outcome) {
  State& s = *state_;
  s.health[outcome.target]->End(outcome, s.Now());
  if (s.attempts == nullptr) return;
  std::string label;
  switch (outcome.failure) {
    case Failure::kNone: label = "ok"; break;
    case Failure::kStatus: label = "http_" + std::to_string(outcome.status); break;
    case Failure::kTimeout: label = "timeout"; break;
    case Failure::kConnect: label = "connect"; break;
    case Failure::kOther: label = "other"; break;
  }
  if (auto* c = s.attempts->WithLabels({s.targets[outcome.target].name, label})) c->Inc();
}

bool Router::ShouldFallBack(const RouterConfig* r, const AttemptOutcome& o) const {
  if (r == nullptr) return false;
  switch (o.failure) {
    case Failure::kStatus:
      return std::find(r->fallback_statuses.begin(), r->fallback_statuses.end(), o.status) !=
             r->fallback_statuses.end();
    case Failure::kTimeout: return r->fallback_on_timeout;
    case Failure::kConnect: return r->fallback_on_connect;
    case Failure::kNone:
    case Failure::kOther: return false;
  }
  return false;
}

std::optional<std::chrono::milliseconds> Router::RetryDelay(
    int retry, std::optional<int64_t> retry_after_ms) const {
  const HealthOptions& h = state_->health_options;
  if (retry_after_ms) {
    if (*retry_after_ms > h.max_retry_wait.count()) return std::nullopt;
    return std::chrono::milliseconds(std::max<int64_t>(0, *retry_after_ms));
  }
  // Exponential backoff with +-50% jitter, so that retries of many clients do not line up.
  const double base = double(h.backoff.count()) * std::pow(2.0, std::max(0, retry - 1));
  const double jitter =
      0.5 + double(internal::Mix(state_->counter.fetch_add(1, std::memory_order_relaxed)) % 1000) / 1000.0;
  return std::chrono::milliseconds(static_cast<int64_t>(base * jitter));
}

void Router::Learn(size_t target, uint64_t prompt_bytes, const telemetry::RequestRecord& record) {
  State& s = *state_;
  if (target >= s.targets.size()) return;
  {
    internal::Learned& l = *s.learned[target];
    MutexLock lock(&l.mu);
    const std::optional<int64_t> input = record.usage.TotalInput();
    if (input && *input > 0 && prompt_bytes > 0) {
      const double ratio = double(prompt_bytes) / double(*input);
      l.bytes_per_token = l.ratio_seen ? l.bytes_per_token + 0.2 * (ratio - l.bytes_per_token) : ratio;
      l.ratio_seen = true;
    }
    if (record.usage.output) {
      const double out = double(*record.usage.output);
      l.output_tokens = l.output_seen ? l.output_tokens + 0.2 * (out - l.output_tokens) : out;
      l.output_seen = true;
    }
  }
  const auto& facts = record.route_facts;
  if (s.prediction_error == nullptr || !facts.estimated_cost_pico || !record.cost.complete ||
      record.cost.total <= 0) {
    return;
  }
  const double error = std::fabs(double(*facts.estimated_cost_pico - record.cost.total)) /
                       double(record.cost.total);
  const std::string_view turn = facts.turn.empty() ? std::string_view("first_use") : facts.turn;
  if (auto* h = s.prediction_error->WithLabels({facts.router, turn})) h->Observe(error);
}

std::string Router::DecisionText(const RouteDecision& d) const {
  // By hand (common/json_writer.h): this is built for every routed request, and a json tree of
  // the candidates cost four times the routing decision itself.
  const State& s = *state_;
  JsonWriter w;
  w.BeginObject();
  w.Key("router").String(d.router ? std::string_view(d.router->name) : std::string_view());
  w.Key("strategy").String(d.router ? StrategyName(d.router->strategy) : "pinned");
  w.Key("target");
  if (d.eligible > 0) {
    w.String(s.targets[d.candidates[0].target].name);
  } else {
    w.Null();
  }
  w.Key("reason").String(d.reason);
  w.Key("reason_code").String(d.reason_code);
  w.Key("moved").Bool(d.moved);
  w.Key("pinned").Bool(d.pinned);
  w.Key("candidates").BeginArray();
  for (const Candidate& c : d.candidates) {
    const Target& t = s.targets[c.target];
    w.BeginObject();
    w.Key("target").String(t.name);
    w.Key("provider").String(t.provider);
    w.Key("model").String(t.upstream_model);
    w.Key("eligible").Bool(c.eligible);
    w.Key("why_not");
    if (c.eligible) {
      w.Null();
    } else {
      w.String(c.why_not);
    }
    w.Key("est_prompt_tokens").OptInt(c.prompt_tokens);
    w.Key("est_cached_tokens").OptInt(c.cached_tokens);
    w.Key("est_cost_usd");
    if (c.cost_pico) {
      w.Double(telemetry::PicoUsdToUsd(*c.cost_pico));
    } else {
      w.Null();
    }
    w.Key("est_cost_pico").OptInt(c.cost_pico);
    w.Key("ratio_source");
    if (c.ratio_source.empty()) {
      w.Null();
    } else {
      w.String(c.ratio_source);
    }
    w.Key("turn");
    if (c.turn.empty()) {
      w.Null();
    } else {
      w.String(c.turn);
    }
    if (t.keys > 1) w.Key("key").Int(c.key);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Take();
}

telemetry::RequestRecord::RouteFacts Router::Facts(const RouteDecision& d,
                                                   std::string_view answered_by) const {
  telemetry::RequestRecord::RouteFacts facts;
  facts.router = d.router ? d.router->name : "";
  facts.reason = d.reason;
  facts.moved = d.moved;
  for (const Candidate& c : d.candidates) {
    if (state_->targets[c.target].name == answered_by) {
      facts.estimated_cost_pico = c.cost_pico;
      facts.turn = std::string(c.turn);
      break;
    }
  }
  return facts;
}

json Router::Describe() const {
  const State& s = *state_;
  const int64_t now = s.Now();
  json targets = json::array();
  for (size_t i = 0; i < s.targets.size(); ++i) {
    const Target& t = s.targets[i];
    const TargetHealth::Snapshot h = s.health[i]->snapshot(now);
    const char* circuit = h.circuit == TargetHealth::Circuit::kClosed   ? "closed"
                          : h.circuit == TargetHealth::Circuit::kOpen ? "open"
                                                                      : "half_open";
    double ratio;
    {
      MutexLock lock(&s.learned[i]->mu);
      ratio = s.learned[i]->bytes_per_token;
    }
    targets.push_back(
        {{"target", t.name}, {"provider", t.provider},
         {"provider_type", std::string(telemetry::ProviderTypeName(t.type))},
         {"upstream_model", t.upstream_model}, {"circuit", circuit},
         {"latency_ms", h.latency_ms ? json(*h.latency_ms) : json()},
         {"ttft_ms", h.ttft_ms ? json(*h.ttft_ms) : json()},
         {"window_attempts", h.window_attempts}, {"window_failures", h.window_failures},
         {"consecutive_failures", h.consecutive_failures}, {"in_flight", h.in_flight},
         {"open_for_s", h.open_until_us > now ? json(double(h.open_until_us - now) / 1e6) : json()},
         {"cooling_for_s",
          h.cooling_until_us > now ? json(double(h.cooling_until_us - now) / 1e6) : json()},
         {"context_window", t.context_window > 0 ? json(t.context_window) : json()},
         {"bytes_per_token", ratio}, {"keys", t.keys}});
  }
  json routers = json::array();
  for (const RouterConfig& r : s.routers) {
    json list = json::array();
    for (const auto& ref : r.targets) list.push_back({{"model", ref.model}, {"weight", ref.weight}});
    json fallback = json::array();
    for (int st : r.fallback_statuses) fallback.push_back(st);
    if (r.fallback_on_timeout) fallback.push_back("timeout");
    if (r.fallback_on_connect) fallback.push_back("connect");
    routers.push_back({{"name", r.name}, {"strategy", StrategyName(r.strategy)},
                       {"cache_aware", r.cache_aware}, {"affinity", AffinityName(r.affinity)},
                       {"targets", list}, {"fallback_on", fallback}, {"retries", r.retries},
                       {"horizon_turns", r.horizon_auto ? json("auto") : json(r.horizon_turns)},
                       {"when_rules", r.when.size()}});
  }
  return json{{"targets", targets}, {"routers", routers}};
}

}  // namespace kvgate::router
