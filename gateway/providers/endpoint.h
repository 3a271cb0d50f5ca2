// The wire operations kvgate forwards (Endpoint), and what each one is like: one EndpointTraits
// row each. The adapters and the built-in engine ask the row ("does the prompt come as chat
// messages?", "may it stream?"), never which endpoint it is, so that an endpoint is one row here
// plus its client API class (gateway/api/) and, when its answer is not chat's, its readers.
#pragma once

#include <string_view>

namespace kvgate::providers {

// Chat and completions go to every provider type (the Anthropic adapter translates chat); the
// Responses API and embeddings only pass through to OpenAI-compatible types (the gateway checks a
// target can serve them before it gets here). Anthropic Messages passes through to Anthropic
// types only; the gateway translates it to chat for the others (messages.h).
enum class Endpoint { kChatCompletions, kCompletions, kResponses, kEmbeddings, kMessages };
inline constexpr int kEndpointCount = 5;

struct EndpointTraits {
  std::string_view name;  // the record's: "chat.completions", "completions", "responses", ...
  std::string_view path;  // where a client posts it: "/v1/chat/completions", ...
  // The prompt is a `messages` array of OpenAI chat turns (else a completions `prompt`, or the
  // API's own shape).
  bool chat_messages = false;
  // OpenAI's sampling request (chat or completions): kvgate sets `stream` and asks for the usage
  // chunk (stream_options.include_usage); max-token fields are rewritten for upstreams that know
  // only one of them.
  bool openai_sampling = false;
  bool streams = true;  // false: `stream` and `stream_options` are dropped (embeddings)
  bool client_stream_flags = false;  // `stream` and `stream_options` are the client's, kept as sent
  bool prompt_cache_key = false;     // OpenAI takes a prompt_cache_key on it
  bool anthropic_only = false;       // passes through to Anthropic providers only
  bool openai_only = false;          // passes through to OpenAI-compatible providers only
};

const EndpointTraits& EndpointTraitsOf(Endpoint endpoint);

// The record's name of an endpoint (EndpointTraits::name) and the path a client posts to.
std::string_view EndpointName(Endpoint endpoint);
std::string_view EndpointPath(Endpoint endpoint);

}  // namespace kvgate::providers
