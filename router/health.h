// Internal to the router: one target's health. EWMA latency and time to first token, the attempts
// and failures of the last `window` seconds, a circuit breaker (closed -> open after N consecutive
// failures or an error rate over X; open -> half-open after the cool-down, where one probe
// attempt decides), a Retry-After cool-down, and the attempts in flight (the router's own view of
// a replica's load).
//
// Thread safety: every method locks the object's mutex; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "router/router.h"

namespace kvgate::router::internal {

class TargetHealth {
 public:
  explicit TargetHealth(const HealthOptions& options);

  enum class Circuit { kClosed, kOpen, kHalfOpen };

  // Whether a request may be sent now; when not, *why_not says so in words. A half-open circuit
  // admits only while its probe is not taken.
  bool Eligible(int64_t now_us, std::string* why_not) const;
  // Just before an attempt: false when the circuit is open, or half-open with its probe taken
  // (skip this target; never with !probe_gate); else takes the half-open probe and counts the
  // attempt in flight.
  bool Begin(int64_t now_us, bool probe_gate = true);
  // The attempt's outcome (every Begin is followed by one End).
  void End(const AttemptOutcome& outcome, int64_t now_us);

  struct Snapshot {
    Circuit circuit = Circuit::kClosed;
    std::optional<double> latency_ms, ttft_ms;  // EWMA, nullopt before the first success
    int window_attempts = 0, window_failures = 0;
    int consecutive_failures = 0;
    int64_t open_until_us = 0;     // circuit open until (then half-open)
    int64_t cooling_until_us = 0;  // Retry-After
    int in_flight = 0;
  };
  Snapshot snapshot(int64_t now_us) const;

 private:
  struct Bucket {
    int64_t second = -1;
    int attempts = 0, failures = 0;
  };
  // Moves an open circuit past its cool-down to half-open.
  Circuit CircuitLocked(int64_t now_us) const REQUIRES(mu_);
  Bucket& BucketLocked(int64_t now_us) REQUIRES(mu_);
  void WindowLocked(int64_t now_us, int* attempts, int* failures) const REQUIRES(mu_);

  const HealthOptions options_;
  mutable Mutex mu_;
  std::vector<Bucket> buckets_ GUARDED_BY(mu_);  // one per second of the window, a ring
  std::optional<double> latency_ms_ GUARDED_BY(mu_), ttft_ms_ GUARDED_BY(mu_);
  int consecutive_failures_ GUARDED_BY(mu_) = 0;
  bool open_ GUARDED_BY(mu_) = false;
  int64_t open_until_us_ GUARDED_BY(mu_) = 0;
  bool probe_taken_ GUARDED_BY(mu_) = false;
  int64_t cooling_until_us_ GUARDED_BY(mu_) = 0;
  int in_flight_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvgate::router::internal
