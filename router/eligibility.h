// Internal to the router: the first half of routing. What the client's model names (a plain
// model, a router, or nothing), whether a pinned target decides the turn, which when rule
// restricts it, and which of the router's targets can serve it (capabilities, context window,
// health and circuit), each eligible one with the planner's estimate of the turn there. The
// strategies (router/strategy.h) then only order what is left.
#pragma once

#include <optional>
#include <vector>

#include "common/error.h"
#include "router/state.h"
#include "router/strategy.h"

namespace kvgate::router::internal {

struct Sifted {
  // A plain model or a pinned target: the decision is made, nothing to rank.
  std::optional<RouteDecision> decided;
  const RouterConfig* router = nullptr;  // else: the router the client named
  Slate slate;                           // its eligible candidates, preference order
  std::vector<Candidate> ineligible;     // the rest, each with why_not
  // The thread's binding (its latest turn within affinity_ttl_seconds) for thread affinity and
  // the cost planner; null otherwise.
  const telemetry::TurnSummary* bound = nullptr;
};

// Errors as Router::Route's: kNotFound for an unknown model, kInvalidArgument for a pinned target
// that is not one of the router's. `thread` must outlive the result (bound points into it).
Result<Sifted> Sift(const RouterState& s, const RequestFacts& facts,
                    const telemetry::ThreadView& thread);

}  // namespace kvgate::router::internal
