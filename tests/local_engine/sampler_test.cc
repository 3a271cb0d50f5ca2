#include "local_engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace kvgate::engine {
namespace {

std::vector<float> Logits(std::initializer_list<float> l) { return std::vector<float>(l); }

TEST(SamplerTest, GreedyPicksArgmax) {
  Sampler s(SamplingParams{}, {});
  auto l = Logits({0.1f, 3.0f, -1.0f, 2.9f});
  EXPECT_EQ(s.Sample(l), 1);
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.0f;
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p, {});
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) {
      std::vector<float> l(16, 0.0f);  // uniform over 16 tokens
      out.push_back(s.Sample(l));
    }
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(SamplerTest, TemperatureSamplesTheSoftmax) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  Sampler s(p, {});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto l = Logits({0.0f, std::log(3.0f)});  // probabilities 1/4, 3/4
    ones += s.Sample(l) == 1;
  }
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.015);
  // Low temperature sharpens: p(1) = 3^10 / (1 + 3^10) ~ 1.
  p.temperature = 0.1f;
  Sampler cold(p, {});
  ones = 0;
  for (int i = 0; i < 1000; ++i) {
    auto l = Logits({0.0f, std::log(3.0f)});
    ones += cold.Sample(l) == 1;
  }
  EXPECT_GE(ones, 995);
}

std::set<int32_t> Support(SamplingParams p, std::initializer_list<float> logits, int draws = 3000) {
  p.seed = 1;
  if (p.temperature == 0.0f) p.temperature = 1.0f;
  Sampler s(p, {});
  std::set<int32_t> seen;
  for (int i = 0; i < draws; ++i) {
    std::vector<float> l(logits);
    seen.insert(s.Sample(l));
  }
  return seen;
}

TEST(SamplerTest, TopK) {
  SamplingParams p;
  p.top_k = 2;
  EXPECT_EQ(Support(p, {1.0f, 0.0f, 1.2f, 0.9f}), (std::set<int32_t>{0, 2}));
  p.top_k = 1;
  p.temperature = 100.0f;
  EXPECT_EQ(Support(p, {1.0f, 0.0f, 1.2f, 0.9f}), (std::set<int32_t>{2}));
}

TEST(SamplerTest, TopP) {
  // Probabilities 0.5, 0.3, 0.2.
  const float a = std::log(0.5f), b = std::log(0.3f), c = std::log(0.2f);
  SamplingParams p;
  p.top_p = 0.6f;
  EXPECT_EQ(Support(p, {c, a, b}), (std::set<int32_t>{1, 2}));
  p.top_p = 0.5f;
  EXPECT_EQ(Support(p, {c, a, b}), (std::set<int32_t>{1}));
  p.top_p = 1.0f;
  EXPECT_EQ(Support(p, {c, a, b}), (std::set<int32_t>{0, 1, 2}));
}

TEST(SamplerTest, MinP) {
  const float a = std::log(0.5f), b = std::log(0.3f), c = std::log(0.2f);
  SamplingParams p;
  p.min_p = 0.5f;  // keeps p >= 0.25
  EXPECT_EQ(Support(p, {a, b, c}), (std::set<int32_t>{0, 1}));
  p.min_p = 0.3f;  // keeps p >= 0.15
  EXPECT_EQ(Support(p, {a, b, c}), (std::set<int32_t>{0, 1, 2}));
}

TEST(SamplerTest, RepetitionPenaltyCoversPromptAndOutput) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  const int32_t prompt[] = {0, 2};
  Sampler s(p, prompt);
  // Token 0 (2.0 -> 1.0) loses to token 1 (1.5); token 2 (-0.1 -> -0.2) stays below token 3.
  auto l = Logits({2.0f, 1.5f, -0.1f, -0.15f});
  EXPECT_EQ(s.Sample(l), 1);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_FLOAT_EQ(l[2], -0.2f);
  // Token 1 is now in the output: 1.5 -> 0.75 < token 3's 0.8.
  auto l2 = Logits({-5.0f, 1.5f, -5.0f, 0.8f});
  EXPECT_EQ(s.Sample(l2), 3);
}

