// Provider adapters: pure translation between the OpenAI wire format that kvgate's clients speak
// and each provider's wire format. No sockets, no I/O, no clock reads unless a caller leaves
// CallOptions::created at 0. docs/providers.md describes the formats and their usage fields.
//
// The request path for one client request (the body is read as raw_json: validated once, never
// turned into a tree unless an adapter rewrites it):
//   1. ThreadIdOf(body, header)           -> the conversation the request belongs to
//   2. BuildUpstreamCall(type, body, opt) -> path, headers and body to send upstream, kvgate's own
//                                            fields removed
//   3a. 2xx, non-streaming: TranslateResponse(type, upstream_body, opt) -> client body + Usage
//   3b. 2xx, streaming: NewStreamTranslator(type, opt); Feed() every body piece, Finish() once
//   3c. non-2xx (streaming or not): TranslateUpstreamError(type, status, upstream_body)
//
// Every function here is non-throwing: nlohmann::json exceptions (and bad_alloc) are caught inside
// the module and turned into an Error / error event. Thread safety: free functions are pure and may
// be called from any thread; a StreamTranslator is single-threaded (one per upstream stream).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/raw_json.h"
#include "gateway/providers/endpoint.h"
#include "telemetry/provider_traits.h"
#include "telemetry/record.h"
#include "telemetry/usage.h"

