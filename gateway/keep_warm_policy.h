// The keep-warm decision, without I/O or clocks (docs/keep-warm.md): whether a ping that renews a
// thread's cached prefix shortly before it expires is worth its price.
//
// A ping reads the cached prefix (at the read rate) so that the provider keeps it another TTL.
// It pays when the thread's next turn comes within that TTL, which would otherwise have found
// the cache gone and written the prefix again (at the write rate). So kvgate pings when
//
//   P(next turn within one more TTL | idle so far) x (re-write cost - read cost) > ping cost
//
// with P an empirical conditional survival over observed idle gaps: of the gaps longer than the
// idle time so far, the share that ended within one more TTL. Threads that went silent count as
// gaps that never ended. A thread's own gaps are blended with its tenant's (the gateway key's)
// or, while the tenant has too few, the gateway's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <string_view>

#include "telemetry/pricing.h"

namespace kvgate::gateway::keep_warm {

// A gap that never ended: a thread that went silent.
inline constexpr double kNeverEnded = std::numeric_limits<double>::infinity();

// Of `at_risk` gaps longer than the idle time so far, `ended` ended within the window after it.
struct SurvivalCounts {
  int at_risk = 0;
  int ended = 0;
};

// The most recent idle gaps (seconds) of a thread, a tenant or the gateway: a bounded sample,
// oldest dropped first.
class GapSample {
 public:
  explicit GapSample(size_t capacity) : capacity_(capacity) {}
  void Add(double gap_seconds);
  // A gap counted as never ended did end after `gap_seconds` (the thread came back): the newest
  // such gap takes that length. False when there is none.
  bool Resolve(double gap_seconds);
  // Of the gaps longer than `idle_seconds`, how many ended at or before idle + `window_seconds`.
  SurvivalCounts Conditional(double idle_seconds, double window_seconds) const;
  size_t size() const { return gaps_.size(); }

 private:
  size_t capacity_;
  std::deque<double> gaps_;
};

// The blend of a thread's own evidence with a prior: the tenant's share when it has at least
// kMinPriorAtRisk gaps at risk, else the gateway's; while the gateway has fewer too, its share
// shrunk toward 0 (ended / (at_risk + 1)): with no evidence at all kvgate does not ping. The
// prior weighs as kPriorWeight gaps of the thread's own.
inline constexpr int kMinPriorAtRisk = 5;
inline constexpr double kPriorWeight = 4.0;
double NextTurnProbability(const SurvivalCounts& thread, const SurvivalCounts& tenant,
                           const SurvivalCounts& gateway);

// The money of one ping, pico-USD. The ping resends the thread's last prompt: `prefix_tokens` of
// it are cached (what the last turn read plus what it wrote), the `tail_tokens` after them are
// not, and it asks for one output token.
struct PingEconomics {
  int64_t prefix_tokens = 0;
  int64_t tail_tokens = 0;
  telemetry::Rates rates;
  // Automatic caching (OpenAI, DeepSeek): a prefix written again costs the input rate. Explicit
  // breakpoints (Anthropic): the 5-minute write rate.
  bool automatic = true;
  // The thread writes with the longer TTL (WriteTtl chose it): a re-write costs that rate.
  bool long_writes = false;
  int64_t WriteRate() const {
    return automatic ? rates.input : long_writes ? rates.cache_write_1h : rates.cache_write_5m;
  }
  // What the ping is expected to cost: the prefix read, the tail at the input rate, one output.
  int64_t Cost() const;
  // What it costs if the cache is already gone (the prefix written again): the most a ping can
  // cost, which the daily cap holds while it runs.
  int64_t WorstCost() const;
  // What reading the prefix saves over writing it again.
  int64_t Saving() const;
  // Saving for `tokens` cache reads (a turn that read less than the whole prefix).
  int64_t SavingFor(int64_t tokens) const;
};

enum class Decision {
  kPing,
  kUnlikely,   // P x saving <= cost
  kThreadCap,  // max_pings_per_thread pings in a row without a turn: the thread has ended
  kDailyCap,   // the worst case would take the day's spend over max_usd_per_day
  kNotCached,  // nothing cached to keep (prefix below the provider's minimum)
};
// "unlikely" | "thread_cap" | "daily_cap" | "not_cached" ("" for kPing): the metric's reason.
std::string_view ReasonName(Decision decision);

struct DecisionInput {
  double probability = 0;  // NextTurnProbability
  PingEconomics economics;
  int pings_since_turn = 0;  // pings sent since the thread's last turn
  int max_pings_per_thread = 1;
  int64_t day_committed = 0;  // pico-USD spent and held today by this model's or router's pings
  int64_t day_cap = 0;        // max_usd_per_day, pico-USD
};
Decision Decide(const DecisionInput& in);

// Which TTL a thread's cache writes should have, where the provider offers a longer one at a
// higher write rate (Anthropic: 1 hour at 2x the input rate against 5 minutes at 1.25x). The
// prompt kvgate is about to send leaves `prefix_tokens` cached, `new_tokens` of them written by
// it. Its next turn reads the prefix when it comes within the TTL and writes it all again when it
// comes later, so per turn
//
//   short: new x write_5m + prefix x (p_short x read + (1 - p_short) x write_5m)
//   long:  new x write_1h + prefix x (p_long  x read + (1 - p_long)  x write_1h)
//
// with p_short and p_long the probabilities (NextTurnProbability, from idle 0) that the next turn
// comes within each TTL. Long writes are chosen when they are expected to cost less. Without gap
// evidence both probabilities are near 0 and short writes, the cheaper ones, win. Keep-warm pings
// that could bridge a gap past the short TTL are left out: where gaps run past it often enough for
// this rule to choose long writes, one long write costs less than the pings it spares.
struct WriteTtlInput {
  double p_short = 0, p_long = 0;
  int64_t prefix_tokens = 0, new_tokens = 0;
  telemetry::Rates rates;
};
struct WriteTtlCosts {
  double short_ttl = 0, long_ttl = 0;  // expected pico-USD per turn
  bool PreferLong() const { return long_ttl < short_ttl; }
};
WriteTtlCosts ExpectedWriteCosts(const WriteTtlInput& in);

// pico-USD of a USD amount (config values), rounded down.
int64_t UsdToPico(double usd);

}  // namespace kvgate::gateway::keep_warm
