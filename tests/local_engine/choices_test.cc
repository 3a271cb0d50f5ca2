// n > 1 on the real engine and model: one prefilled prompt forked into choices that share its KV
// blocks (the partial last block copied on write), each sampled on its own.
#include "local_engine/engine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace kvgate::engine {
namespace {

const std::string kModel = std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// One choice as its events told it.
struct ChoiceSeen {
  std::vector<int32_t> tokens;
  int finals = 0;
  FinishReason reason = FinishReason::kNone;
  Usage usage;
};

class ChoicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not fetched: " << kModel;
  }
  static std::unique_ptr<Engine> Make(EngineOptions o = {}) {
    o.model_path = kModel;
    auto e = Engine::Create(o);
    EXPECT_TRUE(e.has_value()) << (e ? "" : e.error().ToString());
    return e ? std::move(*e) : nullptr;
  }
  // Adds a request of `n` choices; `seen` gets one entry per choice.
  static uint64_t Add(Engine& e, std::vector<int32_t> prompt, SamplingParams p, int32_t n,
                      std::vector<ChoiceSeen>& seen) {
    seen.assign(static_cast<size_t>(n), ChoiceSeen{});
    auto id = e.AddRequest(EngineRequest{
        std::move(prompt), std::move(p),
        [&seen](const TokenEvent& ev) {
          ASSERT_GE(ev.choice, 0);
          ASSERT_LT(ev.choice, static_cast<int32_t>(seen.size()));
          ChoiceSeen& c = seen[static_cast<size_t>(ev.choice)];
          EXPECT_EQ(c.finals, 0) << "choice " << ev.choice << ": an event after its final one";
          if (ev.token_id >= 0) c.tokens.push_back(ev.token_id);
          if (ev.finished) ++c.finals, c.reason = ev.finish_reason;
          c.usage = ev.usage;
        },
        n});
    EXPECT_TRUE(id.has_value()) << (id ? "" : id.error().ToString());
    return id.value_or(0);
  }
  static void RunAll(Engine& e) {
    for (int guard = 0; e.HasWork() && guard < 100000; ++guard) ASSERT_TRUE(e.Step());
    EXPECT_FALSE(e.HasWork());
  }
  // A prompt of `n` tokens from a real text's ids (a BOS, then common word ids).
  static std::vector<int32_t> Prompt(int n) {
    std::vector<int32_t> p{1};
    for (int i = 1; i < n; ++i) p.push_back(300 + (i * 37) % 2000);
    return p;
  }
};

// Greedy choices must all equal one n = 1 request's tokens: the forks decode from the shared
// blocks and from the copied partial block, so a wrong copy or a wrong share changes their text.
TEST_F(ChoicesTest, GreedyChoicesEqualASingleRequestAndThePromptIsComputedOnce) {
  const SamplingParams greedy{.max_tokens = 24, .ignore_eos = true};
  for (const int len : {45, 48}) {  // a partial last block (copied), a full one (shared)
    SCOPED_TRACE("prompt of " + std::to_string(len) + " tokens");
    std::vector<ChoiceSeen> single, many;
    auto reference = Make();
    ASSERT_TRUE(reference);
    Add(*reference, Prompt(len), greedy, 1, single);
    RunAll(*reference);
    ASSERT_EQ(single[0].tokens.size(), 24u);

    auto e = Make();
    ASSERT_TRUE(e);
    Add(*e, Prompt(len), greedy, 3, many);
    RunAll(*e);
    for (size_t i = 0; i < many.size(); ++i) {
      EXPECT_EQ(many[i].tokens, single[0].tokens) << "choice " << i;
      EXPECT_EQ(many[i].finals, 1) << "choice " << i;
      EXPECT_EQ(many[i].reason, FinishReason::kLength);
      EXPECT_EQ(many[i].usage.prompt_tokens, len);
      EXPECT_EQ(many[i].usage.completion_tokens, 24);
    }
    const CacheStats stats = e->cache_stats();
    EXPECT_EQ(stats.blocks.forks, 2u);
    EXPECT_EQ(stats.blocks.fork_copies, len % kBlockSize == 0 ? 0u : 2u);
    // Admitted once: the prompt was looked up (and computed) once, not three times.
    EXPECT_EQ(stats.blocks.queries_tokens, static_cast<uint64_t>(len));
    EXPECT_EQ(stats.blocks.used_blocks, 0);
  }
}

