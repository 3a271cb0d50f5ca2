// The Llama-family model's weights, located in a GGUF file and checked against its metadata.
// Matrices stay quantized (Q4_1 / Q8_0) and, on the CPU backend, inside the file mapping.
//
// Letters: D hidden, F feed-forward, H heads, Hkv KV heads, Dh head dim, V vocabulary.
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.h"
#include "local_engine/backend.h"
#include "local_engine/gguf.h"

namespace kvgate::engine {

struct LlamaDims {
  int64_t n_layers = 0;
  int64_t hidden = 0;       // D
  int64_t ffn = 0;          // F
  int64_t heads = 0;        // H
  int64_t kv_heads = 0;     // Hkv
  int64_t head_dim = 0;     // Dh = D / H
  int64_t vocab = 0;        // V
  int64_t context_length = 0;
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [D]
  WeightMatrix q;                    // [H * Dh, D]
  WeightMatrix k;                    // [Hkv * Dh, D]
  WeightMatrix v;                    // [Hkv * Dh, D]
  WeightMatrix o;                    // [D, H * Dh]
  const float* ffn_norm = nullptr;   // [D]
  WeightMatrix gate;                 // [F, D]
  WeightMatrix up;                   // [F, D]
  WeightMatrix down;                 // [D, F]
};

struct ModelWeights {
  LlamaDims dims;
  WeightMatrix token_embd;             // [V, D]
  const float* output_norm = nullptr;  // [D]
  WeightMatrix output;                 // [V, D]; token_embd when the model ties embeddings
  bool tied_embeddings = false;
  std::vector<LayerWeights> layers;
};

// Reads the hyper-parameters and every tensor, checks names, shapes and types, and makes them
// usable by `backend`. `file` must outlive the returned weights. Any inconsistency (missing tensor,
// wrong shape, unsupported type or architecture) is a kCorruptData / kInvalidArgument Error naming
// the tensor or key.
Result<ModelWeights> LoadWeights(const GgufFile& file, Backend& backend);

}  // namespace kvgate::engine
