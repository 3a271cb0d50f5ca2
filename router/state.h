// Internal to the router: the state a Router holds, shared by its pieces (eligibility, the
// strategies, health and learning). Nothing outside router/ includes this header.
//
// Thread safety: the table, the routers and the indices are constant after Router::Create; health
// and the learned ratios are per target, each under its own mutex; `counter` is atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "router/health.h"
#include "router/router.h"
#include "telemetry/metrics.h"

namespace kvgate::router::internal {

// SplitMix64: a cheap, well-spread hash for weighted picks and jitter without shared RNG state.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The engine's answer about `target` among the request's probes, if one was gathered.
inline std::optional<const EngineProbe*> ProbeFor(const RequestFacts& facts, size_t target) {
  for (const EngineProbe& p : facts.probes) {
    if (p.target == target) return &p;
  }
  return std::nullopt;
}

// What the router has learned about a target from recorded turns.
struct Learned {
  mutable Mutex mu;
  double bytes_per_token GUARDED_BY(mu) = 4.0;  // prompt bytes of minified JSON per input token
  bool ratio_seen GUARDED_BY(mu) = false;
  double output_tokens GUARDED_BY(mu) = 256;  // mean output tokens of its turns
  bool output_seen GUARDED_BY(mu) = false;
};

struct RouterState {
  RouterState(const Clock& c, std::vector<Target> t, RoutingConfig config)
      : clock(c),
        targets(std::move(t)),
        routers(std::move(config.routers)),
        health_options(config.health) {}

  const Clock& clock;
  const std::vector<Target> targets;
  const std::vector<RouterConfig> routers;
  const HealthOptions health_options;
  std::unordered_map<std::string, size_t> target_index;  // constant after Create
  std::unordered_map<std::string, size_t> router_index;  // constant after Create
  std::vector<std::vector<size_t>> router_targets;       // per router, its targets' indices
  std::vector<std::unique_ptr<TargetHealth>> health;     // per target
  std::vector<std::unique_ptr<Learned>> learned;         // per target
  mutable std::atomic<uint64_t> counter{0};              // round robin, weighted picks, jitter
  telemetry::CounterFamily* decisions = nullptr;
  telemetry::CounterFamily* attempts = nullptr;
  telemetry::HistogramFamily* prediction_error = nullptr;

  int64_t Now() const { return clock.NowUnixMicros(); }
};

}  // namespace kvgate::router::internal
