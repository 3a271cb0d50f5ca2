#include "router/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvgate::router::internal {
namespace {

// Cache hits come in whole granularity steps, and nothing below the minimum is cached.
int64_t Cacheable(int64_t tokens, const telemetry::CacheRules& rules) {
  if (tokens <= 0 || tokens < rules.min_tokens) return 0;
  const int64_t g = std::max<int64_t>(1, rules.granularity);
  return tokens / g * g;
}

// The share of a breakpoint cache's new input the client marked for writing, as the thread's last
// turn there shows it; all of it when there is no such turn (clients that mark breakpoints usually
// mark the end of the conversation).
double WriteShare(const telemetry::TurnSummary* last) {
  if (last == nullptr || !last->cache_write || !last->cache_read || !last->total_input) return 1.0;
  const int64_t fresh = *last->total_input - *last->cache_read;
  if (fresh <= 0) return 1.0;
  return std::clamp(double(*last->cache_write) / double(fresh), 0.0, 1.0);
}

// How a turn's request reaches a breakpoint cache: with the client's markers, with the ones the
// provider's anthropic_auto_cache adds to a request without any (the end of the system prompt and
// of the last message: every new token is written, at the helper's TTL), or with none.
struct Breakpoints {
  bool any = false;
  bool by_helper = false;
  static Breakpoints Of(const Target& target, bool client_marked) {
    if (client_marked) return {.any = true};
    if (!target.auto_cache_ttl.empty()) return {.any = true, .by_helper = true};
    return {};
  }
};

}  // namespace

int64_t CostPico(const Target& target, const TurnEstimate& t) {
  if (!target.price) return 0;
  const telemetry::Price& price = *target.price;
  const telemetry::Rates& r = price.tier_threshold_tokens && t.prompt_tokens > *price.tier_threshold_tokens
                                  ? price.above
                                  : price.base;
  return t.uncached * r.input + t.cached * r.cached_input +
         t.writes * (t.long_ttl ? r.cache_write_1h : r.cache_write_5m) + t.output * r.output;
}

TurnEstimate EstimateTurn(const Target& target, const TurnInputs& in,
                          const telemetry::TurnSummary* last_on_target, bool breakpoints) {
  TurnEstimate t;
  t.prompt_tokens = std::max<int64_t>(0, in.prompt_tokens);
  t.cached = std::clamp<int64_t>(in.cached.value_or(0), 0, t.prompt_tokens);
  t.output = std::max<int64_t>(0, in.expected_output);
  const int64_t rest = t.prompt_tokens - t.cached;
  const telemetry::CacheRules& rules = target.cache_rules;
  const Breakpoints marks = Breakpoints::Of(target, breakpoints);
  if (!rules.automatic && marks.any && t.prompt_tokens >= rules.min_tokens) {
    if (marks.by_helper) {
      t.writes = rest;
      t.long_ttl = target.auto_cache_ttl == "1h";
    } else {
      t.writes = static_cast<int64_t>(std::llround(double(rest) * WriteShare(last_on_target)));
      t.long_ttl = last_on_target != nullptr && last_on_target->wrote_1h;
    }
  }
  t.uncached = rest - t.writes;
  t.priced = target.price.has_value();
  t.cost_pico = CostPico(target, t);
  return t;
}

int64_t FutureCostPico(const Target& target, const TurnEstimate& now, int turns,
                       const telemetry::ThreadView& thread, bool breakpoints) {
  const telemetry::CacheRules& rules = target.cache_rules;
  const bool marked = Breakpoints::Of(target, breakpoints).any;
  // A thread without a history yet grows by about its answer and a question like it per turn.
  const double growth = thread.turns >= 2 ? std::max(0.0, thread.mean_growth_tokens)
                                          : 2.0 * double(now.output);
  std::optional<int64_t> ttl = rules.ttl_seconds;
  if (ttl && now.long_ttl) ttl = std::max<int64_t>(*ttl, rules.long_ttl_seconds);
  // Each later turn finds the cache warm as often as the thread's recent gaps stayed within the
  // TTL, and pays for it cold otherwise.
  const double warm_share = ttl ? thread.WarmShare(double(*ttl)) : 1.0;
  // One future turn of `prompt` tokens whose first `cached` are read from the cache.
  auto turn_cost = [&](int64_t prompt, int64_t cached) {
    TurnEstimate t;
    t.prompt_tokens = prompt;
    t.output = now.output;
    t.long_ttl = now.long_ttl;
    t.cached = std::min(cached, prompt);
    const int64_t rest = prompt - t.cached;
    if (!rules.automatic && marked && prompt >= rules.min_tokens) t.writes = rest;
    t.uncached = rest - t.writes;
    t.cost_pico = CostPico(target, t);
    return t;
  };
  double total = 0;
  int64_t prompt = now.prompt_tokens;
  for (int k = 1; k <= turns; ++k) {
    const int64_t left = rules.automatic ? Cacheable(prompt, rules) : (marked ? prompt : 0);
    prompt += static_cast<int64_t>(std::llround(growth));
    const int64_t warm = turn_cost(prompt, left).cost_pico;
    const int64_t cold = turn_cost(prompt, 0).cost_pico;
    total += warm_share * double(warm) + (1.0 - warm_share) * double(cold);
  }
  return static_cast<int64_t>(std::llround(total));
}

std::string Usd(int64_t pico) {
  const double usd = double(pico) / 1e12;
  char buf[48];
  const double a = std::fabs(usd);
  std::snprintf(buf, sizeof buf, a >= 1 ? "$%.2f" : a >= 0.01 ? "$%.4f" : "$%.6f", usd);
  return buf;
}

std::string Thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

}  // namespace kvgate::router::internal