namespace kvgate::providers {

// The provider types and their table live in telemetry/provider_traits.h; these names keep the
// adapters reading as before.
using ProviderType = telemetry::ProviderType;
using telemetry::ProviderTypeFromName;
using telemetry::ProviderTypeName;
using telemetry::TraitsOf;

// The usage flavour NormalizeUsage needs for this provider type (TraitsOf(type).usage).
telemetry::UsageFlavor UsageFlavorFor(ProviderType type);

// True for every type that speaks the OpenAI wire format (all but the Anthropic Messages wire).
bool IsOpenAICompatible(ProviderType type);

// What to send upstream. `path` is relative to the provider's configured base URL: for OpenAI-
// compatible types the base already ends in /v1 (or Gemini's /v1beta/openai) and the path is
// "/chat/completions" or "/completions"; for Anthropic the base is "https://api.anthropic.com" and
// the path is "/v1/messages". The Responses API goes to "/responses", embeddings to "/embeddings".
struct UpstreamCall {
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case names
  std::string body;                                          // JSON
  // The cache helper that changed the request (CacheHelpers): "prompt_cache_key" or
  // "anthropic_auto_cache"; "" when none acted.
  std::string cache_helper;
};

// Cache helpers: what BuildUpstreamCall adds to a request that lacks it, so that the provider's
// prompt cache serves more of it. Off (empty) by default; the gateway fills them from the
// provider's config (docs/configuration.md, "Cache helpers").
struct CacheHelpers {
  // OpenAI types, chat, completions and Responses: the `prompt_cache_key` sent when the client
  // sent none. OpenAI routes requests with one key to the same cache machines, so a thread's
  // turns keep meeting their cache even when many threads share one long system prompt.
  std::string prompt_cache_key;
  // Anthropic (chat translated, and Messages passed through): when the request has no
  // cache_control at all, a breakpoint of this TTL ("5m" or "1h") at the end of the system
  // prompt and at the last cacheable block of the last message. "" off.
  std::string anthropic_auto_cache_ttl;
  // Anthropic (both ways): "1h" when keep-warm chose 1-hour writes for the thread
  // (KeepWarm::WriteTtl): the auto-cache breakpoints get that TTL, and so do the client's own
  // breakpoints when none names a TTL. "" leaves them as they are.
  std::string anthropic_write_ttl;
  // Anthropic (both ways): the thread's previous message id on this provider, sent as
  // `diagnostics: {previous_message_id}` when the request has no `diagnostics` of its own, so
  // that the response says why its cache missed (ProviderCacheMissReason). "" off.
  std::string anthropic_previous_message_id;
};

// Which Bedrock API a bedrock model is called through (models[].api).
enum class BedrockApi {
  kConverse,  // POST /model/{id}/converse, /converse-stream: Bedrock's own message format
  kInvoke,    // POST /model/{id}/invoke, /invoke-with-response-stream: Anthropic's body as it is
};

struct CallOptions {
  Endpoint endpoint = Endpoint::kChatCompletions;
  // The model name sent upstream; empty keeps the client's `model`.
  std::string upstream_model;
  // Credentials for the upstream; empty sends no credential header (local servers).
  std::string api_key;
  // Whether the upstream call streams. This, not the body's `stream`, is the truth.
  bool stream = false;
  // Whether the client asked for a usage chunk (ClientWantsStreamUsage(body)). When false the
  // gateway still asks the upstream for usage and strips it from the client's stream.
  bool client_wants_usage = false;
  // Anthropic requires max_tokens; used when the client sent neither max_tokens nor
  // max_completion_tokens.
  int default_max_tokens = 4096;
  // Unix seconds put in the `created` field of responses kvgate synthesizes (Anthropic
  // translation). 0: the current time, read once per call / translator.
  int64_t created = 0;
  // The Messages pass-through's anthropic-version and anthropic-beta headers, the client's own
  // ("" when it sent none: anthropic-version is then 2023-06-01, anthropic-beta absent).
  std::string anthropic_version;
  std::string anthropic_beta;
  CacheHelpers cache_helpers;
  // Bedrock only: the API the model is called through.
  BedrockApi bedrock_api = BedrockApi::kConverse;
};

// True when the client's body has `stream_options.include_usage: true`.
bool ClientWantsStreamUsage(const raw_json::Object& client_body);

// kvgate's own request fields, which never reach a provider:
//   - top-level `thread_identifier` (the OpenAI SDK sends `extra_body` keys at top level);
//   - `metadata.thread_id` (`metadata` itself goes when that leaves it empty).
// A string is an id as is, an integer its decimal form; other types (and empty strings) carry none.
//
// The thread (conversation) id of a request, "" when it has none. Precedence: thread_identifier,
// then the X-Thread-Id header (`header`, "" when absent), then metadata.thread_id. The id that
// wins must pass ValidateThreadId (kInvalidArgument naming its source otherwise): ids are stored
// in several indexes and shown in the dashboard, so a client cannot make them huge or unreadable.
struct ClientThread {
  std::string id;          // "" when the request names none
  std::string_view source; // telemetry::kThreadFrom*: "body" or "header"; "" without an id
};
Result<ClientThread> ThreadIdOf(const raw_json::Object& body, std::string_view header);

// The headers that coding agents and SDKs name their sessions by, read (in this order) when the
// request names no thread itself: Claude Code's, OpenAI Codex's (`session_id`, one per Codex
// session) and OpenCode's. (The OpenAI Agents SDK sends none: its conversations are threaded by
// previous_response_id, or inferred.)
inline constexpr std::string_view kAgentSessionHeaders[] = {"x-claude-code-session-id",
                                                            "session_id", "x-opencode-session"};
// One of those headers as a request sent it (both empty when it sent none).
struct AgentSession {
  std::string_view header;  // its name, as kAgentSessionHeaders spells it
  std::string_view value;
};

// The longest thread id kvgate accepts, in bytes (docs/api.md).
inline constexpr size_t kMaxThreadIdBytes = 512;
// OK when `id` is valid UTF-8 of at most kMaxThreadIdBytes bytes without control characters;
// otherwise kInvalidArgument with a message that names `source` ("the X-Thread-Id header").
Status ValidateThreadId(std::string_view id, std::string_view source);

// The longest model name a request may name: far beyond any provider's or router's name, and short
// enough that a request's record never stores megabytes of it (a longer name is refused, and
// recorded cut to this length).
inline constexpr size_t kMaxModelNameBytes = 256;
// OK when `name` is at most kMaxModelNameBytes bytes; kInvalidArgument saying so otherwise.
Status ValidateModelName(std::string_view name);
// Removes kvgate's fields from a parsed tree in place (for adapters that work on one) and returns
// the id they carried (thread_identifier first). Does nothing when `body` is not an object.
std::optional<std::string> TakeKvgateFields(nlohmann::json& body);

// For upstreams that cannot honour them (Anthropic, the built-in engine): the error message for
// the first OpenAI request field that asks for what `upstream` does not do (logprobs,
// top_logprobs, a response_format other than text, echo, suffix, best_of > 1), or nullopt. Such
// a request gets a 400 rather than an answer that silently lacks what was asked for.
std::optional<std::string> UnsupportedFeature(const nlohmann::json& body, std::string_view upstream);

// Builds the upstream request from the client's OpenAI-format JSON body (chat or completions,
// per options.endpoint). kvgate's own fields are always removed.
//
// OpenAI-compatible types: the body passes through as the client's own bytes, member by member,
// with unknown fields preserved (top-level whitespace dropped); `model` becomes
// options.upstream_model; `stream` follows options.stream; when streaming, stream_options.
// include_usage is forced to true (other stream_options keys kept); when not streaming,
// stream_options is removed (upstreams reject it without stream). Chunks the upstream then sends
// with `"usage":null` reach a client that did not ask for usage without that member. Headers:
// content-type, authorization "Bearer <key>" (when the key is non-empty), accept
// "text/event-stream" when streaming.
//
// Anthropic: the chat body is translated to a Messages request (see anthropic_request.cc for the
// field-by-field rules). Errors (kInvalidArgument, message fit to show the client as a 400):
// the completions endpoint; more than 4 cache_control breakpoints; n > 1; content part types or
// roles that Messages cannot express; tool-call arguments that are not a JSON object.
// Headers: content-type, x-api-key (when non-empty), anthropic-version "2023-06-01", accept
// "text/event-stream" when streaming.
//
// Responses API and embeddings (OpenAI-compatible types only; kInvalidArgument for Anthropic):
// the body passes through the same way, `model` rewritten and kvgate's fields removed, but
// `stream` and `stream_options` are the client's own for the Responses API (its streams carry
// usage in response.completed, so nothing is forced), and removed for embeddings (which have no
// stream).
//
// Anthropic Messages (Anthropic types only; kInvalidArgument for the others, which get the chat
// translation instead): the client's bytes exactly as sent, but for the value of `model`
// (options.upstream_model) and kvgate's thread fields (removed with their separators); headers
// content-type, x-api-key, anthropic-version and anthropic-beta (options), accept when streaming.
//
// Errors common to all types: kInvalidArgument when the body is not a JSON object or (chat)
// `messages` is not an array.
Result<UpstreamCall> BuildUpstreamCall(ProviderType type, const raw_json::Object& client_body,
                                       const CallOptions& options);

struct Translated {
  std::string body;        // OpenAI-format JSON for the client
  telemetry::Usage usage;  // normalized; all-unknown when the upstream sent no usage
  std::string
      finish_reason;  // OpenAI vocabulary: stop, length, tool_calls, content_filter; "" if none
  // What the provider said of its own cache, when it reports it (Anthropic's `diagnostics`):
  // its cache_miss_reason ("model_changed", "system_changed", "tools_changed",
  // "messages_changed", "previous_message_not_found", "unavailable", ...), "none" when the
  // diagnostics object reports no miss; "" without diagnostics.
  std::string provider_cache_miss_reason;
};

// A 2xx non-streaming upstream body -> the client's body and the normalized usage.
// OpenAI-compatible types: the body is returned byte-for-byte unchanged (usage included, as the
// client expects from OpenAI); llama.cpp's whole response is normalized so `timings` is seen.
// options.endpoint says what the body is: a chat.completion / text_completion (needs `choices`),
// a Responses API `response` object (needs `output`; usage read as OpenAI Responses usage;
// finish_reason "stop", "tool_calls" when it called a function, "length" / "content_filter" for
// an incomplete one; status "failed" is an error like an `error` object), or an embeddings list
// (needs `data`; usage.prompt_tokens is all uncached input, no output); for Anthropic Messages
// (Anthropic types) the Message itself, unchanged, its usage read exactly.
// Anthropic: a Message becomes a chat.completion whose `usage` is in OpenAI shape
// (prompt_tokens = input + cache_creation + cache_read; prompt_tokens_details.cached_tokens = read,
// cache_write_tokens = creation); the normalized Usage comes from the Anthropic usage itself.
// Errors: kCorruptData when the body is not a JSON object of the expected shape (the message says
// what was wrong, without echoing more than a short prefix of the body); kUnavailable when a 2xx
// body carries an error object (some servers do this) — the message is the provider's.
Result<Translated> TranslateResponse(ProviderType type, std::string_view upstream_body,
                                     const CallOptions& options);

// The "id" of a response body the client gets ("chatcmpl-...", "msg_..." from Anthropic,
// "resp_..." from the Responses API), or "" when it has none: what the telemetry stores as the
// request's response_id.
std::string ResponseIdOf(std::string_view client_body);
// The same for a piece of the client's event stream: the "id" of its first data event that has
// one, or else that event's `response.id` (the Responses API's events wrap the response object)
// or `message.id` (Anthropic's message_start);
// "" when none does, e.g. a piece holding only comments.
std::string ResponseIdOfStream(std::string_view sse_bytes);

// An OpenAI-style error: `body` = {"error": {"message", "type", "param", "code"}}, with param and
// code null when empty.
struct ClientError {
  int status = 500;
  nlohmann::json body;
  // The error's message (error.message in either API's shape), "" when it has none.
  std::string message() const;
};
ClientError MakeOpenAIError(int status, std::string message, std::string type,
                            std::string code = "", std::string param = "");

// A non-2xx upstream response -> what kvgate answers the client. The provider's message, type,
// code and param are kept when the body has any recognizable error shape (OpenAI's
// {"error":{...}}, {"error":"text"}, vLLM's {"object":"error","message":...}, {"detail":...},
// Anthropic's {"type":"error","error":{"type","message"}}); otherwise the message quotes the
// status and a short prefix of the body. Status mapping (the upstream's status describes the
// gateway's call, not always the client's request):
//   400, 404, 409, 413, 422, 429 and other 4xx -> same status (the client's request is at fault, or
//                                                 rate-limited: SDKs retry 429 themselves)
//   401, 403 -> 502 (the provider rejected the gateway's own credentials; the client's are fine)
//   408 -> 504;  500 and other 5xx -> 502;  502, 503, 504 -> same;  529 (Anthropic overloaded) ->
//   503 anything else (1xx-3xx passed here by mistake) -> 502
// Anthropic error types map to OpenAI types: invalid_request_error, request_too_large ->
// invalid_request_error; authentication_error, permission_error -> (kept); not_found_error ->
// not_found_error; rate_limit_error -> rate_limit_error; api_error, overloaded_error ->
// server_error; the Anthropic type is kept as `code`.
ClientError TranslateUpstreamError(ProviderType type, int upstream_status,
                                   std::string_view upstream_body);

// The OpenAI error event (`data: {"error": ...}`) a client's stream ends with when kvgate's
// shutdown cuts it before its end (see http::ResponseWriter::SetCutNotice); code
// "server_shutting_down", so a client knows to retry elsewhere.
const std::string& ShutdownCutEvent();

// Incremental translation of a 2xx streaming (SSE) upstream body into OpenAI chat.completion.chunk
// SSE for the client; for the Responses API (options.endpoint), the upstream's Responses events
// pass through unchanged, usage comes from response.completed (or response.incomplete /
// response.failed, the other final events), and content is the first `*.delta` event with a
// non-empty delta; for Anthropic Messages, Anthropic's events pass through unchanged, usage from
// message_start merged with message_delta, and an error is an Anthropic `event: error`.
// Single-threaded. The translator never throws and never crashes on bad input: a malformed
// upstream stream turns into one error event for the client, after which the translator emits
// nothing more.
class StreamTranslator {
 public:
  virtual ~StreamTranslator() = default;

