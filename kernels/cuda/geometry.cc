#include "kernels/cuda/geometry.h"

#include <algorithm>

namespace kvgate::cuda {
namespace {

constexpr int kCtasPerSmTarget = 4;
constexpr int kMinBlocksPerSplit = kAttnWarps;  // one KV block per warp at least

int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

CudaStatus CheckHeads(int hq, int hkv, int d) {
  if (hq <= 0 || hkv <= 0) return CudaStatus::Invalid("head counts must be positive");
  if (hq % hkv != 0) return CudaStatus::Invalid("query heads must be a multiple of kv heads");
  if (hq / hkv > 8) return CudaStatus::Invalid("more than 8 query heads per kv head");
  if (d != 64 && d != 128) return CudaStatus::Invalid("head_dim must be 64 or 128");
  return CudaStatus::Ok();
}

}  // namespace

size_t SplitWorkspaceFloats(size_t rows, int num_q_heads, int splits, int head_dim) {
  if (splits <= 1) return 0;
  return rows * static_cast<size_t>(num_q_heads) * static_cast<size_t>(splits) *
         (static_cast<size_t>(head_dim) + 1);
}

CudaStatus ChooseDecodeGeometry(const DecodeShape& s, int num_sms, DecodeGeometry* out) {
  if (CudaStatus st = CheckHeads(s.num_q_heads, s.num_kv_heads, s.head_dim); !st.ok()) return st;
  if (s.num_seqs <= 0) return CudaStatus::Invalid("decode needs at least one sequence");
  if (s.max_context_tokens <= 0) return CudaStatus::Invalid("context must hold the new token");
  if (num_sms <= 0) return CudaStatus::Invalid("num_sms must be positive");
  const int max_blocks = CeilDiv(s.max_context_tokens, kBlockTokens);
  const int64_t base_ctas = static_cast<int64_t>(s.num_seqs) * s.num_kv_heads;
  const int64_t target = static_cast<int64_t>(num_sms) * kCtasPerSmTarget;
  int splits = base_ctas >= target ? 1 : CeilDiv(target, base_ctas);
  // The group-4 (or smaller), D=128 kernel fits 3 CTAs per SM (its launch bounds), so a small launch
  // (a long sequence alone, say) is split into exactly one full wave of those: measured on an H200
  // (kernels/NOTES.md), one 100K sequence went from 66 splits (1.33 waves) at 0.53 of copy
  // bandwidth to 49 at 0.70. Larger launches keep the rule above: 64 sequences unsplit measured
  // 0.57 against 0.69 at its 2 splits.
  // The CTAs per SM come from the occupancy API for the kernel actually launched (v2 bf16: 3, its
  // ring's shared memory; v2 FP8: 4), or v1's measured 3.
  const int resident = s.ctas_per_sm > 0 ? s.ctas_per_sm : kDecodeG4D128CtasPerSm;
  const int64_t one_wave = static_cast<int64_t>(num_sms) * resident;
  if (s.num_q_heads / s.num_kv_heads <= 4 && s.head_dim == 128 && base_ctas * 4 <= one_wave) {
    splits = static_cast<int>(one_wave / base_ctas);
  }
  splits = std::min({splits, std::max(1, max_blocks / kMinBlocksPerSplit), kMaxSplits});
  const int per_split = CeilDiv(max_blocks, splits);
  splits = CeilDiv(max_blocks, per_split);  // drop splits that would get no block at all
  out->variant = s.variant;
  out->splits = splits;
  out->blocks_per_split = per_split;
  out->grid_x = s.num_kv_heads;
  out->grid_y = s.num_seqs;
  out->grid_z = splits;
  out->threads = kAttnThreads;
  out->workspace_floats = SplitWorkspaceFloats(static_cast<size_t>(s.num_seqs), s.num_q_heads,
                                               splits, s.head_dim);
  return CudaStatus::Ok();
}

int PrefillTileTokens(PrefillVariant variant, int group) {
  if (group < 1 || group > 8) return 0;
  return PrefillPacksHeads(variant) ? kPrefillV2Rows / group : kPrefillQTile;
}

CudaStatus ChoosePrefillGeometry(const PrefillShape& s, int num_tiles, int num_sms,
                                 PrefillGeometry* out) {
  if (CudaStatus st = CheckHeads(s.num_q_heads, s.num_kv_heads, s.head_dim); !st.ok()) return st;
  if (s.num_seqs <= 0 || s.num_q_tokens <= 0 || num_tiles <= 0)
    return CudaStatus::Invalid("prefill needs at least one query token");
  if (s.max_context_tokens <= 0) return CudaStatus::Invalid("context must be positive");
  if (num_sms <= 0) return CudaStatus::Invalid("num_sms must be positive");
  if (num_tiles > 65535) return CudaStatus::Invalid("too many query tiles for one launch");
  const bool v2 = PrefillPacksHeads(s.variant);
  const int kv_tiles = CeilDiv(s.max_context_tokens, kPrefillKvTile);
  const int max_splits = std::min(std::max(1, kv_tiles / 4), kMaxSplits);
  int splits = 1;
  if (v2) {
    // A v2 CTA is 8 warps and kPrefillV2CtasPerSm of them fit an SM: split a short launch into as
    // many CTAs as one wave holds, never into a partial second wave (v1 measured the cost of that
    // in decode: kernels/NOTES.md, "decode v1.2").
    const int64_t base_ctas = static_cast<int64_t>(num_tiles) * s.num_kv_heads;
    const int64_t wave = static_cast<int64_t>(num_sms) * kPrefillV2CtasPerSm;
    if (base_ctas < wave) splits = std::min(static_cast<int>(wave / base_ctas), max_splits);
  } else {
    const int64_t base_ctas = static_cast<int64_t>(num_tiles) * s.num_q_heads;
    const int64_t target = static_cast<int64_t>(num_sms) * kCtasPerSmTarget;
    if (base_ctas < target) splits = std::min(CeilDiv(target, base_ctas), max_splits);
  }
  out->variant = s.variant;
  out->tile_tokens = PrefillTileTokens(s.variant, s.num_q_heads / s.num_kv_heads);
  out->num_tiles = num_tiles;
  out->num_q_tokens = s.num_q_tokens;
  out->splits = splits;
  out->grid_x = v2 ? s.num_kv_heads : s.num_q_heads;
  out->grid_y = num_tiles;
  out->grid_z = splits;
  out->threads = PrefillThreads(s.variant);
  out->workspace_floats = SplitWorkspaceFloats(static_cast<size_t>(s.num_q_tokens), s.num_q_heads,
                                               splits, s.head_dim);
  return CudaStatus::Ok();
}

int64_t PrefillTileCount(std::span<const int32_t> q_lens, int tile_tokens) {
  if (tile_tokens <= 0) return -1;
  int64_t n = 0;
  for (int32_t q : q_lens) {
    if (q < 0) return -1;
    n += (static_cast<int64_t>(q) + tile_tokens - 1) / tile_tokens;
  }
  return n;
}

AttentionRowSplit SplitAttentionRows(std::span<const int32_t> query_start, bool decode_rows_apart) {
  AttentionRowSplit split;
  const size_t seqs = query_start.empty() ? 0 : query_start.size() - 1;
  split.prefill_q_lens.resize(seqs);
  for (size_t s = 0; s < seqs; ++s) split.prefill_q_lens[s] = query_start[s + 1] - query_start[s];
  size_t lead = 0;
  while (lead < seqs && split.prefill_q_lens[lead] == 1) ++lead;
  if (!decode_rows_apart && lead < seqs) lead = 0;
  std::fill_n(split.prefill_q_lens.begin(), lead, 0);
  split.decode_seqs = static_cast<int32_t>(lead);
  return split;
}

CudaStatus BuildPrefillTiles(std::span<const int32_t> q_lens, int tile_tokens,
                             std::vector<int32_t>* tiles) {
  tiles->clear();
  if (tile_tokens <= 0) return CudaStatus::Invalid("tile_tokens must be positive");
  for (size_t seq = 0; seq < q_lens.size(); ++seq) {
    if (q_lens[seq] < 0) return CudaStatus::Invalid("negative query length");
    for (int32_t start = 0; start < q_lens[seq]; start += tile_tokens) {
      tiles->push_back(static_cast<int32_t>(seq));
      tiles->push_back(start);
    }
  }
  return CudaStatus::Ok();
}

CudaStatus AppendSlotMapping(std::span<const int32_t> blocks, int64_t start_pos, int64_t n,
                             int32_t num_pool_blocks, std::vector<int32_t>* slots) {
  if (start_pos < 0 || n < 0) return CudaStatus::Invalid("negative position or count");
  if (start_pos + n > static_cast<int64_t>(blocks.size()) * kBlockTokens)
    return CudaStatus::Invalid("positions past the sequence's blocks");
  for (int64_t pos = start_pos; pos < start_pos + n; ++pos) {
    const int32_t block = blocks[static_cast<size_t>(pos / kBlockTokens)];
    if (block < 0 || block >= num_pool_blocks) return CudaStatus::Invalid("block id out of range");
    slots->push_back(block * kBlockTokens + static_cast<int32_t>(pos % kBlockTokens));
  }
  return CudaStatus::Ok();
}

CudaStatus BuildBlockTable(std::span<const std::vector<int32_t>> seq_blocks, int max_blocks,
                           std::vector<int32_t>* table) {
  if (max_blocks <= 0) return CudaStatus::Invalid("max_blocks must be positive");
  table->assign(seq_blocks.size() * static_cast<size_t>(max_blocks), -1);
  for (size_t s = 0; s < seq_blocks.size(); ++s) {
    if (seq_blocks[s].size() > static_cast<size_t>(max_blocks))
      return CudaStatus::Invalid("sequence has more blocks than the table holds");
    std::copy(seq_blocks[s].begin(), seq_blocks[s].end(),
              table->begin() + static_cast<std::ptrdiff_t>(s * static_cast<size_t>(max_blocks)));
  }
  return CudaStatus::Ok();
}

CudaStatus BuildCacheSegments(std::span<const int32_t> slots, std::vector<CacheSegment>* segments) {
  segments->clear();
  std::vector<int32_t> seen;  // blocks that already have a segment
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] < 0) continue;
    const int32_t block = slots[t] / kBlockTokens, offset = slots[t] % kBlockTokens;
    if (!segments->empty()) {
      CacheSegment& last = segments->back();
      if (last.block == block && static_cast<size_t>(last.token_begin + last.count) == t) {
        if (offset != last.first_offset + last.count)
          return CudaStatus::Invalid("tokens of one block not at consecutive offsets");
        ++last.count;
        continue;
      }
    }
    seen.push_back(block);
    segments->push_back({block, offset, static_cast<int32_t>(t), 1});
  }
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
    return CudaStatus::Invalid("two segments write one KV block in one launch");
  return CudaStatus::Ok();
}

Grid1D ElementwiseGrid(int64_t n, int num_sms) {
  Grid1D g;
  const int64_t needed = (n + g.threads - 1) / g.threads;
  const int64_t cap = static_cast<int64_t>(std::max(num_sms, 1)) * 32;
  g.blocks = static_cast<int>(std::clamp<int64_t>(needed, 1, cap));
  return g;
}

}  // namespace kvgate::cuda
