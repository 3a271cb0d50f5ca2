#include "telemetry/usage.h"

#include <gtest/gtest.h>

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

// Normalizes `text` on the proxy's path (raw bytes) and checks the tree overload agrees.
Usage N(UsageFlavor flavor, const char* text) {
  Usage from_raw = NormalizeUsage(flavor, raw_json::Parse(text).value());
  Usage from_tree = NormalizeUsage(flavor, json::parse(text));
  // raw keeps the provider's key order on the raw path; the tree's is sorted.
  EXPECT_EQ(from_raw.raw.empty() ? json() : json::parse(from_raw.raw),
            from_tree.raw.empty() ? json() : json::parse(from_tree.raw)) << text;
  from_tree.raw = from_raw.raw;
  EXPECT_EQ(from_raw, from_tree) << text;
  return from_raw;
}

TEST(TelemetryUsageTest, FlavorNamesRoundTrip) {
  const char* names[] = {"openai",  "openai-responses", "openai-compatible", "openrouter", "anthropic",
                         "bedrock", "gemini",           "gemini-openai",     "deepseek",   "vllm",
                         "sglang",  "llamacpp",         "kvgate",            "openai-embeddings"};
  for (const char* name : names) {
    auto flavor = UsageFlavorFromName(name);
    ASSERT_TRUE(flavor.has_value()) << name;
    EXPECT_EQ(UsageFlavorName(*flavor), name);
  }
  EXPECT_FALSE(UsageFlavorFromName("OpenAI").has_value());
  EXPECT_FALSE(UsageFlavorFromName("").has_value());
}

// Bug class 1: OpenAI's prompt_tokens already includes cached tokens.
TEST(TelemetryUsageTest, OpenAIChatPromptTokensIncludeCached) {
  Usage u = N(UsageFlavor::kOpenAIChat, R"({"prompt_tokens": 2006, "completion_tokens": 300,
      "total_tokens": 2306, "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
      "completion_tokens_details": {"reasoning_tokens": 128}})");
  EXPECT_EQ(u.cache_read, 1920);
  EXPECT_EQ(u.cache_write_5m, 0);
  EXPECT_EQ(u.cache_write_1h, 0);
  EXPECT_EQ(u.uncached, 86);
  EXPECT_EQ(u.output, 300);
  EXPECT_EQ(u.reasoning, 128);
  EXPECT_EQ(u.TotalInput(), 2006);
  EXPECT_EQ(u.reported_input, 2006);
  EXPECT_FALSE(u.clamped);
  EXPECT_EQ(json::parse(u.raw)["prompt_tokens"], 2006);
}

TEST(TelemetryUsageTest, OpenAIChatWithCacheWrites) {
  Usage u = N(UsageFlavor::kOpenAIChat, R"({"prompt_tokens": 5000, "completion_tokens": 10,
      "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 2048}})");
  EXPECT_EQ(u.cache_read, 1024);
  EXPECT_EQ(u.cache_write_5m, 0);  // OpenAI states no TTL for its writes
  EXPECT_EQ(u.cache_write_no_ttl, 2048);
  EXPECT_EQ(u.uncached, 5000 - 1024 - 2048);
  EXPECT_EQ(u.TotalInput(), 5000);
}

TEST(TelemetryUsageTest, OpenAIChatWithoutDetailsIsUnknownNotZero) {
  Usage u = N(UsageFlavor::kOpenAIChat, R"({"prompt_tokens": 50, "completion_tokens": 5})");
  EXPECT_EQ(u.cache_read, std::nullopt);
  EXPECT_EQ(u.uncached, std::nullopt);
  EXPECT_EQ(u.TotalInput(), std::nullopt);
  EXPECT_EQ(u.reported_input, 50);
  EXPECT_EQ(u.output, 5);
  EXPECT_EQ(u.reasoning, std::nullopt);
}

