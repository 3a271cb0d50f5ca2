// One attempt at answering a client's inference request on one target: the seam between the
// attempt loop (attempts.cc: route, then try candidates while nothing was sent to the client) and
// the two kinds of upstream, a remote provider (remote_upstream.cc: adapter + HTTP client) and
// the built-in engine (engine_upstream.cc).
//
// An attempt either answers the client through the ClientStream (a whole answer, a stream, or the
// record of a client that left), or fails with nothing sent, returning the error the client would
// get; the loop then retries, falls back or sends that error.
//
// Beside attempts, an upstream answers what only its provider knows: how much of a prompt it has
// cached now (the router's probe, GET /api/engine/lookup) and how many tokens a prompt is
// (POST /v1/messages/count_tokens). An upstream that cannot says so (the defaults).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "common/clock.h"
#include "common/raw_json.h"
#include "common/redact.h"
#include "gateway/client_stream.h"
#include "gateway/providers/provider.h"
#include "gateway/providers/sigv4.h"
#include "gateway/upstream/client.h"
#include "router/router.h"

namespace kvgate::gateway {

// Where a provider is and how to sign in to it. Constant after construction.
struct ProviderConnection {
  std::string name;
  providers::ProviderType type = providers::ProviderType::kOpenAI;
  upstream::Url url;                  // unused for local
  std::vector<std::string> api_keys;  // empty: no credential header
  // The provider's cache helpers (ProviderConfig): a prompt_cache_key from the thread id, and
  // anthropic_auto_cache's TTL ("" off).
  bool prompt_cache_key_thread = false;
  std::string anthropic_auto_cache_ttl;
  // anthropic_cache_diagnostics: ask Anthropic why a thread's cache missed (CacheHelpers).
  bool anthropic_cache_diagnostics = false;
  // Bedrock: the region and the credentials every call is SigV4-signed with (empty credentials:
  // an api_key is sent as a bearer token instead).
  std::string region;
  providers::AwsCredentials aws;
};

// The request an upstream gets: the client's, the same for every attempt, or its translation for
// one target's wire (gateway/api/). Nothing of the client's API rides here: its headers for
// Anthropic travel in CallOptions, its after-answer hook on the ClientStream.
struct InferenceCall {
  providers::Endpoint endpoint = providers::Endpoint::kChatCompletions;
  raw_json::Object body;       // the client's JSON body (bytes owned by the http::Request)
  bool stream = false;
  bool client_wants_usage = false;
  size_t worker_index = 0;     // the event loop (its upstream::Client)
};

struct AttemptPlan {
  const router::Target* target = nullptr;
  const ProviderConnection* connection = nullptr;
  int key_index = 0;
  providers::CallOptions options;  // endpoint, upstream model, the key, stream, usage
  // The W3C traceparent the upstream gets (the attempt's span as its parent), "" when the request
  // is not traced.
  std::string traceparent;
};

struct AttemptResult {
  // The client was answered (or left, or was cut mid-stream): the request is over.
  bool answered = false;
  // When !answered: nothing reached the client; what it would get if no other attempt follows.
  providers::ClientError error;
  std::string status_word = "upstream_error";  // "upstream_error" | "timeout" | "error"
  // For health and fallback (outcome.target is set by the loop).
  router::AttemptOutcome outcome;
  std::string message;  // for the record's attempts list ("" on success)
};

// An attempt that ended with nothing sent, the one way to make one: `error` is what the client
// would get (its message goes to the attempts list), `status_word` the record's status
// ("upstream_error", "timeout", "error"), `failure` and `status` what the router's health learns.
AttemptResult FailedAttempt(providers::ClientError error, std::string status_word,
                            router::Failure failure, int status = 0);

// How much of a prompt a target's engine has cached right now for one gateway key
// (Upstream::LookupPrefix).
struct PrefixLookup {
  std::string model;          // the target's name
  int64_t prompt_tokens = 0;  // the prompt as the engine tokenizes it
  // What admission would reuse now: the pool's hits plus the offload tier's continuation of them.
  int64_t cached_tokens = 0;
  int64_t pool_tokens = 0;
  int64_t offload_tokens = 0;
  std::string offload_kind = "disk";  // the offload tier's kind: "disk" (or none) | "host"
  int64_t running = 0;                // the engine's sequences running and waiting now
  int64_t waiting = 0;
};

// GET /api/engine/lookup's answer: {"model", "prompt_tokens", "cached_tokens",
// "cached_tokens_by_tier": {"pool", "disk" | "host"}, "running", "waiting"}.
nlohmann::json PrefixLookupJson(const PrefixLookup& lookup);

// A POST /v1/messages/count_tokens request, as the client sent it.
struct CountTokensCall {
  raw_json::Object body;  // Anthropic Messages (bytes owned by the http::Request)
  std::string anthropic_version;  // the client's headers ("" when absent)
  std::string anthropic_beta;
  size_t worker_index = 0;  // the event loop (its upstream::Client)
};

// The answer to a count, in Anthropic's shape: {"input_tokens": N} as the provider counted them
// (its body as it came) or an Anthropic-shaped error.
struct TokenCount {
  int status = 200;
  std::string body;                   // JSON text
  std::vector<http::Header> headers;  // an upstream refusal's retry-after
};

class Upstream {
 public:
  virtual ~Upstream() = default;
  virtual boost::asio::awaitable<AttemptResult> Attempt(const InferenceCall& call,
                                                        const AttemptPlan& plan,
                                                        ClientStream& client) = 0;

  // How much of `body`'s prompt (OpenAI-shaped: {"messages"} or {"prompt"}, with the tools) the
  // engine behind `target` has cached right now for requests of gateway key `api_key_id` ("" for
  // no key), without touching its cache. Errors: kInvalidArgument for a prompt the engine cannot
  // render, or (this default) a target whose provider keeps no cache kvgate can read; kNotFound
  // when its engine is not running.
  virtual Result<PrefixLookup> LookupPrefix(const router::Target& target,
                                            const raw_json::Object& body,
                                            std::string_view api_key_id) const;

  // The prompt tokens of a Messages request as `target`'s provider counts them (Anthropic: its
  // count_tokens endpoint; the built-in engine: its tokenizer over the rendered chat template).
  // Never recorded nor charged. This default answers a 400 count_tokens_unsupported.
  virtual boost::asio::awaitable<TokenCount> CountTokens(const CountTokensCall& call,
                                                         const router::Target& target,
                                                         const ProviderConnection& connection);
};

// The Retry-After of an upstream answer in milliseconds (retry-after-ms, or retry-after in
// seconds), nullopt when absent or not a number.
std::optional<int64_t> RetryAfterMs(const upstream::Response& head);

// Remote providers: `client_for(worker_index)` is that event loop's upstream client; `clock`
// times the attempts (latency and time to first token, for the router's health). What the
// upstreams say on the error path (error bodies, stream error events, transport errors) reaches
// the client, the record and the logs with the provider keys taken out by `redactor`. `clock` and
// `redactor` must outlive the upstream.
std::unique_ptr<Upstream> NewRemoteUpstream(
    std::function<upstream::Client&(size_t worker_index)> client_for, const Clock& clock,
    const SecretRedactor& redactor);

// Takes the provider keys out of every string of `error`'s body: for an error built from what an
// upstream said, outside an Upstream (count_tokens).
void RedactError(const SecretRedactor& redactor, providers::ClientError& error);

}  // namespace kvgate::gateway
