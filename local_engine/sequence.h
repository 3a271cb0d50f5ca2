// Sequence: the engine's state of one request, from its arrival to its last token. The scheduler
// (scheduler.h) moves it between queues and gives it blocks; the engine (engine.cc) runs it,
// samples its tokens and reports them. Private to the engine's files, not part of its API.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "local_engine/engine.h"

namespace kvgate::engine {

struct Sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt + generated
  int32_t num_prompt = 0;
  int64_t num_computed = 0;  // tokens whose K/V are in the cache
  SequenceBlocks blocks;     // block table + prefix-cache bookkeeping
  bool admitted_once = false;
  int32_t cached_tokens = 0;          // prompt tokens reused at first admission
  int32_t cache_write_tokens = 0;     // prompt tokens this sequence registered in the cache
  int32_t cached_offload_tokens = 0;  // of cached_tokens, restored from the offload tier
  SamplingParams params;
  Sampler sampler;
  std::unique_ptr<StreamingDecoder> decoder;
  StopMatcher stop;
  // Constrained decoding (params.json_grammar): the output's automaton state, advanced with each
  // sampled token's bytes, and the step's allowed tokens (scratch).
  std::optional<JsonMatcher> matcher;
  TokenBitmask allowed;
  // params.logprobs >= 0: the step's logits as the model gave them (masked), before sampling
  // changes them in place (scratch).
  std::vector<float> raw_logits;
  std::function<void(const TokenEvent&)> on_token;
  int32_t completion = 0;
  bool finished = false;
  // n > 1 (EngineRequest::n): this sequence's choice index, and on the first choice (0) how many
  // others it still has to fork once its prompt is computed (Engine::ForkChoices).
  int32_t choice = 0;
  int32_t forks = 0;

  Sequence(uint64_t id_, EngineRequest&& r, const Tokenizer& tok)
      : id(id_),
        tokens(std::move(r.prompt)),
        num_prompt(static_cast<int32_t>(tokens.size())),
        params(std::move(r.sampling)),
        sampler(params, tokens),
        decoder(std::make_unique<StreamingDecoder>(tok, /*render_special=*/false)),
        stop(params.stop),
        on_token(std::move(r.on_token)),
        forks(r.n - 1) {
    blocks.salt = r.cache_salt;
    if (params.json_grammar) matcher.emplace(params.json_grammar);
  }

  // Choice `index` of `first`'s request, forked once its prompt is computed: the same prompt,
  // sampling parameters (a seed becomes seed + index, so that seeded choices differ and still
  // repeat), callback and prompt usage; no blocks (BlockManager::Fork shares them) and nothing
  // generated yet.
  Sequence(const Sequence& first, int32_t index, const Tokenizer& tok)
      : id(first.id),
        tokens(first.tokens.begin(), first.tokens.begin() + first.num_prompt),
        num_prompt(first.num_prompt),
        admitted_once(true),
        cached_tokens(first.cached_tokens),
        cache_write_tokens(first.cache_write_tokens),
        cached_offload_tokens(first.cached_offload_tokens),
        params(WithSeedOffset(first.params, index)),
        sampler(params, tokens),
        decoder(std::make_unique<StreamingDecoder>(tok, /*render_special=*/false)),
        stop(params.stop),
        on_token(first.on_token),
        choice(index) {
    blocks.salt = first.blocks.salt;  // (BlockManager::Fork sets it too; a waiting fork needs it)
    if (params.json_grammar) matcher.emplace(params.json_grammar);
  }

  static SamplingParams WithSeedOffset(SamplingParams p, int32_t index) {
    if (p.seed) *p.seed += static_cast<uint64_t>(index);
    return p;
  }

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  // Tokens whose K/V are still to compute: the prompt's rest while prefilling, then 1 (the last
  // sampled token) while decoding.
  int64_t num_remaining() const { return num_tokens() - num_computed; }
  bool decoding() const { return num_remaining() == 1; }

  // Called at each admission once `restored` tokens were copied in from the offload tier: they
  // count as computed. The first admission fixes the usage's cached tokens (a recomputation after
  // a preemption is the engine's business, not the client's).
  void NoteAdmitted(int restored) {
    num_computed += restored;
    if (admitted_once) return;
    admitted_once = true;
    cached_tokens = static_cast<int32_t>(std::min<int64_t>(num_computed, num_prompt));
    cached_offload_tokens = std::min(restored, cached_tokens);
  }
};

}  // namespace kvgate::engine
