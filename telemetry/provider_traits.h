// Provider types and what each one is: the one table every per-type decision in the gateway, the
// router and the adapters reads (config validation, target defaults, which client APIs are
// translated, the usage flavour, the catalog's caching rules, token counting, the built-in engine).
// Telemetry owns it because both router/ and gateway/providers/ depend on telemetry, which also
// owns the usage flavours and the price catalog the rows name.
//
// Adding a provider type: one enumerator in ProviderType and one row in kTraits
// (provider_traits.cc), plus its adapter in gateway/providers/ when its wire is not one of the
// existing ones. A type on the OpenAI chat wire needs no adapter: openai_compat.cc serves every
// such type, with per-type quirks of the body or the usage inside that adapter.
//
// Thread safety: constant data and pure functions.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "telemetry/usage.h"

namespace kvgate::telemetry {

enum class ProviderType {
  kOpenAI,
  kAnthropic,  // Anthropic Messages API; every other remote type speaks OpenAI Chat/Completions
  kDeepSeek,
  kVllm,
  kSglang,
  kLlamaCpp,
  kOpenRouter,
  kGeminiOpenAI,  // Gemini's OpenAI-compatible endpoint
  kLocal,         // kvgate's own engine (OpenAI-compatible, exact cache reads and writes)
  kBedrock,       // AWS Bedrock: Converse or InvokeModel (Anthropic's body), SigV4-signed
};

// The wire format kvgate speaks to a provider of the type.
enum class Wire {
  kOpenAIChat,         // POST {base}/chat/completions, /completions (and /responses, /embeddings)
  kAnthropicMessages,  // POST {base}/v1/messages
  kEngine,             // the built-in engine, in process: no URL, no per-token price
  kBedrock,            // POST {base}/model/{id}/converse (or /invoke), event-stream framing
};

// How /v1/messages/count_tokens counts a request for a model of the type.
enum class TokenCounting {
  kNone,               // refused: kvgate has no tokenizer of the provider's
  kAnthropicCountApi,  // Anthropic's own count_tokens API
  kEngineTokenizer,    // the engine's tokenizer and chat template
};

// What a target of the type can do when its model config says nothing (models[].supports).
struct DefaultCapabilities {
  bool tools = true;
  bool images = true;
  bool response_format = true;
  bool responses = true;   // the OpenAI Responses API (passed through or translated)
  bool embeddings = true;  // POST /v1/embeddings (passed through only)
};

struct ProviderTraits {
  ProviderType type;
  std::string_view name;  // the config's providers[].type; also the record's provider_type
  Wire wire;
  UsageFlavor usage;  // the flavour NormalizeUsage reads the type's usage with
  // The catalog's caching-rules key (PriceCatalog::FindCachingRule) for the type's models.
  std::string_view cache_rules_key;
  DefaultCapabilities defaults;
  // The Responses API is answered through chat (gateway/api/responses_api.cc) instead of passed
  // through; only the OpenAI chat wire can take it as it is.
  bool translates_responses;
  // Anthropic Messages (POST /v1/messages) is translated to chat for it: every wire but
  // Anthropic's own, which takes it as it is.
  bool translates_messages;
  bool accepts_top_k;  // the Messages API's top_k may be sent as a chat extra
  TokenCounting counting;
  // The cache helpers the type's config may turn on (docs/configuration.md, "Cache helpers"):
  // prompt_cache_key (OpenAI's parameter); anthropic_auto_cache and anthropic_cache_diagnostics.
  bool prompt_cache_key;
  bool anthropic_cache_helpers;
};

// The type's row. Every enumerator has one.
const ProviderTraits& TraitsOf(ProviderType type);
// Every row, in enumerator order.
std::span<const ProviderTraits> AllProviderTraits();

// The config name's type: an exact, case-sensitive match; nullopt for anything else.
std::optional<ProviderType> ProviderTypeFromName(std::string_view name);
std::string_view ProviderTypeName(ProviderType type);

// Whether the type is the built-in engine (its wire is kEngine): hosted by this process, probed
// for cached prefixes, counted with its tokenizer, free per token.
bool IsBuiltInEngine(ProviderType type);
// Whether the Responses API and embeddings can pass through to it unchanged (the OpenAI chat wire);
// models[].supports may only turn those on for such types (or the Responses API where translated).
bool PassesThrough(ProviderType type);

}  // namespace kvgate::telemetry
