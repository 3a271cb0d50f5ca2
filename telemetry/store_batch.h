// Internal to the telemetry module: what one batch adds to the aggregate tables (threads,
// thread_models, thread_last_prompt, usage_by_minute), summed in memory so that each aggregate
// row is written once per batch. Both stores' writers use it, so the aggregates mean the same.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "telemetry/record.h"

namespace kvgate::telemetry::internal {

// The turns of one thread within a batch, summed (see kUpsertThread).
struct ThreadDelta {
  int64_t turns = 0;
  int64_t first_seen_us = 0;
  int64_t last_seen_us = 0;
  int64_t cache_read = 0;
  int64_t cache_write = 0;
  int64_t cache_write_5m = 0;
  int64_t cache_write_1h = 0;
  int64_t cache_write_no_ttl = 0;
  int64_t uncached = 0;
  int64_t output = 0;
  int64_t reasoning = 0;
  int64_t cost_total = 0;
  int64_t cost_saved = 0;
  int64_t cost_missed = 0;
  int64_t known_input_read = 0;
  int64_t known_input_total = 0;
  std::set<std::string> models;
  const RequestRecord* last_prompt = nullptr;  // the batch's last turn with a prompt fingerprint

  int64_t rows =
      0;  // turns and keep-warm pings (a ping is not a turn, but its cost is the thread's)

  void Add(const RequestRecord& r) {
    const Usage& u = r.usage;
    const std::optional<int64_t> total_input = u.TotalInput();
    first_seen_us = rows == 0 ? r.created_at_us : std::min(first_seen_us, r.created_at_us);
    last_seen_us = rows == 0 ? r.created_at_us : std::max(last_seen_us, r.created_at_us);
    ++rows;
    if (r.purpose != kPurposeKeepWarm) ++turns;
    cache_read += u.cache_read.value_or(0);
    cache_write_5m += u.cache_write_5m.value_or(0);
    cache_write_1h += u.cache_write_1h.value_or(0);
    cache_write_no_ttl += u.cache_write_no_ttl.value_or(0);
    cache_write += u.cache_write_5m.value_or(0) + u.cache_write_1h.value_or(0) +
                   u.cache_write_no_ttl.value_or(0);
    uncached += u.uncached.value_or(0);
    output += u.output.value_or(0);
    reasoning += u.reasoning.value_or(0);
    cost_total += r.cost.total;
    cost_saved += r.cost.saved;
    cost_missed += r.cost.missed;
    known_input_read += total_input.has_value() ? u.cache_read.value_or(0) : 0;
    known_input_total += total_input.value_or(0);
    models.insert(r.model);
    if (r.prompt_fingerprint) last_prompt = &r;
  }
};

// A batch's requests of one (minute, model, provider), summed (see kUpsertMinute).
struct MinuteDelta {
  int64_t requests = 0, errors = 0, cache_read = 0, cache_write = 0, uncached = 0, output = 0;
  int64_t cost_total = 0, cost_saved = 0, cost_missed = 0;
  int64_t known_input_read = 0, known_input_total = 0, latency_us_sum = 0, latency_count = 0;

  void Add(const RequestRecord& r) {
    const Usage& u = r.usage;
    const std::optional<int64_t> total_input = u.TotalInput();
    ++requests;
    errors += r.status == "ok" ? 0 : 1;
    cache_read += u.cache_read.value_or(0);
    cache_write += u.cache_write_5m.value_or(0) + u.cache_write_1h.value_or(0) +
                   u.cache_write_no_ttl.value_or(0);
    uncached += u.uncached.value_or(0);
    output += u.output.value_or(0);
    cost_total += r.cost.total;
    cost_saved += r.cost.saved;
    cost_missed += r.cost.missed;
    known_input_read += total_input.has_value() ? u.cache_read.value_or(0) : 0;
    known_input_total += total_input.value_or(0);
    if (r.latency_us) {
      latency_us_sum += *r.latency_us;
      ++latency_count;
    }
  }
};

// (minute start in unix micros, model, provider); model is "" for requests that reached no
// provider, as in the metrics.
using MinuteKey = std::tuple<int64_t, std::string_view, std::string_view>;
inline MinuteKey MinuteKeyOf(const RequestRecord& r) {
  constexpr int64_t kMinuteUs = 60'000'000;
  const int64_t t = r.created_at_us;
  const int64_t minute = (t >= 0 ? t / kMinuteUs : (t - kMinuteUs + 1) / kMinuteUs) * kMinuteUs;
  // ("" as a literal: a default string_view's null data would bind as SQL NULL.)
  return {minute, r.provider.empty() ? std::string_view("") : std::string_view(r.model),
          r.provider};
}

}  // namespace kvgate::telemetry::internal
