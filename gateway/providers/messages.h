// The Anthropic Messages API (`POST /v1/messages`) as an API kvgate's clients speak (Claude Code,
// the Anthropic SDKs). Two ways through kvgate (docs/api.md, "Anthropic Messages API"):
//
//   - to `anthropic` providers the client's body passes through as its own bytes
//     (BuildUpstreamCall with Endpoint::kMessages): prompt caching hashes the exact tokens of
//     tools -> system -> messages, and re-serializing would reorder keys in tool schemas;
//   - to every other target (OpenAI-compatible providers, the built-in engine) the request is
//     translated into an OpenAI chat request (MessagesToChat), served on the chat path, and the
//     answer translated back (ChatToMessage, MessagesAnswerStream) into Anthropic's shapes.
//
// Errors on this endpoint, kvgate's own included, are Anthropic-shaped (ToAnthropicError).
//
// Pure translation, no I/O; every function is non-throwing. A MessagesAnswerStream is
// single-threaded (one per client stream).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/raw_json.h"
#include "gateway/providers/provider.h"

namespace kvgate::providers {

// The thread id of a Messages request: the sources of ThreadIdOf (thread_identifier, the
// X-Thread-Id header, metadata.thread_id), then `session` (an agent's session header,
// kAgentSessionHeaders: Claude Code's X-Claude-Code-Session-Id), then metadata.user_id. The
// winner must pass ValidateThreadId (kInvalidArgument naming its source otherwise).
Result<ClientThread> MessagesThreadIdOf(const raw_json::Object& body, std::string_view header,
                                        AgentSession session);

struct MessagesToChatOptions {
  // Whether `top_k` may be sent (OpenAI itself rejects it; vLLM, SGLang, llama.cpp and the
  // built-in engine take it).
  bool top_k = true;
  // The prompt only (a count_tokens body): max_tokens is not required, and sent when present.
  bool prompt_only = false;
};

// An Anthropic Messages request -> the OpenAI chat request for the same conversation, as JSON
// text. Field by field:
//   system (string, or text blocks)  -> a first system message (one text, or text parts)
//   messages[].content string        -> the same string
//   user blocks: text -> text part; image (base64 or url source) -> image_url part (data: URL);
//                tool_result -> a `tool` message (tool_call_id = tool_use_id; its text content),
//                in block order, so tool messages follow the assistant turn that called them
//   assistant blocks: text -> content; tool_use -> tool_calls (input -> arguments, its bytes);
//                thinking / redacted_thinking -> dropped
//   tools[] {name, description, input_schema} -> {type: function, function: {name, description,
//                parameters}}, the schema's bytes as the client sent them
//   tool_choice auto|any|tool|none -> auto|required|{function}|none; disable_parallel_tool_use
//                -> parallel_tool_calls: false
//   max_tokens, temperature, top_p, top_k (options), stream -> same; stop_sequences -> stop;
//   metadata.user_id -> user
//   cache_control anywhere is dropped (these targets have no breakpoints); so are kvgate's thread
//   fields, `thinking`, `service_tier` and every other field.
// Errors (kInvalidArgument, a message fit for a 400): a body without `messages` (an array) or a
// positive integer `max_tokens`; roles other than user / assistant; block types that chat cannot
// carry (document, server tools, images in tool results); a tool without a name.
Result<std::string> MessagesToChat(const raw_json::Object& messages_body,
                                   const MessagesToChatOptions& options = {});

// A chat.completion (the answer to MessagesToChat's request) -> the Anthropic Message for the
// client: {"id": "msg_...", "type": "message", "role": "assistant", "model", "content": [text
// block, tool_use blocks], "stop_reason", "stop_sequence", "usage": {"input_tokens",
// "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"}}. finish_reason
// stop -> end_turn, or stop_sequence with the string when the choice names it in a string
// `stop_reason` (vLLM and kvgate's engine do; OpenAI does not), length -> max_tokens, tool_calls /
// function_call -> tool_use, content_filter -> refusal. Usage: cache_read = prompt_tokens_details.cached_tokens, cache_creation =
// prompt_tokens_details.cache_write_tokens, input_tokens = prompt_tokens minus both (Anthropic's
// input_tokens excludes the cached ones). The id is "msg_" + the chat id without its chatcmpl
// prefix. Errors: kCorruptData when the body is not a chat.completion.
Result<std::string> ChatToMessage(std::string_view chat_completion);

// The client's Message id for a chat completion id ("chatcmpl-abc" -> "msg_abc").
std::string MessageIdFor(std::string_view chat_id);

// Incremental translation of an OpenAI chat.completion.chunk stream (with its usage chunk: the
// request must ask for it) into Anthropic's stream: message_start, then per content block
// content_block_start, content_block_delta (text_delta / input_json_delta), content_block_stop
// (a ping after the first block starts), then message_delta (stop_reason and the whole usage)
// and message_stop at data: [DONE]. message_start carries zero counts: OpenAI-compatible streams
// report usage only at their end, and the SDKs take message_delta's counts as the final ones. An
// OpenAI error event becomes an Anthropic `event: error`, after which nothing more is sent.
class MessagesAnswerStream {
 public:
  virtual ~MessagesAnswerStream() = default;
  // The client bytes for the next piece of the chat stream (pieces may split events anywhere).
  virtual std::string Feed(std::string_view chat_sse) = 0;
  // Bytes that close the client's stream: an error event when the chat stream neither finished
  // nor failed ("" otherwise). Later calls return "".
  virtual std::string Finish() = 0;
  // The Message id the client got ("" before message_start).
  virtual const std::string& message_id() const = 0;
};
std::unique_ptr<MessagesAnswerStream> NewMessagesAnswerStream();

// An error in Anthropic's shape: {"type": "error", "error": {"type", "message"}}. The type is
// the OpenAI error's `code` when that already names an Anthropic type (errors that came from an
// Anthropic upstream keep theirs), else follows the status: 400, 415, 422 and other 4xx
// invalid_request_error, 401 authentication_error, 403 permission_error, 404 not_found_error,
// 413 request_too_large, 429 rate_limit_error, 503 and 529 overloaded_error, 504 timeout_error,
// other 5xx api_error. An overloaded_error goes out as 529, Anthropic's status for it.
ClientError ToAnthropicError(const ClientError& openai_error);
// The same as a stream event: `event: error\ndata: {...}\n\n`.
std::string AnthropicErrorEvent(const ClientError& error);
// The error event a Messages stream ends with when kvgate's shutdown cuts it.
const std::string& AnthropicShutdownCutEvent();

}  // namespace kvgate::providers
