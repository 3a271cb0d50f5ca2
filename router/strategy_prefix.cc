// affinity prefix: score = cached blocks - prefix_load_weight * load, the form the NVIDIA Dynamo
// KV router uses. Blocks are the engine's own (EngineProbe::block_tokens): a partial block is not
// reused, so it does not count.
#include <algorithm>

#include "router/state.h"
#include "router/strategy.h"

namespace kvgate::router::internal {

Ranking RankByPrefix(const StrategyContext& ctx, Slate& slate) {
  const RequestFacts& facts = ctx.facts;
  std::vector<double> rank;
  bool any_probe = false;
  for (const Candidate& c : slate.eligible) {
    auto probe = ProbeFor(facts, c.target);
    const int64_t in_flight = ctx.health[c.target]->snapshot(facts.now_us).in_flight;
    const int64_t load = probe ? std::max<int64_t>((*probe)->load, in_flight) : in_flight;
    double blocks = 0.0;
    if (probe) {
      const int64_t block_tokens = std::max<int64_t>(1, (*probe)->block_tokens);
      blocks = double((*probe)->cached_tokens) / double(block_tokens);
    }
    any_probe = any_probe || probe.has_value();
    rank.push_back(-(blocks - ctx.router.prefix_load_weight * double(load)));
  }
  slate.SortBy(rank);
  const std::string& first = ctx.NameOf(slate.eligible[0]);
  auto probe = ProbeFor(facts, slate.eligible[0].target);
  if (any_probe && probe && (*probe)->cached_tokens > 0) {
    return {.reason_code = "prefix_hit",
            .reason = first + " holds " + Thousands((*probe)->cached_tokens) + " of " +
                      Thousands((*probe)->prompt_tokens) +
                      " prompt tokens in its prefix cache (load " + std::to_string((*probe)->load) +
                      ")"};
  }
  if (any_probe) {
    return {.reason_code = "least_loaded",
            .reason = "no replica holds this prompt's prefix; " + first + " is the least loaded"};
  }
  return {
      .reason_code = "least_loaded_no_lookup",
      .reason = "no replica answered the cache lookup in time; " + first + " is the least loaded"};
}

}  // namespace kvgate::router::internal
