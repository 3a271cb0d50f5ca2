// The KV cache's block size: tokens per block, the unit of prefix caching (a prompt's leading full
// blocks are hashed and shared), of allocation and eviction, and of the offload tier's slots.
// 16, as vLLM's default: big enough that a block table stays short, small enough that a shared
// prefix loses at most 15 tokens to its partial last block.
#pragma once

#include <cstdint>

namespace kvgate::engine {

inline constexpr int kBlockSize = 16;

// A whole-block copy, src -> dst (block indices; -1s: none). BlockManager::Fork asks for one within
// the pool; Backend::CopyBlocks runs them between the pool and an offload tier's host slots.
struct BlockCopy {
  int32_t src = -1;
  int32_t dst = -1;
};

}  // namespace kvgate::engine
