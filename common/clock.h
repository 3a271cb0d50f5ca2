// Time as an injected dependency, so tests can move it (cache TTLs, monitor windows, idle gaps).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvgate {

// Thread safety: implementations must be safe to call from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time in microseconds since the Unix epoch (for timestamps that are stored).
  virtual int64_t NowUnixMicros() const = 0;
  // Monotonic time in nanoseconds (for durations: latency, TTFT, deadlines).
  virtual int64_t MonotonicNanos() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t NowUnixMicros() const override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  int64_t MonotonicNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that only moves when told to. Both time lines advance together.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_unix_micros = 1'767'225'600'000'000)  // 2026-01-01T00:00:00Z
      : unix_micros_(start_unix_micros) {}
  int64_t NowUnixMicros() const override { return unix_micros_.load(); }
  int64_t MonotonicNanos() const override { return (unix_micros_.load() - start_) * 1000; }
  void AdvanceMicros(int64_t micros) { unix_micros_.fetch_add(micros); }
  void AdvanceSeconds(int64_t seconds) { AdvanceMicros(seconds * 1'000'000); }

 private:
  std::atomic<int64_t> unix_micros_;
  const int64_t start_ = unix_micros_.load();
};

}  // namespace kvgate