TEST(TelemetryUsageTest, OpenAIResponses) {
  Usage u = N(UsageFlavor::kOpenAIResponses, R"({"input_tokens": 3000, "output_tokens": 700,
      "input_tokens_details": {"cached_tokens": 2048},
      "output_tokens_details": {"reasoning_tokens": 500}, "total_tokens": 3700})");
  EXPECT_EQ(u.cache_read, 2048);
  EXPECT_EQ(u.cache_write_5m, 0);
  EXPECT_EQ(u.uncached, 952);
  EXPECT_EQ(u.output, 700);
  EXPECT_EQ(u.reasoning, 500);

  Usage w = N(UsageFlavor::kOpenAIResponses, R"({"input_tokens": 3000, "output_tokens": 1,
      "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 2500}})");
  EXPECT_EQ(w.cache_write_5m, 0);
  EXPECT_EQ(w.cache_write_no_ttl, 2500);
  EXPECT_EQ(w.uncached, 500);
}

// The Responses API's counts as the API reference shows them: input_tokens includes the cached
// ones (the same convention as prompt_tokens), so uncached = input - cached.
TEST(TelemetryUsageTest, OpenAIResponsesReferenceShape) {
  Usage u = N(UsageFlavor::kOpenAIResponses, R"({"input_tokens": 36, "input_tokens_details":
      {"cached_tokens": 0}, "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 0},
      "total_tokens": 123})");
  EXPECT_EQ(u.cache_read, 0);
  EXPECT_EQ(u.cache_write_no_ttl, 0);  // no cache_write_tokens: this model bills no writes
  EXPECT_EQ(u.uncached, 36);
  EXPECT_EQ(u.output, 87);
  EXPECT_EQ(u.reasoning, 0);
  EXPECT_EQ(u.TotalInput(), 36);
  EXPECT_EQ(u.reported_input, 36);
  EXPECT_FALSE(u.clamped);
}

TEST(TelemetryUsageTest, OpenAIResponsesWithoutDetailsIsUnknownNotZero) {
  // An OpenAI-compatible server's Responses endpoint that reports no cache counts (vLLM without
  // --enable-prompt-tokens-details): the cached share, so the uncached one, is unknown.
  Usage u = N(UsageFlavor::kOpenAIResponses, R"({"input_tokens": 400, "output_tokens": 9})");
  EXPECT_EQ(u.cache_read, std::nullopt);
  EXPECT_EQ(u.uncached, std::nullopt);
  EXPECT_EQ(u.reported_input, 400);
  EXPECT_EQ(u.output, 9);
  EXPECT_EQ(u.reasoning, std::nullopt);
}

TEST(TelemetryUsageTest, OpenAIResponsesCachedAboveInputIsClamped) {
  Usage u = N(UsageFlavor::kOpenAIResponses, R"({"input_tokens": 100, "output_tokens": 1,
      "input_tokens_details": {"cached_tokens": 128}})");
  EXPECT_EQ(u.uncached, 0);
  EXPECT_TRUE(u.clamped);
}

TEST(TelemetryUsageTest, OpenAIEmbeddingsAreAllUncachedInput) {
  Usage u = N(UsageFlavor::kOpenAIEmbeddings, R"({"prompt_tokens": 8, "total_tokens": 8})");
  EXPECT_EQ(u.uncached, 8);
  EXPECT_EQ(u.cache_read, 0);
  EXPECT_EQ(u.CacheWrite(), 0);
  EXPECT_EQ(u.output, 0);
  EXPECT_EQ(u.reasoning, 0);
  EXPECT_EQ(u.TotalInput(), 8);
  EXPECT_EQ(u.reported_input, 8);
  Usage none = N(UsageFlavor::kOpenAIEmbeddings, R"({"total_tokens": 8})");
  EXPECT_EQ(none.uncached, std::nullopt);
  EXPECT_EQ(none.output, std::nullopt);
  EXPECT_EQ(none.TotalInput(), std::nullopt);
}

