#include "router/router.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <unordered_map>

#include "common/json_writer.h"
#include "common/mutex.h"
#include "router/health.h"
#include "router/planner.h"

namespace kvgate::router {
namespace {

using nlohmann::json;
using internal::PlanEntry;
using internal::TargetHealth;
using internal::TurnEstimate;

// SplitMix64: a cheap, well-spread hash for weighted picks and jitter without shared RNG state.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// What the router has learned about a target from recorded turns.
struct Learned {
  mutable Mutex mu;
  double bytes_per_token GUARDED_BY(mu) = 4.0;  // prompt bytes of minified JSON per input token
  bool ratio_seen GUARDED_BY(mu) = false;
  double output_tokens GUARDED_BY(mu) = 256;  // mean output tokens of its turns
  bool output_seen GUARDED_BY(mu) = false;
};

std::optional<const EngineProbe*> ProbeFor(const RequestFacts& facts, size_t target) {
  for (const EngineProbe& p : facts.probes) {
    if (p.target == target) return &p;
  }
  return std::nullopt;
}

// v[i] = old v[idx[i]].
template <class T>
void Permute(std::vector<T>& v, const std::vector<size_t>& idx) {
  std::vector<T> out;
  out.reserve(v.size());
  for (size_t i : idx) out.push_back(std::move(v[i]));
  v = std::move(out);
}

bool Matches(const WhenRule& rule, const RequestFacts& facts, int64_t prompt_tokens) {
  if (rule.prompt_tokens_above && !(prompt_tokens > *rule.prompt_tokens_above)) return false;
  if (rule.prompt_tokens_below && !(prompt_tokens < *rule.prompt_tokens_below)) return false;
  if (rule.tools && *rule.tools != facts.tools) return false;
  if (rule.images && *rule.images != facts.images) return false;
  if (rule.stream && *rule.stream != facts.stream) return false;
  for (const auto& [key, allowed] : rule.metadata) {
    auto it = std::find_if(facts.metadata.begin(), facts.metadata.end(),
                           [&](const auto& kv) { return kv.first == key; });
    if (it == facts.metadata.end() ||
        std::find(allowed.begin(), allowed.end(), it->second) == allowed.end()) {
      return false;
    }
  }
  return true;
}

}  // namespace

telemetry::CacheRules CacheRulesFor(const telemetry::PriceCatalog& catalog,
                                    std::string_view provider_type, std::string_view model) {
  // kvgate's provider types -> the catalog's caching-rule keys.
  std::string_view key = provider_type;
  if (provider_type == "gemini-openai") key = "gemini";
  if (provider_type == "local") key = "kvgate";
  if (provider_type == "openrouter") key = "openai";
  telemetry::CacheRules rules;
  auto rule = catalog.FindCachingRule(key);
  if (!rule) return rules;
  rules.automatic = rule->automatic;
  rules.min_tokens = rule->MinCacheableTokensFor(model);
  rules.granularity = std::max<int64_t>(1, rule->granularity_tokens);
  // nullopt for caches without time-based expiry (self-hosted engines): never "expired".
  rules.ttl_seconds = rule->ttl_seconds;
  if (rule->max_ttl_seconds) rules.long_ttl_seconds = *rule->max_ttl_seconds;
  return rules;
}

struct Router::State {
  State(const Clock& c, std::vector<Target> t, RoutingConfig config)
      : clock(c), targets(std::move(t)), routers(std::move(config.routers)),
        health_options(config.health) {}

  const Clock& clock;
  const std::vector<Target> targets;
  const std::vector<RouterConfig> routers;
  const HealthOptions health_options;
  std::unordered_map<std::string, size_t> target_index;  // constant after Create
  std::unordered_map<std::string, size_t> router_index;  // constant after Create
  std::vector<std::vector<size_t>> router_targets;       // per router, its targets' indices
  std::vector<std::unique_ptr<TargetHealth>> health;     // per target
  std::vector<std::unique_ptr<Learned>> learned;         // per target
  mutable std::atomic<uint64_t> counter{0};              // round robin, weighted picks, jitter
  telemetry::CounterFamily* decisions = nullptr;
  telemetry::CounterFamily* attempts = nullptr;
  telemetry::HistogramFamily* prediction_error = nullptr;

