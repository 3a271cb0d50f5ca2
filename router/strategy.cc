#include "router/strategy.h"

#include <algorithm>

namespace kvgate::router::internal {

std::vector<size_t> Slate::SortBy(const std::vector<double>& rank) {
  std::vector<size_t> idx(eligible.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return rank[a] < rank[b]; });
  Permute(eligible, idx);
  Permute(estimates, idx);
  return idx;
}

bool Slate::MoveToFront(const std::vector<Target>& targets, std::string_view name) {
  for (size_t i = 0; i < eligible.size(); ++i) {
    if (targets[eligible[i].target].name != name) continue;
    std::rotate(eligible.begin(), eligible.begin() + i, eligible.begin() + i + 1);
    std::rotate(estimates.begin(), estimates.begin() + i, estimates.begin() + i + 1);
    return true;
  }
  return false;
}

Ranking RankSlate(const StrategyContext& ctx, const telemetry::TurnSummary* bound, Slate& slate) {
  const RouterConfig& r = ctx.router;
  // Prefix affinity replaces the strategy; the cost planner weighs the thread's binding itself.
  if (r.affinity == Affinity::kPrefix) return RankByPrefix(ctx, slate);
  if (r.strategy == Strategy::kCost) return RankByCost(ctx, slate);
  if (bound != nullptr && r.affinity == Affinity::kThread &&
      slate.MoveToFront(ctx.targets, bound->target)) {
    return {.reason_code = "affinity",
            .reason = "kept on " + ctx.NameOf(slate.eligible[0]) + " (thread affinity)"};
  }
  switch (r.strategy) {
    case Strategy::kWeighted:
      return RankByWeight(ctx, slate);
    case Strategy::kLatency:
      return RankByLatency(ctx, slate);
    case Strategy::kCost:
    case Strategy::kFallback:
      break;
  }
  return RankInOrder(ctx, slate);
}

}  // namespace kvgate::router::internal
