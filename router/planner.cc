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

// How a client marks a breakpoint cache, as the thread's last turn there shows it: its reads and
// writes are the prompt up to its last breakpoint, the rest the tail after it. A warm turn tells
// which share of the new input the client marked (the end of the conversation: nearly all; only
// the system prompt: none); a cold one only the tail.
struct Marking {
  std::optional<double> share;  // of the input added since the last turn; nullopt: unknown
  int64_t last_marked = 0;      // the last turn's prefix up to its breakpoint
  int64_t last_input = 0;
  int64_t tail = 0;             // the last turn's tokens after its breakpoint
  bool known = false;           // the last turn's usage says all of this

  static Marking Of(const telemetry::TurnSummary* last) {
    Marking m;
    if (last == nullptr || !last->cache_write || !last->cache_read || !last->total_input) return m;
    m.known = true;
    m.last_input = *last->total_input;
    m.last_marked = std::clamp<int64_t>(*last->cache_read + *last->cache_write, 0, m.last_input);
    m.tail = m.last_input - m.last_marked;
    const int64_t fresh = m.last_input - *last->cache_read;
    if (*last->cache_read > 0 && fresh > 0) {
      m.share = std::clamp(double(*last->cache_write) / double(fresh), 0.0, 1.0);
    }
    return m;
  }

  // This turn's prefix up to its breakpoint, for a prompt of `prompt` tokens.
  int64_t MarkedOf(int64_t prompt) const {
    if (!known) return prompt;  // clients that mark usually mark the end of the conversation
    if (share) {
      const int64_t added = std::max<int64_t>(0, prompt - last_input);
      return std::min<int64_t>(prompt, last_marked + std::llround(*share * double(added)));
    }
    return std::max<int64_t>(0, prompt - tail);
  }
  double ShareAfter() const { return share.value_or(1.0); }
};

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

TurnEstimate EstimateTurn(const Target& target, const TurnInputs& in, const WriteHabit& habit) {
  TurnEstimate t;
  t.prompt_tokens = std::max<int64_t>(0, in.prompt_tokens);
  t.cached = std::clamp<int64_t>(in.cached.value_or(0), 0, t.prompt_tokens);
  t.output = std::max<int64_t>(0, in.expected_output);
  const int64_t rest = t.prompt_tokens - t.cached;
  const telemetry::CacheRules& rules = target.cache_rules;
  const Breakpoints marks = Breakpoints::Of(target, habit.breakpoints);
  if (!rules.automatic && marks.any) {
    if (marks.by_helper) {
      t.marked = t.prompt_tokens;
      t.marked_share = 1.0;
      t.long_ttl = target.auto_cache_ttl == "1h";
    } else {
      const Marking m = Marking::Of(habit.last_on_target);
      t.marked = std::max(t.cached, m.MarkedOf(t.prompt_tokens));
      t.marked_share = m.ShareAfter();
      // The TTL the thread writes with: its last turn here, else its last turn anywhere (the
      // client's markers travel with the conversation).
      const telemetry::TurnSummary* ttl_from =
          habit.last_on_target != nullptr ? habit.last_on_target : habit.thread_latest;
      t.long_ttl = ttl_from != nullptr && ttl_from->wrote_1h;
    }
    if (t.marked >= rules.min_tokens) t.writes = std::min(rest, t.marked - t.cached);
  }
  t.uncached = rest - t.writes;
  t.priced = target.price.has_value();
  t.cost_pico = CostPico(target, t);
  return t;
}

int64_t FutureCostPico(const Target& target, const TurnEstimate& now, int turns,
                       const telemetry::ThreadView& thread) {
  const telemetry::CacheRules& rules = target.cache_rules;
  // A thread without a history yet grows by about its answer and a question like it per turn.
  const double growth = thread.turns >= 2 ? std::max(0.0, thread.mean_growth_tokens)
                                          : 2.0 * double(now.output);
  std::optional<int64_t> ttl = rules.ttl_seconds;
  if (ttl && now.long_ttl) ttl = std::max<int64_t>(*ttl, rules.long_ttl_seconds);
  // Each later turn finds the cache warm as often as the thread's recent gaps stayed within the
  // TTL, and pays for it cold otherwise.
  const double warm_share = ttl ? thread.WarmShare(double(*ttl)) : 1.0;
  // One future turn of `prompt` tokens, `marked` of them up to its breakpoint (a breakpoint
  // cache), whose first `cached` are read from the cache: the rest of the marked prefix is
  // written, at the rate this turn writes at.
  auto turn_cost = [&](int64_t prompt, int64_t marked, int64_t cached) {
    TurnEstimate t;
    t.prompt_tokens = prompt;
    t.output = now.output;
    t.long_ttl = now.long_ttl;
    t.cached = std::min(cached, prompt);
    const int64_t rest = prompt - t.cached;
    if (!rules.automatic && marked >= rules.min_tokens) {
      t.writes = std::clamp<int64_t>(marked - t.cached, 0, rest);
    }
    t.uncached = rest - t.writes;
    t.cost_pico = CostPico(target, t);
    return t;
  };
  double total = 0;
  int64_t prompt = now.prompt_tokens;
  int64_t marked = now.marked;
  for (int k = 1; k <= turns; ++k) {
    // What the previous turn left in the cache.
    const int64_t left = rules.automatic              ? Cacheable(prompt, rules)
                         : marked >= rules.min_tokens ? marked
                                                      : 0;
    const int64_t added = static_cast<int64_t>(std::llround(growth));
    prompt += added;
    marked += static_cast<int64_t>(std::llround(now.marked_share * double(added)));
    const int64_t warm = turn_cost(prompt, marked, left).cost_pico;
    const int64_t cold = turn_cost(prompt, marked, 0).cost_pico;
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
