#include "router/eligibility.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "router/prompt_size.h"

namespace kvgate::router::internal {
namespace {

int64_t ExpectedOutput(const RouterState& s, size_t t, const RequestFacts& facts,
                       const telemetry::ThreadView& thread) {
  double out;
  if (thread.turns > 0 && thread.mean_output_tokens > 0) {
    out = thread.mean_output_tokens;
  } else {
    MutexLock lock(&s.learned[t]->mu);
    out = s.learned[t]->output_tokens;
  }
  int64_t n = static_cast<int64_t>(std::llround(out));
  if (facts.max_output_tokens > 0) n = std::min(n, facts.max_output_tokens);
  return n;
}

// What target t's cache holds of the prompt, and what kind of turn this would be there.
struct CacheOutlook {
  std::optional<int64_t> cached;  // nullopt: cold (no cache of this thread there)
  std::string_view turn;          // Candidate::turn
};

CacheOutlook ExpectedCached(const RouterState& s, size_t t, const RequestFacts& facts,
                            const telemetry::ThreadView& thread, int64_t prompt_tokens) {
  const telemetry::TurnSummary* last = thread.OnTarget(s.targets[t].name);
  const std::string_view turn = last == nullptr ? "first_use" : "warm";
  if (auto probe = ProbeFor(facts, t)) return {.cached = (*probe)->cached_tokens, .turn = turn};
  if (last == nullptr || !facts.fingerprint) return {.turn = turn};
  auto e = telemetry::ExpectCached(*last, *facts.fingerprint, prompt_tokens,
                                   s.targets[t].cache_rules, facts.now_us);
  if (!e) return {.turn = turn};
  return {.cached = e->Live(), .turn = e->expired ? "after_expiry" : "warm"};
}

// The thread's binding for affinity thread: its last turn's target, within the TTL.
const telemetry::TurnSummary* Bound(const RouterConfig& r, const telemetry::ThreadView& thread,
                                    int64_t now_us) {
  if (!thread.latest) return nullptr;
  if (now_us - thread.latest->created_at_us > r.affinity_ttl_seconds * 1'000'000) return nullptr;
  return &*thread.latest;
}

// Which API key of target t's provider: the thread's last key there while affinity holds, else
// one by hash of the thread id, else round robin.
int KeyFor(const RouterState& s, size_t t, const RequestFacts& facts,
           const telemetry::ThreadView& thread, const RouterConfig* r) {
  const int keys = s.targets[t].keys;
  if (keys <= 1) return 0;
  const bool sticky = r == nullptr || r->affinity != Affinity::kNone;
  if (sticky) {
    const telemetry::TurnSummary* last = thread.OnTarget(s.targets[t].name);
    const int64_t ttl_us = (r ? r->affinity_ttl_seconds : 3600) * 1'000'000;
    if (last != nullptr && facts.now_us - last->created_at_us <= ttl_us && last->key < keys) {
      return last->key;
    }
    if (!facts.thread_id.empty()) {
      return static_cast<int>(std::hash<std::string_view>{}(facts.thread_id) %
                              static_cast<size_t>(keys));
    }
  }
  return static_cast<int>(s.counter.fetch_add(1, std::memory_order_relaxed) %
                          static_cast<uint64_t>(keys));
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

// The decision for a client that named a plain model: its target, nothing else.
Result<RouteDecision> PlainModel(const RouterState& s, size_t t, const RequestFacts& facts,
                                 const telemetry::ThreadView& thread) {
  if (!facts.pinned_target.empty() && facts.pinned_target != facts.model) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the x-kvgate-route-target header names " + std::string(facts.pinned_target) +
                         ", but model " + std::string(facts.model) + " is not a router");
  }
  RouteDecision d;
  Candidate c;
  c.target = t;
  c.key = KeyFor(s, t, facts, thread, nullptr);
  d.candidates.push_back(c);
  d.eligible = 1;
  d.reason_code = "only_target";
  return d;
}

// The decision for a router turn whose x-kvgate-route-target header names one of its targets.
Result<RouteDecision> Pinned(const RouterState& s, const RouterConfig& r,
                             const std::vector<size_t>& indices, const RequestFacts& facts,
                             const telemetry::ThreadView& thread) {
  auto it = std::find_if(indices.begin(), indices.end(),
                         [&](size_t t) { return s.targets[t].name == facts.pinned_target; });
  if (it == indices.end()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the x-kvgate-route-target header names " + std::string(facts.pinned_target) +
                         ", which is not a target of router " + r.name);
  }
  RouteDecision d;
  d.router = &r;
  Candidate c;
  c.target = *it;
  c.key = KeyFor(s, *it, facts, thread, &r);
  d.candidates.push_back(c);
  d.eligible = 1;
  d.pinned = true;
  d.reason = "pinned to " + s.targets[*it].name + " by the x-kvgate-route-target header";
  d.reason_code = "pinned";
  d.moved = thread.latest && thread.latest->target != s.targets[*it].name;
  return d;
}

