// The Responses API on a target that speaks only OpenAI chat (the built-in engine, Anthropic
// providers): the attempt loop's step that rebuilds the conversation of previous_response_id,
// translates the request (providers/responses_translate.h), and sets the ClientStream to
// translate the answer back and keep the finished conversation for the next turn.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "gateway/client_stream.h"
#include "gateway/providers/provider.h"
#include "gateway/response_threads.h"
#include "gateway/upstream.h"

namespace kvgate::gateway {

// Whether a Responses request to a provider of `type` is translated to chat (rather than passed
// through, or refused).
bool TranslatesResponses(providers::ProviderType type);

// The answer to a previous_response_id that is unknown, or another gateway key's (the same
// answer: OpenAI's, so that an id of another key's reads exactly as one never made).
AttemptResult PreviousResponseNotFound(const std::string& response_id);

// Writes the chat request for the Responses `call` into `chat_text` (which must outlive
// `chat_call`) and `chat_call`, and sets `client` to translate the answer. Returns the failed
// attempt (the client's 400, not worth another target) when the request cannot be told in chat's
// terms or its previous_response_id is not in `threads` under the request's gateway key
// (client.record().api_key_id).
std::optional<AttemptResult> TranslateResponsesForChat(const InferenceCall& call,
                                                       ResponseThreads& threads,
                                                       std::string& chat_text,
                                                       InferenceCall& chat_call,
                                                       ClientStream& client);

// The chat request body a Responses request becomes (its stored conversation included), for
// asking the engines what of its prompt they hold before routing; nullopt when it cannot be
// translated (the attempt then answers the 400), as when its conversation is another key's than
// `api_key_id`.
std::optional<std::string> ChatBodyForProbe(const raw_json::Object& responses_body,
                                            ResponseThreads& threads, std::string_view api_key_id);

}  // namespace kvgate::gateway
