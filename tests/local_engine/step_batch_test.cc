// The engine's step arrays and the decode padding for CUDA graphs (step_batch.h).
#include "local_engine/step_batch.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvgate::engine {
namespace {

TEST(StepBatchTest, PowerOfTwoBuckets) {
  const std::vector<std::pair<int32_t, int32_t>> cases = {
      {0, 1}, {1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {9, 16}, {16, 16}, {17, 32}, {1000, 1024}};
  for (auto [n, want] : cases) EXPECT_EQ(PowerOfTwoBucket(n), want) << n;
}

TEST(StepBatchTest, SequencesFillTheArraysAndPadTheirTables) {
  StepBatch b;
  b.table_width = 4;
  const std::vector<int32_t> tokens(40, 7), blocks_a{5, 9}, blocks_b{2, 3, 6};
  b.AddSequence(tokens, 16, 3, blocks_a, 16);  // positions 16..18 of a 19-token context
  b.AddSequence(tokens, 36, 1, blocks_b, 16);  // one decode token at position 36
  EXPECT_EQ(b.positions, (std::vector<int32_t>{16, 17, 18, 36}));
  EXPECT_EQ(b.slot_mapping, (std::vector<int64_t>{9 * 16, 9 * 16 + 1, 9 * 16 + 2, 6 * 16 + 4}));
  EXPECT_EQ(b.query_start, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(b.context_lens, (std::vector<int32_t>{19, 37}));
  EXPECT_EQ(b.block_tables, (std::vector<int32_t>{5, 9, -1, -1, 2, 3, 6, -1}));
  EXPECT_TRUE(ValidateBatch(b.View(16), 10));
  EXPECT_EQ(PadDecodeBatch(b, 10), 0) << "a batch with a prefill chunk is never padded";
  EXPECT_EQ(b.num_seqs(), 2);
}

TEST(StepBatchTest, DecodeBatchesPadToAPowerOfTwoWithDummies) {
  for (int seqs : {1, 2, 3, 5, 8}) {
    StepBatch b;
    b.table_width = 2;
    const std::vector<int32_t> tokens(20, 3), blocks{1, 4};
    for (int s = 0; s < seqs; ++s) b.AddSequence(tokens, 17, 1, blocks, 16);
    const int32_t scratch = 11;
    const int32_t dummies = PadDecodeBatch(b, scratch);
    const int64_t padded = PowerOfTwoBucket(seqs);
    EXPECT_EQ(dummies, padded - seqs);
    ASSERT_EQ(b.num_seqs(), padded);
    EXPECT_EQ(static_cast<int64_t>(b.token_ids.size()), padded);
    EXPECT_EQ(b.block_tables.size(), static_cast<size_t>(padded * 2));
    for (int64_t s = seqs; s < padded; ++s) {
      EXPECT_EQ(b.slot_mapping[s], -1) << "a dummy writes no K/V";
      EXPECT_EQ(b.positions[s], 0);
      EXPECT_EQ(b.context_lens[s], 1);
      EXPECT_EQ(b.block_tables[s * 2], scratch);
      EXPECT_EQ(b.block_tables[s * 2 + 1], -1);
    }
    // The real sequences are untouched and the whole batch is valid on a pool holding the scratch
    // block (12 blocks: 0..10 for sequences, 11 kept aside).
    EXPECT_EQ(b.slot_mapping[0], 4 * 16 + 1);
    EXPECT_TRUE(ValidateBatch(b.View(16), 12)) << seqs;
  }
}

}  // namespace
}  // namespace kvgate::engine
