// The built-in engine's request adapter: an OpenAI chat or completions body -> what the engine
// runs (sampling parameters, the constraint, n, logprobs, the prompt text), or the 400 the client
// gets. Pure: no engine, no thread, no I/O; the engine upstream (engine_upstream.cc) tokenizes the
// prompt and submits the request.
//
// A request that asks for what the engine does not do (the legacy function calling, logit_bias,
// tools on /v1/completions) gets a 400 naming the field (docs/api.md): an answer that silently
// lacks what was asked for is worse than an error.
//
// Thread safety: functions are pure.
#pragma once

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/local_tools.h"
#include "gateway/providers/provider.h"
#include "local_engine/chat_template.h"
#include "local_engine/sampler.h"

namespace kvgate::gateway {

// What the adapter needs of the model that serves the request.
struct EngineModel {
  const engine::ChatTemplate* chat_template = nullptr;  // required
  int32_t max_choices = 1;  // the most choices (n) a request may ask for: Engine::max_choices()
};

// One OpenAI request as the engine takes it.
struct EngineCall {
  // OpenAI's defaults where the body is silent; json_grammar is response_format's or the tools';
  // logprobs is set; max_tokens is the client's (asked_max) until FitToContext.
  engine::SamplingParams sampling;
  bool asked_max = false;  // max_tokens or max_completion_tokens was given
  int32_t n = 1;           // choices
  bool tools = false;      // the output is the tool-call object (ToolCallAssembler)
  std::string prompt;      // the chat template over the messages (chat), or the raw prompt
};

// Reads `body` (the client's JSON object; kvgate's own fields are ignored) for `endpoint`
// (kCompletions: a prompt; any other: chat messages). Errors: an OpenAI-shaped 400
// (invalid_request_error) whose code and param name the field.
std::expected<EngineCall, providers::ClientError> EngineCallFrom(std::string_view body,
                                                                 providers::Endpoint endpoint,
                                                                 const EngineModel& model);

// Checks the prompt (`prompt_tokens` long) against the context, and when the client asked no
// max_tokens sets it to the rest of the context, bounded by `max_output_tokens_default` (> 0).
// Errors: the 400 context_length_exceeded in OpenAI's wording (clients look for it to trim
// history).
std::expected<void, providers::ClientError> FitToContext(EngineCall& call,
                                                         providers::Endpoint endpoint,
                                                         int64_t prompt_tokens,
                                                         int64_t context_length,
                                                         int64_t max_output_tokens_default);

// The prompt text alone, as EngineCallFrom renders it, for a body whose sampling fields do not
// matter (a prefix lookup, a token count): {"messages"} (with its tools) when `chat`, else
// {"prompt"}. Errors name the field.
std::expected<std::string, FieldError> EnginePromptOf(const nlohmann::json& body, bool chat,
                                                      const engine::ChatTemplate& chat_template);

}  // namespace kvgate::gateway
