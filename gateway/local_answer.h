// The answer of one request to the built-in engine, assembled from its token events: one choice
// per engine choice (n > 1 included), each with its text, its tool calls (with tools) and its
// logprobs, streamed as OpenAI chunks or returned whole.
//
// Thread safety: an EngineAnswer belongs to the request's coroutine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/local_response.h"
#include "gateway/local_tools.h"
#include "local_engine/engine.h"

namespace kvgate::gateway {

// One engine event as the request's coroutine sees it (TokenEvent's text is a view valid only in
// the callback).
struct EngineEvent {
  int32_t choice = 0;
  std::string text;
  bool finished = false;
  engine::FinishReason reason = engine::FinishReason::kNone;
  engine::Usage usage;
  std::string error;
  std::optional<engine::TokenLogprobs> logprobs;
  std::string stop_string;  // TokenEvent::stop_string
};

class EngineAnswer {
 public:
  // `tools`: the output is the tool-call object (ToolCallAssembler); `logprobs` >= 0: each
  // choice reports its tokens' logprobs.
  EngineAnswer(ResponseHead head, int32_t n, bool tools, int32_t logprobs,
               const engine::Tokenizer& tokenizer);

  // A chat stream's first chunks: the assistant role of each choice (content null with tools,
  // as OpenAI).
  std::string OpeningChunks() const;
  // Takes one event. Streaming: returns the chunks it completes ("" when it completes none);
  // otherwise keeps the text for Whole().
  std::string Add(EngineEvent event, bool streaming);

  // Every choice has had its final event.
  bool finished() const { return finished_ == static_cast<int32_t>(choices_.size()); }
  // So far: the prompt counted once, completion tokens summed over the choices.
  engine::Usage usage() const;
  // A choice's finish reason ("stop", "length", "tool_calls"); choice 0's is the request's.
  std::string FinishReason(int32_t choice) const;
  // vLLM's stop_reason: the stop string that ended a choice, null when something else did.
  nlohmann::json StopReason(int32_t choice) const;
  // The engine's error when a choice failed (the request then failed as a whole); "" otherwise.
  const std::string& error() const { return error_; }

  // A stream's last chunks: each choice's finish reason (and the logprobs not yet sent).
  std::string ClosingChunks();
  // The whole chat.completion / text_completion.
  std::string Whole();

 private:
  struct Choice {
    std::string text;
    std::optional<ToolCallAssembler> tool_out;
    std::optional<LogprobsBuilder> logprobs_out;
    engine::Usage usage;
    engine::FinishReason reason = engine::FinishReason::kNone;
    std::string stop_string;  // the stop string that ended it, "" for none
    bool finished = false;
    nlohmann::json TakeLogprobs() { return logprobs_out ? logprobs_out->Take() : nullptr; }
  };

  const ResponseHead head_;
  std::vector<Choice> choices_;
  int32_t finished_ = 0;
  std::string error_;
};

}  // namespace kvgate::gateway
