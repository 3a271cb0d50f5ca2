// The OpenAI Responses API (`POST /v1/responses`) on targets that do not speak it (the built-in
// engine, Anthropic providers): the request is translated into an OpenAI chat request, served on
// the chat path (tools, structured output, the prefix cache all as on chat), and the answer
// translated back into a Responses `response` object or the Responses event stream. The same
// pattern as messages.h; docs/api.md ("The Responses API on the built-in engine") has the rules.
//
// Pure translation, no I/O; every function is non-throwing. A ResponsesAnswerStream is
// single-threaded (one per client stream).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/providers/provider.h"

namespace kvgate::providers {

// A Responses request told in chat's terms.
struct ResponsesChat {
  std::optional<ClientError> error;  // set: the client's 400 (naming the field); nothing else is
  std::string chat_body;             // the chat request, JSON text
  // The conversation this turn continues with, as a JSON array of chat messages without the
  // instructions (earlier turns' instructions are not carried over, as OpenAI documents): the
  // stored history, then this turn's input. The answer's assistant message completes it.
  std::string conversation;
  // The request's fields a `response` object echoes (instructions, tools, metadata, ...), JSON.
  std::string echo;
};

// `responses_body` (the client's bytes) -> the chat request. `history` is the stored
// conversation of previous_response_id (a JSON array of chat messages), nullptr when there is
// none. Field by field:
//   instructions -> a first system message; input string -> one user message; input items:
//   message (role user / system / developer -> system / assistant; content string or
//   input_text / output_text parts) -> the same chat message; function_call -> an assistant
//   tool_call (consecutive calls join one assistant message); function_call_output -> a tool
//   message; reasoning items -> dropped (the targets produce none to continue).
//   tools[] {type: function, name, description, parameters, strict} -> chat function tools;
//   tool_choice auto|none|required|{type: function, name} -> the same in chat's shape;
//   text.format json_schema|json_object|text -> response_format; max_output_tokens ->
//   max_tokens; temperature, top_p, parallel_tool_calls, user, stream -> the same (usage asked
//   for on a stream). store, metadata, previous_response_id, service_tier, prompt_cache_key,
//   safety_identifier, stream_options and kvgate's thread fields shape no generation.
// Errors (a 400 with the field as `param`): built-in tools (web_search, file_search, ...),
// `reasoning` with an effort, include, background, truncation "auto", top_logprobs,
// max_tool_calls, conversation, prompt, text.verbosity, input_image / input_file parts,
// item_reference items, unknown fields and malformed values.
ResponsesChat ResponsesToChat(std::string_view responses_body, const std::string* history);

// What a translated answer produced, for the conversation store.
struct ResponsesOutcome {
  std::string response_id;        // "resp_..." (the chat id without its chatcmpl prefix)
  std::string assistant_message;  // the chat assistant message (text and tool_calls), JSON
};

// A chat.completion -> the Responses `response` object: output = a message item with one
// output_text part (when there is text, or nothing else) then one function_call item per tool
// call; status completed, or incomplete (incomplete_details.reason max_output_tokens) when the
// chat answer stopped for length; usage {input_tokens, input_tokens_details.cached_tokens,
// output_tokens, output_tokens_details.reasoning_tokens: 0, total_tokens}. `echo` is
// ResponsesChat::echo. Errors: kCorruptData when the body is not a chat.completion.
Result<std::string> ChatToResponse(std::string_view chat_completion, std::string_view echo,
                                   ResponsesOutcome* outcome);

// Incremental translation of a chat.completion.chunk stream (with its usage chunk) into the
// Responses event stream, each event `event: <type>` + `data: {type, sequence_number, ...}`:
// response.created, response.in_progress, then per output item response.output_item.added and
// for a message response.content_part.added, response.output_text.delta..., .output_text.done,
// .content_part.done, or for a tool call response.function_call_arguments.delta..., .done;
// response.output_item.done; at data: [DONE] response.completed (or response.incomplete) with
// the whole response and its usage. A chat error event, or a stream that ends short of [DONE],
// becomes an `error` event, after which nothing more is sent.
class ResponsesAnswerStream {
 public:
  virtual ~ResponsesAnswerStream() = default;
  virtual std::string Feed(std::string_view chat_sse) = 0;
  virtual std::string Finish() = 0;
  virtual const std::string& response_id() const = 0;  // "" before response.created
  // Set once the stream completed (response.completed / incomplete was produced).
  virtual const std::optional<ResponsesOutcome>& outcome() const = 0;
};
std::unique_ptr<ResponsesAnswerStream> NewResponsesAnswerStream(std::string echo);

// The client's response id for a chat completion id ("chatcmpl-abc" or "chatcmpl_abc" -> "resp_abc").
std::string ResponseIdFor(std::string_view chat_id);

}  // namespace kvgate::providers
