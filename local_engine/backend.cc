#include "local_engine/backend.h"

#include <string>

namespace kvgate::engine {

Status ValidateBatch(const BatchMetadata& b, int64_t num_blocks) {
  auto bad = [](const std::string& what) {
    return MakeError(ErrorCode::kInvalidArgument, "batch metadata: " + what);
  };
  const int64_t t = b.num_tokens(), s = b.num_seqs();
  if (t == 0 || s == 0) return bad("empty batch");
  if (static_cast<int64_t>(b.positions.size()) != t ||
      static_cast<int64_t>(b.slot_mapping.size()) != t) {
    return bad("positions / slot_mapping must have one entry per token");
  }
  if (static_cast<int64_t>(b.query_start.size()) != s + 1 || b.query_start[0] != 0 ||
      b.query_start[s] != t) {
    return bad("query_start must have S + 1 entries from 0 to T");
  }
  if (b.block_size <= 0 || b.block_size > 64 || b.max_blocks_per_seq <= 0 ||
      static_cast<int64_t>(b.block_tables.size()) != s * b.max_blocks_per_seq) {
    return bad("block tables must be [S, max_blocks_per_seq] with 0 < block_size <= 64");
  }
  const int64_t slots = num_blocks * b.block_size;
  for (int64_t i = 0; i < s; ++i) {
    const int64_t qlen = b.query_start[i + 1] - b.query_start[i];
    const int64_t ctx = b.context_lens[i];
    if (qlen <= 0 || ctx < qlen) return bad("sequence " + std::to_string(i) + ": bad lengths");
    if ((ctx + b.block_size - 1) / b.block_size > b.max_blocks_per_seq) {
      return bad("sequence " + std::to_string(i) + ": block table too short for its context");
    }
    const int32_t* table = b.block_tables.data() + i * b.max_blocks_per_seq;
    for (int64_t blk = 0; blk * b.block_size < ctx; ++blk) {
      if (table[blk] < 0 || table[blk] >= num_blocks) {
        return bad("sequence " + std::to_string(i) + ": block id out of range");
      }
    }
    for (int64_t j = 0; j < qlen; ++j) {
      const int64_t tok = b.query_start[i] + j, pos = ctx - qlen + j;
      if (b.positions[tok] != pos) {
        return bad("token " + std::to_string(tok) + ": position disagrees with context length");
      }
      const int64_t want = static_cast<int64_t>(table[pos / b.block_size]) * b.block_size +
                           pos % b.block_size;
      if (b.slot_mapping[tok] >= slots || (b.slot_mapping[tok] >= 0 && b.slot_mapping[tok] != want)) {
        return bad("token " + std::to_string(tok) + ": slot disagrees with its block table");
      }
    }
  }
  return {};
}

StepKey MakeStepKey(const BatchMetadata& batch, int64_t rows_out, uint64_t activations,
                    bool graphs) {
  bool decode = graphs;
  for (size_t i = 0; decode && i + 1 < batch.query_start.size(); ++i) {
    decode = batch.query_start[i + 1] - batch.query_start[i] == 1;
  }
  return StepKey{batch.num_tokens(), rows_out, batch.max_blocks_per_seq, activations, decode};
}

}  // namespace kvgate::engine