  int64_t Now() const { return clock.NowUnixMicros(); }

  int64_t PromptTokens(size_t t, const RequestFacts& facts,
                       const telemetry::ThreadView& thread) const {
    if (auto probe = ProbeFor(facts, t)) return (*probe)->prompt_tokens;
    const telemetry::TurnSummary* last = thread.OnTarget(targets[t].name);
    if (last != nullptr && last->total_input && last->fingerprint && facts.fingerprint) {
      const uint64_t last_bytes = std::max<uint64_t>(1, last->fingerprint->TotalBytes());
      return static_cast<int64_t>(double(*last->total_input) * double(facts.prompt_bytes) /
                                  double(last_bytes));
    }
    MutexLock lock(&learned[t]->mu);
    return static_cast<int64_t>(double(facts.prompt_bytes) / learned[t]->bytes_per_token);
  }

  int64_t ExpectedOutput(size_t t, const RequestFacts& facts,
                         const telemetry::ThreadView& thread) const {
    double out;
    if (thread.turns > 0 && thread.mean_output_tokens > 0) {
      out = thread.mean_output_tokens;
    } else {
      MutexLock lock(&learned[t]->mu);
      out = learned[t]->output_tokens;
    }
    int64_t n = static_cast<int64_t>(std::llround(out));
    if (facts.max_output_tokens > 0) n = std::min(n, facts.max_output_tokens);
    return n;
  }

  std::optional<int64_t> ExpectedCached(size_t t, const RequestFacts& facts,
                                        const telemetry::ThreadView& thread,
                                        int64_t prompt_tokens) const {
    if (auto probe = ProbeFor(facts, t)) return (*probe)->cached_tokens;
    const telemetry::TurnSummary* last = thread.OnTarget(targets[t].name);
    if (last == nullptr || !facts.fingerprint) return std::nullopt;
    auto e = telemetry::ExpectCached(*last, *facts.fingerprint, prompt_tokens,
                                     targets[t].cache_rules, facts.now_us);
    if (!e) return std::nullopt;
    return e->Live();
  }

  // The thread's binding for affinity thread: its last turn's target, within the TTL.
  const telemetry::TurnSummary* Bound(const RouterConfig& r, const telemetry::ThreadView& thread,
                                      int64_t now_us) const {
    if (!thread.latest) return nullptr;
    if (now_us - thread.latest->created_at_us > r.affinity_ttl_seconds * 1'000'000) return nullptr;
    return &*thread.latest;
  }

  int KeyFor(size_t t, const RequestFacts& facts, const telemetry::ThreadView& thread,
             const RouterConfig* r) const {
    const int keys = targets[t].keys;
    if (keys <= 1) return 0;
    const bool sticky = r == nullptr || r->affinity != Affinity::kNone;
    if (sticky) {
      const telemetry::TurnSummary* last = thread.OnTarget(targets[t].name);
      const int64_t ttl_us = (r ? r->affinity_ttl_seconds : 3600) * 1'000'000;
      if (last != nullptr && facts.now_us - last->created_at_us <= ttl_us && last->key < keys) {
        return last->key;
      }
      if (!facts.thread_id.empty()) {
        return static_cast<int>(std::hash<std::string_view>{}(facts.thread_id) %
                                static_cast<size_t>(keys));
      }
    }
    return static_cast<int>(counter.fetch_add(1, std::memory_order_relaxed) %
                            static_cast<uint64_t>(keys));
  }
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
    state->learned.push_back(std::make_unique<Learned>());
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
        "Cost planner: |estimated - billed| / billed cost of each routed turn.", {"router"},
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
    if (r.affinity == Affinity::kPrefix || state_->targets[t].provider_type == "local") {
      out.push_back(t);
    }
  }
  return out;
}

