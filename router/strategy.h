// Internal to the router: the strategies that order a routed turn's eligible candidates. Each one
// is a function of the same shape (a Rank), in a file of its own (strategy_<name>.cc), and sees
// only what a StrategyContext hands it: no router state, no locks of its own beyond the health
// snapshots it reads. Eligibility (router/eligibility.h) has already removed every target that
// cannot serve the turn; a strategy only reorders and explains.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "router/health.h"
#include "router/planner.h"
#include "router/router.h"

namespace kvgate::router::internal {

// The eligible candidates of a turn in preference order, each with the planner's estimate of it.
// Reordering keeps the two lists parallel.
struct Slate {
  std::vector<Candidate> eligible;
  std::vector<TurnEstimate> estimates;  // parallel to `eligible`

  // Orders by `rank` (ascending), ties kept in order; returns the permutation (new position ->
  // old index) for other parallel lists. REQUIRES: rank.size() == eligible.size().
  std::vector<size_t> SortBy(const std::vector<double>& rank);
  // Moves the candidate of the target named `name` to the front (the rest keep their order);
  // false when no eligible candidate has that name.
  bool MoveToFront(const std::vector<Target>& targets, std::string_view name);
};

// v[i] = old v[idx[i]].
template <class T>
void Permute(std::vector<T>& v, const std::vector<size_t>& idx) {
  std::vector<T> out;
  out.reserve(v.size());
  for (size_t i : idx) out.push_back(std::move(v[i]));
  v = std::move(out);
}

// What a strategy may read. Every reference outlives the call.
struct StrategyContext {
  const RouterConfig& router;
  const RequestFacts& facts;
  const telemetry::ThreadView& thread;
  const std::vector<Target>& targets;                        // the table
  const std::vector<std::unique_ptr<TargetHealth>>& health;  // per target
  // Advanced once per weighted pick (shared with key round robin and retry jitter).
  std::atomic<uint64_t>& counter;

  const std::string& NameOf(const Candidate& c) const { return targets[c.target].name; }
};

// Why the first candidate is first: a short label for metrics and the sentence for the record.
struct Ranking {
  std::string reason_code;
  std::string reason;
};

// Each strategy reorders a non-empty slate and says why its first is first.
using Rank = Ranking (*)(const StrategyContext& ctx, Slate& slate);

// affinity prefix: the replica whose engine holds most of the prompt in blocks, less
// prefix_load_weight per request queued or running there.
Ranking RankByPrefix(const StrategyContext& ctx, Slate& slate);
// strategy cost: cheapest over the horizon, the cached prefix a move would lose weighed in
// (cache_aware), or cheapest at list price (not).
Ranking RankByCost(const StrategyContext& ctx, Slate& slate);
// strategy weighted: one pick in proportion to the targets' weights, the rest in order.
Ranking RankByWeight(const StrategyContext& ctx, Slate& slate);
// strategy latency: lowest EWMA latency (TTFT for a stream, once measured); unmeasured first.
Ranking RankByLatency(const StrategyContext& ctx, Slate& slate);
// strategy fallback: the configured order, as eligibility left it.
Ranking RankInOrder(const StrategyContext& ctx, Slate& slate);

// The whole ordering step: prefix affinity, else cost, else thread affinity (keep the thread on
// `bound`'s target, may be null) before weighted, latency or fallback.
Ranking RankSlate(const StrategyContext& ctx, const telemetry::TurnSummary* bound, Slate& slate);

}  // namespace kvgate::router::internal
