#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace kvgate::kernels::cpu {
namespace {

constexpr int64_t kMaxHeadDim = 256;

// Rows of weights per work item: small enough to balance two threads on a 576-row matvec, large
// enough that the per-item overhead (one atomic) is noise.
constexpr size_t kRowGrain = 16;

// Runs the row kernels for rows [r0, r1) of one matrix over all T tokens, a tile of up to
// kMaxTileTokens tokens at a time. The token loop is outside the rows so a 4-token activation
// tile stays in L1 while the chunk's rows stream past.
void MatMulRows(const VecKernels& kern, const QMatrix& w, const BlockQ8A* xq, int64_t t,
                int64_t nb, int64_t r0, int64_t r1, float* out) {
  const int64_t n = w.rows;
  for (int64_t t0 = 0; t0 < t; t0 += kMaxTileTokens) {
    const int ntok = static_cast<int>(std::min<int64_t>(kMaxTileTokens, t - t0));
    const BlockQ8A* a = xq + t0 * nb;
    float* o = out + t0 * n + r0;
    if (w.type == WeightType::kQ4_1) {
      kern.dot_q4_1_rows(static_cast<const BlockQ4_1*>(w.data) + r0 * nb, r1 - r0, a, nb, ntok,
                         static_cast<int>(nb), o, n);
    } else {
      kern.dot_q8_0_rows(static_cast<const BlockQ8_0*>(w.data) + r0 * nb, r1 - r0, a, nb, ntok,
                         static_cast<int>(nb), o, n);
    }
  }
}

}  // namespace

void MatMul(const CpuContext& ctx, const float* x, int64_t t, int64_t k,
            std::span<const QMatrix* const> ws, std::span<float* const> outs) {
  const int64_t nb = k / kQBlock;
  std::vector<BlockQ8A>& xq = *ctx.q8_scratch;
  if (xq.size() < static_cast<size_t>(t * nb)) xq.resize(t * nb);
  const VecKernels& kern = *ctx.kernels;
  if (t == 1) {
    kern.quantize_row_q8a(x, k, xq.data());
  } else {
    ctx.pool->ParallelFor(t, 8, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) kern.quantize_row_q8a(x + i * k, k, xq.data() + i * nb);
    });
  }
  int64_t total_rows = 0;
  for (const QMatrix* w : ws) total_rows += w->rows;
  ctx.pool->ParallelFor(total_rows, kRowGrain, [&](size_t begin, size_t end) {
    // [begin, end) indexes the concatenation of all matrices' rows; split it per matrix.
    int64_t base = 0;
    for (size_t i = 0; i < ws.size() && static_cast<int64_t>(begin) < static_cast<int64_t>(end);
         ++i) {
      const int64_t rows = ws[i]->rows;
      const int64_t lo = std::max<int64_t>(begin, base), hi = std::min<int64_t>(end, base + rows);
      if (lo < hi) MatMulRows(kern, *ws[i], xq.data(), t, nb, lo - base, hi - base, outs[i]);
      base += rows;
    }
  });
}

void EmbedRows(const QMatrix& table, std::span<const int32_t> ids, float* out) {
  const int64_t k = table.cols;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (table.type == WeightType::kQ8_0) {
      DequantizeQ8_0(static_cast<const BlockQ8_0*>(table.data) + ids[i] * (k / kQBlock), k,
                     out + i * k);
    } else {
      DequantizeQ4_1(static_cast<const BlockQ4_1*>(table.data) + ids[i] * (k / kQBlock), k,
                     out + i * k);
    }
  }
}

void RmsNorm(const CpuContext& ctx, const float* x, const float* w, int64_t t, int64_t d, float eps,
             float* out) {
  auto rows = [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const float* xr = x + i * d;
      float* o = out + i * d;
      float ss = 0.0f;
      for (int64_t j = 0; j < d; ++j) ss += xr[j] * xr[j];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
      for (int64_t j = 0; j < d; ++j) o[j] = xr[j] * inv * w[j];
    }
  };
  if (t < 64) {
    rows(0, t);
  } else {
    ctx.pool->ParallelFor(t, 32, rows);
  }
}

