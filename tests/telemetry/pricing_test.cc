#include "telemetry/pricing.h"

#include <gtest/gtest.h>

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

int64_t Micro(const json& v) {
  Result<int64_t> r = ParseMicroUsdPerMillion(v);
  EXPECT_TRUE(r.has_value()) << v.dump();
  return r.value_or(-1);
}

TEST(TelemetryPricingTest, ParsesDecimalStringsExactly) {
  EXPECT_EQ(Micro("0.075"), 75'000);
  EXPECT_EQ(Micro("2.00"), 2'000'000);
  EXPECT_EQ(Micro("15"), 15'000'000);
  EXPECT_EQ(Micro("18.75"), 18'750'000);
  EXPECT_EQ(Micro("0.000001"), 1);
  EXPECT_EQ(Micro("0.0000010"), 1);
  EXPECT_EQ(Micro(".5"), 500'000);
  EXPECT_EQ(Micro("1e-3"), 1'000);
  EXPECT_EQ(Micro("2.5E1"), 25'000'000);
  EXPECT_EQ(Micro("0"), 0);
  EXPECT_EQ(Micro("000.0"), 0);
  for (const char* bad : {"", ".", "-1", "+1", "0.0000001", "1,5", "abc", "1e", "0.5 ", " 0.5", "1e-7",
                          "99999999999999999999"}) {
    Result<int64_t> r = ParseMicroUsdPerMillion(json(bad));
    EXPECT_FALSE(r.has_value()) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    }
  }
}

TEST(TelemetryPricingTest, ParsesJsonNumbersExactly) {
  EXPECT_EQ(Micro(json(0.075)), 75'000);
  EXPECT_EQ(Micro(json(0.1)), 100'000);
  EXPECT_EQ(Micro(json(1.1)), 1'100'000);
  EXPECT_EQ(Micro(json(0.275)), 275'000);
  EXPECT_EQ(Micro(json(2)), 2'000'000);
  EXPECT_EQ(Micro(json(2u)), 2'000'000);
  EXPECT_EQ(Micro(json(0.30000000000000004)), 300'000);  // float noise rounds
  EXPECT_FALSE(ParseMicroUsdPerMillion(json(-0.5)).has_value());
  EXPECT_FALSE(ParseMicroUsdPerMillion(json(-2)).has_value());
  EXPECT_FALSE(ParseMicroUsdPerMillion(json(1e-9)).has_value());  // a short number, not noise
  EXPECT_FALSE(ParseMicroUsdPerMillion(json(nullptr)).has_value());
  EXPECT_FALSE(ParseMicroUsdPerMillion(json::array()).has_value());
  EXPECT_FALSE(ParseMicroUsdPerMillion(json(true)).has_value());
}

TEST(TelemetryPricingTest, ParsesPerTokenPrices) {
  EXPECT_EQ(ParseMicroUsdPerMillionFromPerToken(json(2.5e-06)), 2'500'000);
  EXPECT_EQ(ParseMicroUsdPerMillionFromPerToken(json(7.5e-08)), 75'000);
  EXPECT_EQ(ParseMicroUsdPerMillionFromPerToken(json(1.25e-07)), 125'000);
  EXPECT_EQ(ParseMicroUsdPerMillionFromPerToken(json(3.0000000000000004e-07)), 300'000);
  EXPECT_EQ(ParseMicroUsdPerMillionFromPerToken(json("0.0000028")), 2'800'000);
  EXPECT_EQ(ParseMicroUsdPerMillionFromPerToken(json(0)), 0);
  EXPECT_FALSE(ParseMicroUsdPerMillionFromPerToken(json("1e-13")).has_value());
}

TEST(TelemetryPricingTest, PicoUsdToUsd) {
  EXPECT_DOUBLE_EQ(PicoUsdToUsd(336'900'000), 0.0003369);
  EXPECT_DOUBLE_EQ(PicoUsdToUsd(1'500'000'000'000), 1.5);
  EXPECT_DOUBLE_EQ(PicoUsdToUsd(-2'000'000'000'000), -2.0);
  EXPECT_DOUBLE_EQ(PicoUsdToUsd(0), 0.0);
}

Usage MakeUsage(std::optional<int64_t> read, std::optional<int64_t> w5m, std::optional<int64_t> w1h,
                std::optional<int64_t> uncached, std::optional<int64_t> output) {
  Usage u;
  u.cache_read = read;
  u.cache_write_5m = w5m;
  u.cache_write_1h = w1h;
  u.cache_write_no_ttl = w5m.has_value() ? std::optional<int64_t>(0) : std::nullopt;
  u.uncached = uncached;
  u.output = output;
  return u;
}

TEST(TelemetryPricingTest, CostGpt4oMiniWithCacheRead) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  Usage u = NormalizeUsage(UsageFlavor::kOpenAIChat, json::parse(R"({"prompt_tokens": 2006,
      "completion_tokens": 300, "prompt_tokens_details": {"cached_tokens": 1920}})"));
  Cost c = ComputeCost(u, catalog, "gpt-4o-mini-2024-07-18");
  // 1920 x 75'000 ; 86 x 150'000 ; 300 x 600'000
  EXPECT_EQ(c.cache_read, 144'000'000);
  EXPECT_EQ(c.uncached, 12'900'000);
  EXPECT_EQ(c.cache_write, 0);
  EXPECT_EQ(c.output, 180'000'000);
  EXPECT_EQ(c.total, 336'900'000);
  EXPECT_EQ(c.saved, 1920LL * 150'000 - 144'000'000);
  EXPECT_TRUE(c.complete);
  EXPECT_TRUE(c.priced);
}

TEST(TelemetryPricingTest, CostEmbeddingModelsInputOnly) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  Usage u = NormalizeUsage(UsageFlavor::kOpenAIEmbeddings,
                           json::parse(R"({"prompt_tokens": 1000, "total_tokens": 1000})"));
  // $0.02 / 1M = 20'000 micro-USD per 1M tokens = 20'000 pico-USD per token.
  Cost small = ComputeCost(u, catalog, "text-embedding-3-small");
  EXPECT_EQ(small.total, 1000LL * 20'000);
  EXPECT_EQ(small.uncached, small.total);
  EXPECT_EQ(small.output, 0);
  EXPECT_TRUE(small.complete);
  EXPECT_TRUE(small.priced);
  EXPECT_EQ(ComputeCost(u, catalog, "text-embedding-3-large").total, 1000LL * 130'000);
}

// Bug class 3: a cache write is charged at the write rate only, never also at the input rate.
TEST(TelemetryPricingTest, CostSonnetCacheWriteChargedOnce) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  Usage u = NormalizeUsage(UsageFlavor::kAnthropic, json::parse(R"({"input_tokens": 21,
      "cache_creation_input_tokens": 188086, "cache_read_input_tokens": 3000, "output_tokens": 393})"));
  Cost c = ComputeCost(u, catalog, "claude-sonnet-4-5-20250929");
  EXPECT_EQ(c.uncached, 21LL * 3'000'000);
  EXPECT_EQ(c.cache_write, 188086LL * 3'750'000);
  EXPECT_EQ(c.cache_read, 3000LL * 300'000);
  EXPECT_EQ(c.output, 393LL * 15'000'000);
  EXPECT_EQ(c.total, 712'180'500'000);
  EXPECT_EQ(c.saved, -132'964'500'000);  // writing cost more than the reads saved this turn
  EXPECT_TRUE(c.complete);
}

TEST(TelemetryPricingTest, CostOpusTtlSplit) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  Cost c = ComputeCost(MakeUsage(0, 500, 1000, 10, 0), catalog, "claude-opus-4-5");
  EXPECT_EQ(c.cache_write, 500LL * 6'250'000 + 1000LL * 10'000'000);
  EXPECT_EQ(c.uncached, 50'000'000);
  EXPECT_EQ(c.total, 13'175'000'000);
}

TEST(TelemetryPricingTest, CostGeminiLongContextTier) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  Cost above = ComputeCost(MakeUsage(200'000, 0, 0, 50'000, 1000), catalog, "gemini-2.5-pro");
  EXPECT_EQ(above.cache_read, 200'000LL * 250'000);
  EXPECT_EQ(above.uncached, 50'000LL * 2'500'000);
  EXPECT_EQ(above.output, 1000LL * 15'000'000);
  EXPECT_EQ(above.total, 190'000'000'000);
  EXPECT_TRUE(above.complete);

  Cost at = ComputeCost(MakeUsage(150'000, 0, 0, 50'000, 1000), catalog, "gemini-2.5-pro");
  EXPECT_EQ(at.cache_read, 150'000LL * 125'000);
  EXPECT_EQ(at.uncached, 50'000LL * 1'250'000);
  EXPECT_EQ(at.output, 1000LL * 10'000'000);

  // Split unknown but the provider's total known: the tier still applies, cost incomplete.
  Usage split_unknown = MakeUsage(std::nullopt, 0, 0, std::nullopt, 10);
  split_unknown.reported_input = 300'000;
  Cost c = ComputeCost(split_unknown, catalog, "gemini-2.5-pro");
  EXPECT_EQ(c.output, 10LL * 15'000'000);
  EXPECT_FALSE(c.complete);
}

TEST(TelemetryPricingTest, CostDeepSeek) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  Usage u = NormalizeUsage(UsageFlavor::kDeepSeek, json::parse(R"({"prompt_tokens": 1000,
      "completion_tokens": 77, "prompt_cache_hit_tokens": 832, "prompt_cache_miss_tokens": 168})"));
  Cost c = ComputeCost(u, catalog, "deepseek-chat");
  EXPECT_EQ(c.total, 832LL * 28'000 + 168LL * 280'000 + 77LL * 420'000);
  EXPECT_EQ(c.total, 102'676'000);
  EXPECT_EQ(c.saved, 832LL * (280'000 - 28'000));
}

TEST(TelemetryPricingTest, UnknownComponentsMakeCostIncomplete) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  Usage vllm = NormalizeUsage(UsageFlavor::kVllm, json::parse(R"({"prompt_tokens": 400, "completion_tokens": 9})"));
  Cost c = ComputeCost(vllm, catalog, "gpt-4.1");
  EXPECT_TRUE(c.priced);
  EXPECT_FALSE(c.complete);
  EXPECT_EQ(c.output, 9LL * 8'000'000);
  EXPECT_EQ(c.total, 9LL * 8'000'000);
  EXPECT_EQ(c.uncached, 0);

  Cost unpriced = ComputeCost(MakeUsage(1, 0, 0, 1, 1), catalog, "my-local-model");
  EXPECT_FALSE(unpriced.priced);
  EXPECT_FALSE(unpriced.complete);
  EXPECT_EQ(unpriced.total, 0);

  // Overflow is unknown, never wrapped.
  Price huge;
  huge.base.output = int64_t{1} << 40;
  Cost o = ComputeCost(MakeUsage(0, 0, 0, 0, int64_t{1} << 40), huge);
  EXPECT_FALSE(o.complete);
  EXPECT_GE(o.total, 0);
}

TEST(TelemetryPricingTest, BuiltInHasEveryModelOfTheTable) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  struct Row {
    const char* model;
    int64_t input, cached, w5m, w1h, output;
  };
  const Row rows[] = {
      {"gpt-4.1", 2'000'000, 500'000, 2'000'000, 2'000'000, 8'000'000},
      {"gpt-4.1-mini", 400'000, 100'000, 400'000, 400'000, 1'600'000},
      {"gpt-4o", 2'500'000, 1'250'000, 2'500'000, 2'500'000, 10'000'000},
      {"gpt-4o-mini", 150'000, 75'000, 150'000, 150'000, 600'000},
      {"gpt-5", 1'250'000, 125'000, 1'250'000, 1'250'000, 10'000'000},
      {"gpt-5-mini", 250'000, 25'000, 250'000, 250'000, 2'000'000},
      {"o3", 2'000'000, 500'000, 2'000'000, 2'000'000, 8'000'000},
      {"o4-mini", 1'100'000, 275'000, 1'100'000, 1'100'000, 4'400'000},
      {"claude-opus-4-1", 15'000'000, 1'500'000, 18'750'000, 30'000'000, 75'000'000},
      {"claude-opus-4-5", 5'000'000, 500'000, 6'250'000, 10'000'000, 25'000'000},
      {"claude-sonnet-4-5", 3'000'000, 300'000, 3'750'000, 6'000'000, 15'000'000},
      {"claude-haiku-4-5", 1'000'000, 100'000, 1'250'000, 2'000'000, 5'000'000},
      // Bedrock's ids of the same models, at the same list prices.
      {"anthropic.claude-opus-4-1", 15'000'000, 1'500'000, 18'750'000, 30'000'000, 75'000'000},
      {"anthropic.claude-opus-4-5", 5'000'000, 500'000, 6'250'000, 10'000'000, 25'000'000},
      {"anthropic.claude-sonnet-4-5", 3'000'000, 300'000, 3'750'000, 6'000'000, 15'000'000},
      {"anthropic.claude-haiku-4-5", 1'000'000, 100'000, 1'250'000, 2'000'000, 5'000'000},
      {"gemini-2.5-pro", 1'250'000, 125'000, 1'250'000, 1'250'000, 10'000'000},
      {"gemini-2.5-flash", 300'000, 30'000, 300'000, 300'000, 2'500'000},
      {"deepseek-chat", 280'000, 28'000, 280'000, 280'000, 420'000},
      {"text-embedding-3-small", 20'000, 20'000, 20'000, 20'000, 0},
      {"text-embedding-3-large", 130'000, 130'000, 130'000, 130'000, 0},
  };
  EXPECT_EQ(catalog.size(), std::size(rows));
  for (const Row& row : rows) {
    std::optional<Price> p = catalog.Find(row.model);
    ASSERT_TRUE(p.has_value()) << row.model;
    EXPECT_EQ(p->base, (Rates{row.input, row.cached, row.w5m, row.w1h, row.output, row.w5m})) << row.model;
  }
  std::optional<Price> pro = catalog.Find("gemini-2.5-pro");
  ASSERT_TRUE(pro.has_value());
  EXPECT_EQ(pro->tier_threshold_tokens, 200'000);
  EXPECT_EQ(pro->above, (Rates{2'500'000, 250'000, 1'250'000, 1'250'000, 15'000'000, 1'250'000}));
}

TEST(TelemetryPricingTest, FindFallsBackToDatedPrefix) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  EXPECT_EQ(catalog.Find("gpt-4o-mini-2024-07-18")->base.input, 150'000);  // not gpt-4o
  EXPECT_EQ(catalog.Find("gpt-4o-2024-08-06")->base.input, 2'500'000);
  EXPECT_EQ(catalog.Find("openai/gpt-4.1-mini")->base.input, 400'000);
  EXPECT_FALSE(catalog.Find("gpt-4").has_value());
  EXPECT_FALSE(catalog.Find("gpt-4o2").has_value());
  EXPECT_FALSE(catalog.Find("").has_value());
  EXPECT_FALSE(catalog.Find("-").has_value());
}

TEST(TelemetryPricingTest, WritesWithoutTtlHaveTheirOwnRate) {
  PriceCatalog catalog;
  ASSERT_TRUE(catalog.MergeJson(json::parse(R"({"own": {"input": "1", "output": "2",
      "cache_write_5m": "1.25", "cache_write_no_ttl": "1.1"}, "inherits": {"input": "1",
      "output": "2", "cache_write_5m": "1.25"}})")));
  EXPECT_EQ(catalog.Find("own")->base.cache_write_no_ttl, 1'100'000);
  EXPECT_EQ(catalog.Find("inherits")->base.cache_write_no_ttl, 1'250'000);
  Usage u = MakeUsage(0, 0, 0, 10, 0);
  u.cache_write_no_ttl = 100;
  Cost c = ComputeCost(u, catalog, "own");
  EXPECT_EQ(c.cache_write, 100LL * 1'100'000);
  EXPECT_EQ(c.saved, 100LL * (1'000'000 - 1'100'000));
  EXPECT_TRUE(c.complete);
  u.cache_write_no_ttl = std::nullopt;  // unknown is not zero
  EXPECT_FALSE(ComputeCost(u, catalog, "own").complete);
}

TEST(TelemetryPricingTest, MissCostIsTheInputRateOverTheCachedRate) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  const Price mini = *catalog.Find("gpt-4o-mini");  // 0.15 input, 0.075 cached
  const Usage u = MakeUsage(0, 0, 0, 2000, 10);
  EXPECT_EQ(MissCost(1920, u, mini), 1920LL * (150'000 - 75'000));
  EXPECT_EQ(MissCost(0, u, mini), 0);
  EXPECT_EQ(MissCost(-5, u, mini), 0);
  const Price pro = *catalog.Find("gemini-2.5-pro");  // the long-context tier's rates above 200k
  EXPECT_EQ(MissCost(1000, MakeUsage(0, 0, 0, 250'000, 0), pro), 1000LL * (2'500'000 - 250'000));
  EXPECT_EQ(MissCost(1000, MakeUsage(0, 0, 0, 1'000, 0), pro), 1000LL * (1'250'000 - 125'000));
  EXPECT_EQ(MissCost(1000, u, Price{}), 0);  // free: nothing lost
}

TEST(TelemetryPricingTest, MergeKvgateShape) {
  PriceCatalog catalog;
  ASSERT_TRUE(catalog.MergeJson(json::parse(R"({"my-model": {"input": "0.5", "output": 1.5,
      "cached_input": "0.05", "cache_write_5m": "0.625", "note": "ignored"},
      "tiered": {"input": "1", "output": "2", "tier": {"threshold_tokens": 1000, "input": "3"}}})")));
  EXPECT_EQ(catalog.Find("my-model")->base, (Rates{500'000, 50'000, 625'000, 625'000, 1'500'000, 625'000}));
  std::optional<Price> t = catalog.Find("tiered");
  EXPECT_EQ(t->tier_threshold_tokens, 1000);
  EXPECT_EQ(t->above, (Rates{3'000'000, 1'000'000, 1'000'000, 1'000'000, 2'000'000, 1'000'000}));

  // All-or-nothing: one bad entry leaves the catalog unchanged.
  Status bad = catalog.MergeJson(json::parse(R"({"new-one": {"input": "1", "output": "1"},
      "broken": {"input": "abc", "output": "1"}})"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(catalog.Find("new-one").has_value());
  EXPECT_FALSE(catalog.MergeJson(json::parse(R"({"m": {"output": "1"}})")).has_value());
  EXPECT_FALSE(catalog.MergeJson(json::parse(R"({"m": 5})")).has_value());
  EXPECT_FALSE(catalog.MergeJson(json::parse(R"([1])")).has_value());
  EXPECT_FALSE(catalog.MergeJson(json::parse(R"({"m": {"input": "1", "output": "1", "tier": {"input": "2"}}})")).has_value());
}

TEST(TelemetryPricingTest, MergeLiteLlmShape) {
  PriceCatalog catalog;
  ASSERT_TRUE(catalog.MergeJson(json::parse(R"({
    "claude-sonnet-4-5": {"input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05,
      "cache_read_input_token_cost": 3e-07, "cache_creation_input_token_cost": 3.75e-06,
      "cache_creation_input_token_cost_above_1hr": 6e-06,
      "input_cost_per_token_above_200k_tokens": 6e-06, "output_cost_per_token_above_200k_tokens": 2.25e-05,
      "cache_read_input_token_cost_above_200k_tokens": 6e-07,
      "cache_creation_input_token_cost_above_200k_tokens": 7.5e-06,
      "litellm_provider": "anthropic", "max_input_tokens": 200000, "mode": "chat",
      "supports_prompt_caching": true},
    "gpt-4o-mini": {"input_cost_per_token": 1.5e-07, "output_cost_per_token": 6e-07,
      "cache_read_input_token_cost": 7.5e-08, "litellm_provider": "openai"},
    "dall-e-3": {"input_cost_per_pixel": 4.0054321e-08, "output_cost_per_pixel": 0.0, "mode": "image_generation"}
  })")));
  EXPECT_EQ(catalog.size(), 2u);  // the image model is skipped
  std::optional<Price> s = catalog.Find("claude-sonnet-4-5");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->base, (Rates{3'000'000, 300'000, 3'750'000, 6'000'000, 15'000'000, 3'750'000}));
  EXPECT_EQ(s->base, PriceCatalog::BuiltIn().Find("claude-sonnet-4-5")->base);
  EXPECT_EQ(s->tier_threshold_tokens, 200'000);
  EXPECT_EQ(s->above, (Rates{6'000'000, 600'000, 7'500'000, 6'000'000, 22'500'000, 7'500'000}));
  EXPECT_EQ(catalog.Find("gpt-4o-mini")->base, (Rates{150'000, 75'000, 150'000, 150'000, 600'000, 150'000}));
  EXPECT_FALSE(catalog.Find("gpt-4o-mini")->tier_threshold_tokens.has_value());

  EXPECT_FALSE(catalog.MergeJson(json::parse(R"({"x": {"input_cost_per_token": "cheap",
      "output_cost_per_token": 1e-06}})")).has_value());
}

TEST(TelemetryPricingTest, CachingRules) {
  PriceCatalog catalog = PriceCatalog::BuiltIn();
  std::optional<CachingRule> openai = catalog.FindCachingRule("openai");
  ASSERT_TRUE(openai.has_value());
  EXPECT_EQ(openai->min_cacheable_tokens, 1024);
  EXPECT_EQ(openai->granularity_tokens, 128);
  EXPECT_EQ(openai->ttl_seconds, 300);
  std::optional<CachingRule> anthropic = catalog.FindCachingRule("anthropic");
  ASSERT_TRUE(anthropic.has_value());
  EXPECT_EQ(anthropic->MinCacheableTokensFor("claude-haiku-4-5-20251001"), 4096);
  EXPECT_EQ(anthropic->MinCacheableTokensFor("claude-sonnet-4-5"), 1024);
  EXPECT_EQ(anthropic->MinCacheableTokensFor("claude-unknown"), 1024);
  EXPECT_EQ(anthropic->max_ttl_seconds, 3600);
  EXPECT_FALSE(anthropic->automatic);
  EXPECT_TRUE(openai->automatic);
  std::optional<CachingRule> deepseek = catalog.FindCachingRule("deepseek");
  ASSERT_TRUE(deepseek.has_value());
  EXPECT_EQ(deepseek->granularity_tokens, 64);
  EXPECT_FALSE(deepseek->ttl_seconds.has_value());
  for (const char* type : {"gemini", "vllm", "sglang", "llamacpp", "kvgate", "bedrock", "azure"}) {
    EXPECT_TRUE(catalog.FindCachingRule(type).has_value()) << type;
  }
  EXPECT_FALSE(catalog.FindCachingRule("nonesuch").has_value());

  ASSERT_TRUE(catalog.MergeCachingRules(json::parse(R"({"vllm": {"min_cacheable_tokens": 32,
      "granularity_tokens": 32, "ttl_seconds": null}})")));
  EXPECT_EQ(catalog.FindCachingRule("vllm")->granularity_tokens, 32);
  EXPECT_FALSE(catalog.MergeCachingRules(json::parse(R"({"x": {"granularity_tokens": 2}})")).has_value());
  EXPECT_FALSE(catalog.MergeCachingRules(json::parse(R"({"x": {"min_cacheable_tokens": -1}})")).has_value());
  EXPECT_FALSE(catalog.MergeCachingRules(json::parse(R"({"x": {"min_cacheable_tokens": 1, "automatic": 1}})")).has_value());
  EXPECT_FALSE(catalog.FindCachingRule("x").has_value());
}

}  // namespace
}  // namespace kvgate::telemetry
