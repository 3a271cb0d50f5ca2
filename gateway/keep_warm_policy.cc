#include "gateway/keep_warm_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvgate::gateway::keep_warm {

void GapSample::Add(double gap_seconds) {
  if (capacity_ == 0 || std::isnan(gap_seconds) || gap_seconds < 0) return;
  gaps_.push_back(gap_seconds);
  if (gaps_.size() > capacity_) gaps_.pop_front();
}

bool GapSample::Resolve(double gap_seconds) {
  for (auto it = gaps_.rbegin(); it != gaps_.rend(); ++it) {
    if (*it == kNeverEnded) {
      *it = gap_seconds;
      return true;
    }
  }
  return false;
}

SurvivalCounts GapSample::Conditional(double idle_seconds, double window_seconds) const {
  SurvivalCounts c;
  for (double g : gaps_) {
    if (g <= idle_seconds) continue;
    ++c.at_risk;
    if (g <= idle_seconds + window_seconds) ++c.ended;
  }
  return c;
}

double NextTurnProbability(const SurvivalCounts& thread, const SurvivalCounts& tenant,
                           const SurvivalCounts& gateway) {
  double prior = double(gateway.ended) / double(gateway.at_risk + 1);
  if (tenant.at_risk >= kMinPriorAtRisk) {
    prior = double(tenant.ended) / double(tenant.at_risk);
  } else if (gateway.at_risk >= kMinPriorAtRisk) {
    prior = double(gateway.ended) / double(gateway.at_risk);
  }
  return (double(thread.ended) + kPriorWeight * prior) / (double(thread.at_risk) + kPriorWeight);
}

namespace {

// tokens x micro-USD per 1M tokens = pico-USD; saturating (a price or count this large is a
// config error, and a ping must then look too dear rather than free).
int64_t Times(int64_t tokens, int64_t rate) {
  if (tokens <= 0 || rate <= 0) return 0;
  if (tokens > std::numeric_limits<int64_t>::max() / rate) {
    return std::numeric_limits<int64_t>::max() / 4;
  }
  return tokens * rate;
}

}  // namespace

int64_t PingEconomics::Cost() const {
  return Times(prefix_tokens, rates.cached_input) + Times(tail_tokens, rates.input) +
         Times(1, rates.output);
}

int64_t PingEconomics::WorstCost() const {
  return Times(prefix_tokens, std::max(WriteRate(), rates.input)) +
         Times(tail_tokens, rates.input) + Times(1, rates.output);
}

int64_t PingEconomics::Saving() const { return SavingFor(prefix_tokens); }

int64_t PingEconomics::SavingFor(int64_t tokens) const {
  return Times(std::min(tokens, prefix_tokens),
               std::max<int64_t>(0, WriteRate() - rates.cached_input));
}

std::string_view ReasonName(Decision decision) {
  switch (decision) {
    case Decision::kPing:
      return "";
    case Decision::kUnlikely:
      return "unlikely";
    case Decision::kThreadCap:
      return "thread_cap";
    case Decision::kDailyCap:
      return "daily_cap";
    case Decision::kNotCached:
      return "not_cached";
  }
  return "";
}

Decision Decide(const DecisionInput& in) {
  if (in.pings_since_turn >= in.max_pings_per_thread) return Decision::kThreadCap;
  if (in.economics.prefix_tokens <= 0) return Decision::kNotCached;
  const double expected_saving = in.probability * double(in.economics.Saving());
  if (!(expected_saving > double(in.economics.Cost()))) return Decision::kUnlikely;
  // Held at its worst: pings in flight together never take the day past the cap.
  if (in.day_committed + in.economics.WorstCost() > in.day_cap) return Decision::kDailyCap;
  return Decision::kPing;
}

WriteTtlCosts ExpectedWriteCosts(const WriteTtlInput& in) {
  auto per_turn = [&](double p, int64_t write_rate) {
    const double prefix = double(std::max<int64_t>(0, in.prefix_tokens));
    const double written = double(std::max<int64_t>(0, in.new_tokens));
    return written * double(write_rate) +
           prefix * (p * double(in.rates.cached_input) + (1.0 - p) * double(write_rate));
  };
  return {.short_ttl = per_turn(std::clamp(in.p_short, 0.0, 1.0), in.rates.cache_write_5m),
          .long_ttl = per_turn(std::clamp(in.p_long, 0.0, 1.0), in.rates.cache_write_1h)};
}

int64_t UsdToPico(double usd) {
  if (!(usd > 0)) return 0;
  const double pico = std::floor(usd * 1e12);
  if (pico >= 9.2e18) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(pico);
}

}  // namespace kvgate::gateway::keep_warm
