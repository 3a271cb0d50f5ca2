// Hands out the paged KV cache's blocks. The engine only sees block ids (they go into block tables);
// part 2 replaces this simple free-list allocator with the prefix-caching BlockManager behind the
// same small interface.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kvgate::engine {

class KvBlockAllocator {
 public:
  virtual ~KvBlockAllocator() = default;
  virtual int32_t num_blocks() const = 0;
  virtual int32_t num_free() const = 0;
  // A free block id in [0, num_blocks), or nullopt when none is left.
  virtual std::optional<int32_t> Allocate() = 0;
  // REQUIRES: `block` came from Allocate() and was not freed since.
  virtual void Free(int32_t block) = 0;
};

// LIFO free list: a freed block is the next one handed out (it is likely still in cache).
class SimpleBlockAllocator final : public KvBlockAllocator {
 public:
  explicit SimpleBlockAllocator(int32_t num_blocks);
  int32_t num_blocks() const override { return num_blocks_; }
  int32_t num_free() const override { return static_cast<int32_t>(free_.size()); }
  std::optional<int32_t> Allocate() override;
  void Free(int32_t block) override;

 private:
  int32_t num_blocks_;
  std::vector<int32_t> free_;
};

}  // namespace kvgate::engine
