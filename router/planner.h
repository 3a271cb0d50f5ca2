// Internal to the router: what a turn is expected to cost on a target, and the stay-or-switch
// plan over the next turns. Pure functions of the target, the request facts and the thread's
// memory; money in pico-USD (tokens x micro-USD per 1M tokens).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "router/router.h"

namespace kvgate::router::internal {

// One turn on one target, as the planner sees it.
struct TurnEstimate {
  int64_t prompt_tokens = 0;
  int64_t cached = 0;     // reads from the cache
  int64_t writes = 0;     // tokens written into a breakpoint cache (Anthropic)
  int64_t uncached = 0;   // the rest of the input
  int64_t output = 0;
  bool long_ttl = false;  // writes at the long-TTL rate
  // A breakpoint cache: the tokens up to the request's last breakpoint (what the cache holds of
  // the prompt once the turn is over: cached + writes), and the share of each later turn's new
  // tokens the client will mark for writing. 0 and 0 for a cache that writes nothing.
  int64_t marked = 0;
  double marked_share = 0;
  int64_t cost_pico = 0;
  bool priced = false;    // the target has a price (else cost_pico is 0)
};

// The cost of a turn's tokens at a target's price (the long-context tier when the prompt
// exceeds it). 0 without a price.
int64_t CostPico(const Target& target, const TurnEstimate& turn);

struct TurnInputs {
  int64_t prompt_tokens = 0;
  int64_t expected_output = 0;
  std::optional<int64_t> cached;  // nullopt: cold (no cache of this thread there)
};

// What the thread's turns show about how it writes to a breakpoint cache.
struct WriteHabit {
  // The thread's last turn on the target (may be null): how much of its new input the client
  // marks for writing (its reads and writes are the prefix up to its last breakpoint, the rest
  // the tail after it), and at which TTL.
  const telemetry::TurnSummary* last_on_target = nullptr;
  // The thread's last turn anywhere (may be null): the TTL it writes with on a target it has
  // not used yet.
  const telemetry::TurnSummary* thread_latest = nullptr;
  // The request carries cache_control markers (without them a breakpoint cache writes nothing,
  // unless the target's provider adds its own: Target::auto_cache_ttl).
  bool breakpoints = false;
};

// Splits a turn's prompt into cached / written / uncached tokens on `target` and prices it. On a
// breakpoint cache everything up to the last breakpoint that is not read is written, at the
// thread's TTL: after an expiry that is the whole marked prefix again, at the write rate.
TurnEstimate EstimateTurn(const Target& target, const TurnInputs& inputs, const WriteHabit& habit);

// The planner's view of one eligible candidate.
struct PlanEntry {
  size_t candidate = 0;   // index into the decision's candidates
  TurnEstimate now;       // this turn, with the target's cache as it is
  int64_t cold_pico = 0;  // this turn with nothing cached (the cache-blind price)
  int64_t after_pico = 0; // the next horizon-1 turns, had this turn gone there
  int64_t total_pico() const { return now.cost_pico + after_pico; }
};

// The next `turns` turns' cost on a target once this turn went there: each turn adds the
// thread's mean growth, reads what the previous turn left (when the thread's gaps stay within
// the TTL), writes the rest of its marked prefix at `now`'s write rate (all of it when the cache
// expired in between) and pays the input rate for the tail.
int64_t FutureCostPico(const Target& target, const TurnEstimate& now, int turns,
                       const telemetry::ThreadView& thread);

// "$0.0113" with enough digits to be read.
std::string Usd(int64_t pico);
// "41,200"
std::string Thousands(int64_t n);

}  // namespace kvgate::router::internal
