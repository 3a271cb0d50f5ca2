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
  // per 1M tokens written with no TTL stated (Usage::cache_write_no_ttl); defaults to the 5m rate
  int64_t cache_write_no_ttl = 0;
  bool operator==(const Rates&) const = default;
};

struct Price {
  Rates base;
  // Long-context tier: when the prompt's total input exceeds `threshold_tokens`, `above` applies
  // to the whole request (Gemini 2.5 Pro above 200k).
  std::optional<int64_t> tier_threshold_tokens;
  Rates above;
  bool operator==(const Price&) const = default;
};

struct Cost {
  int64_t cache_read = 0;   // pico-USD
  int64_t cache_write = 0;  // 5m + 1h + no TTL
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
  // What the cache misses diagnosed on this turn cost beyond a hit (MissCost), 0 when none.
  int64_t missed = 0;
};

// Parses "0.075" -> 75'000 exactly (decimal string or JSON number, up to 6 decimals of a USD/1M).
// Strings: [0-9]+(.[0-9]+)?([eE][+-]?[0-9]+)? (also ".5"), non-negative, exact: a digit below one
// micro-USD that is not 0 is kInvalidArgument. JSON numbers: integers exactly; floats through their
// shortest round-trip decimal form (0.075 -> "0.075"), exactly, except that float noise (a form with
// 15+ significant digits, e.g. 3.0000000000000004e-07 scaled) is rounded to the nearest unit.
Result<int64_t> ParseMicroUsdPerMillion(const nlohmann::json& value);

// The same for a USD-per-token value (LiteLLM's fields): 2.5e-06 USD/token -> 2'500'000.
Result<int64_t> ParseMicroUsdPerMillionFromPerToken(const nlohmann::json& value);

// Prices one request. Rates: uncached x input, cache_read x cached_input, cache_write_5m x
// cache_write_5m, cache_write_1h x cache_write_1h, output x output; a cache write is charged at its
// write rate only, never also at the input rate. The long-context tier applies when the total input
// (Usage::TotalInput(), else Usage::reported_input) exceeds the threshold; when neither is known and
// the price has a tier, base rates are used and the cost is incomplete. Unknown components add 0 and
// make `complete` false; `saved` is computed over the known input components. A product that would
// overflow int64 counts as unknown. `priced` is true.
Cost ComputeCost(const Usage& usage, const Price& price);

// What `missed_tokens` input tokens cost because they were not read from the cache: each at the
// uncached input rate instead of the cached-input rate (the tier chosen as ComputeCost chooses it).
// A lower bound where a miss was written to the cache again at a higher write rate. 0 when the
// product would overflow.
int64_t MissCost(int64_t missed_tokens, const Usage& usage, const Price& price);

// pico-USD -> USD as a double, for JSON output only (never for arithmetic).
double PicoUsdToUsd(int64_t pico);

// How a provider type's prompt cache behaves, for cache-miss diagnosis (docs/providers.md; some of
// these values are best knowledge, not guarantees).
struct CachingRule {
  // Prompts shorter than this are never cached (silently).
  int64_t min_cacheable_tokens = 0;
  // Cache hits come in multiples of this many tokens (OpenAI 128, DeepSeek 64, paged engines 16).
  int64_t granularity_tokens = 1;
  // Idle time after which an entry is expected to be gone; nullopt when the cache has no time-based
  // expiry (evicted by memory pressure only: vLLM, SGLang, llama.cpp, kvgate's engine).
  std::optional<int64_t> ttl_seconds;
  // The longest retention the provider offers on request (Anthropic's 1h TTL, OpenAI's 1h bound).
  std::optional<int64_t> max_ttl_seconds;
  // True when the provider caches every prompt prefix by itself (OpenAI, DeepSeek, Gemini implicit,
  // vLLM, kvgate's engine); false when only marked prefixes are cached (Anthropic cache_control).
  bool automatic = true;
  // Per-model minimum, looked up like PriceCatalog::Find (exact, then dated-suffix prefix).
  std::map<std::string, int64_t, std::less<>> model_min_cacheable_tokens;

