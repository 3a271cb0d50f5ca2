// Prices and costs. All money is integer: prices in micro-USD per 1M tokens (0.075 USD/1M = 75'000),
// costs in pico-USD (1e-12 USD), so tokens x price is exact with no float drift.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "telemetry/usage.h"

namespace kvgate::telemetry {

struct Rates {
  int64_t input = 0;           // micro-USD per 1M uncached input tokens
  int64_t cached_input = 0;    // per 1M cache-read tokens
  int64_t cache_write_5m = 0;  // per 1M tokens written with a 5-minute TTL
  int64_t cache_write_1h = 0;  // per 1M tokens written with a 1-hour TTL
  int64_t output = 0;          // per 1M output tokens (reasoning included)
};

struct Price {
  Rates base;
  // Long-context tier: when the prompt's total input exceeds `threshold_tokens`, `above` applies
  // to the whole request (Gemini 2.5 Pro above 200k).
  std::optional<int64_t> tier_threshold_tokens;
  Rates above;
};

struct Cost {
  int64_t cache_read = 0;   // pico-USD
  int64_t cache_write = 0;  // 5m + 1h
  int64_t uncached = 0;
  int64_t output = 0;
  int64_t total = 0;
  // What the same input would have cost with no cache at all, minus what it cost: positive when
  // caching saved money, negative when writes cost more than they saved this turn.
  int64_t saved = 0;
  // False when a usage component was unknown or the model has no price: the known parts are still
  // summed, but the total is a lower bound.
  bool complete = false;
  bool priced = false;  // a price was found for the model
};

// Parses "0.075" -> 75'000 exactly (decimal string or JSON number, up to 6 decimals of a USD/1M).
Result<int64_t> ParseMicroUsdPerMillion(const nlohmann::json& value);

Cost ComputeCost(const Usage& usage, const Price& price);

// pico-USD -> USD as a double, for JSON output only (never for arithmetic).
double PicoUsdToUsd(int64_t pico);

// The price catalog: the built-in table of PROVIDERS.md, plus entries loaded from JSON (kvgate's own
// shape or LiteLLM's field names: input_cost_per_token, cache_read_input_token_cost, ...), plus
// per-model overrides from the config. Immutable after construction; safe to share across threads.
class PriceCatalog {
 public:
  static PriceCatalog BuiltIn();
  // Adds or replaces entries from a JSON object {model: {...}}; both field styles accepted.
  Status MergeJson(const nlohmann::json& catalog);
  void Set(std::string model, Price price);
  // Exact match first, then the longest catalog name that prefixes `model` followed by '-'
  // (so "gpt-4o-mini-2024-07-18" finds "gpt-4o-mini"), else nullopt.
  std::optional<Price> Find(std::string_view model) const;

 private:
  std::map<std::string, Price, std::less<>> prices_;
};

}  // namespace kvgate::telemetry