bool Router::WantsProbes(std::string_view model) const { return !ProbeTargets(model).empty(); }

Result<RouteDecision> Router::Route(const RequestFacts& facts,
                                    const telemetry::ThreadView& thread) const {
  const State& s = *state_;
  RouteDecision d;
  if (std::optional<size_t> t = FindTarget(facts.model)) {
    if (!facts.pinned_target.empty() && facts.pinned_target != facts.model) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "the x-kvgate-route-target header names " + std::string(facts.pinned_target) +
                           ", but model " + std::string(facts.model) + " is not a router");
    }
    Candidate c;
    c.target = *t;
    c.key = s.KeyFor(*t, facts, thread, nullptr);
    d.candidates.push_back(c);
    d.eligible = 1;
    d.reason_code = "only_target";
    return d;
  }
  auto rit = s.router_index.find(std::string(facts.model));
  if (rit == s.router_index.end()) {
    return MakeError(ErrorCode::kNotFound, "unknown model " + std::string(facts.model));
  }
  const RouterConfig& r = s.routers[rit->second];
  const std::vector<size_t>& indices = s.router_targets[rit->second];
  d.router = &r;
  const telemetry::TurnSummary* bound =
      r.affinity == Affinity::kThread || r.strategy == Strategy::kCost
          ? s.Bound(r, thread, facts.now_us)
          : nullptr;

  if (!facts.pinned_target.empty()) {
    auto it = std::find_if(indices.begin(), indices.end(),
                           [&](size_t t) { return s.targets[t].name == facts.pinned_target; });
    if (it == indices.end()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "the x-kvgate-route-target header names " +
                           std::string(facts.pinned_target) + ", which is not a target of router " +
                           r.name);
    }
    Candidate c;
    c.target = *it;
    c.key = s.KeyFor(*it, facts, thread, &r);
    d.candidates.push_back(c);
    d.eligible = 1;
    d.pinned = true;
    d.reason = "pinned to " + s.targets[*it].name + " by the x-kvgate-route-target header";
    d.reason_code = "pinned";
    d.moved = thread.latest && thread.latest->target != s.targets[*it].name;
    return d;
  }

  // A rough token count for when-rules, before any target is chosen: the thread's last prompt
  // scaled, else bytes at the first target's ratio.
  const int64_t rough_tokens = s.PromptTokens(indices.front(), facts, thread);
  const WhenRule* rule = nullptr;
  size_t rule_index = 0;
  for (size_t w = 0; w < r.when.size(); ++w) {
    if (Matches(r.when[w], facts, rough_tokens)) {
      rule = &r.when[w];
      rule_index = w;
      break;
    }
  }
  std::vector<size_t> order = indices;
  if (rule != nullptr) {  // the rule's targets first, in its order; the rest are excluded below
    std::vector<size_t> ruled;
    for (const std::string& name : rule->targets) ruled.push_back(s.target_index.at(name));
    for (size_t t : indices) {
      if (std::find(ruled.begin(), ruled.end(), t) == ruled.end()) ruled.push_back(t);
    }
    order = std::move(ruled);
  }

  std::vector<Candidate> eligible, ineligible;
  std::vector<TurnEstimate> estimates;  // parallel to `eligible`
  for (size_t t : order) {
    const Target& target = s.targets[t];
    Candidate c;
    c.target = t;
    c.key = s.KeyFor(t, facts, thread, &r);
    const int64_t prompt = s.PromptTokens(t, facts, thread);
    c.prompt_tokens = prompt;
    std::string why;
    if (rule != nullptr &&
        std::find(rule->targets.begin(), rule->targets.end(), target.name) == rule->targets.end()) {
      why = "excluded for this turn by when rule " + std::to_string(rule_index);
    } else if (facts.responses_api && !target.capabilities.responses) {
      why = "does not serve the Responses API (provider type " + target.provider_type + ")";
    } else if (facts.embeddings_api && !target.capabilities.embeddings) {
      why = "does not serve embeddings (provider type " + target.provider_type + ")";
    } else if (facts.tools && !target.capabilities.tools) {
      why = "does not support tools";
    } else if (facts.images && !target.capabilities.images) {
      why = "does not support image or other non-text content";
    } else if (facts.response_format && !target.capabilities.response_format) {
      why = "does not support response_format";
    } else if (target.context_window > 0 &&
               prompt + std::max<int64_t>(facts.max_output_tokens, 1) > target.context_window) {
      why = "a prompt of about " + internal::Thousands(prompt) + " tokens does not fit its " +
            internal::Thousands(target.context_window) + "-token context window";
    } else {
      s.health[t]->Eligible(facts.now_us, &why);
    }
    if (!why.empty()) {
      c.eligible = false;
      c.why_not = std::move(why);
      ineligible.push_back(std::move(c));
      continue;
    }
    const std::optional<int64_t> cached = s.ExpectedCached(t, facts, thread, prompt);
    TurnEstimate e = internal::EstimateTurn(
        target, {.prompt_tokens = prompt, .expected_output = s.ExpectedOutput(t, facts, thread),
                 .cached = cached},
        thread.OnTarget(target.name), facts.cache_breakpoints);
    c.cached_tokens = e.cached;
    if (e.priced) c.cost_pico = e.cost_pico;
    eligible.push_back(std::move(c));
    estimates.push_back(e);
  }

  // Orders `eligible` (and `estimates` with it) by `rank` (ascending), ties kept in order;
  // returns the permutation (new position -> old index) for other parallel lists.
  auto sort_by = [&](const std::vector<double>& rank) {
    std::vector<size_t> idx(eligible.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return rank[a] < rank[b]; });
    Permute(eligible, idx);
    Permute(estimates, idx);
    return idx;
  };
  auto move_to_front = [&](const std::string& name) -> bool {
    for (size_t i = 0; i < eligible.size(); ++i) {
      if (s.targets[eligible[i].target].name != name) continue;
      std::rotate(eligible.begin(), eligible.begin() + i, eligible.begin() + i + 1);
      std::rotate(estimates.begin(), estimates.begin() + i, estimates.begin() + i + 1);
      return true;
    }
    return false;
  };
  auto name_of = [&](size_t i) -> const std::string& { return s.targets[eligible[i].target].name; };

  if (!eligible.empty()) {
    if (r.affinity == Affinity::kPrefix) {
      std::vector<double> rank;
      bool any_probe = false;
      for (const Candidate& c : eligible) {
        auto probe = ProbeFor(facts, c.target);
        const int64_t in_flight = s.health[c.target]->snapshot(facts.now_us).in_flight;
        const int64_t load = probe ? std::max<int64_t>((*probe)->load, in_flight) : in_flight;
        const double blocks = probe ? double((*probe)->cached_tokens) / 16.0 : 0.0;
        any_probe = any_probe || probe.has_value();
        rank.push_back(-(blocks - r.prefix_load_weight * double(load)));
      }
      sort_by(rank);
      auto probe = ProbeFor(facts, eligible[0].target);
      if (any_probe && probe && (*probe)->cached_tokens > 0) {
        d.reason_code = "prefix_hit";
        d.reason = name_of(0) + " holds " + internal::Thousands((*probe)->cached_tokens) + " of " +
                   internal::Thousands((*probe)->prompt_tokens) +
                   " prompt tokens in its prefix cache (load " + std::to_string((*probe)->load) + ")";
      } else {
        d.reason_code = any_probe ? "least_loaded" : "least_loaded_no_lookup";
        d.reason = any_probe ? "no replica holds this prompt's prefix; " + name_of(0) +
                                   " is the least loaded"
                             : "no replica answered the cache lookup in time; " + name_of(0) +
                                   " is the least loaded";
      }
    } else if (r.strategy == Strategy::kCost) {
      if (!r.cache_aware) {
        std::vector<double> rank;
        for (size_t i = 0; i < eligible.size(); ++i) {
          TurnEstimate cold = estimates[i];
          cold.uncached += cold.cached + cold.writes;
          cold.cached = cold.writes = 0;
          const int64_t cost = internal::CostPico(s.targets[eligible[i].target], cold);
          rank.push_back(estimates[i].priced ? double(cost) : 1e30);
        }
        sort_by(rank);
        d.reason_code = "cheapest_list_price";
        d.reason = "cheapest eligible target at list price (cache-blind): " + name_of(0);
      } else {
        const std::string incumbent = thread.latest ? thread.latest->target : "";
        const int h = r.horizon_auto ? std::clamp(thread.turns, 4, 32) : r.horizon_turns;
        std::vector<double> rank;
        std::vector<int64_t> after;
        for (size_t i = 0; i < eligible.size(); ++i) {
          const Target& target = s.targets[eligible[i].target];
          const int64_t future = internal::FutureCostPico(target, estimates[i],
                                                          h - 1, thread,
                                                          facts.cache_breakpoints);
          after.push_back(future);
          double total = estimates[i].priced ? double(estimates[i].cost_pico + future) : 1e30;
          // Ties go to the incumbent: a switch must save something to be worth its churn.
          if (name_of(i) == incumbent) total -= 0.5;
          rank.push_back(total);
        }
        Permute(after, sort_by(rank));
        const TurnEstimate& best = estimates[0];
        size_t inc = eligible.size();
        for (size_t i = 0; i < eligible.size(); ++i) {
          if (name_of(i) == incumbent) inc = i;
        }
        if (inc == 0) {
          // Stayed: name the cheapest-per-turn alternative the planner turned down, if any.
          size_t alt = eligible.size();
          for (size_t i = 1; i < eligible.size(); ++i) {
            if (estimates[i].priced && after[i] < after[0] && (alt == eligible.size() ||
                                                               after[i] < after[alt])) {
              alt = i;
            }
          }
          d.reason_code = "stayed_warm";
          if (alt < eligible.size()) {
            const int64_t extra = estimates[alt].cost_pico - best.cost_pico;
            const int64_t per_turn = h > 1 ? (after[0] - after[alt]) / (h - 1) : 0;
            d.reason = "stayed on " + name_of(0) + ": moving to " + name_of(alt) +
                       " would lose " + internal::Thousands(best.cached) + " cached tokens, " +
                       (extra >= 0 ? "+" : "") + internal::Usd(extra) + " this turn, saving " +
                       internal::Usd(per_turn) + " per turn after";
          } else {
            d.reason = "stayed on " + name_of(0) + ": the cheapest over the next " +
                       std::to_string(h) + " turns (" + internal::Usd(best.cost_pico) +
                       " this turn, " + internal::Thousands(best.cached) + " tokens cached)";
          }
        } else if (inc < eligible.size()) {
          const int64_t saving =
              (estimates[inc].cost_pico + after[inc]) - (best.cost_pico + after[0]);
          const bool warm = best.cached > 0;
          d.reason_code = warm ? "returned_warm" : "switched";
          d.reason = (warm ? "moved back to " + name_of(0) + ", whose cache still holds " +
                                 internal::Thousands(best.cached) + " tokens of this thread"
                           : "moved to " + name_of(0)) +
                     ": leaving " + incumbent + " gives up " +
                     internal::Thousands(estimates[inc].cached) + " cached tokens but saves " +
                     internal::Usd(saving) + " over the next " + std::to_string(h) + " turns";
        } else {
          d.reason_code = "cheapest";
          d.reason = "cheapest over the next " + std::to_string(h) + " turns: " + name_of(0) +
                     " (about " + internal::Usd(best.cost_pico + after[0]) + ")";
          if (!incumbent.empty()) d.reason += "; " + incumbent + " cannot serve this turn";
        }
      }
    } else {
      bool kept = false;
      if (bound != nullptr && r.affinity == Affinity::kThread) kept = move_to_front(bound->target);
      if (!kept && r.strategy == Strategy::kWeighted) {
        int64_t total = 0;
        for (const Candidate& c : eligible) {
          total += std::find_if(r.targets.begin(), r.targets.end(), [&](const auto& ref) {
                     return ref.model == s.targets[c.target].name;
                   })->weight;
        }
        if (total > 0) {
          int64_t pick = static_cast<int64_t>(
              Mix(s.counter.fetch_add(1, std::memory_order_relaxed)) % uint64_t(total));
          for (size_t i = 0; i < eligible.size(); ++i) {
            const int weight = std::find_if(r.targets.begin(), r.targets.end(), [&](const auto& ref) {
                                 return ref.model == name_of(i);
                               })->weight;
            if (pick < weight) {
              const std::string name = name_of(i);
              move_to_front(name);
              d.reason = "weighted pick: " + name + " (weight " + std::to_string(weight) +
                         " of " + std::to_string(total) + ")";
              break;
            }
            pick -= weight;
          }
        }
        d.reason_code = "weighted";
      } else if (!kept && r.strategy == Strategy::kLatency) {
        std::vector<double> rank;
        for (const Candidate& c : eligible) {
          auto h = s.health[c.target]->snapshot(facts.now_us);
          std::optional<double> ms = facts.stream && h.ttft_ms ? h.ttft_ms : h.latency_ms;
          rank.push_back(ms ? *ms : -1.0);  // unmeasured first: measure it
        }
        sort_by(rank);
        auto h = s.health[eligible[0].target]->snapshot(facts.now_us);
        std::optional<double> ms = facts.stream && h.ttft_ms ? h.ttft_ms : h.latency_ms;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.0f ms", ms.value_or(0));
        d.reason_code = "fastest";
        d.reason = ms ? "fastest: " + name_of(0) + " (" + (facts.stream && h.ttft_ms ? "TTFT" : "latency") +
                            " EWMA " + buf + ")"
                      : "fastest: " + name_of(0) + " has no latency measured yet";
      } else if (!kept) {
        d.reason_code = "fallback_order";
        d.reason = "first healthy target in order: " + name_of(0);
      }
      if (kept) {
        d.reason_code = "affinity";
        d.reason = "kept on " + name_of(0) + " (thread affinity)";
      }
    }
    if (!ineligible.empty() && d.reason_code != "affinity") {
      d.reason += "; skipped " + s.targets[ineligible[0].target].name + ": " + ineligible[0].why_not;
    }
  } else {
    d.reason_code = "none_eligible";
    d.reason = "no target can serve this request";
  }
  d.eligible = eligible.size();
  d.candidates = std::move(eligible);
  d.candidates.insert(d.candidates.end(), std::make_move_iterator(ineligible.begin()),
                      std::make_move_iterator(ineligible.end()));
  d.moved = d.eligible > 0 && thread.latest &&
            thread.latest->target != s.targets[d.candidates[0].target].name;
  if (s.decisions != nullptr) {
    if (auto* c = s.decisions->WithLabels({r.name, StrategyName(r.strategy), d.reason_code})) c->Inc();
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
      0.5 + double(Mix(state_->counter.fetch_add(1, std::memory_order_relaxed)) % 1000) / 1000.0;
  return std::chrono::milliseconds(static_cast<int64_t>(base * jitter));
}

void Router::Learn(size_t target, uint64_t prompt_bytes, const telemetry::RequestRecord& record) {
  State& s = *state_;
  if (target >= s.targets.size()) return;
  {
    Learned& l = *s.learned[target];
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
  if (auto* h = s.prediction_error->WithLabels({facts.router})) h->Observe(error);
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
        {{"target", t.name}, {"provider", t.provider}, {"provider_type", t.provider_type},
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
