// Prefill attention v3's host-checkable plan (attention_prefill_v3.cu): the CTA's roles, its shared
// memory, the TMA box that fetches a KV block, the 128-byte swizzle both TMA and wgmma use, and the
// wgmma shared-memory descriptors. Plain C++ usable on host and device; tests/cuda/
// prefill_v3_layout_test.cc checks every rule here without a GPU. After FlashAttention-3:
//
// - CTA = 3 warpgroups (384 threads) over the same 128-row tile as v2 (rows = (token, head) pairs
//   of one kv head's G heads, PrefillTileTokens). Warpgroup 0 is the producer: one thread issues
//   the TMA loads of each 64-key K/V tile into a ring of kPrefillV3Stages stages, signalling a
//   "full" mbarrier with the bytes it expects. Warpgroups 1 and 2 are consumers of 64 rows each:
//   S = Q K^T and O += P V with wgmma (m64n64k16 for S, m64nDk16 for O with P from registers),
//   online softmax in registers, and an arrive on the stage's "empty" mbarrier when done with it.
// - Paged K/V through TMA: one 3-D tensor map per cache plane, dims (D, Hkv, slots) innermost
//   first; a box is (64 dims, 1 head, 16 slots), i.e. one KV block's rows of one kv head and 64
//   dims, 2 KB. A 64-key tile is 4 blocks x D / 64 dim chunks of K, as many of V. A block past
//   the context is fetched at slot coordinate = the pool's slot count, wholly out of bounds, which
//   TMA fills with zeros (and still counts the full box bytes, so every stage expects the same).
// - Shared memory tiles are [rows][64 elements] chunks of 128-byte rows in the 128-byte swizzle:
//   16-byte chunk c of row r sits at chunk c ^ (r % 8), atoms of 8 rows (1024 bytes) 1024-aligned.
//   TMA writes that pattern (CU_TENSOR_MAP_SWIZZLE_128B); the consumers write Q in it by hand.
// - Descriptors: Q and K are K-major (rows = M or N, 128 bytes of the reduction dim each): LBO
//   unused (1), SBO = 1024 (the next 8 rows); a k-step of 16 elements moves the start by 32 bytes
//   inside the swizzle atom, the next 64-element chunk by the chunk's bytes. V is MN-major (rows =
//   keys = the reduction dim, 128 bytes = 64 output dims each; imm-trans-b = 1): LBO = the stride
//   between 64-dim chunks, SBO = 1024 (the next 8 keys); a k-step of 16 keys moves the start by
//   2048 bytes. These are the canonical SW128 layouts as CUTLASS documents them, re-derived, not
//   copied; a device run that gets S right and O wrong points at the V descriptor first.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KVGATE_PREFILL_V3_HD __host__ __device__
#else
#define KVGATE_PREFILL_V3_HD
#endif