TEST(SamplerTest, PresenceAndFrequencyPenalties) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const int32_t prompt[] = {1};  // prompt tokens are not penalized by these
  Sampler s(p, prompt);
  auto l = Logits({1.0f, 0.9f});
  EXPECT_EQ(s.Sample(l), 0);  // no history yet
  auto l2 = Logits({1.0f, 0.9f});
  EXPECT_EQ(s.Sample(l2), 1);  // token 0: 1.0 - 0.5 - 0.25 = 0.25
  EXPECT_FLOAT_EQ(l2[0], 0.25f);
  auto l3 = Logits({2.0f, 0.0f});
  s.Sample(l3);                 // token 0: 2.0 - 0.75 = 1.25 > token 1: 0 - 0.75
  auto l4 = Logits({2.0f, 0.0f});
  s.Sample(l4);
  EXPECT_FLOAT_EQ(l4[0], 2.0f - 0.5f - 0.25f * 2);
}

TEST(SamplerTest, ValidateRejectsBadParams) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}));
  SamplingParams p;
  p.temperature = -1.0f;
  EXPECT_FALSE(ValidateSamplingParams(p));
  p = {};
  p.top_p = 0.0f;
  EXPECT_FALSE(ValidateSamplingParams(p));
  p = {};
  p.max_tokens = 0;
  EXPECT_FALSE(ValidateSamplingParams(p));
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_FALSE(ValidateSamplingParams(p));
  p = {};
  p.min_p = 1.5f;
  EXPECT_FALSE(ValidateSamplingParams(p));
}

TEST(StopMatcherTest, HoldsBackPartialMatchesAndStopsBeforeTheStopString) {
  StopMatcher m({"</end>", "STOP"});
  auto a = m.Push("Hello </e");
  EXPECT_EQ(a.text, "Hello ");
  EXPECT_FALSE(a.stopped);
  auto b = m.Push("x> more S");  // "</ex>" is not a stop: released; "S" may start "STOP"
  EXPECT_EQ(b.text, "</ex> more ");
  auto c = m.Push("TO");
  EXPECT_EQ(c.text, "");
  auto d = m.Push("P and after");
  EXPECT_TRUE(d.stopped);
  EXPECT_EQ(d.text, "");
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_TRUE(m.Push("more").stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, EarliestStopWinsAndFlushReleasesHeldText) {
  StopMatcher m({"bc", "ab"});
  EXPECT_EQ(m.matched(), "");
  auto o = m.Push("xxabc");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "xx");
  EXPECT_EQ(m.matched(), "ab");  // listed second, found first
  StopMatcher n({"###"});
  EXPECT_EQ(n.Push("text #").text, "text ");
  EXPECT_EQ(n.Push("#").text, "");
  EXPECT_EQ(n.Flush(), "##");
  EXPECT_EQ(n.matched(), "");
  StopMatcher none({});
  EXPECT_EQ(none.Push("anything").text, "anything");
}

TEST(LogprobsTest, LogSoftmaxOfTheRawLogitsWithMaskedTokensLeftOut) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {1.0f, 3.0f, -inf, 3.0f, 0.0f};
  const TokenLogprobs lp = ComputeLogprobs(logits, 4, 3);
  const double lse = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(0.0));
  EXPECT_EQ(lp.token, 4);
  EXPECT_NEAR(lp.logprob, 0.0 - lse, 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 1);  // a tie: the lower id first
  EXPECT_EQ(lp.top[1].token, 3);
  EXPECT_EQ(lp.top[2].token, 0);
  EXPECT_NEAR(lp.top[0].logprob, 3.0 - lse, 1e-6);
  // More asked for than there are unmasked tokens: those there are.
  EXPECT_EQ(ComputeLogprobs(logits, 1, 20).top.size(), 4u);
  EXPECT_TRUE(ComputeLogprobs(logits, 1, 0).top.empty());
  double sum = 0;
  for (const auto& t : ComputeLogprobs(logits, 1, 20).top) sum += std::exp(t.logprob);
  EXPECT_NEAR(sum, 1.0, 1e-6);
  SamplingParams p;
  p.logprobs = kMaxTopLogprobs + 1;
  EXPECT_FALSE(ValidateSamplingParams(p).has_value());
}

}  // namespace
}  // namespace kvgate::engine
