// The provider-type table. Every field of every row is written out, so that a reader sees every
// decision a type makes in one place.
#include "telemetry/provider_traits.h"

#include <array>
#include <cstddef>

namespace kvgate::telemetry {

namespace {

constexpr DefaultCapabilities kAll{};

constexpr std::array<ProviderTraits, 10> kTraits = {{
    {.type = ProviderType::kOpenAI,
     .name = "openai",
     .wire = Wire::kOpenAIChat,
     .usage = UsageFlavor::kOpenAIChat,
     .cache_rules_key = "openai",
     .defaults = kAll,
     .translates_responses = false,
     .translates_messages = true,
     .accepts_top_k = false,
     .counting = TokenCounting::kNone,
     .prompt_cache_key = true,
     .anthropic_cache_helpers = false},
    {.type = ProviderType::kAnthropic,
     .name = "anthropic",
     .wire = Wire::kAnthropicMessages,
     .usage = UsageFlavor::kAnthropic,
     .cache_rules_key = "anthropic",
     .defaults = {.response_format = false, .embeddings = false},
     .translates_responses = true,
     .translates_messages = false,
     .accepts_top_k = false,  // Messages passes through with its top_k
     .counting = TokenCounting::kAnthropicCountApi,
     .prompt_cache_key = false,
     .anthropic_cache_helpers = true},
    // DeepSeek serves neither the Responses API nor embeddings, and reads no images.
    {.type = ProviderType::kDeepSeek,
     .name = "deepseek",
     .wire = Wire::kOpenAIChat,
     .usage = UsageFlavor::kDeepSeek,
     .cache_rules_key = "deepseek",
     .defaults = {.images = false, .responses = false, .embeddings = false},
     .translates_responses = false,
     .translates_messages = true,
     .accepts_top_k = false,
     .counting = TokenCounting::kNone,
     .prompt_cache_key = false,
     .anthropic_cache_helpers = false},
    {.type = ProviderType::kVllm,
     .name = "vllm",
     .wire = Wire::kOpenAIChat,
     .usage = UsageFlavor::kVllm,
     .cache_rules_key = "vllm",
     .defaults = kAll,
     .translates_responses = false,
     .translates_messages = true,
     .accepts_top_k = true,
     .counting = TokenCounting::kNone,
     .prompt_cache_key = false,
     .anthropic_cache_helpers = false},
    {.type = ProviderType::kSglang,
     .name = "sglang",
     .wire = Wire::kOpenAIChat,
     .usage = UsageFlavor::kSglang,
     .cache_rules_key = "sglang",
     .defaults = kAll,
     .translates_responses = false,
     .translates_messages = true,
     .accepts_top_k = true,
     .counting = TokenCounting::kNone,
     .prompt_cache_key = false,
     .anthropic_cache_helpers = false},
    {.type = ProviderType::kLlamaCpp,
     .name = "llamacpp",
     .wire = Wire::kOpenAIChat,
     .usage = UsageFlavor::kLlamaCpp,
     .cache_rules_key = "llamacpp",
     .defaults = kAll,
     .translates_responses = false,
     .translates_messages = true,
     .accepts_top_k = true,
     .counting = TokenCounting::kNone,
     .prompt_cache_key = false,
     .anthropic_cache_helpers = false},
    // OpenRouter caches as OpenAI does (automatic prefixes) for the models kvgate prices.
    {.type = ProviderType::kOpenRouter,
     .name = "openrouter",
     .wire = Wire::kOpenAIChat,
     .usage = UsageFlavor::kOpenRouter,
     .cache_rules_key = "openai",
     .defaults = kAll,
     .translates_responses = false,
     .translates_messages = true,
     .accepts_top_k = true,
     .counting = TokenCounting::kNone,
     .prompt_cache_key = false,
     .anthropic_cache_helpers = false},
    // Gemini's OpenAI endpoint serves no Responses API; its cache is Gemini's.
    {.type = ProviderType::kGeminiOpenAI,
     .name = "gemini-openai",
     .wire = Wire::kOpenAIChat,
     .usage = UsageFlavor::kGeminiOpenAI,
     .cache_rules_key = "gemini",
     .defaults = {.responses = false},
     .translates_responses = false,
     .translates_messages = true,
     .accepts_top_k = false,
     .counting = TokenCounting::kNone,
     .prompt_cache_key = false,
     .anthropic_cache_helpers = false},
    // The built-in engine reads no images and does not embed.
    {.type = ProviderType::kLocal,
     .name = "local",
     .wire = Wire::kEngine,
     .usage = UsageFlavor::kKvgateEngine,
     .cache_rules_key = "kvgate",
     .defaults = {.images = false, .embeddings = false},
     .translates_responses = true,
     .translates_messages = true,
     .accepts_top_k = true,
     .counting = TokenCounting::kEngineTokenizer,
     .prompt_cache_key = false,
     .anthropic_cache_helpers = false},
    // Bedrock: chat goes through the Anthropic translation to Converse or InvokeModel; Messages
    // and the Responses API are translated to chat first. Its cache is Anthropic's (cachePoint
    // blocks), so anthropic_auto_cache applies.
    {.type = ProviderType::kBedrock,
     .name = "bedrock",
     .wire = Wire::kBedrock,
     .usage = UsageFlavor::kBedrock,
     .cache_rules_key = "bedrock",
     .defaults = {.response_format = false, .embeddings = false},
     .translates_responses = true,
     .translates_messages = true,
     .accepts_top_k = false,
     .counting = TokenCounting::kNone,
     .prompt_cache_key = false,
     .anthropic_cache_helpers = true},
}};

// Rows are indexed by enumerator: TraitsOf is an array read.
constexpr bool RowsInEnumOrder() {
  for (size_t i = 0; i < kTraits.size(); ++i) {
    if (static_cast<size_t>(kTraits[i].type) != i) return false;
  }
  return true;
}
static_assert(RowsInEnumOrder(), "kTraits rows must follow ProviderType's order");
static_assert(kTraits.size() == static_cast<size_t>(ProviderType::kBedrock) + 1,
              "every ProviderType needs a row (kBedrock is the last enumerator)");

}  // namespace

const ProviderTraits& TraitsOf(ProviderType type) { return kTraits[static_cast<size_t>(type)]; }

std::span<const ProviderTraits> AllProviderTraits() { return kTraits; }

std::optional<ProviderType> ProviderTypeFromName(std::string_view name) {
  for (const ProviderTraits& row : kTraits) {
    if (row.name == name) return row.type;
  }
  return std::nullopt;
}

std::string_view ProviderTypeName(ProviderType type) { return TraitsOf(type).name; }

bool IsBuiltInEngine(ProviderType type) { return TraitsOf(type).wire == Wire::kEngine; }

bool PassesThrough(ProviderType type) { return TraitsOf(type).wire == Wire::kOpenAIChat; }

}  // namespace kvgate::telemetry
