// A strategy's inputs, built by hand: a table of targets with their health, a router config,
// the request's facts and the thread's memory, and a slate of every target in table order.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "router/strategy.h"

namespace kvgate::router::internal {

constexpr int64_t kT0 = 1'767'225'600'000'000;

inline telemetry::Price Rates(int64_t input, int64_t cached, int64_t output) {
  telemetry::Price p;
  p.base = {.input = input,
            .cached_input = cached,
            .cache_write_5m = input,
            .cache_write_1h = input,
            .output = output};
  return p;
}

struct StrategyFixture {
  explicit StrategyFixture(std::vector<std::string> names) {
    for (const std::string& name : names) {
      Target t;
      t.name = name;
      t.provider = "p-" + name;
      t.type = telemetry::ProviderType::kOpenAI;
      t.upstream_model = name;
      t.cache_rules = {.min_tokens = 1024, .granularity = 128, .ttl_seconds = 300};
      targets.push_back(std::move(t));
      health.push_back(std::make_unique<TargetHealth>(HealthOptions{}));
      router.targets.push_back({.model = name});
    }
    router.name = "r";
    facts.model = "r";
    facts.now_us = kT0;
  }

  // Movable, so that tests can build variants in functions (Context() takes references anew).
  StrategyFixture(StrategyFixture&& o) noexcept
      : targets(std::move(o.targets)),
        health(std::move(o.health)),
        router(std::move(o.router)),
        facts(std::move(o.facts)),
        thread(std::move(o.thread)),
        counter(o.counter.load()) {}

  StrategyContext Context() {
    return {.router = router,
            .facts = facts,
            .thread = thread,
            .targets = targets,
            .health = health,
            .counter = counter};
  }

  // Every target eligible, in table order, each estimated for a `prompt`-token turn with
  // `cached[i]` tokens cached (none when shorter).
  Slate All(int64_t prompt = 1000, std::vector<int64_t> cached = {}) const {
    Slate slate;
    for (size_t i = 0; i < targets.size(); ++i) {
      Candidate c;
      c.target = i;
      slate.eligible.push_back(c);
      std::optional<int64_t> hit;
      if (i < cached.size()) hit = cached[i];
      slate.estimates.push_back(EstimateTurn(
          targets[i], {.prompt_tokens = prompt, .expected_output = 100, .cached = hit}, {}));
    }
    return slate;
  }

  // The slate's order as target names.
  std::vector<std::string> Order(const Slate& slate) const {
    std::vector<std::string> out;
    for (const Candidate& c : slate.eligible) out.push_back(targets[c.target].name);
    return out;
  }

  // An answered attempt on target t that took `latency_ms` (and `ttft_ms` to its first token).
  void Answered(size_t t, int64_t latency_ms, std::optional<int64_t> ttft_ms = std::nullopt) {
    health[t]->Begin(facts.now_us);
    health[t]->End({.target = t,
                    .latency_us = latency_ms * 1000,
                    .ttft_us = ttft_ms ? std::optional<int64_t>(*ttft_ms * 1000) : std::nullopt},
                   facts.now_us);
  }

  std::vector<Target> targets;
  std::vector<std::unique_ptr<TargetHealth>> health;
  RouterConfig router;
  RequestFacts facts;
  telemetry::ThreadView thread;
  std::atomic<uint64_t> counter{0};
};

}  // namespace kvgate::router::internal
