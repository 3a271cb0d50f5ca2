// The normalized usage of one request, and its parsing from each provider's usage JSON.
// See ../shared/docs/PROVIDERS.md, "Normalization table". Unknown is not zero: a count the provider
// did not report is std::nullopt, never 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvgate::telemetry {

// How a provider reports usage. Several provider types share a flavour.
enum class UsageFlavor {
  kOpenAIChat,     // OpenAI / Azure chat completions (prompt_tokens includes cached)
  kOpenAIResponses,
  kOpenAICompatible,  // xAI, Groq, Fireworks, Mistral: cached_tokens only, no writes
  kOpenRouter,
  kAnthropic,      // input_tokens excludes cache read and write
  kBedrock,
  kGeminiNative,
  kGeminiOpenAI,
  kDeepSeek,
  kVllm,           // cached_tokens absent -> unknown
  kSglang,         // cached_tokens omitted when 0 (and when the feature is off) -> unknown
  kLlamaCpp,
  kKvgateEngine,
};

std::optional<UsageFlavor> UsageFlavorFromName(std::string_view name);
std::string_view UsageFlavorName(UsageFlavor flavor);

struct Usage {
  std::optional<int64_t> cache_read;
  std::optional<int64_t> cache_write_5m;
  std::optional<int64_t> cache_write_1h;
  std::optional<int64_t> uncached;
  std::optional<int64_t> output;     // includes reasoning
  std::optional<int64_t> reasoning;  // subset of output
  // True when `uncached` came out negative from the provider's numbers and was clamped to 0.
  bool clamped = false;
  // The usage object exactly as the provider sent it (merged across stream events where the
  // provider spreads it), kept so pricing can be re-run. Null when the provider sent none.
  nlohmann::json raw;

  // All input tokens, when every input component is known.
  std::optional<int64_t> TotalInput() const;
  bool operator==(const Usage&) const = default;
};

// Normalizes one usage object (the value of "usage" / "usageMetadata", or for llama.cpp the whole
// response so `timings` is visible). Never throws; fields with wrong types count as unreported.
Usage NormalizeUsage(UsageFlavor flavor, const nlohmann::json& usage);

}  // namespace kvgate::telemetry