TEST(TelemetryUsageTest, OpenAICompatibleHasNoWrites) {
  Usage u = N(UsageFlavor::kOpenAICompatible, R"({"prompt_tokens": 900, "completion_tokens": 20,
      "prompt_tokens_details": {"cached_tokens": 512, "cache_write_tokens": 300}})");
  EXPECT_EQ(u.cache_read, 512);
  EXPECT_EQ(u.cache_write_5m, 0);  // the table says 0: a stray field is ignored
  EXPECT_EQ(u.cache_write_no_ttl, 0);
  EXPECT_EQ(u.uncached, 388);
  EXPECT_EQ(u.output, 20);
}

TEST(TelemetryUsageTest, OpenRouter) {
  Usage u = N(UsageFlavor::kOpenRouter, R"({"prompt_tokens": 10000, "completion_tokens": 50,
      "cost": 0.0123, "prompt_tokens_details": {"cached_tokens": 4000, "cache_write_tokens": 5000}})");
  EXPECT_EQ(u.cache_read, 4000);
  EXPECT_EQ(u.cache_write_5m, 0);
  EXPECT_EQ(u.cache_write_no_ttl, 5000);
  EXPECT_EQ(u.uncached, 1000);
  EXPECT_DOUBLE_EQ(json::parse(u.raw)["cost"].get<double>(), 0.0123);
}

// Bug class 1, the other side: Anthropic's input_tokens excludes cache reads and writes.
TEST(TelemetryUsageTest, AnthropicInputExcludesCache) {
  Usage u = N(UsageFlavor::kAnthropic, R"({"input_tokens": 21, "cache_creation_input_tokens": 188086,
      "cache_read_input_tokens": 3000, "output_tokens": 393})");
  EXPECT_EQ(u.uncached, 21);
  EXPECT_EQ(u.cache_read, 3000);
  EXPECT_EQ(u.cache_write_5m, 188086);  // no split: all 5m
  EXPECT_EQ(u.cache_write_no_ttl, 0);  // Anthropic writes always have a TTL
  EXPECT_EQ(u.cache_write_1h, 0);
  EXPECT_EQ(u.output, 393);
  EXPECT_EQ(u.TotalInput(), 21 + 188086 + 3000);
  EXPECT_EQ(u.reported_input, 21 + 188086 + 3000);
  EXPECT_EQ(u.reasoning, std::nullopt);
}

TEST(TelemetryUsageTest, AnthropicTtlSplit) {
  Usage u = N(UsageFlavor::kAnthropic, R"({"input_tokens": 10, "cache_creation_input_tokens": 1500,
      "cache_read_input_tokens": 0, "output_tokens": 5,
      "cache_creation": {"ephemeral_5m_input_tokens": 500, "ephemeral_1h_input_tokens": 1000}})");
  EXPECT_EQ(u.cache_write_5m, 500);
  EXPECT_EQ(u.cache_write_1h, 1000);
  EXPECT_EQ(u.TotalInput(), 1510);

  Usage partial = N(UsageFlavor::kAnthropic, R"({"input_tokens": 10,
      "cache_creation_input_tokens": 1500, "cache_read_input_tokens": 0,
      "cache_creation": {"ephemeral_1h_input_tokens": 1200}})");
  EXPECT_EQ(partial.cache_write_1h, 1200);
  EXPECT_EQ(partial.cache_write_5m, 300);
}

TEST(TelemetryUsageTest, AnthropicWithoutCacheFieldsIsUnknown) {
  Usage u = N(UsageFlavor::kAnthropic, R"({"input_tokens": 40, "output_tokens": 2})");
  EXPECT_EQ(u.uncached, 40);
  EXPECT_EQ(u.cache_read, std::nullopt);
  EXPECT_EQ(u.cache_write_5m, std::nullopt);
  EXPECT_EQ(u.cache_write_1h, std::nullopt);
  EXPECT_EQ(u.TotalInput(), std::nullopt);
}

