// The scheduler's policy on a real block pool: FCFS admission, decodes before prefill chunks
// within the token budget, preemption of the youngest by recompute, and the lone sequence that
// fills the pool. The sequences' tokenizer is the bundled model's (only their decoder needs one);
// the model's weights are never read.
#include "local_engine/scheduler.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "local_engine/gguf.h"
#include "local_engine/tokenizer.h"

namespace kvgate::engine {
namespace {

const std::string kModel = std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not fetched: " << kModel;
    auto file = GgufFile::Open(kModel);
    ASSERT_TRUE(file.has_value());
    file_ = std::move(*file);
    auto tok = Tokenizer::FromGguf(*file_);
    ASSERT_TRUE(tok.has_value());
    tok_ = std::move(*tok);
  }
  // A sequence of `n` distinct prompt tokens (distinct across calls: no prefix hits).
  std::unique_ptr<Sequence> Seq(int n) {
    std::vector<int32_t> prompt(n);
    std::iota(prompt.begin(), prompt.end(), next_token_);
    next_token_ += n;
    return std::make_unique<Sequence>(next_id_++, EngineRequest{std::move(prompt), {}, nullptr},
                                      *tok_);
  }
  // What the engine does with a chunk after the forward pass: its tokens are computed, and a
  // sequence whose last token was computed gets a sampled one.
  static void Run(const StepPlan& plan) {
    for (const Chunk& c : plan.chunks) {
      c.seq->num_computed += c.num_tokens;
      if (c.seq->num_remaining() == 0) c.seq->tokens.push_back(7);
    }
  }
  static std::vector<std::pair<uint64_t, int64_t>> Shape(const StepPlan& plan) {
    std::vector<std::pair<uint64_t, int64_t>> out;
    for (const Chunk& c : plan.chunks) out.emplace_back(c.seq->id, c.num_tokens);
    return out;
  }
  using Shape_ = std::vector<std::pair<uint64_t, int64_t>>;

  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
  uint64_t next_id_ = 1;
  int32_t next_token_ = 100;
};

// The head of the queue waits until it fits, and nothing behind it jumps ahead.
TEST_F(SchedulerTest, AdmissionIsFirstComeFirstServed) {
  BlockManager blocks(4);
  Scheduler sched({.max_running = 8, .max_batch_tokens = 512}, blocks);
  sched.Enqueue(Seq(40));  // 3 blocks
  sched.Enqueue(Seq(40));  // 3 more: does not fit beside the first
  sched.Enqueue(Seq(5));   // would fit, but waits behind the second
  const auto admitted = sched.Admit(nullptr);
  ASSERT_EQ(admitted.size(), 1u);
  EXPECT_EQ(admitted[0].seq->id, 1u);
  EXPECT_EQ(admitted[0].tier_blocks, 0);
  EXPECT_EQ(sched.num_running(), 1);
  EXPECT_EQ(sched.num_waiting(), 2);
}

TEST_F(SchedulerTest, AdmitsAtMostMaxRunningAndAsksTheTierBeforeAllocating) {
  BlockManager blocks(64);
  Scheduler sched({.max_running = 2, .max_batch_tokens = 512}, blocks);
  for (int i = 0; i < 3; ++i) sched.Enqueue(Seq(20));
  int asked = 0;
  const auto admitted = sched.Admit([&](const Sequence& s) {
    EXPECT_TRUE(s.blocks.block_ids.empty()) << "the tier is asked before the allocation";
    return ++asked;
  });
  ASSERT_EQ(admitted.size(), 2u);
  EXPECT_EQ(admitted[1].tier_blocks, 2);
  EXPECT_EQ(sched.num_waiting(), 1);
}

