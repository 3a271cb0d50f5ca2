// The normalized usage of one request, and its parsing from each provider's usage JSON.
// docs/providers.md has the normalization table, provider by provider. Unknown is not zero: a count
// the provider did not report is std::nullopt, never 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/raw_json.h"

namespace kvgate::telemetry {

// How a provider reports usage. Several provider types share a flavour.
enum class UsageFlavor {
  kOpenAIChat,     // OpenAI / Azure chat completions (prompt_tokens includes cached)
  kOpenAIResponses,   // input_tokens includes cached (input_tokens_details.cached_tokens)
  kOpenAIEmbeddings,  // prompt_tokens only: all uncached input, no output, no cache
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
  std::optional<int64_t> cache_write_5m;  // written with a 5-minute TTL (Anthropic, Bedrock)
  std::optional<int64_t> cache_write_1h;  // written with a 1-hour TTL (Anthropic)
  // Written with no TTL stated: kvgate's engine (its cache has no time-based expiry) and
  // OpenAI-shaped `cache_write_tokens` (OpenAI, OpenRouter), which carry no TTL. Kept apart so
  // that a 5-minute bucket only ever holds 5-minute writes.
  std::optional<int64_t> cache_write_no_ttl;
  std::optional<int64_t> uncached;
  std::optional<int64_t> output;     // includes reasoning
  std::optional<int64_t> reasoning;  // subset of output
  // Of cache_read, the tokens served from a slower cache tier than the provider's primary one
  // (the built-in engine's disk offload tier; the rest came from its KV pool). Unknown for
  // providers that do not report tiers.
  std::optional<int64_t> cache_read_offload;
  // The kind of that tier ("disk", "host": the engine's file or host-memory tier); empty when
  // unknown (no tier, another provider, an older kvgate's record, which meant "disk").
  std::string cache_read_offload_tier;
  // True when `uncached` came out negative from the provider's numbers and was clamped to 0.
  bool clamped = false;
  // True when some counts are kvgate's estimate, not the provider's report: a stream the client
  // left whose usage did not arrive within the drain (gateway/remote_upstream.cc).
  bool estimated = false;
  // The usage object as the provider sent it (merged across stream events where the provider
  // spreads it), as minified JSON text, kept so pricing can be re-run. Empty when the provider
  // sent none. (Text, not a tree: it is only ever stored, and a tree cost a parse, copies and a
  // re-serialization per request.)
  std::string raw;
  // The provider's own total of input tokens (prompt_tokens, input_tokens + cache counts,
  // promptTokenCount, ...), known even when the cache split is not (vLLM without
  // prompt_tokens_details). Never used for pricing; used for hit ratios and below-minimum checks.
  std::optional<int64_t> reported_input;

  // All input tokens, when every input component is known.
  std::optional<int64_t> TotalInput() const;
  // Every cache write (5m + 1h + no TTL), when all three are known.
  std::optional<int64_t> CacheWrite() const;
  bool operator==(const Usage&) const = default;
};

// Normalizes one usage object (the value of "usage" / "usageMetadata", or for llama.cpp the whole
// response so `timings` is visible). Never throws; fields with wrong types count as unreported.
//
// A count is accepted when it is a JSON integer (or an integral float) in [0, 2^50]; anything else
// (string, null, negative, fractional, absurdly large) counts as unreported. Per-flavour rules beyond
// the table in docs/providers.md:
//  - a "0" cache-write column in the table means the provider has no cache writes: every write
//    bucket is 0 whenever the usage object is an object at all (vLLM, SGLang, DeepSeek, Gemini,
//    llama.cpp, xAI/Groq/...);
//  - writes reported without a TTL (OpenAI Chat / Responses, OpenRouter, kvgate's engine) go to
//    cache_write_no_ttl, and their 5m and 1h buckets are 0; every other flavour's no-TTL bucket is
//    0 (Anthropic and Bedrock writes always have a TTL: 5 minutes unless split otherwise);
//  - OpenAI Chat / Responses / OpenRouter report cache_write_tokens only for models that bill writes,
//    so an absent write field is 0 (those tokens are billed as input otherwise); an absent
//    cached_tokens is unknown, and then uncached is unknown too;
//  - kvgate's engine always reports both, so an absent cache_write_tokens is unknown there; it
//    also reports prompt_tokens_details.cache_read_offload_tokens (cache_read_offload), the part
//    of its cached tokens restored from its disk tier (absent: unknown);
//  - Anthropic: absent cache_read_input_tokens / cache_creation_input_tokens are unknown; with no
//    cache_creation split all writes go to the 5m bucket; with a partial split the missing bucket is
//    the remainder of cache_creation_input_tokens;
//  - Gemini native is proto3 JSON, which omits zero-valued fields: with promptTokenCount present, an
//    absent cachedContentTokenCount / candidatesTokenCount / thoughtsTokenCount is 0;
//  - Gemini OpenAI-compat: output = total_tokens - prompt_tokens, else completion_tokens;
//  - DeepSeek: prompt_cache_hit_tokens, else prompt_tokens_details.cached_tokens; uncached =
//    prompt_cache_miss_tokens, else prompt_tokens - read;
//  - llama.cpp: `usage` may be the whole response (with "usage" and "timings") or the usage object;
//    read = usage.prompt_tokens_details.cached_tokens, else timings.cache_n; uncached =
//    timings.prompt_n, else prompt_tokens - read; output = completion_tokens, else timings.predicted_n;
//  - OpenAI embeddings: uncached = prompt_tokens; cache reads and writes are 0 (no cache), and
//    output and reasoning 0 when prompt_tokens is known (an embedding has no output);
//  - reasoning: completion_tokens_details / output_tokens_details .reasoning_tokens, Gemini
//    thoughtsTokenCount; unknown elsewhere.
// A computed uncached below 0 is clamped to 0 and `clamped` is set. `raw` is `usage` verbatim,
// minified.
Usage NormalizeUsage(UsageFlavor flavor, raw_json::Value usage);
// The same for a usage object built or merged as a tree (Anthropic streams, the built-in engine).
Usage NormalizeUsage(UsageFlavor flavor, const nlohmann::json& usage);

}  // namespace kvgate::telemetry