// Bug class 2 (the normalizer's half): a stream's usage merged from message_start and the last
// cumulative message_delta normalizes to the final numbers, output from the delta.
TEST(TelemetryUsageTest, AnthropicMergedStreamUsage) {
  json start = json::parse(R"({"input_tokens": 12, "cache_creation_input_tokens": 0,
      "cache_read_input_tokens": 4096, "output_tokens": 1})");
  json last_delta = json::parse(R"({"output_tokens": 250})");
  json merged = start;
  merged.update(last_delta);
  Usage u = NormalizeUsage(UsageFlavor::kAnthropic, merged);
  EXPECT_EQ(u.output, 250);
  EXPECT_EQ(u.cache_read, 4096);
  EXPECT_EQ(u.uncached, 12);
  EXPECT_EQ(u.cache_write_5m, 0);
  EXPECT_EQ(json::parse(u.raw), merged);
}

TEST(TelemetryUsageTest, Bedrock) {
  Usage u = N(UsageFlavor::kBedrock, R"({"inputTokens": 30, "outputTokens": 8, "totalTokens": 4138,
      "cacheReadInputTokens": 4000, "cacheWriteInputTokens": 100})");
  EXPECT_EQ(u.uncached, 30);
  EXPECT_EQ(u.cache_read, 4000);
  EXPECT_EQ(u.cache_write_5m, 100);
  EXPECT_EQ(u.cache_write_1h, 0);
  EXPECT_EQ(u.output, 8);
  EXPECT_EQ(u.TotalInput(), 4130);

  Usage none = N(UsageFlavor::kBedrock, R"({"inputTokens": 30, "outputTokens": 8})");
  EXPECT_EQ(none.cache_read, std::nullopt);
  EXPECT_EQ(none.cache_write_5m, std::nullopt);
  EXPECT_EQ(none.uncached, 30);

  // cacheDetails splits the writes by TTL.
  Usage split = N(UsageFlavor::kBedrock, R"({"inputTokens": 3, "outputTokens": 1,
      "cacheReadInputTokens": 0, "cacheWriteInputTokens": 1500,
      "cacheDetails": [{"ttl": "5m", "inputTokens": 500}, {"ttl": "1h", "inputTokens": 1000}]})");
  EXPECT_EQ(split.cache_write_5m, 500);
  EXPECT_EQ(split.cache_write_1h, 1000);
  EXPECT_EQ(split.TotalInput(), 1503);
}

TEST(TelemetryUsageTest, GeminiNative) {
  Usage u = N(UsageFlavor::kGeminiNative, R"({"promptTokenCount": 5000,
      "cachedContentTokenCount": 4096, "candidatesTokenCount": 100, "thoughtsTokenCount": 900,
      "totalTokenCount": 6000})");
  EXPECT_EQ(u.cache_read, 4096);
  EXPECT_EQ(u.cache_write_5m, 0);
  EXPECT_EQ(u.uncached, 904);
  EXPECT_EQ(u.output, 1000);  // thoughts are billed as output
  EXPECT_EQ(u.reasoning, 900);

  // proto3 omits zero fields.
  Usage plain = N(UsageFlavor::kGeminiNative, R"({"promptTokenCount": 7, "candidatesTokenCount": 3})");
  EXPECT_EQ(plain.cache_read, 0);
  EXPECT_EQ(plain.uncached, 7);
  EXPECT_EQ(plain.output, 3);
  EXPECT_EQ(plain.reasoning, 0);

  Usage bad = N(UsageFlavor::kGeminiNative, R"({"promptTokenCount": 7, "cachedContentTokenCount": "3"})");
  EXPECT_EQ(bad.cache_read, std::nullopt);
  EXPECT_EQ(bad.uncached, std::nullopt);
}