// Decodes first, then prefill chunks in admission order until the budget is spent: a long prompt
// takes several steps (chunked prefill) and never holds the decodes back.
TEST_F(SchedulerTest, DecodesFirstThenPrefillChunksWithinTheBudget) {
  BlockManager blocks(64);
  Scheduler sched({.max_running = 8, .max_batch_tokens = 32}, blocks);
  sched.Enqueue(Seq(10));
  sched.Admit(nullptr);
  StepPlan p = sched.Plan();
  EXPECT_EQ(Shape(p), (Shape_{{1, 10}}));
  Run(p);  // sequence 1 now decodes
  sched.Enqueue(Seq(50));
  sched.Enqueue(Seq(8));
  sched.Admit(nullptr);
  p = sched.Plan();
  EXPECT_EQ(Shape(p), (Shape_{{1, 1}, {2, 31}})) << "sequence 3 gets nothing of this step";
  Run(p);
  p = sched.Plan();
  EXPECT_EQ(Shape(p), (Shape_{{1, 1}, {2, 19}, {3, 8}}));
  for (const Chunk& c : p.chunks) {
    EXPECT_GE(std::ssize(c.seq->blocks.block_ids) * kBlockSize, c.seq->num_computed + c.num_tokens)
        << "the plan grows each block table to hold its chunk";
  }
}

// When the next decodes need more new blocks than are free, the youngest sequence gives its
// blocks back and returns to the head of the queue, to be recomputed.
TEST_F(SchedulerTest, PreemptsTheYoungestWhenDecodesDoNotFit) {
  BlockManager blocks(4);
  Scheduler sched({.max_running = 8, .max_batch_tokens = 512}, blocks);
  sched.Enqueue(Seq(31));  // 2 blocks each: the pool is full
  sched.Enqueue(Seq(31));
  ASSERT_EQ(sched.Admit(nullptr).size(), 2u);
  Run(sched.Plan());  // both prefilled: 32 tokens, 2 blocks each
  Run(sched.Plan());  // both decoded once: 33 tokens, a third block each needed
  const StepPlan p = sched.Plan();
  EXPECT_EQ(Shape(p), (Shape_{{1, 1}}));
  EXPECT_EQ(sched.preemptions(), 1u);
  EXPECT_EQ(sched.num_running(), 1);
  ASSERT_EQ(sched.num_waiting(), 1);
  const std::vector<Sequence*> live = sched.Live();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0]->id, 2u);
  EXPECT_EQ(live[0]->num_computed, 0) << "preempted by recompute";
  EXPECT_TRUE(live[0]->blocks.block_ids.empty());
}

TEST_F(SchedulerTest, ALoneSequenceThatFillsThePoolIsOutOfRoom) {
  BlockManager blocks(2);
  Scheduler sched({.max_running = 8, .max_batch_tokens = 512}, blocks);
  sched.Enqueue(Seq(31));
  sched.Admit(nullptr);
  Run(sched.Plan());
  Run(sched.Plan());  // 33 tokens: a third block that the pool does not have
  const StepPlan p = sched.Plan();
  EXPECT_TRUE(p.chunks.empty());
  ASSERT_NE(p.out_of_room, nullptr);
  EXPECT_EQ(p.out_of_room->id, 1u);
  EXPECT_EQ(sched.preemptions(), 0u);
}

TEST_F(SchedulerTest, RemoveFinishedDropsThemFromBothQueues) {
  BlockManager blocks(4);
  Scheduler sched({.max_running = 1, .max_batch_tokens = 512}, blocks);
  sched.Enqueue(Seq(3));
  sched.Enqueue(Seq(3));
  sched.Admit(nullptr);
  for (Sequence* s : sched.Live()) {
    blocks.Free(s->blocks);
    s->finished = true;
  }
  sched.RemoveFinished();
  EXPECT_EQ(sched.num_running(), 0);
  EXPECT_EQ(sched.num_waiting(), 0);
  EXPECT_TRUE(sched.Live().empty());
  EXPECT_TRUE(sched.Plan().chunks.empty());
}

}  // namespace
}  // namespace kvgate::engine