// Why target t cannot serve the turn ("" when it can). `rule`: the when rule that matched.
std::string WhyNot(const RouterState& s, size_t t, const RequestFacts& facts, int64_t prompt,
                   const WhenRule* rule, size_t rule_index) {
  const Target& target = s.targets[t];
  std::string why;
  if (rule != nullptr &&
      std::find(rule->targets.begin(), rule->targets.end(), target.name) == rule->targets.end()) {
    why = "excluded for this turn by when rule " + std::to_string(rule_index);
  } else if (facts.responses_api && !target.capabilities.responses) {
    why = "does not serve the Responses API (provider type " +
          std::string(telemetry::ProviderTypeName(target.type)) + ")";
  } else if (facts.embeddings_api && !target.capabilities.embeddings) {
    why = "does not serve embeddings (provider type " +
          std::string(telemetry::ProviderTypeName(target.type)) + ")";
  } else if (facts.tools && !target.capabilities.tools) {
    why = "does not support tools";
  } else if (facts.images && !target.capabilities.images) {
    why = "does not support image or other non-text content";
  } else if (facts.response_format && !target.capabilities.response_format) {
    why = "does not support response_format";
  } else if (target.context_window > 0 &&
             prompt + std::max<int64_t>(facts.max_output_tokens, 1) > target.context_window) {
    why = "a prompt of about " + Thousands(prompt) + " tokens does not fit its " +
          Thousands(target.context_window) + "-token context window";
  } else {
    s.health[t]->Eligible(facts.now_us, &why);
  }
  return why;
}

}  // namespace

Result<Sifted> Sift(const RouterState& s, const RequestFacts& facts,
                    const telemetry::ThreadView& thread) {
  Sifted out;
  if (auto t = s.target_index.find(std::string(facts.model)); t != s.target_index.end()) {
    auto d = PlainModel(s, t->second, facts, thread);
    if (!d) return std::unexpected(d.error());
    out.decided = std::move(*d);
    return out;
  }
  auto rit = s.router_index.find(std::string(facts.model));
  if (rit == s.router_index.end()) {
    return MakeError(ErrorCode::kNotFound, "unknown model " + std::string(facts.model));
  }
  const RouterConfig& r = s.routers[rit->second];
  const std::vector<size_t>& indices = s.router_targets[rit->second];
  out.router = &r;
  if (r.affinity == Affinity::kThread || r.strategy == Strategy::kCost) {
    out.bound = Bound(r, thread, facts.now_us);
  }
  if (!facts.pinned_target.empty()) {
    auto d = Pinned(s, r, indices, facts, thread);
    if (!d) return std::unexpected(d.error());
    out.decided = std::move(*d);
    return out;
  }

  // A rough token count for when-rules, before any target is chosen: the thread's last prompt
  // scaled, else bytes at the first target's ratio.
  const int64_t rough_tokens = EstimatePromptSize(s, indices.front(), facts, thread).tokens;
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

  for (size_t t : order) {
    const Target& target = s.targets[t];
    Candidate c;
    c.target = t;
    c.key = KeyFor(s, t, facts, thread, &r);
    const PromptSize size = EstimatePromptSize(s, t, facts, thread);
    const int64_t prompt = size.tokens;
    c.prompt_tokens = prompt;
    c.ratio_source = RatioSourceName(size.source);
    if (std::string why = WhyNot(s, t, facts, prompt, rule, rule_index); !why.empty()) {
      c.eligible = false;
      c.why_not = std::move(why);
      out.ineligible.push_back(std::move(c));
      continue;
    }
    const CacheOutlook outlook = ExpectedCached(s, t, facts, thread, prompt);
    c.turn = outlook.turn;
    TurnEstimate e = EstimateTurn(target,
                                  {.prompt_tokens = prompt,
                                   .expected_output = ExpectedOutput(s, t, facts, thread),
                                   .cached = outlook.cached},
                                  {.last_on_target = thread.OnTarget(target.name),
                                   .thread_latest = thread.latest ? &*thread.latest : nullptr,
                                   .breakpoints = facts.cache_breakpoints});
    c.cached_tokens = e.cached;
    if (e.priced) c.cost_pico = e.cost_pico;
    out.slate.eligible.push_back(std::move(c));
    out.slate.estimates.push_back(e);
  }
  return out;
}

}  // namespace kvgate::router::internal