TEST(TelemetryUsageTest, GeminiOpenAICompat) {
  Usage u = N(UsageFlavor::kGeminiOpenAI, R"({"prompt_tokens": 3000, "completion_tokens": 40,
      "total_tokens": 3540, "prompt_tokens_details": {"cached_tokens": 2000}})");
  EXPECT_EQ(u.cache_read, 2000);
  EXPECT_EQ(u.uncached, 1000);
  EXPECT_EQ(u.output, 540);  // total - prompt: completion_tokens there excludes thinking
  EXPECT_EQ(u.cache_write_5m, 0);

  Usage no_total = N(UsageFlavor::kGeminiOpenAI, R"({"prompt_tokens": 30, "completion_tokens": 4})");
  EXPECT_EQ(no_total.output, 4);
  EXPECT_EQ(no_total.cache_read, std::nullopt);
}

TEST(TelemetryUsageTest, DeepSeek) {
  Usage u = N(UsageFlavor::kDeepSeek, R"({"prompt_tokens": 1000, "completion_tokens": 77,
      "prompt_cache_hit_tokens": 832, "prompt_cache_miss_tokens": 168,
      "completion_tokens_details": {"reasoning_tokens": 20}})");
  EXPECT_EQ(u.cache_read, 832);
  EXPECT_EQ(u.uncached, 168);
  EXPECT_EQ(u.cache_write_5m, 0);
  EXPECT_EQ(u.cache_write_1h, 0);
  EXPECT_EQ(u.output, 77);
  EXPECT_EQ(u.reasoning, 20);

  Usage newer = N(UsageFlavor::kDeepSeek, R"({"prompt_tokens": 1000, "completion_tokens": 7,
      "prompt_tokens_details": {"cached_tokens": 640}})");
  EXPECT_EQ(newer.cache_read, 640);
  EXPECT_EQ(newer.uncached, 360);
}

TEST(TelemetryUsageTest, VllmWithoutDetailsIsUnknown) {
  Usage u = N(UsageFlavor::kVllm, R"({"prompt_tokens": 400, "completion_tokens": 9, "total_tokens": 409})");
  EXPECT_EQ(u.cache_read, std::nullopt);
  EXPECT_EQ(u.uncached, std::nullopt);
  EXPECT_EQ(u.cache_write_5m, 0);  // vLLM never writes (no write fee)
  EXPECT_EQ(u.cache_write_1h, 0);
  EXPECT_EQ(u.output, 9);
  EXPECT_EQ(u.reported_input, 400);

  Usage with = N(UsageFlavor::kVllm, R"({"prompt_tokens": 400, "completion_tokens": 9,
      "prompt_tokens_details": {"cached_tokens": 384}})");
  EXPECT_EQ(with.cache_read, 384);
  EXPECT_EQ(with.uncached, 16);

  Usage zero = N(UsageFlavor::kVllm, R"({"prompt_tokens": 400, "completion_tokens": 9,
      "prompt_tokens_details": {"cached_tokens": 0}})");
  EXPECT_EQ(zero.cache_read, 0);
  EXPECT_EQ(zero.uncached, 400);
}

TEST(TelemetryUsageTest, SglangOmittedWhenZeroIsUnknown) {
  Usage u = N(UsageFlavor::kSglang, R"({"prompt_tokens": 64, "completion_tokens": 2,
      "prompt_tokens_details": null})");
  EXPECT_EQ(u.cache_read, std::nullopt);
  EXPECT_EQ(u.uncached, std::nullopt);
  Usage hit = N(UsageFlavor::kSglang, R"({"prompt_tokens": 64, "completion_tokens": 2,
      "prompt_tokens_details": {"cached_tokens": 48}})");
  EXPECT_EQ(hit.cache_read, 48);
  EXPECT_EQ(hit.uncached, 16);
}

