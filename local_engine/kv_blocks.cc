#include "local_engine/kv_blocks.h"

namespace kvgate::engine {

SimpleBlockAllocator::SimpleBlockAllocator(int32_t num_blocks) : num_blocks_(num_blocks) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 handed out first
}

std::optional<int32_t> SimpleBlockAllocator::Allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void SimpleBlockAllocator::Free(int32_t block) { free_.push_back(block); }

}  // namespace kvgate::engine
