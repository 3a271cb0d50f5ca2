// The built-in engine's answers in OpenAI's shapes: chat.completion / text_completion objects,
// their stream chunks, usage, and logprobs (chat's `logprobs.content` entries, or the legacy
// completions shape).
//
// Thread safety: functions are pure; a LogprobsBuilder belongs to one response.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "gateway/providers/provider.h"
#include "local_engine/engine.h"
#include "local_engine/tokenizer.h"

namespace kvgate::gateway {

// usage with prompt_tokens_details {cached_tokens, cache_write_tokens, cache_read_offload_tokens,
// and cache_read_offload_tier ("disk" or "host") when the engine has an offload tier}.
nlohmann::json UsageJson(const engine::Usage& usage);
// "length" or "stop".
std::string FinishReasonFor(engine::FinishReason reason);

// What every chunk and the whole answer of one response repeat.
struct ResponseHead {
  std::string id;
  int64_t created = 0;
  std::string model;
  providers::Endpoint endpoint = providers::Endpoint::kChatCompletions;
  std::string fingerprint;  // system_fingerprint
  bool chat() const { return providers::EndpointTraitsOf(endpoint).chat_messages; }
  nlohmann::json Base(const char* chat_object) const;
};

// One SSE event of choice `index`: a chat delta (or a completion's text), the finish reason (null
// until the last), the logprobs of the tokens it carries (null: none), and on the last one
// vLLM's stop_reason (the stop string that ended the choice, or null; absent before the last).
std::string Chunk(const ResponseHead& head, const nlohmann::json& delta_or_text,
                  const nlohmann::json& finish_reason, const nlohmann::json& logprobs = nullptr,
                  int32_t index = 0, const std::optional<nlohmann::json>& stop_reason = {});
std::string UsageChunk(const ResponseHead& head, const engine::Usage& usage);
// The whole answer: `choices` are OpenAI's choice objects ({index, message or text, logprobs,
// finish_reason}).
std::string FullResponse(const ResponseHead& head, nlohmann::json choices,
                         const engine::Usage& usage);

// Collects the engine's per-token logprobs into OpenAI's shape: for chat
// {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}],
// "refusal": null}; for completions {"tokens", "token_logprobs", "top_logprobs" (one
// {token: logprob} object per token), "text_offset"}. A token that is not whole UTF-8 is written
// "bytes:\xNN..." (as OpenAI does); `bytes` has its exact bytes.
class LogprobsBuilder {
 public:
  LogprobsBuilder(bool chat, const engine::Tokenizer& tokenizer) : chat_(chat), tokenizer_(tokenizer) {}
  void Add(const engine::TokenLogprobs& lp);
  // What was added since the last Take, in the shape above; null when nothing was.
  nlohmann::json Take();

 private:
  std::string TokenText(int32_t token) const;

  const bool chat_;
  const engine::Tokenizer& tokenizer_;
  nlohmann::json pending_ = nlohmann::json::array();  // chat entries, or completion tokens
  int64_t text_offset_ = 0;  // completions: bytes of the tokens before
};

}  // namespace kvgate::gateway
