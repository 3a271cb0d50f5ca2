// What the accuracy benchmarks (bench/kv_quant, bench/fp8_gemm) share: a text's next-token
// log-probabilities through a ModelRunner, their comparison against a reference run, and greedy
// completions of a batch of prompts. Nothing here is timed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "local_engine/backend.h"
#include "local_engine/gguf.h"
#include "local_engine/kv_dtype.h"
#include "local_engine/tokenizer.h"
#include "local_engine/weights.h"

namespace kvgate::engine::bench {

bool ReadTextFile(const std::string& path, std::string* out);

// BOS (when the tokenizer has one) and the tokens of `text`, control tokens not parsed.
std::vector<int32_t> TextTokenIds(const Tokenizer& tok, const std::string& text);

// The prompts of a file, one per non-empty line, each as a user message in the model's chat
// template (BOS first when the model adds one). Errors: an unreadable file, the template's.
Result<std::vector<std::vector<int32_t>>> ChatPromptIds(const GgufFile& gguf, const Tokenizer& tok,
                                                        const std::string& prompts_path);

// Log-probabilities [ids.size(), V] of every position of `ids` (BOS included) on `backend` with a
// KV cache of `dtype`, as prefill chunks of 512 tokens.
Result<std::vector<float>> TextLogProbs(const ModelWeights& weights, Backend& backend, KvDtype dtype,
                                        const std::vector<int32_t>& ids);

// Per position i < ids.size() - 1 of a run's log-probabilities `lp` against the reference `ref`
// (both [ids.size(), V]): "nll" (-log p(ids[i + 1])), "kl" (KL(ref || lp), nats) and "top1" (both
// argmaxes agree), each a JSON array.
nlohmann::json ScorePositions(const std::vector<float>& ref, const std::vector<float>& lp,
                              const std::vector<int32_t>& ids, int64_t vocab);

// `max_tokens` greedy tokens after each prompt (token ids, BOS included), EOS not special, all
// prompts as one batch per step through a ModelRunner on `backend` (f16 KV cache).
Result<std::vector<std::vector<int32_t>>> GreedyCompletions(const ModelWeights& weights, Backend& backend,
                                                            const std::vector<std::vector<int32_t>>& prompts,
                                                            int max_tokens);

}  // namespace kvgate::engine::bench
