// The engine's side of the KV offload tier (kv_tier.h): which blocks go to the tier and when, and
// where they come back (engine.h, "Offload tier").
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "local_engine/engine.h"
#include "local_engine/host_tier.h"
#include "local_engine/offload_tier.h"
#include "local_engine/scheduler.h"
#include "local_engine/sequence.h"

namespace kvgate::engine {
namespace {

uint64_t NanosSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
}

// What the offload tier's bytes belong to: the model's weights (every tensor's name, type, shape
// and bytes: two fine-tunes of one architecture share everything else) and the KV layout the
// runner reads and writes blocks in. A tier file written under another key is never served.
uint64_t KvLayoutKey(const GgufFile& file, const ModelRunner& runner) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  auto add = [&state](const void* p, size_t n) { XXH3_64bits_update(&state, p, n); };
  // The dtype is part of the key, not only of the block size: int8 and fp8 blocks have the same
  // size, and reading one as the other would be garbage, never a miss.
  constexpr std::string_view kLayout =
      "kvgate kv v2: [layer][K,V][block][Hkv][Dh] values, then [block][Hkv] f16 scales if int8/fp8";
  add(kLayout.data(), kLayout.size());
  const std::string_view dtype = KvDtypeName(runner.kv_config().dtype);
  add(dtype.data(), dtype.size());
  const LlamaDims& d = runner.dims();
  const int64_t geometry[] = {d.n_layers, d.kv_heads, d.head_dim, runner.kv_config().block_size,
                              runner.KvBytesPerBlock()};
  add(geometry, sizeof geometry);
  for (const GgufTensor& t : file.tensors()) {
    add(t.name.data(), t.name.size());
    const uint64_t shape[] = {static_cast<uint64_t>(t.type), t.n_bytes, t.dims.size()};
    add(shape, sizeof shape);
    add(t.dims.data(), t.dims.size() * sizeof(uint64_t));
    add(t.data, t.n_bytes);
  }
  return XXH3_64bits_digest(&state);
}

// The disk tier as a KvTier: each block goes through host memory (ModelRunner::ReadBlock and
// WriteBlock) to its checksummed slot.
class DiskTier final : public KvTier {
 public:
  DiskTier(std::unique_ptr<OffloadTier> file, ModelRunner& runner)
      : file_(std::move(file)), runner_(runner), bytes_(file_->block_bytes()) {}
  std::string_view kind() const override { return "disk"; }
  std::string location() const override { return file_->path(); }
  bool Contains(const TierKey& key) const override { return file_->Contains(key); }
  bool Pin(const TierKey& key) override { return file_->Pin(key); }
  void UnpinAll() override { file_->UnpinAll(); }
  void StoreBlocks(std::span<const TierBlock> evicted) override {
    for (const TierBlock& b : evicted) {
      if (file_->Contains(b.key)) {  // restored from the tier earlier: the same bytes are there
        file_->Touch(b.key);
        continue;
      }
      if (runner_.ReadBlock(b.pool_block, bytes_)) {
        file_->Store(b.key, bytes_);
      } else {
        NoteUnreadBlock();
      }
    }
  }
  int LoadBlocks(std::span<const TierBlock> blocks) override {
    int n = 0;
    for (const TierBlock& b : blocks) {
      // A corrupt slot is a miss: this block and the rest are computed.
      if (!file_->Load(b.key, bytes_) || !runner_.WriteBlock(b.pool_block, bytes_)) break;
      ++n;
    }
    return n;
  }
  OffloadTierStats stats() const override { return file_->stats(); }

 private:
  // A block the pool could not hand over is not stored (the tier is a cache), but not silently:
  // said at the first, then at most once a minute with the count.
  void NoteUnreadBlock() {
    ++unread_blocks_;
    const auto now = std::chrono::steady_clock::now();
    if (last_unread_report_ && now - *last_unread_report_ < std::chrono::minutes(1)) return;
    std::fprintf(stderr,
                 "kvgate: offload tier %s: %llu evicted blocks could not be read from the "
                 "KV pool and were not stored\n",
                 file_->path().c_str(), static_cast<unsigned long long>(unread_blocks_));
    last_unread_report_ = now;
  }

  std::unique_ptr<OffloadTier> file_;
  ModelRunner& runner_;
  std::vector<std::byte> bytes_;  // one block
  // The engine's tier I/O (RunTierIo) is the only caller of StoreBlocks: no lock.
  uint64_t unread_blocks_ = 0;
  std::optional<std::chrono::steady_clock::time_point> last_unread_report_;
};

}  // namespace

// The pool's eviction listener: notes each evicted hashed block; RunTierIo copies them out before
// anything overwrites them. Copy on eviction rather than on creation (vLLM's native offloading
// copies every new block after each step, so that the copy overlaps compute and the GPU block can
// be freed early): here the copy is synchronous and an evicted block's bytes stay valid until its
// new owner's first write (a restore or a forward pass, both after RunTierIo), so copying when the
// pool drops a block is exact, and it writes only the blocks the pool actually loses: a prefix
// that keeps being hit in the pool never costs a disk write.
struct Engine::TierWriter final : EvictionListener {
  struct Evicted {
    int32_t block = -1;
    uint64_t hash = 0;
    uint64_t salt = 0;
    std::array<int32_t, kBlockSize> tokens{};
  };
  void OnEvict(int32_t block_id, uint64_t hash, uint64_t salt,
               std::span<const int32_t> tokens) override {
    Evicted e{block_id, hash, salt, {}};
    std::copy_n(tokens.begin(), std::min(tokens.size(), e.tokens.size()), e.tokens.begin());
    pending.push_back(e);
  }
  std::vector<Evicted> pending;
};