  struct Output {
    std::string bytes;  // to write to the client as is (possibly empty)
    // `bytes` include at least one chunk carrying generated text, reasoning, or a tool-call delta.
    // The caller records TTFT at the first Output with has_content.
    bool has_content = false;
  };

  // Feeds the next piece of the upstream body; pieces may split events at any byte.
  // After the stream completed or failed, further input is ignored.
  virtual Output Feed(std::string_view upstream_bytes) = 0;

  // Call once when the upstream body ended (upstream_eof = true) or the upstream read failed
  // (upstream_eof = false, failure_message says why). Returns the bytes that close the client
  // stream: a trailing event left without its blank line is processed first (at eof); then, if the
  // stream neither completed nor already failed, an OpenAI-style error event
  // `data: {"error":{...}}\n\n` (the OpenAI SDK raises on it). Nothing is emitted after that.
  // Later calls return "".
  virtual std::string Finish(bool upstream_eof, std::string_view failure_message = "") = 0;

  // The exact usage: the last cumulative values seen (Anthropic: message_start merged with later
  // message_delta usage, last value per field). All-unknown until the upstream reports usage.
  virtual const telemetry::Usage& usage() const = 0;
  // OpenAI vocabulary; "" until the upstream gives one.
  virtual std::string_view finish_reason() const = 0;
  // Translated::provider_cache_miss_reason, from the stream's events; "" until one reports it.
  virtual std::string_view provider_cache_miss_reason() const = 0;
  // The upstream's terminal event was seen ([DONE] / message_stop / response.completed or
  // response.incomplete; response.failed is an upstream error).
  virtual bool completed() const = 0;
  // The message of an error event the upstream sent mid-stream, if any.
  virtual std::optional<std::string> upstream_error() const = 0;
  // The message of the error event sent to the client, if any (an upstream error event, a
  // malformed upstream stream, or the stream ending early / failing in Finish).
  virtual std::optional<std::string> client_error() const = 0;
};

// A translator for one streaming call; `options` must be the ones given to BuildUpstreamCall.
// Never null.
std::unique_ptr<StreamTranslator> NewStreamTranslator(ProviderType type,
                                                      const CallOptions& options);

}  // namespace kvgate::providers