// Seeded choices differ from each other (seed + index each) and repeat as a set.
TEST_F(ChoicesTest, SeededChoicesDifferAndRepeat) {
  const SamplingParams p{.temperature = 1.0f, .seed = 7, .max_tokens = 16, .ignore_eos = true};
  auto e = Make();
  ASSERT_TRUE(e);
  std::vector<ChoiceSeen> a, b;
  Add(*e, Prompt(20), p, 4, a);
  RunAll(*e);
  Add(*e, Prompt(20), p, 4, b);
  RunAll(*e);
  std::set<std::vector<int32_t>> distinct;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "choice " << i;
    distinct.insert(a[i].tokens);
  }
  EXPECT_GE(distinct.size(), 3u);
}

// No free block for a fork's copy: it waits, then recomputes the partial block from the prefix
// cache's full blocks, and still gives the greedy text.
TEST_F(ChoicesTest, AForkWithoutRoomWaitsAndRecomputesItsPartialBlock) {
  const SamplingParams greedy{.max_tokens = 4, .ignore_eos = true};
  std::vector<ChoiceSeen> single, many;
  auto reference = Make();
  ASSERT_TRUE(reference);
  Add(*reference, Prompt(40), greedy, 1, single);
  RunAll(*reference);

  EngineOptions small;
  small.num_kv_blocks = 4;  // the prompt takes 3 (40 tokens, 44 with the output): room for 1 copy
  auto e = Make(small);
  ASSERT_TRUE(e);
  Add(*e, Prompt(40), greedy, 3, many);
  RunAll(*e);
  for (size_t i = 0; i < many.size(); ++i) {
    EXPECT_EQ(many[i].tokens, single[0].tokens) << "choice " << i;
    EXPECT_EQ(many[i].finals, 1);
    EXPECT_EQ(many[i].usage.prompt_tokens, 40);
  }
  EXPECT_EQ(e->cache_stats().blocks.fork_copies, 1u);
}

TEST_F(ChoicesTest, CancelEndsEveryChoiceBeforeAndAfterTheFork) {
  auto e = Make();
  ASSERT_TRUE(e);
  const SamplingParams p{.max_tokens = 200, .ignore_eos = true};
  std::vector<ChoiceSeen> before, after;
  const uint64_t early = Add(*e, Prompt(30), p, 3, before);
  e->Cancel(early);  // still in the inbox: nothing forked yet
  RunAll(*e);
  for (const ChoiceSeen& c : before) {
    EXPECT_EQ(c.finals, 1);
    EXPECT_EQ(c.reason, FinishReason::kCancelled);
  }
  const uint64_t late = Add(*e, Prompt(30), p, 3, after);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(e->Step());  // prefilled, forked, decoding
  ASSERT_FALSE(after[1].tokens.empty());
  e->Cancel(late);
  RunAll(*e);
  for (const ChoiceSeen& c : after) {
    EXPECT_EQ(c.finals, 1);
    EXPECT_EQ(c.reason, FinishReason::kCancelled);
    EXPECT_LT(c.tokens.size(), 200u);
  }
  EXPECT_EQ(e->cache_stats().blocks.used_blocks, 0);
}

TEST_F(ChoicesTest, RejectsChoicesOutsideTheEnginesBound) {
  EngineOptions o;
  o.max_running = 4;
  auto e = Make(o);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->max_choices(), 4);
  for (const int32_t n : {0, -1, 5}) {
    auto id = e->AddRequest(EngineRequest{{1, 2, 3}, {}, nullptr, n});
    ASSERT_FALSE(id.has_value()) << n;
    EXPECT_NE(id.error().message.find("n must be between 1 and 4"), std::string::npos);
  }
  EXPECT_TRUE(e->AddRequest(EngineRequest{{1, 2, 3}, SamplingParams{.max_tokens = 1}, nullptr, 4}));
  RunAll(*e);
}

}  // namespace
}  // namespace kvgate::engine
