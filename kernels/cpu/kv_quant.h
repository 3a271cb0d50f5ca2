// Element formats of the CPU backend's paged KV cache and their scalar codecs: f16 and bf16 (no
// scale), int8 and FP8 E4M3 (one f16 scale per token per kv head).
//
// Layout of one layer's K (and, separately, V) cache: num_blocks blocks of KvBlockBytes() each.
//   f16, bf16:  [block_size][Hkv][Dh] 2-byte values (so slot s is at s * Hkv * Dh values, as the
//               cache has always been laid out);
//   int8, fp8:  [block_size][Hkv][Dh] 1-byte codes, then [block_size][Hkv] f16 scales; a value is
//               code * scale (int8) or DecodeE4M3(code) * scale (fp8).
// The scales sit inside the block, so a block's bytes (what the offload tier copies) are the block
// and its scales together.
//
// Why one scale per (token, kv head) rather than per (block, kv head): the engine writes a block
// one token at a time while it decodes. A per-block scale would have to grow as louder tokens
// arrive and re-encode the tokens already in the block (rounding them twice), and one loud token
// (the attention-sink first token is often 10x the others) would coarsen the other 15 tokens of
// its block. A per-token scale is fixed when the token is written, never revisited, and costs 2
// bytes per 64 values: an int8 token of SmolLM2-135M takes 11,880 bytes against 23,040 in f16
// (1.94x the tokens in the same memory).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvgate::kernels::cpu {

enum class KvFormat : uint8_t { kF16, kBf16, kInt8, kFp8 };

inline constexpr bool KvFormatHasScales(KvFormat f) {
  return f == KvFormat::kInt8 || f == KvFormat::kFp8;
}
inline constexpr size_t KvValueBytes(KvFormat f) { return KvFormatHasScales(f) ? 1 : 2; }
inline constexpr size_t KvScaleBytes(KvFormat f) { return KvFormatHasScales(f) ? 2 : 0; }

// The geometry of one layer's K or V cache.
struct KvLayout {
  KvFormat format = KvFormat::kF16;
  int64_t block_size = 0;  // tokens per block (the engine's kBlockSize)
  int64_t kv_heads = 0;  // Hkv
  int64_t head_dim = 0;  // Dh
};

// Bytes of one block of one layer's K (or V): values and scales.
inline constexpr size_t KvBlockBytes(const KvLayout& l) {
  return static_cast<size_t>(l.block_size * l.kv_heads) *
         (static_cast<size_t>(l.head_dim) * KvValueBytes(l.format) + KvScaleBytes(l.format));
}

// FP8 E4M3 ("e4m3fn"): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits, largest finite 448.
// Encoding rounds to nearest even and saturates at +-448 (bit-identical to kernels/cuda/fp8.h's
// EncodeE4M3; NaN encodes to 0x7f there and to 0 here, since a cache must never hold a NaN code).
uint8_t EncodeE4M3(float x);
// Decodes every code but the NaN codes 0x7f / 0xff, which EncodeE4M3 never writes (they decode as
// +-480 here, the value the vector kernels' f16 bit trick gives them).
float DecodeE4M3(uint8_t code);

// One row x [n] of one token and kv head into codes [n] and its f16 scale (returned): int8 codes
// round(x / s) with s = max|x| / 127, FP8 codes EncodeE4M3(x / s) with s = max|x| / 448, where s
// is rounded up to an f16 before the codes are computed from it (so nothing clips). An all-zero
// row gets scale 0.
uint16_t QuantizeKvRowInt8(const float* x, int n, int8_t* codes);
uint16_t QuantizeKvRowFp8(const float* x, int n, uint8_t* codes);
// The inverse, for tests and tools: out [n] = code * scale.
void DequantizeKvRowInt8(const int8_t* codes, uint16_t scale, int n, float* out);
void DequantizeKvRowFp8(const uint8_t* codes, uint16_t scale, int n, float* out);

// The Dh values of token row `row` (0 <= row < block_size), kv head `head`, of one block of
// `layout` (KvBlockBytes bytes at `block`), as the cache holds them (tests and tools).
void ReadKvRow(const KvLayout& layout, const void* block, int64_t row, int64_t head, float* out);

}  // namespace kvgate::kernels::cpu
