#include "router/health.h"

#include <algorithm>
#include <cstdio>

namespace kvgate::router::internal {
namespace {

// A failure counts against a target's health when another target might have done better: an
// overloaded or failing upstream, a timeout, a broken connection. A 4xx other than 429 is the
// request's own fault.
bool CountsAsFailure(const AttemptOutcome& o) {
  switch (o.failure) {
    case Failure::kNone:
    case Failure::kOther:
      return false;
    case Failure::kTimeout:
    case Failure::kConnect:
      return true;
    case Failure::kStatus:
      return o.status == 429 || o.status >= 500;
  }
  return false;
}

std::string Seconds(int64_t micros) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", double(micros) / 1e6);
  return buf;
}

}  // namespace

TargetHealth::TargetHealth(const HealthOptions& options)
    : options_(options), buckets_(std::max<int64_t>(1, options.window.count())) {}

TargetHealth::Circuit TargetHealth::CircuitLocked(int64_t now_us) const {
  if (!open_) return Circuit::kClosed;
  return now_us < open_until_us_ ? Circuit::kOpen : Circuit::kHalfOpen;
}

TargetHealth::Bucket& TargetHealth::BucketLocked(int64_t now_us) {
  const int64_t second = now_us / 1'000'000;
  Bucket& b = buckets_[static_cast<size_t>(second % static_cast<int64_t>(buckets_.size()))];
  if (b.second != second) b = Bucket{second, 0, 0};
  return b;
}

void TargetHealth::WindowLocked(int64_t now_us, int* attempts, int* failures) const {
  const int64_t second = now_us / 1'000'000;
  *attempts = *failures = 0;
  for (const Bucket& b : buckets_) {
    if (b.second < 0 || second - b.second >= static_cast<int64_t>(buckets_.size())) continue;
    *attempts += b.attempts;
    *failures += b.failures;
  }
}

bool TargetHealth::Eligible(int64_t now_us, std::string* why_not) const {
  MutexLock lock(&mu_);
  if (now_us < cooling_until_us_) {
    if (why_not) *why_not = "rate limited: Retry-After for " + Seconds(cooling_until_us_ - now_us);
    return false;
  }
  switch (CircuitLocked(now_us)) {
    case Circuit::kClosed:
      return true;
    case Circuit::kOpen:
      if (why_not) {
        *why_not = "circuit open after " + std::to_string(consecutive_failures_) +
                   " failures; half-open in " + Seconds(open_until_us_ - now_us);
      }
      return false;
    case Circuit::kHalfOpen:
      if (probe_taken_ && why_not) *why_not = "circuit half-open: its probe request is in flight";
      return !probe_taken_;
  }
  return true;
}

bool TargetHealth::Begin(int64_t now_us, bool probe_gate) {
  MutexLock lock(&mu_);
  if (probe_gate) {
    switch (CircuitLocked(now_us)) {
      case Circuit::kClosed:
        break;
      case Circuit::kOpen:  // it opened since the request was routed (a retry, say)
        return false;
      case Circuit::kHalfOpen:
        if (probe_taken_) return false;
        probe_taken_ = true;
        break;
    }
  }
  ++in_flight_;
  return true;
}

void TargetHealth::End(const AttemptOutcome& outcome, int64_t now_us) {
  MutexLock lock(&mu_);
  in_flight_ = std::max(0, in_flight_ - 1);
  const bool failed = CountsAsFailure(outcome);
  Bucket& bucket = BucketLocked(now_us);
  ++bucket.attempts;
  if (failed) ++bucket.failures;
  if (outcome.retry_after_ms && *outcome.retry_after_ms > 0 && outcome.status == 429) {
    cooling_until_us_ = std::max(cooling_until_us_, now_us + *outcome.retry_after_ms * 1000);
  }
  const Circuit circuit = CircuitLocked(now_us);
  if (!failed) {
    if (outcome.failure == Failure::kNone) {
      const double w = options_.ewma_weight;
      const double ms = double(outcome.latency_us) / 1000.0;
      latency_ms_ = latency_ms_ ? *latency_ms_ + w * (ms - *latency_ms_) : ms;
      if (outcome.ttft_us) {
        const double t = double(*outcome.ttft_us) / 1000.0;
        ttft_ms_ = ttft_ms_ ? *ttft_ms_ + w * (t - *ttft_ms_) : t;
      }
    }
    consecutive_failures_ = 0;
    if (circuit == Circuit::kHalfOpen && probe_taken_) {
      // The probe answered: close, and forget the failures that opened the circuit (they would
      // reopen it on the next error otherwise).
      open_ = false;
      probe_taken_ = false;
      for (Bucket& b : buckets_) b = Bucket{};
    }
    return;
  }
  ++consecutive_failures_;
  if (circuit == Circuit::kHalfOpen) {
    if (probe_taken_) {  // the probe failed: open for another cool-down
      probe_taken_ = false;
      open_until_us_ = now_us + options_.cooldown.count() * 1000;
    }
    return;
  }
  if (circuit == Circuit::kOpen) return;
  int attempts = 0, failures = 0;
  WindowLocked(now_us, &attempts, &failures);
  const bool rate = attempts >= options_.min_requests &&
                    double(failures) >= options_.error_rate_to_open * double(attempts);
  if (consecutive_failures_ >= options_.failures_to_open || rate) {
    open_ = true;
    probe_taken_ = false;
    open_until_us_ = now_us + options_.cooldown.count() * 1000;
  }
}

TargetHealth::Snapshot TargetHealth::snapshot(int64_t now_us) const {
  MutexLock lock(&mu_);
  Snapshot s;
  s.circuit = CircuitLocked(now_us);
  s.latency_ms = latency_ms_;
  s.ttft_ms = ttft_ms_;
  WindowLocked(now_us, &s.window_attempts, &s.window_failures);
  s.consecutive_failures = consecutive_failures_;
  s.open_until_us = open_ ? open_until_us_ : 0;
  s.cooling_until_us = cooling_until_us_ > now_us ? cooling_until_us_ : 0;
  s.in_flight = in_flight_;
  return s;
}

}  // namespace kvgate::router::internal
