// Token sampling for one request, and stop-string matching on the decoded text stream.
//
// Sampling order (as in vLLM / llama.cpp): penalties -> (greedy when temperature == 0) ->
// temperature -> top-k -> top-p -> min-p -> draw with the request's own std::mt19937_64.
// Thread safety: a Sampler / StopMatcher belongs to one request and is used by one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "local_engine/json_grammar.h"
#include "local_engine/token_trie.h"

namespace kvgate::engine {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax after penalties)
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off; keep the smallest set with cumulative prob >= top_p
  float min_p = 0.0f;               // 0: off; drop tokens with prob < min_p * max prob
  float repetition_penalty = 1.0f;  // 1: off; tokens in prompt or output: logit / p if > 0 else * p
  float presence_penalty = 0.0f;    // subtracted once from tokens present in the output
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the output
  std::optional<uint64_t> seed;     // same seed + same logits = same tokens; none: random
  int32_t max_tokens = 256;         // completion tokens at most
  std::vector<std::string> stop;    // stop strings, matched on the decoded text
  bool ignore_eos = false;
  // Constrained decoding (response_format json_object / json_schema): when set, every sampled
  // token keeps the output a prefix of a value of this grammar, and the request ends once the
  // value is complete. Null: unconstrained.
  std::shared_ptr<const JsonGrammar> json_grammar;
  // Log probabilities of each generated token (OpenAI's logprobs / top_logprobs): -1 none; 0 to
  // kMaxTopLogprobs: the sampled token's and that many of the likeliest (ComputeLogprobs).
  int32_t logprobs = -1;
};

inline constexpr int32_t kMaxTopLogprobs = 20;

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;  // likeliest first
};

// The log-softmax of `logits` [V] (the model's raw logits, after the constrained-decoding mask
// and before penalties, temperature and top-k/p, as OpenAI reports the model's distribution) at
// `chosen`, and the `top_n` likeliest tokens (ties: the lower id first). Masked tokens (-inf) are
// never among them, so there may be fewer. REQUIRES: chosen is an index of logits.
TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t chosen, int32_t top_n);

// kInvalidArgument naming the bad field (negative temperature, top_p outside (0, 1], ...).
Status ValidateSamplingParams(const SamplingParams& p);

class Sampler {
 public:
  // `prompt` feeds the repetition penalty.
  Sampler(const SamplingParams& params, std::span<const int32_t> prompt);

  // Picks the next token from logits [V] (modified in place) and records it as output.
  int32_t Sample(std::span<float> logits);

 private:
  void ApplyPenalties(std::span<float> logits) const;

  // Constant after construction.
  SamplingParams params_;
  std::vector<int32_t> prompt_tokens_;  // sorted, unique

  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
};

// The constrained-decoding stage, before Sample: every logit whose token `allowed` does not
// contain becomes -inf, so no later stage (penalties, temperature, top-k/p, min-p) can pick it.
// REQUIRES: allowed.size() == logits.size() and at least one token allowed.
void MaskLogits(std::span<float> logits, const TokenBitmask& allowed);

// Finds stop strings in a stream of text pieces. Text that might be the start of a stop string is
// held back until it is clear; text from the first stop string on is never released.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Output {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was found (text ends right before it)
  };
  Output Push(std::string_view piece);
  // End of stream without a stop: everything held back.
  std::string Flush();
  // The stop string that was found ("" before one is): Anthropic's stop_sequence, vLLM's
  // stop_reason.
  std::string_view matched() const;

 private:
  std::vector<std::string> stops_;  // non-empty strings only
  std::string pending_;
  bool stopped_ = false;
  size_t matched_ = 0;  // index into stops_, valid once stopped_
};

}  // namespace kvgate::engine