  // The minimum for `model`: its per-model entry when there is one, else min_cacheable_tokens.
  int64_t MinCacheableTokensFor(std::string_view model) const;
  bool operator==(const CachingRule&) const = default;
};

// The price catalog: the built-in table (telemetry/catalog.json), plus entries loaded from JSON (kvgate's own
// shape or LiteLLM's field names: input_cost_per_token, cache_read_input_token_cost, ...), plus
// per-model overrides from the config. Immutable after construction; safe to share across threads.
// (Const methods may run concurrently; MergeJson/Set/MergeCachingRules need exclusive access.)
class PriceCatalog {
 public:
  // The built-in table (telemetry/catalog.json, compiled into the library): every model of
  // the price table of docs/providers.md and the caching rules per provider type.
  static PriceCatalog BuiltIn();
  // Adds or replaces entries from a JSON object {model: {...}}; both field styles accepted.
  // kvgate's shape, USD per 1M tokens as strings or numbers: {"input", "output", "cached_input",
  // "cache_write_5m", "cache_write_1h", "cache_write_no_ttl", "tier": {"threshold_tokens", <same
  // rate keys>}}; "input" and "output" are required; cached_input and cache_write_5m default to
  // input (no separate fee means the provider bills those tokens as input), cache_write_1h and
  // cache_write_no_ttl to cache_write_5m; a tier's
  // missing rates default to the base rates. Other keys are ignored.
  // LiteLLM's shape (recognised by any key containing "cost"), USD per token: input_cost_per_token,
  // output_cost_per_token, cache_read_input_token_cost, cache_creation_input_token_cost,
  // cache_creation_input_token_cost_above_1hr, and "<field>_above_<N>k_tokens" for a tier at N*1000
  // tokens; same defaults; entries with neither an input nor an output token price (image, audio,
  // "sample_spec") are skipped. All-or-nothing: on error nothing is merged.
  Status MergeJson(const nlohmann::json& catalog);
  void Set(std::string model, Price price);
  // Exact match first, then the longest catalog name that prefixes `model` followed by '-'
  // (so "gpt-4o-mini-2024-07-18" finds "gpt-4o-mini"), else, when `model` contains '/', the same
  // for the part after the last '/' ("openai/gpt-4o" finds "gpt-4o"); else nullopt.
  std::optional<Price> Find(std::string_view model) const;
  size_t size() const { return prices_.size(); }
  // The model's context window in tokens (an entry's "context_window", or LiteLLM's
  // "max_input_tokens"), looked up like Find; nullopt when unknown.
  std::optional<int64_t> ContextWindow(std::string_view model) const;

  // Adds or replaces caching rules from {provider_type: {"min_cacheable_tokens", "granularity_tokens",
  // "ttl_seconds" (null: none), "max_ttl_seconds", "automatic" (default true),
  // "model_min_cacheable_tokens": {model: n}}}; min_cacheable_tokens is required.
  // All-or-nothing.
  Status MergeCachingRules(const nlohmann::json& rules);
  // The rule under a caching-rules key (a provider type's ProviderTraits::cache_rules_key, or a
  // provider the catalog knows that is no type yet: azure, bedrock, ...), else nullopt.
  std::optional<CachingRule> FindCachingRule(std::string_view provider_type) const;

 private:
  std::map<std::string, Price, std::less<>> prices_;
  std::map<std::string, int64_t, std::less<>> context_windows_;
  std::map<std::string, CachingRule, std::less<>> caching_rules_;
};

// Prices a request by model name: ComputeCost with the catalog's price, or, when the model has no
// price, a Cost with every component 0, priced = false and complete = false.
Cost ComputeCost(const Usage& usage, const PriceCatalog& catalog, std::string_view model);

}  // namespace kvgate::telemetry
