// strategy cost: the cheapest target for this turn and the next horizon - 1, with the cache each
// target holds of the thread priced in (cache_aware), so that a warm conversation moves only when
// the move repays the prefix it gives up; or the cheapest at list price (cache-blind).
#include <algorithm>

#include "router/strategy.h"

namespace kvgate::router::internal {
namespace {

// The rank of a target without a price: after every priced one.
constexpr double kUnpriced = 1e30;

Ranking CheapestAtListPrice(const StrategyContext& ctx, Slate& slate) {
  std::vector<double> rank;
  for (size_t i = 0; i < slate.eligible.size(); ++i) {
    TurnEstimate cold = slate.estimates[i];
    cold.uncached += cold.cached + cold.writes;
    cold.cached = cold.writes = 0;
    const int64_t cost = CostPico(ctx.targets[slate.eligible[i].target], cold);
    rank.push_back(slate.estimates[i].priced ? double(cost) : kUnpriced);
  }
  slate.SortBy(rank);
  return {.reason_code = "cheapest_list_price",
          .reason = "cheapest eligible target at list price (cache-blind): " +
                    ctx.NameOf(slate.eligible[0])};
}

// The reason when the incumbent (first) stays: the cheapest-per-turn alternative the planner
// turned down, if any. `after`: each candidate's cost over the rest of the horizon.
Ranking Stayed(const StrategyContext& ctx, const Slate& slate, const std::vector<int64_t>& after,
               int h) {
  const std::vector<TurnEstimate>& est = slate.estimates;
  const size_t n = slate.eligible.size();
  const std::string& first = ctx.NameOf(slate.eligible[0]);
  size_t alt = n;
  for (size_t i = 1; i < n; ++i) {
    if (est[i].priced && after[i] < after[0] && (alt == n || after[i] < after[alt])) alt = i;
  }
  if (alt == n) {
    return {.reason_code = "stayed_warm",
            .reason = "stayed on " + first + ": the cheapest over the next " + std::to_string(h) +
                      " turns (" + Usd(est[0].cost_pico) + " this turn, " +
                      Thousands(est[0].cached) + " tokens cached)"};
  }
  const int64_t extra = est[alt].cost_pico - est[0].cost_pico;
  const int64_t per_turn = h > 1 ? (after[0] - after[alt]) / (h - 1) : 0;
  return {.reason_code = "stayed_warm",
          .reason = "stayed on " + first + ": moving to " + ctx.NameOf(slate.eligible[alt]) +
                    " would lose " + Thousands(est[0].cached) + " cached tokens, " +
                    (extra >= 0 ? "+" : "") + Usd(extra) + " this turn, saving " + Usd(per_turn) +
                    " per turn after"};
}

Ranking CheapestOverHorizon(const StrategyContext& ctx, Slate& slate) {
  const telemetry::ThreadView& thread = ctx.thread;
  const std::string incumbent = thread.latest ? thread.latest->target : "";
  const int h =
      ctx.router.horizon_auto ? std::clamp(thread.turns, 4, 32) : ctx.router.horizon_turns;
  std::vector<double> rank;
  std::vector<int64_t> after;
  for (size_t i = 0; i < slate.eligible.size(); ++i) {
    const TurnEstimate& e = slate.estimates[i];
    const int64_t future = FutureCostPico(ctx.targets[slate.eligible[i].target], e, h - 1, thread);
    after.push_back(future);
    double total = e.priced ? double(e.cost_pico + future) : kUnpriced;
    // Ties go to the incumbent: a switch must save something to be worth its churn.
    if (ctx.NameOf(slate.eligible[i]) == incumbent) total -= 0.5;
    rank.push_back(total);
  }
  Permute(after, slate.SortBy(rank));
  const TurnEstimate& best = slate.estimates[0];
  const std::string& first = ctx.NameOf(slate.eligible[0]);
  size_t inc = slate.eligible.size();
  for (size_t i = 0; i < slate.eligible.size(); ++i) {
    if (ctx.NameOf(slate.eligible[i]) == incumbent) inc = i;
  }
  if (inc == 0) return Stayed(ctx, slate, after, h);
  if (inc < slate.eligible.size()) {
    const TurnEstimate& left = slate.estimates[inc];
    const int64_t saving = (left.cost_pico + after[inc]) - (best.cost_pico + after[0]);
    const bool warm = best.cached > 0;
    return {.reason_code = warm ? "returned_warm" : "switched",
            .reason = (warm ? "moved back to " + first + ", whose cache still holds " +
                                  Thousands(best.cached) + " tokens of this thread"
                            : "moved to " + first) +
                      ": leaving " + incumbent + " gives up " + Thousands(left.cached) +
                      " cached tokens but saves " + Usd(saving) + " over the next " +
                      std::to_string(h) + " turns"};
  }
  Ranking ranking{.reason_code = "cheapest",
                  .reason = "cheapest over the next " + std::to_string(h) + " turns: " + first +
                            " (about " + Usd(best.cost_pico + after[0]) + ")"};
  if (!incumbent.empty()) ranking.reason += "; " + incumbent + " cannot serve this turn";
  return ranking;
}

}  // namespace

Ranking RankByCost(const StrategyContext& ctx, Slate& slate) {
  return ctx.router.cache_aware ? CheapestOverHorizon(ctx, slate) : CheapestAtListPrice(ctx, slate);
}

}  // namespace kvgate::router::internal
