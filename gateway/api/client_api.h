// The client APIs kvgate serves, one class each: OpenAI Chat Completions and Completions, OpenAI
// Embeddings, the OpenAI Responses API and Anthropic Messages. Each owns what is particular to
// its clients: reading and validating the request, where its thread id comes from, how an attempt
// on each upstream wire looks (the client's body passed through, or a chat body and an encoder
// that tells the chat answer back in the client's API), the shape of its errors and of its
// stream-cut event, and what happens once an answer has an id. The inference path (the gateway's
// "hall": parse -> admit -> route -> attempts -> commit) knows only this interface.
//
// A new client API is one class here and one row in ClientApis (apis.h).
//
// Thread safety: a ClientApi is constant after construction and shared by every request; an
// ApiCall belongs to one request's coroutine.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/raw_json.h"
#include "gateway/client_stream.h"
#include "gateway/http/server.h"
#include "gateway/providers/provider.h"
#include "gateway/upstream.h"
#include "router/router.h"
#include "telemetry/record.h"

namespace kvgate::gateway {
class ThreadDirectory;
}

namespace kvgate::gateway::api {

// How one attempt looks on its target's wire.
struct WirePlan {
  // The request the upstream gets instead of the client's own (nullopt: the client's, passed
  // through). Its body's bytes live in `translated_text`.
  std::optional<InferenceCall> translated;
  std::unique_ptr<std::string> translated_text;
  // Tells the upstream's chat answer in the client's API; null when the answer passes as sent.
  std::unique_ptr<AnswerEncoder> encoder;
};

// One request as its client API reads it; lives as long as the request.
class ApiCall {
 public:
  virtual ~ApiCall() = default;

  // Settles the request's thread (record.thread_id, as the client named it after Read): scoped
  // to its gateway key (record.api_key_id) through `threads`; the Responses API also follows
  // previous_response_id. Returns the client's error when the request cannot go on.
  virtual boost::asio::awaitable<std::optional<providers::ClientError>> ResolveThread(
      ThreadDirectory& threads, telemetry::RequestRecord& record);
  // Whether the prompt is all in the body, and so fingerprinted for the cache diagnosis (not
  // when the provider completes it from its own state, nor for embeddings).
  virtual bool whole_prompt() const { return true; }
  // Whether the thread is named only once the answer is (a Responses conversation's first stored
  // response names it): the prompt is then kept for the diagnosis though record.thread_id is "".
  virtual bool thread_from_answer() const { return false; }
  // What the request needs of a target (the Responses API, embeddings), for the router.
  virtual void FillNeeds(router::RequestFacts& facts) const { (void)facts; }
  // The features of the request's content a router's rules look at: tools, images, response
  // format, output cap, metadata.
  void FillContentFacts(router::RequestFacts& facts) const;
  // The chat body the built-in engines would tokenize, for a router's probe: the client's own by
  // default; nullopt when there is none (the request cannot be told as chat).
  virtual std::optional<std::string> ProbeBody() const { return std::string(body_.value().text); }

  // The attempt on `target` (a provider of `type`): `call` is the client's request; `options`
  // (the upstream call's) may be adjusted for the wire. The failed attempt when the request cannot
  // be told on that wire (the client's 400; no other target would do better).
  virtual std::expected<WirePlan, AttemptResult> Plan(const InferenceCall& call,
                                                      providers::ProviderType type,
                                                      providers::CallOptions& options) = 0;
  // Runs when the answer's id is known, before any byte of it reaches the client
  // (ClientStream::OnAnswerId). Nothing by default.
  virtual void OnAnswerId(telemetry::RequestRecord& record) { (void)record; }

  const raw_json::Object& body() const { return body_; }

 protected:
  explicit ApiCall(raw_json::Object body) : body_(body) {}

 private:
  raw_json::Object body_;  // the client's JSON object (bytes owned by the http::Request)
};

class ClientApi {
 public:
  explicit ClientApi(AnswerStyle style) : style_(std::move(style)) {}
  virtual ~ClientApi() = default;

  // The client's endpoint, as recorded.
  virtual providers::Endpoint endpoint() const = 0;
  // How kvgate's own answers look to this API's clients (errors, the stream-cut event).
  const AnswerStyle& style() const { return style_; }
  // Reads and validates the request's JSON object (its bytes outlive the call): fills
  // record.model, .stream and .thread_id (as the client named it); the client's 400 otherwise
  // (record.model is set, cut, even then when the body named one).
  virtual std::expected<std::unique_ptr<ApiCall>, providers::ClientError> Read(
      const http::Request& request, const raw_json::Object& body,
      telemetry::RequestRecord& record) const = 0;
  // The 400 for a request that none of its route's targets can serve in this API (Responses and
  // embeddings pass through only to targets that support them); nullopt when one can, or could
  // once healthy again (the 503 that says so comes later).
  virtual std::optional<providers::ClientError> RefuseTargets(
      const router::RouteDecision& decision, const std::vector<router::Target>& targets,
      const std::string& model) const {
    (void)decision, (void)targets, (void)model;
    return std::nullopt;
  }

 private:
  const AnswerStyle style_;
};

// The request fields every API reads the same way: the model (present, a valid name), stream (a
// boolean or absent). Fills record.model and record.stream.
std::optional<providers::ClientError> ReadModelAndStream(const raw_json::Object& body,
                                                         telemetry::RequestRecord& record);
// The first of the agents' session headers (providers::kAgentSessionHeaders) the request
// carries; empty when none.
providers::AgentSession AgentSessionHeader(const http::Request& request);
// The OpenAI APIs' reading: the thread id (providers::ThreadIdOf: the body's thread fields, then
// X-Thread-Id; then an agent's session header) into record.thread_id and .thread_source, then
// ReadModelAndStream.
std::optional<providers::ClientError> ReadOpenAIRequest(const http::Request& request,
                                                        const raw_json::Object& body,
                                                        telemetry::RequestRecord& record);
// OpenAI's errors as kvgate builds them, and OpenAI's stream-cut event.
AnswerStyle OpenAIStyle();
// RefuseTargets for an API that `serves` decides per target: `path` is the API's, `support` its
// supports.* key, `how` and `advice` finish the message.
std::optional<providers::ClientError> RefuseUnserved(
    const router::RouteDecision& decision, const std::vector<router::Target>& targets,
    const std::string& model, bool (*serves)(const router::Target&), std::string_view path,
    std::string_view support, std::string_view how, std::string_view advice);
// A 400 invalid_request_error.
providers::ClientError BadRequest(std::string message, std::string code, std::string param = "");
// The failed attempt for a request that cannot be told on a target's wire: the client's 400
// (kInvalidArgument) or kvgate's 500.
AttemptResult Untranslatable(const Error& error);
// `text`, a translated request body, as the upstream's call: `call` with that body on the chat
// wire (the client's usage always asked for: the encoder needs it). `plan` keeps the text.
std::optional<AttemptResult> PlanChat(const InferenceCall& call, std::string text,
                                      providers::CallOptions& options, WirePlan& plan);

}  // namespace kvgate::gateway::api