void RopeInterleaved(float* x, int64_t t, int64_t h, int64_t dh, std::span<const int32_t> positions,
                     float theta) {
  float cs[kMaxHeadDim / 2], sn[kMaxHeadDim / 2];
  const int64_t half = std::min(dh, kMaxHeadDim) / 2;
  // The angle follows ggml's float recurrence (theta_j = pos * base^(-2j/Dh), built by repeated
  // multiplication) rather than an exact pow: at long positions the two differ by ~1e-4 rad,
  // enough to flip near-tie greedy choices against llama.cpp.
  const float step = std::pow(theta, -2.0f / static_cast<float>(dh));
  for (int64_t i = 0; i < t; ++i) {
    float angle = static_cast<float>(positions[i]);
    for (int64_t j = 0; j < half; ++j) {
      cs[j] = std::cos(angle);
      sn[j] = std::sin(angle);
      angle *= step;
    }
    for (int64_t head = 0; head < h; ++head) {
      float* v = x + (i * h + head) * dh;
      for (int64_t j = 0; j < half; ++j) {
        const float a = v[2 * j], b = v[2 * j + 1];
        v[2 * j] = a * cs[j] - b * sn[j];
        v[2 * j + 1] = a * sn[j] + b * cs[j];
      }
    }
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void WriteKv(const CpuContext& ctx, const float* k, const float* v, int64_t t,
             std::span<const int64_t> slots, const KvLayout& layout, void* k_cache, void* v_cache) {
  const VecKernels& kern = *ctx.kernels;
  const int64_t dh = layout.head_dim, hkv = layout.kv_heads, bs = layout.block_size;
  const int64_t kv_dim = hkv * dh;
  const size_t block_bytes = KvBlockBytes(layout);
  auto* kc = static_cast<std::byte*>(k_cache);
  auto* vc = static_cast<std::byte*>(v_cache);
  for (int64_t i = 0; i < t; ++i) {
    const int64_t slot = slots[i];
    if (slot < 0) continue;
    const float* src[2] = {k + i * kv_dim, v + i * kv_dim};
    std::byte* caches[2] = {kc, vc};
    for (int c = 0; c < 2; ++c) {
      std::byte* block = caches[c] + static_cast<size_t>(slot / bs) * block_bytes;
      const int64_t row = slot % bs;  // the token's row within its block
      switch (layout.format) {
        case KvFormat::kF16:
          kern.f32_to_f16(src[c], reinterpret_cast<uint16_t*>(block) + row * kv_dim, kv_dim);
          break;
        case KvFormat::kBf16: {
          uint16_t* out = reinterpret_cast<uint16_t*>(block) + row * kv_dim;
          for (int64_t j = 0; j < kv_dim; ++j) out[j] = F32ToBf16(src[c][j]);
          break;
        }
        case KvFormat::kInt8:
        case KvFormat::kFp8: {
          std::byte* scales = block + bs * kv_dim;
          for (int64_t h = 0; h < hkv; ++h) {
            std::byte* codes = block + row * kv_dim + h * dh;
            const uint16_t scale =
                layout.format == KvFormat::kInt8
                    ? QuantizeKvRowInt8(src[c] + h * dh, static_cast<int>(dh),
                                        reinterpret_cast<int8_t*>(codes))
                    : QuantizeKvRowFp8(src[c] + h * dh, static_cast<int>(dh),
                                       reinterpret_cast<uint8_t*>(codes));
            std::memcpy(scales + (row * hkv + h) * sizeof(uint16_t), &scale, sizeof scale);
          }
          break;
        }
      }
    }
  }
}

namespace {

// One unit of attention work: query tokens [tok0, tok1) of sequence s (consecutive positions)
// against KV head kv_head, for query heads [head0, head1) of that head's group, over cache blocks
// [blk0, blk1). All of its rows read the same keys, so each cache block is brought into L1 once
// per item instead of once per (token, head): at long contexts the K/V stream, not the
// arithmetic, is what costs. An item that covers only part of the keys (part >= 0) leaves its
// softmax state in a partial slot, merged with the other parts afterwards.
struct AttentionItem {
  int32_t s;
  int32_t kv_head;
  int64_t tok0, tok1;
  int64_t head0, head1;
  int64_t blk0, blk1;
  int64_t part = -1;  // partial slot (rows x (head_dim + 2) floats), or -1: write the output
};

// Query tokens per item in a prefill chunk: with the group's heads, about 16 rows share a block.
constexpr int64_t kAttentionRows = 16;
// Fewest cache blocks a key split gives each part (16 blocks = 256 positions): shorter ranges are
// not worth a merge.
constexpr int64_t kMinBlocksPerPart = 16;

struct AttentionPlan {
  std::vector<AttentionItem> items;
  // Items split over the keys: [first, first + parts) are the parts of one (tokens, heads) unit.
  struct Split {
    size_t first;
    int64_t parts;
  };
  std::vector<Split> splits;
  int64_t partial_slots = 0;
};

AttentionPlan PlanAttention(const PagedAttentionArgs& a, size_t threads) {
  const int64_t group = a.heads / a.kv_heads;
  const int num_seqs = static_cast<int>(a.context_lens.size());
  const int64_t tile = std::max<int64_t>(1, kAttentionRows / group);
  size_t whole_groups = 0;  // items if every item takes the group's heads and all keys
  for (int s = 0; s < num_seqs; ++s) {
    const int64_t qlen = a.query_start[s + 1] - a.query_start[s];
    whole_groups += static_cast<size_t>((qlen + tile - 1) / tile * a.kv_heads);
  }
  // Too few items to keep every thread busy (a sequence or two decoding): long contexts split
  // their keys into parts (flash-decoding), which keeps each block read once per group; short
  // ones take one head per item, at the price of reading each block once per head.
  const size_t wanted = 2 * threads;
  const int64_t parts_wanted =
      whole_groups >= wanted ? 1 : static_cast<int64_t>((wanted + whole_groups - 1) / whole_groups);
  const bool split_heads = whole_groups < threads;
  AttentionPlan plan;
  for (int s = 0; s < num_seqs; ++s) {
    const int64_t blocks = (a.context_lens[s] + a.block_size - 1) / a.block_size;
    const int64_t parts = std::min(parts_wanted, blocks / kMinBlocksPerPart);
    for (int64_t t0 = a.query_start[s]; t0 < a.query_start[s + 1]; t0 += tile) {
      const int64_t t1 = std::min<int64_t>(t0 + tile, a.query_start[s + 1]);
      for (int64_t g = 0; g < a.kv_heads; ++g) {
        const auto kv = static_cast<int32_t>(g);
        if (parts >= 2) {
          plan.splits.push_back({plan.items.size(), parts});
          const int64_t rows = (t1 - t0) * group;
          for (int64_t p = 0; p < parts; ++p) {
            plan.items.push_back({s, kv, t0, t1, g * group, (g + 1) * group, blocks * p / parts,
                                  blocks * (p + 1) / parts, plan.partial_slots});
            plan.partial_slots += rows;
          }
        } else if (!split_heads) {
          plan.items.push_back({s, kv, t0, t1, g * group, (g + 1) * group, 0, blocks});
        } else {
          for (int64_t h = g * group; h < (g + 1) * group; ++h)
            plan.items.push_back({s, kv, t0, t1, h, h + 1, 0, blocks});
        }
      }
    }
  }
  return plan;
}

}  // namespace

namespace {

// The f16 scales of rows [0, n) of an int8 / FP8 block for kv head h (kv_quant.h's layout).
void RowScales(const std::byte* block, const KvLayout& layout, int64_t h, int64_t n, float* out) {
  const std::byte* scales = block + layout.block_size * layout.kv_heads * layout.head_dim;
  for (int64_t j = 0; j < n; ++j) {
    uint16_t s;
    std::memcpy(&s, scales + (j * layout.kv_heads + h) * sizeof(uint16_t), sizeof s);
    out[j] = F16ToF32(s);
  }
}

// How many cache blocks ahead attention fetches K/V (see RunAttentionItems).
constexpr int64_t kAttendBlocksAhead = 2;

// Prefetches `rows` rows of `row_bytes` (one kv head of one token) `stride` bytes apart, of K and
// of V.
void PrefetchHeadRows(const std::byte* k, const std::byte* v, int64_t rows, int64_t stride,
                      int64_t row_bytes) {
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t off = 0; off < row_bytes; off += 64) {
      __builtin_prefetch(k + j * stride + off);
      __builtin_prefetch(v + j * stride + off);
    }
  }
}

void RunAttentionItems(const VecKernels& kern, const PagedAttentionArgs& a,
                       const AttentionPlan& plan, std::vector<float>& partials, size_t begin,
                       size_t end) {
  const int64_t kv_dim = a.kv_heads * a.head_dim;
  const int64_t bs = a.block_size;
  const int64_t dh = a.head_dim;
  const KvLayout layout{a.format, bs, a.kv_heads, dh};
  const bool scaled = KvFormatHasScales(a.format);
  const size_t block_bytes = KvBlockBytes(layout);
  const size_t value_bytes = KvValueBytes(a.format);
  const auto attend = kern.attend_block[static_cast<int>(a.format)];
  const auto* k_base = static_cast<const std::byte*>(a.k_cache);
  const auto* v_base = static_cast<const std::byte*>(a.v_cache);
  // Per row: the query (rounded to f16, as llama.cpp does when multiplying it with the f16 K
  // cache), its last visible position, the online-softmax state and the accumulator.
  // (Per thread, reused across calls: ParallelFor runs this once per item.)
  thread_local std::vector<float> q, acc;
  thread_local std::vector<int64_t> last;
  thread_local std::vector<float> m, l;
  float k_scale[64], v_scale[64];
  uint16_t qh[kMaxHeadDim];
  for (size_t i = begin; i < end; ++i) {
    const AttentionItem& it = plan.items[i];
    const int64_t heads = it.head1 - it.head0;
    const int64_t rows = (it.tok1 - it.tok0) * heads;
    q.resize(static_cast<size_t>(rows * dh));
    acc.assign(static_cast<size_t>(rows * dh), 0.0f);
    last.resize(static_cast<size_t>(rows));
    m.assign(static_cast<size_t>(rows), -std::numeric_limits<float>::infinity());
    l.assign(static_cast<size_t>(rows), 0.0f);
    const int64_t qlen = a.query_start[it.s + 1] - a.query_start[it.s];
    const int64_t first_pos = a.context_lens[it.s] - qlen - a.query_start[it.s];  // + tok
    int64_t max_pos = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t tok = it.tok0 + r / heads, head = it.head0 + r % heads;
      kern.f32_to_f16(a.q + (tok * a.heads + head) * dh, qh, dh);
      kern.f16_to_f32(qh, q.data() + r * dh, dh);
      last[r] = first_pos + tok;
      max_pos = std::max(max_pos, last[r]);
    }
    const int32_t* table = a.block_tables.data() + it.s * a.max_blocks;
    // The item's kv head: its values start this far into every token row of a block.
    const size_t head_off = static_cast<size_t>(it.kv_head * dh) * value_bytes;
    // Online softmax, one cache block (<= 64 keys) at a time; the block stays in L1 while every
    // row of the item reads it. Per row the arithmetic is the same as one row alone.
    for (int64_t blk = it.blk0; blk < it.blk1 && blk * bs <= max_pos; ++blk) {
      const std::byte* kb = k_base + static_cast<size_t>(table[blk]) * block_bytes;
      const std::byte* vb = v_base + static_cast<size_t>(table[blk]) * block_bytes;
      // The blocks of a sequence are scattered over the pool, where the hardware prefetcher
      // cannot follow: fetch this head's rows of the block after the next while this one is
      // attended (decode at a 2K context reads ~47 MB of K/V per token for this model).
      if (const int64_t ahead = blk + kAttendBlocksAhead; ahead < it.blk1 && ahead * bs <= max_pos) {
        PrefetchHeadRows(k_base + static_cast<size_t>(table[ahead]) * block_bytes + head_off,
                         v_base + static_cast<size_t>(table[ahead]) * block_bytes + head_off,
                         bs, kv_dim * value_bytes, dh * value_bytes);
      }
      if (scaled) {
        const int64_t n = std::min(bs, max_pos + 1 - blk * bs);
        RowScales(kb, layout, it.kv_head, n, k_scale);
        RowScales(vb, layout, it.kv_head, n, v_scale);
        for (int64_t j = 0; j < n; ++j) k_scale[j] *= a.scale;
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = std::min(bs, last[r] + 1 - blk * bs);
        if (n <= 0) continue;
        attend({q.data() + r * dh, static_cast<int>(dh), kb + head_off, vb + head_off, kv_dim,
                static_cast<int>(n), a.scale, scaled ? k_scale : nullptr,
                scaled ? v_scale : nullptr, &m[r], &l[r], acc.data() + r * dh});
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (it.part >= 0) {
        float* slot = partials.data() + (it.part + r) * (dh + 2);
        slot[0] = m[r];
        slot[1] = l[r];
        std::copy(acc.begin() + r * dh, acc.begin() + (r + 1) * dh, slot + 2);
        continue;
      }
      const int64_t tok = it.tok0 + r / heads, head = it.head0 + r % heads;
      float* o = a.out + (tok * a.heads + head) * dh;
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      for (int64_t d = 0; d < dh; ++d) o[d] = acc[r * dh + d] * inv;
    }
  }
}

}  // namespace

