#include "telemetry/provider_traits.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::telemetry {
namespace {

std::vector<ProviderType> AllTypes() {
  std::vector<ProviderType> out;
  for (int i = 0; i <= static_cast<int>(ProviderType::kBedrock); ++i) {
    out.push_back(static_cast<ProviderType>(i));
  }
  return out;
}

TEST(ProviderTraitsTest, EveryTypeHasItsOwnRow) {
  EXPECT_EQ(AllProviderTraits().size(), AllTypes().size());
  for (ProviderType type : AllTypes()) {
    const ProviderTraits& row = TraitsOf(type);
    EXPECT_EQ(row.type, type) << static_cast<int>(type);
    EXPECT_FALSE(row.name.empty()) << static_cast<int>(type);
    EXPECT_FALSE(row.cache_rules_key.empty()) << row.name;
  }
}

TEST(ProviderTraitsTest, NamesRoundTrip) {
  std::set<std::string_view> names;
  for (ProviderType type : AllTypes()) {
    const std::string_view name = ProviderTypeName(type);
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    std::optional<ProviderType> back = ProviderTypeFromName(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, type) << name;
  }
  EXPECT_EQ(names, (std::set<std::string_view>{"openai", "anthropic", "deepseek", "vllm", "sglang",
                                               "llamacpp", "openrouter", "gemini-openai", "local",
                                               "bedrock"}));
  // Exact and case-sensitive: the catalog's keys and near misses are no types.
  for (std::string_view other : {"OpenAI", "gemini", "kvgate", "", "local ", "Anthropic"}) {
    EXPECT_FALSE(ProviderTypeFromName(other).has_value()) << other;
  }
}

// The decisions the table took over from targets.cc, router.cc and the former proxy.cc and
// responses_bridge.cc, count_tokens.cc and provider.cc, pinned as they were.
TEST(ProviderTraitsTest, RowsKeepTheDecisionsTheyReplaced) {
  EXPECT_EQ(TraitsOf(ProviderType::kGeminiOpenAI).cache_rules_key, "gemini");
  EXPECT_EQ(TraitsOf(ProviderType::kLocal).cache_rules_key, "kvgate");
  EXPECT_EQ(TraitsOf(ProviderType::kOpenRouter).cache_rules_key, "openai");
  EXPECT_EQ(TraitsOf(ProviderType::kDeepSeek).cache_rules_key, "deepseek");
  EXPECT_EQ(TraitsOf(ProviderType::kLocal).usage, UsageFlavor::kKvgateEngine);
  EXPECT_EQ(TraitsOf(ProviderType::kOpenAI).usage, UsageFlavor::kOpenAIChat);

  std::set<std::string_view> engine, pass_through, responses_translated, messages_as_is, top_k,
      counted, prompt_cache_key, anthropic_helpers;
  for (const ProviderTraits& row : AllProviderTraits()) {
    if (IsBuiltInEngine(row.type)) engine.insert(row.name);
    if (PassesThrough(row.type)) pass_through.insert(row.name);
    if (row.translates_responses) responses_translated.insert(row.name);
    if (!row.translates_messages) messages_as_is.insert(row.name);
    if (row.accepts_top_k) top_k.insert(row.name);
    if (row.counting != TokenCounting::kNone) counted.insert(row.name);
    if (row.prompt_cache_key) prompt_cache_key.insert(row.name);
    if (row.anthropic_cache_helpers) anthropic_helpers.insert(row.name);
    // A type takes the Responses API passed through or translated, never both.
    EXPECT_FALSE(row.translates_responses && PassesThrough(row.type)) << row.name;
    // Embeddings only ever pass through.
    if (row.defaults.embeddings) {
      EXPECT_TRUE(PassesThrough(row.type)) << row.name;
    }
  }
  using Names = std::set<std::string_view>;
  EXPECT_EQ(engine, Names({"local"}));
  EXPECT_EQ(pass_through, Names({"openai", "deepseek", "vllm", "sglang", "llamacpp", "openrouter",
                                 "gemini-openai"}));
  EXPECT_EQ(responses_translated, Names({"local", "anthropic", "bedrock"}));
  EXPECT_EQ(messages_as_is, Names({"anthropic"}));
  EXPECT_EQ(top_k, Names({"vllm", "sglang", "llamacpp", "local", "openrouter"}));
  EXPECT_EQ(counted, Names({"anthropic", "local"}));
  EXPECT_EQ(TraitsOf(ProviderType::kLocal).counting, TokenCounting::kEngineTokenizer);
  EXPECT_EQ(TraitsOf(ProviderType::kAnthropic).counting, TokenCounting::kAnthropicCountApi);
  EXPECT_EQ(prompt_cache_key, Names({"openai"}));
  EXPECT_EQ(anthropic_helpers, Names({"anthropic", "bedrock"}));

  auto caps = [](ProviderType t) {
    const DefaultCapabilities& d = TraitsOf(t).defaults;
    return std::vector<bool>{d.tools, d.images, d.response_format, d.responses, d.embeddings};
  };
  using Caps = std::vector<bool>;  // tools, images, response_format, responses, embeddings
  EXPECT_EQ(caps(ProviderType::kOpenAI), Caps({true, true, true, true, true}));
  EXPECT_EQ(caps(ProviderType::kAnthropic), Caps({true, true, false, true, false}));
  EXPECT_EQ(caps(ProviderType::kDeepSeek), Caps({true, false, true, false, false}));
  EXPECT_EQ(caps(ProviderType::kGeminiOpenAI), Caps({true, true, true, false, true}));
  EXPECT_EQ(caps(ProviderType::kLocal), Caps({true, false, true, true, false}));
  EXPECT_EQ(caps(ProviderType::kBedrock), Caps({true, true, false, true, false}));
  EXPECT_EQ(TraitsOf(ProviderType::kBedrock).usage, UsageFlavor::kBedrock);
  EXPECT_EQ(TraitsOf(ProviderType::kBedrock).cache_rules_key, "bedrock");
  for (ProviderType t : {ProviderType::kVllm, ProviderType::kSglang, ProviderType::kLlamaCpp,
                         ProviderType::kOpenRouter}) {
    EXPECT_EQ(caps(t), Caps({true, true, true, true, true})) << ProviderTypeName(t);
  }
}

}  // namespace
}  // namespace kvgate::telemetry
