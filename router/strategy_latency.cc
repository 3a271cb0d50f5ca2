// strategy latency: the lowest EWMA latency, or time to first token for a stream once one is
// measured. A target never measured goes first, so that it gets measured.
#include <cstdio>
#include <optional>

#include "router/strategy.h"

namespace kvgate::router::internal {
namespace {

// The figure the strategy ranks by for this request, and whether it is a TTFT.
std::optional<double> Figure(const TargetHealth::Snapshot& h, bool stream, bool* ttft) {
  *ttft = stream && h.ttft_ms.has_value();
  return *ttft ? h.ttft_ms : h.latency_ms;
}

}  // namespace

Ranking RankByLatency(const StrategyContext& ctx, Slate& slate) {
  const RequestFacts& facts = ctx.facts;
  std::vector<double> rank;
  bool ttft = false;
  for (const Candidate& c : slate.eligible) {
    std::optional<double> ms =
        Figure(ctx.health[c.target]->snapshot(facts.now_us), facts.stream, &ttft);
    rank.push_back(ms ? *ms : -1.0);  // unmeasured first: measure it
  }
  slate.SortBy(rank);
  const std::optional<double> ms =
      Figure(ctx.health[slate.eligible[0].target]->snapshot(facts.now_us), facts.stream, &ttft);
  const std::string& first = ctx.NameOf(slate.eligible[0]);
  if (!ms)
    return {.reason_code = "fastest",
            .reason = "fastest: " + first + " has no latency measured yet"};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f ms", *ms);
  return {
      .reason_code = "fastest",
      .reason = "fastest: " + first + " (" + (ttft ? "TTFT" : "latency") + " EWMA " + buf + ")"};
}

}  // namespace kvgate::router::internal
