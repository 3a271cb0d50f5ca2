#include "local_engine/step_batch.h"

namespace kvgate::engine {

void StepBatch::AddSequence(std::span<const int32_t> tokens, int64_t first, int64_t n,
                            std::span<const int32_t> blocks, int32_t block_size) {
  for (int64_t pos = first; pos < first + n; ++pos) {
    token_ids.push_back(tokens[static_cast<size_t>(pos)]);
    positions.push_back(static_cast<int32_t>(pos));
    slot_mapping.push_back(static_cast<int64_t>(blocks[static_cast<size_t>(pos / block_size)]) *
                               block_size + pos % block_size);
  }
  query_start.push_back(static_cast<int32_t>(token_ids.size()));
  context_lens.push_back(static_cast<int32_t>(first + n));
  block_tables.insert(block_tables.end(), blocks.begin(), blocks.end());
  block_tables.resize(block_tables.size() + (table_width - blocks.size()), -1);
}

BatchMetadata StepBatch::View(int32_t block_size) const {
  return BatchMetadata{token_ids,    positions,   slot_mapping, query_start,
                       context_lens, block_tables, table_width,  block_size};
}

int32_t PowerOfTwoBucket(int32_t n) {
  int32_t b = 1;
  while (b < n) b *= 2;
  return b;
}

int32_t PadDecodeBatch(StepBatch& b, int32_t scratch_block) {
  const int64_t s = b.num_seqs();
  if (s == 0 || static_cast<int64_t>(b.token_ids.size()) != s) return 0;
  const int32_t dummies = PowerOfTwoBucket(static_cast<int32_t>(s)) - static_cast<int32_t>(s);
  for (int32_t i = 0; i < dummies; ++i) {
    b.token_ids.push_back(0);
    b.positions.push_back(0);
    b.slot_mapping.push_back(-1);  // nothing written: the scratch block stays as allocated
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(1);
    b.block_tables.push_back(scratch_block);
    b.block_tables.resize(b.block_tables.size() + (b.table_width - 1), -1);
  }
  return dummies;
}

}  // namespace kvgate::engine
