// The KV cache's block size: tokens per block, the unit of prefix caching (a prompt's leading full
// blocks are hashed and shared), of allocation and eviction, and of the offload tier's slots.
// 16, as vLLM's default: big enough that a block table stays short, small enough that a shared
// prefix loses at most 15 tokens to its partial last block.
#pragma once

namespace kvgate::engine {

inline constexpr int kBlockSize = 16;

}  // namespace kvgate::engine
