// strategy fallback: the configured order (a when rule's order first), as eligibility left it.
#include "router/strategy.h"

namespace kvgate::router::internal {

Ranking RankInOrder(const StrategyContext& ctx, Slate& slate) {
  return {.reason_code = "fallback_order",
          .reason = "first healthy target in order: " + ctx.NameOf(slate.eligible[0])};
}

}  // namespace kvgate::router::internal