void PagedAttention(const CpuContext& ctx, const PagedAttentionArgs& a) {
  const VecKernels& kern = *ctx.kernels;
  const int64_t dh = a.head_dim;
  const AttentionPlan plan = PlanAttention(a, static_cast<size_t>(ctx.pool->size()));
  // Per partial row: m, l, then the unnormalized accumulator.
  std::vector<float> partials(static_cast<size_t>(plan.partial_slots * (dh + 2)));
  ctx.pool->ParallelFor(plan.items.size(), 1, [&](size_t begin, size_t end) {
    RunAttentionItems(kern, a, plan, partials, begin, end);
  });

  // Merge the parts of each split: rescale every part's state to the largest maximum.
  for (const AttentionPlan::Split& split : plan.splits) {
    const AttentionItem& first = plan.items[split.first];
    const int64_t heads = first.head1 - first.head0;
    const int64_t rows = (first.tok1 - first.tok0) * heads;
    for (int64_t r = 0; r < rows; ++r) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t p = 0; p < split.parts; ++p) {
        mx = std::max(mx, partials[(plan.items[split.first + p].part + r) * (dh + 2)]);
      }
      const int64_t tok = first.tok0 + r / heads, head = first.head0 + r % heads;
      float* o = a.out + (tok * a.heads + head) * dh;
      std::fill(o, o + dh, 0.0f);
      float total = 0.0f;
      for (int64_t p = 0; p < split.parts; ++p) {
        const float* slot = partials.data() + (plan.items[split.first + p].part + r) * (dh + 2);
        if (slot[1] == 0.0f) continue;  // this part saw no key of this row
        const float w = std::exp(slot[0] - mx);
        total += slot[1] * w;
        for (int64_t d = 0; d < dh; ++d) o[d] += slot[2 + d] * w;
      }
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;
      for (int64_t d = 0; d < dh; ++d) o[d] *= inv;
    }
  }
}

}  // namespace kvgate::kernels::cpu
