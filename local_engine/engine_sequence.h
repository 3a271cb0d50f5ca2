// Engine::Sequence, the engine's state of one request: private to the engine's own files
// (engine.cc, engine_offload.cc), not part of its API.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "local_engine/engine.h"

namespace kvgate::engine {

struct Engine::Sequence {
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

  Sequence(uint64_t id_, EngineRequest&& r, const Tokenizer& tok)
      : id(id_),
        tokens(std::move(r.prompt)),
        num_prompt(static_cast<int32_t>(tokens.size())),
        params(std::move(r.sampling)),
        sampler(params, tokens),
        decoder(std::make_unique<StreamingDecoder>(tok, /*render_special=*/false)),
        stop(params.stop),
        on_token(std::move(r.on_token)) {
    if (params.json_grammar) matcher.emplace(params.json_grammar);
  }
};

}  // namespace kvgate::engine
