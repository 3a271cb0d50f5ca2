// The host arrays of one engine step (what Engine::Step hands ModelRunner::Forward), and the
// padding that keeps decode steps shape-stable for CUDA graphs (EngineOptions::cuda_graphs).
//
// Why padding: a recorded step (backend.h StepMode::kCapture) bakes in its grid sizes, the number
// of token rows and the block-table stride. With graphs on, the engine therefore rounds the table
// width up to a power of two (which also bounds the decode split-K plan, StepKey) and a decode
// batch's sequence count up to a power of two with dummy sequences, so a few recordings serve every
// batch. A dummy sequence has one token (id 0, position 0), writes no K/V (slot -1), and reads one
// token of a scratch block that no sequence owns; its logits row is ignored.
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "local_engine/backend.h"

namespace kvgate::engine {

struct StepBatch {
  std::vector<int32_t> token_ids, positions, query_start{0}, context_lens, block_tables;
  std::vector<int64_t> slot_mapping;
  int32_t table_width = 1;  // block-table columns; set before the first AddSequence

  // Appends a sequence whose tokens [first, first + n) of `tokens` are computed now (their K/V
  // go to the slots `blocks` give them) over a context of first + n tokens.
  // REQUIRES: blocks.size() <= table_width, blocks cover first + n tokens of `block_size`.
  void AddSequence(std::span<const int32_t> tokens, int64_t first, int64_t n,
                   std::span<const int32_t> blocks, int32_t block_size);
  int64_t num_seqs() const { return static_cast<int64_t>(context_lens.size()); }
  // Views the arrays (valid while this object is unchanged).
  BatchMetadata View(int32_t block_size) const;
};

// The smallest power of two >= n, for n >= 1 (1 for n <= 1).
int32_t PowerOfTwoBucket(int32_t n);

// When every sequence of `b` has one token (a decode batch), appends dummy sequences up to
// PowerOfTwoBucket(S) reading `scratch_block`; returns how many. Other batches are left as they
// are (0): prefill steps are never recorded.
int32_t PadDecodeBatch(StepBatch& b, int32_t scratch_block);

}  // namespace kvgate::engine