TEST(TelemetryUsageTest, LlamaCppWholeResponse) {
  Usage u = N(UsageFlavor::kLlamaCpp, R"({"choices": [], "usage": {"prompt_tokens": 120,
      "completion_tokens": 30, "total_tokens": 150},
      "timings": {"cache_n": 100, "prompt_n": 20, "predicted_n": 30}})");
  EXPECT_EQ(u.cache_read, 100);
  EXPECT_EQ(u.uncached, 20);
  EXPECT_EQ(u.output, 30);
  EXPECT_EQ(u.cache_write_5m, 0);
  EXPECT_EQ(u.TotalInput(), 120);

  Usage details = N(UsageFlavor::kLlamaCpp, R"({"usage": {"prompt_tokens": 120,
      "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 96}}})");
  EXPECT_EQ(details.cache_read, 96);
  EXPECT_EQ(details.uncached, 24);

  Usage timings_only = N(UsageFlavor::kLlamaCpp,
                         R"({"timings": {"cache_n": 5, "prompt_n": 6, "predicted_n": 7}})");
  EXPECT_EQ(timings_only.cache_read, 5);
  EXPECT_EQ(timings_only.uncached, 6);
  EXPECT_EQ(timings_only.output, 7);
}

TEST(TelemetryUsageTest, KvgateEngine) {
  Usage u = N(UsageFlavor::kKvgateEngine, R"({"prompt_tokens": 100, "completion_tokens": 12,
      "prompt_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 32}})");
  EXPECT_EQ(u.cache_read, 64);
  EXPECT_EQ(u.cache_write_5m, 0);  // the engine's cache has no TTL: not Anthropic's 5m bucket
  EXPECT_EQ(u.cache_write_1h, 0);
  EXPECT_EQ(u.cache_write_no_ttl, 32);
  EXPECT_EQ(u.uncached, 4);
  EXPECT_EQ(u.TotalInput(), 100);
  // The engine always reports writes: absent means unknown.
  Usage missing = N(UsageFlavor::kKvgateEngine, R"({"prompt_tokens": 100, "completion_tokens": 12,
      "prompt_tokens_details": {"cached_tokens": 64}})");
  EXPECT_EQ(missing.cache_write_no_ttl, std::nullopt);
  EXPECT_EQ(missing.uncached, std::nullopt);
  EXPECT_EQ(u.cache_read_offload, std::nullopt) << "no tier split reported: unknown";
}

TEST(TelemetryUsageTest, KvgateEngineCacheTiers) {
  Usage u = N(UsageFlavor::kKvgateEngine, R"({"prompt_tokens": 12300, "completion_tokens": 12,
      "prompt_tokens_details": {"cached_tokens": 12288, "cache_write_tokens": 0,
                                "cache_read_offload_tokens": 8192}})");
  EXPECT_EQ(u.cache_read, 12288);
  EXPECT_EQ(u.cache_read_offload, 8192);  // of cache_read: 4,096 from the pool, 8,192 from disk
  EXPECT_EQ(u.uncached, 12);
  EXPECT_EQ(u.cache_read_offload_tier, "") << "kind not reported";
  Usage host = N(UsageFlavor::kKvgateEngine, R"({"prompt_tokens": 70, "completion_tokens": 4,
      "prompt_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 0,
                                "cache_read_offload_tokens": 48,
                                "cache_read_offload_tier": "host"}})");
  EXPECT_EQ(host.cache_read_offload, 48);
  EXPECT_EQ(host.cache_read_offload_tier, "host");
  // Only the kinds the engine has: anything else is not a label the store keeps.
  Usage odd = N(UsageFlavor::kKvgateEngine, R"({"prompt_tokens": 70, "completion_tokens": 4,
      "prompt_tokens_details": {"cached_tokens": 64, "cache_read_offload_tokens": 48,
                                "cache_read_offload_tier": "tape"}})");
  EXPECT_EQ(odd.cache_read_offload_tier, "");
  // Other flavours have no tiers, even when a field of that name shows up.
  Usage other = N(UsageFlavor::kOpenAIChat, R"({"prompt_tokens": 100, "completion_tokens": 1,
      "prompt_tokens_details": {"cached_tokens": 64, "cache_read_offload_tokens": 64}})");
  EXPECT_EQ(other.cache_read_offload, std::nullopt);
}