// Here, where TierWriter is complete (unique_ptr members).
Engine::Engine() = default;
Engine::~Engine() = default;

Status Engine::OpenTier() {
  const EngineOptions::Offload& o = options_.offload;
  if (!o.disk_path.empty() && o.host_bytes > 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "offload: give disk (with bytes) or host_bytes, not both: one tier per engine");
  }
  if (!options_.enable_prefix_caching) {
    return MakeError(ErrorCode::kInvalidArgument, "offload: the tier needs prefix caching");
  }
  if (o.host_bytes > 0) {
    auto tier = HostTier::Create(*backend_, runner_->KvPlanes(), o.host_bytes);
    if (!tier) return std::unexpected(tier.error());
    tier_ = std::move(*tier);
  } else {
    if (options_.device != Device::kCpu) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "offload: the disk tier is supported on device cpu only (host_bytes: a "
                       "host-memory tier works on every device)");
    }
    auto file = OffloadTier::Open({.path = o.disk_path,
                                   .capacity_bytes = o.bytes,
                                   .block_bytes = static_cast<size_t>(runner_->KvBytesPerBlock()),
                                   .layout_key = KvLayoutKey(*file_, *runner_)});
    if (!file) return std::unexpected(file.error());
    tier_ = std::make_unique<DiskTier>(std::move(*file), *runner_);
  }
  tier_writer_ = std::make_unique<TierWriter>();
  blocks_->set_eviction_listener(tier_writer_.get());
  return {};
}

CachedPrefix Engine::LookupCachedPrefix(std::span<const int32_t> prompt,
                                        uint64_t cache_salt) const {
  MutexLock lock(&blocks_mu_);
  CachedPrefix out{.pool_tokens = blocks_->LookupCachedTokens(prompt, cache_salt)};
  if (!tier_) return out;
  const std::vector<uint64_t> chain = BlockManager::HashChain(prompt, cache_salt);
  for (size_t i = static_cast<size_t>(out.pool_tokens / kBlockSize); i < chain.size(); ++i) {
    if (!tier_->Contains({chain[i], cache_salt, prompt.subspan(i * kBlockSize, kBlockSize)})) break;
    out.offload_tokens += kBlockSize;
  }
  return out;
}

int Engine::TierBlocksFor(const Sequence& s) {
  if (!tier_) return 0;
  const std::span<const int32_t> tokens(s.tokens);
  const std::vector<uint64_t> chain = BlockManager::HashChain(tokens, s.blocks.salt);
  int found = 0;
  for (size_t i =
           static_cast<size_t>(blocks_->LookupCachedTokens(tokens, s.blocks.salt) / kBlockSize);
       i < chain.size(); ++i) {
    if (!tier_->Pin({chain[i], s.blocks.salt, tokens.subspan(i * kBlockSize, kBlockSize)})) break;
    ++found;
  }
  return found;
}

void Engine::RunTierIo(std::span<const Admission> restores) {
  if (!tier_) return;
  std::vector<TierWriter::Evicted> evicted;
  evicted.swap(tier_writer_->pending);
  if (evicted.empty() && restores.empty()) return;
  std::vector<int> restored(restores.size(), 0);
  uint64_t store_ns = 0, restore_ns = 0;
  {
    MutexUnlock unlocked(&blocks_mu_);
    // Stores first: a restore may write into a block evicted this step, whose bytes a store reads.
    const auto stores_start = std::chrono::steady_clock::now();
    if (!evicted.empty()) {
      std::vector<TierBlock> blocks;
      blocks.reserve(evicted.size());
      for (const TierWriter::Evicted& e : evicted)
        blocks.push_back({e.block, {e.hash, e.salt, e.tokens}});
      tier_->StoreBlocks(blocks);
      store_ns = NanosSince(stores_start);
    }
    const auto restores_start = std::chrono::steady_clock::now();
    for (size_t r = 0; r < restores.size(); ++r) {
      const Sequence& s = *restores[r].seq;
      const std::span<const int32_t> tokens(s.tokens);
      const std::vector<uint64_t> chain = BlockManager::HashChain(tokens, s.blocks.salt);
      const size_t first = static_cast<size_t>(s.blocks.num_cached_tokens / kBlockSize);
      const size_t end =
          std::min(chain.size(), first + static_cast<size_t>(restores[r].tier_blocks));
      std::vector<TierBlock> blocks;
      for (size_t i = first; i < end; ++i) {
        blocks.push_back({s.blocks.block_ids[i],
                          {chain[i], s.blocks.salt, tokens.subspan(i * kBlockSize, kBlockSize)}});
      }
      restored[r] = tier_->LoadBlocks(blocks) * kBlockSize;
    }
    tier_->UnpinAll();
    if (!restores.empty()) restore_ns = NanosSince(restores_start);
  }
  offload_store_ns_ += store_ns;
  offload_restore_ns_ += restore_ns;
  for (size_t r = 0; r < restores.size(); ++r) {
    Sequence& s = *restores[r].seq;
    if (restored[r] > 0) {
      blocks_->CommitRestored(s.tokens, s.blocks.num_cached_tokens + restored[r], s.blocks);
      offload_hit_tokens_ += static_cast<uint64_t>(restored[r]);
      ++offload_restores_;
    }
    s.NoteAdmitted(restored[r]);
  }
}

}  // namespace kvgate::engine
