// strategy weighted: one pick in proportion to the weights of the eligible targets (a target
// that is down does not pass its share to one neighbour: the others split it), the rest of the
// slate in order behind it for fallback.
#include <algorithm>

#include "router/state.h"
#include "router/strategy.h"

namespace kvgate::router::internal {
namespace {

int WeightOf(const RouterConfig& r, std::string_view name) {
  return std::find_if(r.targets.begin(), r.targets.end(),
                      [&](const auto& ref) { return ref.model == name; })
      ->weight;
}

}  // namespace

Ranking RankByWeight(const StrategyContext& ctx, Slate& slate) {
  Ranking ranking{.reason_code = "weighted"};
  int64_t total = 0;
  for (const Candidate& c : slate.eligible) total += WeightOf(ctx.router, ctx.NameOf(c));
  if (total <= 0) return ranking;
  int64_t pick = static_cast<int64_t>(Mix(ctx.counter.fetch_add(1, std::memory_order_relaxed)) %
                                      uint64_t(total));
  for (const Candidate& c : slate.eligible) {
    const std::string name = ctx.NameOf(c);
    const int weight = WeightOf(ctx.router, name);
    if (pick < weight) {
      slate.MoveToFront(ctx.targets, name);
      ranking.reason = "weighted pick: " + name + " (weight " + std::to_string(weight) + " of " +
                       std::to_string(total) + ")";
      break;
    }
    pick -= weight;
  }
  return ranking;
}

}  // namespace kvgate::router::internal