namespace kvgate::cuda::prefill_v3 {

inline constexpr int kThreads = 384;        // 3 warpgroups
inline constexpr int kConsumerThreads = 256;  // warpgroups 1 and 2
inline constexpr int kRows = 128;           // per CTA, 64 per consumer warpgroup (v2's tile)
inline constexpr int kKeys = 64;            // per K/V tile (4 KV blocks)
inline constexpr int kBlockKeys = 16;       // per TMA box (one KV block)
inline constexpr int kChunkElems = 64;      // 128 bytes of 16-bit elements: one swizzle row
inline constexpr int kStages = 4;           // K/V tile pairs in the ring
inline constexpr int kAtomBytes = 1024;     // 8 rows x 128 bytes

// Bytes of a [rows][64] chunk and of a tile [rows][d] stored as d / 64 chunks.
KVGATE_PREFILL_V3_HD constexpr int ChunkBytes(int rows) { return rows * 128; }
KVGATE_PREFILL_V3_HD constexpr int TileBytes(int rows, int d) { return ChunkBytes(rows) * (d / kChunkElems); }

// Shared memory, from a 1024-aligned base: Q [128][D], then kStages x (K [64][D], V [64][D]), then
// the full[kStages] and empty[kStages] mbarriers (8 bytes each). kAlloc adds the slack to align
// the base (dynamic shared memory is only 16-byte aligned).
struct Smem {
  int d;
  KVGATE_PREFILL_V3_HD constexpr int q() const { return 0; }
  KVGATE_PREFILL_V3_HD constexpr int stage(int s) const { return TileBytes(kRows, d) + s * 2 * TileBytes(kKeys, d); }
  KVGATE_PREFILL_V3_HD constexpr int k(int s) const { return stage(s); }
  KVGATE_PREFILL_V3_HD constexpr int v(int s) const { return stage(s) + TileBytes(kKeys, d); }
  KVGATE_PREFILL_V3_HD constexpr int full(int s) const { return stage(kStages) + 8 * s; }
  KVGATE_PREFILL_V3_HD constexpr int empty(int s) const { return stage(kStages) + 8 * (kStages + s); }
  KVGATE_PREFILL_V3_HD constexpr int bytes() const { return stage(kStages) + 16 * kStages; }
  KVGATE_PREFILL_V3_HD constexpr int alloc() const { return bytes() + kAtomBytes; }
  // The bytes the producer's TMA loads bring into one stage (the full barrier's transaction count).
  KVGATE_PREFILL_V3_HD constexpr int stage_tx_bytes() const { return 2 * TileBytes(kKeys, d); }
};

// Byte offset of element (row, col) of a [rows][d] tile in the chunked, 128-byte-swizzled layout.
KVGATE_PREFILL_V3_HD constexpr int SwizzledOffset(int row, int col, int rows) {
  const int chunk = col / kChunkElems, in_chunk = col % kChunkElems;
  const int c16 = in_chunk / 8, within = (in_chunk % 8) * 2;
  return chunk * ChunkBytes(rows) + row * 128 + ((c16 ^ (row % 8)) * 16) + within;
}

// The wgmma shared-memory matrix descriptor: start address >> 4 in bits 0-13, LBO >> 4 in 16-29,
// SBO >> 4 in 32-45, base offset 0 (atoms 1024-aligned), layout 1 = 128-byte swizzle in 62-63.
KVGATE_PREFILL_V3_HD constexpr uint64_t Descriptor(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return (static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4)) | (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (uint64_t{1} << 62);
}

// Q (A) of consumer warpgroup `wg` (0 or 1), k-step kk (16 dims): rows wg*64.. of the Q tile.
KVGATE_PREFILL_V3_HD constexpr uint64_t QDescriptor(uint32_t q_base, int wg, int kk) {
  return Descriptor(q_base + (kk / 4) * ChunkBytes(kRows) + wg * 64 * 128 + (kk % 4) * 32, 16, kAtomBytes);
}
// K (B, K-major) of a stage, k-step kk: all 64 keys.
KVGATE_PREFILL_V3_HD constexpr uint64_t KDescriptor(uint32_t k_base, int kk) {
  return Descriptor(k_base + (kk / 4) * ChunkBytes(kKeys) + (kk % 4) * 32, 16, kAtomBytes);
}
// V (B, MN-major, imm-trans-b 1) of a stage, k-step k2 (keys 16 k2 ..): every output dim.
KVGATE_PREFILL_V3_HD constexpr uint64_t VDescriptor(uint32_t v_base, int k2) {
  return Descriptor(v_base + k2 * 16 * 128, ChunkBytes(kKeys), kAtomBytes);
}

// Where box (block b of the tile, dim chunk c) of a K or V tile lands: its 16 rows of chunk c.
KVGATE_PREFILL_V3_HD constexpr int BoxOffset(int b, int c) { return c * ChunkBytes(kKeys) + b * kBlockKeys * 128; }

// The TMA tensor map of one cache plane [NB][16][Hkv][D] (16-bit elements): what
// cuTensorMapEncodeTiled gets. Ok() checks the driver's documented limits (dims <= 2^32, strides
// multiples of 16 below 2^40, box <= 256 per dim, the box's inner bytes a multiple of 16 and at most
// the 128-byte swizzle span).
struct PagedKvTensorMap {
  uint64_t dims[3];     // D, Hkv, NB * 16 (slots)
  uint64_t strides[2];  // bytes: Hkv dim, slot dim
  uint32_t box[3];      // 64, 1, 16
  KVGATE_PREFILL_V3_HD constexpr bool Ok() const {
    for (int i = 0; i < 3; ++i)
      if (dims[i] == 0 || dims[i] > (uint64_t{1} << 32) || box[i] == 0 || box[i] > 256) return false;
    for (int i = 0; i < 2; ++i)
      if (strides[i] % 16 != 0 || strides[i] >= (uint64_t{1} << 40)) return false;
    return box[0] * 2 % 16 == 0 && box[0] * 2 <= 128 && box[0] <= dims[0];
  }
};

KVGATE_PREFILL_V3_HD constexpr PagedKvTensorMap PlanPagedKvTensorMap(int num_blocks, int num_kv_heads, int d) {
  const uint64_t row = static_cast<uint64_t>(d) * 2;
  return {{static_cast<uint64_t>(d), static_cast<uint64_t>(num_kv_heads),
           static_cast<uint64_t>(num_blocks) * kBlockKeys},
          {row, row * static_cast<uint64_t>(num_kv_heads)},
          {static_cast<uint32_t>(kChunkElems), 1u, static_cast<uint32_t>(kBlockKeys)}};
}

}  // namespace kvgate::cuda::prefill_v3

#undef KVGATE_PREFILL_V3_HD