TEST(TelemetryUsageTest, NegativeRemainderIsClampedAndFlagged) {
  Usage u = N(UsageFlavor::kOpenAIChat, R"({"prompt_tokens": 100, "completion_tokens": 1,
      "prompt_tokens_details": {"cached_tokens": 128}})");
  EXPECT_EQ(u.uncached, 0);
  EXPECT_TRUE(u.clamped);
  Usage g = N(UsageFlavor::kGeminiNative, R"({"promptTokenCount": 10, "cachedContentTokenCount": 11})");
  EXPECT_EQ(g.uncached, 0);
  EXPECT_TRUE(g.clamped);
}

TEST(TelemetryUsageTest, WrongTypesAreUnreportedNeverThrow) {
  Usage u = N(UsageFlavor::kOpenAIChat, R"({"prompt_tokens": "100", "completion_tokens": -3,
      "prompt_tokens_details": [1, 2]})");
  EXPECT_EQ(u.uncached, std::nullopt);
  EXPECT_EQ(u.cache_read, std::nullopt);
  EXPECT_EQ(u.output, std::nullopt);
  EXPECT_EQ(u.reported_input, std::nullopt);

  Usage floats = N(UsageFlavor::kOpenAIChat, R"({"prompt_tokens": 10.0, "completion_tokens": 2.5,
      "prompt_tokens_details": {"cached_tokens": 4}})");
  EXPECT_EQ(floats.uncached, 6);
  EXPECT_EQ(floats.output, std::nullopt);

  for (const char* text : {"null", "[]", "42", "\"usage\"", "{}"}) {
    for (int f = 0; f <= static_cast<int>(UsageFlavor::kKvgateEngine); ++f) {
      Usage x = N(static_cast<UsageFlavor>(f), text);
      EXPECT_EQ(x.uncached, std::nullopt) << text << " " << f;
      EXPECT_EQ(x.output, std::nullopt) << text << " " << f;
      if (std::string_view(text) == "null") {
        EXPECT_EQ(x.raw, "");  // no usage
      } else {
        EXPECT_EQ(json::parse(x.raw), json::parse(text));
      }
    }
  }
  Usage huge = N(UsageFlavor::kAnthropic, R"({"input_tokens": 18446744073709551615})");
  EXPECT_EQ(huge.uncached, std::nullopt);
}

// One upstream reported 4e9 tokens: priced as given it charged a key $800,000 and set its token
// limit's reset 76 years out. No request can hold that many (10x the largest context window):
// unknown, flagged, and the raw kept.
TEST(UsageTest, CountsBeyondAnyContextWindowAreUnknownAndFlagged) {
  Usage u = N(UsageFlavor::kOpenAIChat, R"({"prompt_tokens": 4000000000,
      "completion_tokens": 12, "prompt_tokens_details": {"cached_tokens": 0}})");
  EXPECT_EQ(u.uncached, std::nullopt);
  EXPECT_EQ(u.reported_input, std::nullopt);
  EXPECT_EQ(u.cache_read, 0);
  EXPECT_EQ(u.output, 12);
  EXPECT_TRUE(u.clamped);
  EXPECT_NE(u.raw.find("4000000000"), std::string::npos);
  Usage out = N(UsageFlavor::kAnthropic, R"({"input_tokens": 10, "output_tokens": 4e9})");
  EXPECT_EQ(out.uncached, 10);
  EXPECT_EQ(out.output, std::nullopt);
  EXPECT_TRUE(out.clamped);
  // The largest real prompts stay as they came.
  Usage big = N(UsageFlavor::kAnthropic, R"({"input_tokens": 10000000, "output_tokens": 1})");
  EXPECT_EQ(big.uncached, 10'000'000);
  EXPECT_FALSE(big.clamped);
}

}  // namespace
}  // namespace kvgate::telemetry
