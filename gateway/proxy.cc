// The inference path: POST /v1/chat/completions, /v1/completions, /v1/responses,
// /v1/embeddings and /v1/messages, streaming and not.
// One data flow: parse -> route (router::Router, with the thread's memory) -> attempts (retry or
// fall back while nothing has been sent to the client) -> commit. The RequestLog records what
// happened on every path, with the route and every attempt.
#include <algorithm>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/ids.h"
#include "common/json_text.h"
#include "common/raw_json.h"
#include "common/utf8.h"
#include "gateway/client_stream.h"
#include "gateway/gateway.h"
#include "gateway/local_provider.h"
#include "gateway/providers/messages.h"
#include "gateway/request_log.h"
#include "gateway/responses_bridge.h"
#include "gateway/run_blocking.h"
#include "gateway/tracked_writer.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

providers::ClientError BadRequest(std::string message, std::string code, std::string param = "") {
  return providers::MakeOpenAIError(400, std::move(message), "invalid_request_error",
                                    std::move(code), std::move(param));
}

// True for a non-empty array (tools, functions) or any other non-null value.
bool Present(const raw_json::Object& body, std::string_view key) {
  std::optional<raw_json::Value> v = body.Find(key);
  if (!v || v->is_null()) return false;
  return !v->is_array() || !raw_json::Elements(*v).empty();
}

// What the router needs to know of a request's content, read from its raw bytes.
void FillFacts(const raw_json::Object& body, router::RequestFacts& facts) {
  facts.tools = Present(body, "tools") || Present(body, "functions");
  if (std::optional<raw_json::Value> format = body.Find("response_format");
      format && !format->is_null()) {
    std::optional<raw_json::Value> type = raw_json::Find(*format, "type");
    std::optional<std::string> name = type ? raw_json::DecodeString(*type) : std::nullopt;
    facts.response_format = !name || *name != "text";
  }
  // The Responses API's structured output is text.format.
  if (std::optional<raw_json::Value> text = body.Find("text"); text && text->is_object()) {
    std::optional<raw_json::Value> format = raw_json::Find(*text, "format");
    std::optional<raw_json::Value> type = format ? raw_json::Find(*format, "type") : std::nullopt;
    std::optional<std::string> name = type ? raw_json::DecodeString(*type) : std::nullopt;
    if (name && *name != "text") facts.response_format = true;
  }
  for (const char* key : {"max_completion_tokens", "max_tokens", "max_output_tokens"}) {
    std::optional<raw_json::Value> v = body.Find(key);
    if (!v || v->kind != raw_json::Kind::kNumber) continue;
    facts.max_output_tokens = std::max<int64_t>(0, std::atoll(std::string(v->text).c_str()));
    break;
  }
  // Breakpoint caches (Anthropic) cache only what the client marks.
  facts.cache_breakpoints = body.value().text.find("\"cache_control\"") != std::string_view::npos;
  // Chat messages, or the Responses API's input items: any part that is not text.
  std::optional<raw_json::Value> messages = body.Find("messages");
  if (!messages) messages = body.Find("input");
  if (messages && messages->is_array()) {
    raw_json::ForEachElement(*messages, [&](raw_json::Value message) {
      std::optional<raw_json::Value> content = raw_json::Find(message, "content");
      if (!content || !content->is_array()) return;
      raw_json::ForEachElement(*content, [&](raw_json::Value part) {
        std::optional<raw_json::Value> type = raw_json::Find(part, "type");
        std::optional<std::string> name = type ? raw_json::DecodeString(*type) : std::nullopt;
        // (Anthropic's non-text blocks other than images: tool turns and reasoning.)
        if (name && *name != "text" && *name != "input_text" && *name != "output_text" &&
            *name != "tool_use" && *name != "tool_result" && *name != "thinking" &&
            *name != "redacted_thinking") {
          facts.images = true;
        }
      });
    });
  }
  if (std::optional<raw_json::Value> metadata = body.Find("metadata")) {
    raw_json::ForEachMember(*metadata, [&](const raw_json::Member& m) {
      if (m.key.find('\\') != std::string_view::npos) return;  // (keys with escapes: not matched)
      if (std::optional<std::string> value = raw_json::DecodeString(m.value)) {
        facts.metadata.emplace_back(std::string(m.key), std::move(*value));
      } else if (m.value.kind == raw_json::Kind::kNumber || m.value.kind == raw_json::Kind::kBool) {
        facts.metadata.emplace_back(std::string(m.key), std::string(m.value.text));
      }
    });
  }
}

// The attempts list entry of one attempt.
json AttemptJson(const router::Target& target, int key, int keys, const AttemptResult& r,
                 const telemetry::RequestRecord& rec, int64_t latency_us) {
  std::string status = "ok";
  if (!r.answered) {
    status = r.status_word;
  } else if (rec.status == "client_disconnected" || rec.status == "shutdown") {
    status = rec.status;
  } else if (r.outcome.failure != router::Failure::kNone) {
    status = rec.status.empty() ? "upstream_error" : rec.status;
  }
  json j = {{"target", target.name},
            {"provider", target.provider},
            {"status", status},
            {"http_status", r.outcome.status != 0 ? r.outcome.status : rec.upstream_status},
            {"error", r.message.empty() ? json() : json(Utf8Snippet(r.message, 300))},
            {"latency_ms", double(latency_us) / 1000.0}};
  if (keys > 1) j["key"] = key;
  return j;
}

// The chat request an OpenAI-chat target gets for an Anthropic Messages `call`: its body is
// written into `chat_text`, which must outlive `chat_call`. The client's usage is always asked
// for (message_delta carries it). Returns the failed attempt when the request cannot be told in
// chat's terms (the client's 400; no other target would do better).
std::optional<AttemptResult> TranslateForChat(const InferenceCall& call, providers::ProviderType type,
                                              std::string& chat_text, InferenceCall& chat_call) {
  using providers::ProviderType;
  const bool top_k = telemetry::TraitsOf(type).accepts_top_k;
  auto refused = [](const Error& error) {
    const bool internal = error.code != ErrorCode::kInvalidArgument;
    AttemptResult r;
    r.message = error.message;
    r.error = providers::MakeOpenAIError(internal ? 500 : 400, error.message,
                                         internal ? "server_error" : "invalid_request_error",
                                         internal ? "internal_error" : "invalid_request");
    r.status_word = "error";
    r.outcome.failure = router::Failure::kOther;
    return r;
  };
  Result<std::string> chat = providers::MessagesToChat(call.body, {.top_k = top_k});
  if (!chat) return refused(chat.error());
  chat_text = std::move(*chat);
  Result<raw_json::Value> parsed = raw_json::Parse(chat_text);
  if (!parsed) {
    return refused(MakeError(ErrorCode::kInternal, "the translated request is not valid JSON: " +
                                                       parsed.error().message)
                       .error());
  }
  chat_call = call;
  chat_call.endpoint = providers::Endpoint::kChatCompletions;
  chat_call.body = raw_json::Object(*parsed);
  chat_call.client_wants_usage = true;
  return std::nullopt;
}

// The dearest rates of the targets a decision may try (a fallback may land on any of them), rate
// by rate, for the cost a key's budget holds at admission; nullopt when none of them is priced.
std::optional<telemetry::Price> DearestPrice(const router::Router& router,
                                             const router::RouteDecision& decision) {
  std::optional<telemetry::Price> dearest;
  auto raise = [](telemetry::Rates& to, const telemetry::Rates& from) {
    to.input = std::max(to.input, from.input);
    to.cached_input = std::max(to.cached_input, from.cached_input);
    to.cache_write_5m = std::max(to.cache_write_5m, from.cache_write_5m);
    to.cache_write_1h = std::max(to.cache_write_1h, from.cache_write_1h);
    to.cache_write_no_ttl = std::max(to.cache_write_no_ttl, from.cache_write_no_ttl);
    to.output = std::max(to.output, from.output);
  };
  for (size_t i = 0; i < decision.eligible; ++i) {
    const std::optional<telemetry::Price>& price =
        router.targets()[decision.candidates[i].target].price;
    if (!price) continue;
    if (!dearest) dearest.emplace();
    raise(dearest->base, price->base);
    // A long-context tier's rates count as base ones: the estimate cannot tell the tier.
    if (price->tier_threshold_tokens) raise(dearest->base, price->above);
  }
  return dearest;
}

// The provider's cache helpers for a request of `thread_id`. The prompt_cache_key is a hash of
// the thread id, not the id itself: fixed in length, and nothing of the client's naming leaves
// for OpenAI.
// With anthropic_cache_diagnostics, the previous message id is that of the thread's latest turn
// on this same provider (an id of another provider's, or of another organisation's, is one
// Anthropic cannot find).
providers::CacheHelpers CacheHelpersFor(const ProviderConnection& connection,
                                        const std::string& thread_id, const Recorder& recorder) {
  providers::CacheHelpers helpers;
  if (connection.prompt_cache_key_thread && !thread_id.empty()) {
    helpers.prompt_cache_key = "kvgate-" + HashApiKey(thread_id).substr(0, 32);
  }
  helpers.anthropic_auto_cache_ttl = connection.anthropic_auto_cache_ttl;
  if (connection.anthropic_cache_diagnostics && !thread_id.empty()) {
    const telemetry::ThreadView view = recorder.View(thread_id);
    for (const telemetry::TurnSummary& turn : view.by_target) {  // most recent first
      if (turn.provider == connection.name && !turn.response_id.empty()) {
        helpers.anthropic_previous_message_id = turn.response_id;
        break;
      }
    }
  }
  return helpers;
}

}  // namespace

asio::awaitable<void> Gateway::HandleInference(http::Request& request,
                                               http::ResponseWriter& writer,
                                               providers::Endpoint endpoint) {
  RequestLog log(*deps_.recorder, *deps_.clock, request.arrival_monotonic_ns);
  auto& rec = log.record();
  rec.request_id = NewId("req");
  rec.endpoint = std::string(providers::EndpointName(endpoint));
  TrackedWriter tracked(writer, {});
  std::string failure;
  try {
    co_await ServeInference(request, tracked, endpoint, log);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  if (failure.empty()) co_return;
  // The last barrier: the turn is recorded as kvgate's error (never as a client that left), and
  // the client gets a 500 with the request's id, or an error event if its stream had begun.
  std::fprintf(stderr, "kvgate: internal error on request %s: %s\n", rec.request_id.c_str(),
               failure.c_str());
  const int status = tracked.status() == 0 ? 500 : tracked.status();
  log.SetError(status, "error", "kvgate internal error: " + Utf8Snippet(failure));
  std::string body = InternalErrorJson(rec.request_id);
  std::string event = "data: " + body + "\n\n";
  if (endpoint == providers::Endpoint::kMessages) {  // in the shape its client reads
    providers::ClientError error{.status = 500, .body = json::parse(body)};
    body = JsonText(providers::ToAnthropicError(error).body);
    event = providers::AnthropicErrorEvent(providers::ToAnthropicError(error));
  }
  if (tracked.status() == 0) {
    std::vector<http::Header> headers{{"x-request-id", rec.request_id}};
    co_await tracked.Send(500, kJson, std::move(body), std::move(headers));
  } else if (tracked.stream_open()) {
    co_await tracked.WriteChunk(event);
    co_await tracked.EndStream();
  }
  log.Commit();
}

asio::awaitable<void> Gateway::ServeInference(http::Request& request,
                                              http::ResponseWriter& writer,
                                              providers::Endpoint endpoint, RequestLog& log) {
  auto& rec = log.record();
  const bool messages_api = endpoint == providers::Endpoint::kMessages;
  ClientStream client(writer, log,
                      messages_api ? ClientApi::kAnthropicMessages : ClientApi::kOpenAI);

  // Authentication (gateway keys are optional).
  std::shared_ptr<KeyState> key;
  if (Result<std::shared_ptr<KeyState>> found = AuthenticateKey(request); !found) {
    co_await client.SendError(providers::MakeOpenAIError(401, found.error().message,
                                                         "invalid_request_error", "invalid_api_key"),
                              "error");
    co_return;
  } else {
    key = std::move(*found);
    if (key) rec.api_key_id = key->id();
  }

  // A compressed body would read as malformed JSON; say what is wrong instead (RFC 9110 15.5.16).
  if (std::string_view encoding = request.header("content-encoding");
      !encoding.empty() && encoding != "identity") {
    providers::ClientError error = providers::MakeOpenAIError(
        415, "Content-Encoding " + Utf8Snippet(encoding) + " is not supported; send the body "
             "uncompressed", "invalid_request_error", "unsupported_content_encoding");
    co_await client.SendError(error, "error");
    co_return;
  }

  // Parse: validate once and read the few fields kvgate needs from the raw bytes; the body is
  // forwarded from the same bytes (raw_json), and a tree is built only for the adapters that
  // rewrite it.
  Result<raw_json::Value> parsed = raw_json::Parse(request.body);
  if (!parsed || !parsed->is_object()) {
    // The message is built outside the co_await (GCC 12: no ?: with temporaries inside one).
    std::string message = "The request body must be a JSON object";
    if (!parsed) message = "We could not parse the JSON body of your request: " + parsed.error().message;
    co_await client.SendError(BadRequest(std::move(message), "invalid_json"), "error");
    co_return;
  }
  const raw_json::Object body(*parsed);
  // Messages clients also name their conversation by Claude Code's session header or
  // metadata.user_id (docs/api.md).
  Result<std::string> thread_id =
      messages_api ? providers::MessagesThreadIdOf(body, request.header("x-thread-id"),
                                                   request.header("x-claude-code-session-id"))
                   : providers::ThreadIdOf(body, request.header("x-thread-id"));
  if (!thread_id) {
    co_await client.SendError(BadRequest(thread_id.error().message, "invalid_thread_id"), "error");
    co_return;
  } else {
    rec.thread_id = std::move(*thread_id);
  }
  // The Responses API: a request that continues a response joins that response's thread.
  const bool responses = endpoint == providers::Endpoint::kResponses;
  std::string previous_response;
  if (std::optional<raw_json::Value> previous = body.Find("previous_response_id");
      responses && previous && !previous->is_null()) {
    previous_response = raw_json::DecodeString(*previous).value_or("");
    if (previous_response.empty()) {
      co_await client.SendError(BadRequest("previous_response_id must be a non-empty string",
                                           "invalid_type", "previous_response_id"),
                                "error");
      co_return;
    }
  }
  // Gateway keys: a thread id names a thread of the key's own (thread_scope.h), and another key's
  // response is continued by no one (its id answers as an unknown one, in the attempt).
  if (key && !rec.thread_id.empty()) rec.thread_id = co_await ScopeThread(rec.thread_id, key->id());
  std::string previous_of_other_key;
  if (!previous_response.empty() && (key || rec.thread_id.empty())) {
    PreviousResponse previous = co_await ThreadOfResponse(previous_response, rec.api_key_id);
    if (previous.other_key) previous_of_other_key = previous_response;
    if (rec.thread_id.empty() && !previous.thread_id.empty()) {
      rec.thread_id = std::move(previous.thread_id);
    } else if (rec.thread_id.empty()) {
      // A conversation kvgate has not seen begin (or another key's: the same to this one): the
      // response id names the thread.
      if (Status valid = providers::ValidateThreadId(previous_response, "previous_response_id");
          !valid) {
        co_await client.SendError(BadRequest(valid.error().message, "invalid_thread_id"), "error");
        co_return;
      }
      rec.thread_id = co_await ScopeThread(previous_response, rec.api_key_id);
      if (previous_of_other_key.empty()) {
        response_threads_.Remember(previous_response, rec.thread_id, rec.api_key_id);
      }
    }
  }
  // A stored response that starts a conversation names its thread (its own id), so that the
  // turns continuing it land there (docs/api.md). One not stored cannot be continued.
  std::optional<raw_json::Value> store = body.Find("store");
  const bool starts_thread = responses && rec.thread_id.empty() &&
                             !(store && store->kind == raw_json::Kind::kBool && !store->is_true());
  // A prompt the provider completes from its own state (previous_response_id) is not the prompt
  // kvgate sees: only whole prompts are fingerprinted. Embeddings have no conversation.
  const bool whole_prompt = endpoint != providers::Endpoint::kEmbeddings && previous_response.empty();
  std::optional<raw_json::Value> model = body.Find("model");
  std::optional<std::string> model_name = model ? raw_json::DecodeString(*model) : std::nullopt;
  if (!model_name || model_name->empty()) {
    co_await client.SendError(BadRequest("you must provide a model parameter", "missing_model",
                                         "model"),
                              "error");
    co_return;
  }
  if (Status valid = providers::ValidateModelName(*model_name); !valid) {
    rec.model = Utf8Snippet(*model_name, providers::kMaxModelNameBytes);  // recorded, cut
    co_await client.SendError(BadRequest(valid.error().message, "invalid_model", "model"), "error");
    co_return;
  }
  rec.model = std::move(*model_name);
  std::optional<raw_json::Value> stream = body.Find("stream");
  if (stream && stream->kind != raw_json::Kind::kBool && !stream->is_null()) {
    co_await client.SendError(BadRequest("stream must be a boolean", "invalid_type", "stream"),
                              "error");
    co_return;
  }
  rec.stream = stream && stream->is_true();
  if (rec.stream && endpoint == providers::Endpoint::kEmbeddings) {
    co_await client.SendError(BadRequest("embeddings do not stream: 'stream' must be false or "
                                         "absent", "unsupported_parameter", "stream"),
                              "error");
    co_return;
  }
  const bool chat_shape = endpoint == providers::Endpoint::kChatCompletions ||
                          endpoint == providers::Endpoint::kCompletions;
  // As OpenAI (and vLLM) answer it: stream_options asks for something only a stream carries.
  if (std::optional<raw_json::Value> stream_options = body.Find("stream_options");
      chat_shape && !rec.stream && stream_options && !stream_options->is_null()) {
    co_await client.SendError(
        BadRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                   "invalid_request", "stream_options"),
        "error");
    co_return;
  }

  // With threads shared between replicas, the thread's latest stored turn is read once, off the
  // event loop, before anything looks at the thread (the router, the cache helpers, the
  // diagnosis): another replica may have served its previous turn.
  if (thread_reads_ && !rec.thread_id.empty()) {
    const Recorder& recorder = *deps_.recorder;
    const std::string& thread_id = rec.thread_id;
    co_await RunOnPool<bool>(*thread_reads_, [&recorder, &thread_id] {
      recorder.SyncThread(thread_id);
      return true;
    });
    rec.thread_synced = true;
  }

  // Route: the request's facts and the thread's memory in, an ordered list of candidates out.
  const router::Router& router = *deps_.router;
  router::RequestFacts facts;
  facts.model = rec.model;
  facts.thread_id = rec.thread_id;
  facts.pinned_target = request.header("x-kvgate-route-target");
  facts.now_us = deps_.clock->NowUnixMicros();
  facts.stream = rec.stream;
  facts.prompt_bytes = request.body.size();
  facts.responses_api = responses;
  facts.embeddings_api = endpoint == providers::Endpoint::kEmbeddings;
  telemetry::ThreadView thread;
  if (router.FindRouter(rec.model) != nullptr) {
    FillFacts(body, facts);
    if (!rec.thread_id.empty() && whole_prompt) {
      auto fingerprint = std::make_shared<const telemetry::PromptFingerprint>(
          telemetry::Fingerprint(body));
      facts.prompt_bytes = fingerprint->TotalBytes();
      facts.fingerprint = fingerprint;
      log.set_fingerprint(std::move(fingerprint));  // hashed once, for the diagnosis too
      thread = deps_.recorder->View(rec.thread_id);
    }
    if (!responses) {
      ProbeEngines(body, rec.api_key_id, facts);
    } else if (std::optional<std::string> chat =
                   ChatBodyForProbe(body, response_threads_, rec.api_key_id)) {
      // The engines serve a Responses request as the chat request it becomes: ask about that.
      if (Result<raw_json::Value> tree = raw_json::Parse(*chat)) {
        ProbeEngines(raw_json::Object(*tree), rec.api_key_id, facts);
      }
    }
  } else if (auto t = router.FindTarget(rec.model); t && router.targets()[*t].keys > 1 &&
                                                    !rec.thread_id.empty()) {
    thread = deps_.recorder->View(rec.thread_id);  // the key this thread used last
  }
  if ((!rec.thread_id.empty() || starts_thread) && whole_prompt) {
    log.set_prompt(*parsed);  // request.body outlives the log
  }

  Result<router::RouteDecision> decision = router.Route(facts, thread);
  if (!decision) {
    if (decision.error().code == ErrorCode::kNotFound) {
      co_await client.SendError(
          providers::MakeOpenAIError(404,
                                     "The model `" + Utf8Snippet(rec.model) +
                                         "` does not exist or is not configured in this kvgate "
                                         "(see GET /v1/models)",
                                     "invalid_request_error", "model_not_found", "model"),
          "error");
    } else {
      co_await client.SendError(BadRequest(decision.error().message, "invalid_route_target"),
                                "error");
    }
    co_return;
  }
  if (decision->router != nullptr) {
    rec.route = router.DecisionText(*decision);
    client.headers().push_back({"x-kvgate-router", decision->router->name});
  }
  if (std::optional<providers::ClientError> refused =
          RefuseEndpoint(endpoint, *decision, rec.model)) {
    co_await client.SendError(*refused, "error");
    co_return;
  }
  if (decision->eligible == 0) {
    std::string why;
    for (const router::Candidate& c : decision->candidates) {
      why += (why.empty() ? "" : "; ") + router.targets()[c.target].name + ": " + c.why_not;
    }
    co_await client.SendError(
        providers::MakeOpenAIError(503, "no target of router " + rec.model +
                                            " can serve this request (" + why + ")",
                                   "server_error", "no_eligible_target"),
        "error");
    co_return;
  }
  // The key's model allow-list and limits, last: a request refused for its own faults above
  // costs its key nothing. The hold is given back when the request is over.
  std::optional<KeyAdmission> admission =
      co_await AdmitKey(key, rec.model, body, DearestPrice(router, *decision), client);
  if (!admission) co_return;
  InferenceCall call{.endpoint = endpoint,
                     .body = body,
                     .stream = rec.stream,
                     .client_wants_usage = providers::ClientWantsStreamUsage(body),
                     .worker_index = request.worker_index,
                     .previous_response_of_other_key = std::move(previous_of_other_key)};
  if (messages_api) {
    // Passed on only as printable ASCII (what their values are): nothing a client sends can
    // reach another server's request head as anything but these two fields.
    auto printable = [](std::string_view v) {
      return std::all_of(v.begin(), v.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    };
    for (auto [name, slot] : {std::pair{"anthropic-version", &call.anthropic_version},
                              {"anthropic-beta", &call.anthropic_beta}}) {
      if (std::string_view v = request.header(name); printable(v)) *slot = std::string(v);
    }
  }
  if (responses) {
    call.on_response_id = [this, starts_thread](telemetry::RequestRecord& r) {
      if (r.thread_id.empty() && starts_thread &&
          providers::ValidateThreadId(r.response_id, "the response id")) {
        // A new id, so its key's own (unless a client of another key named a thread so first).
        r.thread_id = r.api_key_id.empty()
                          ? r.response_id
                          : StoredThreadId(r.response_id, r.api_key_id,
                                           thread_owners_.Claim(r.response_id, r.api_key_id));
      }
      response_threads_.Remember(r.response_id, r.thread_id, r.api_key_id);
    };
  }
  co_await RunAttempts(call, *decision, client);
}

asio::awaitable<void> Gateway::RunAttempts(const InferenceCall& call,
                                           const router::RouteDecision& decision,
                                           ClientStream& client) {
  router::Router& router = *deps_.router;
  RequestLog& log = client.log();
  auto& rec = client.record();
  const size_t fixed_headers = client.headers().size();
  std::optional<AttemptResult> last;  // the latest failure, answered if nothing else can be
  auto send_last = [&]() -> asio::awaitable<void> {
    co_await client.SendError(last->error, last->status_word);
    log.Commit();
  };
  for (size_t i = 0; i < decision.eligible; ++i) {
    const router::Candidate& candidate = decision.candidates[i];
    const router::Target& target = router.targets()[candidate.target];
    const int retries = decision.router != nullptr ? decision.router->retries : 0;
    int key = candidate.key;
    for (int attempt = 0; attempt <= retries; ++attempt) {
      if (attempt > 0) {
        std::optional<std::chrono::milliseconds> delay =
            router.RetryDelay(attempt, last->outcome.retry_after_ms);
        if (!delay) break;  // a long Retry-After: the next target rather than a wait
        asio::steady_timer timer(co_await asio::this_coro::executor, *delay);
        co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
        if (client.client_gone()) {
          client.RecordClientLeft("the client closed the connection while kvgate waited to retry");
          log.Commit();
          co_return;
        }
        // Rate limits are per key: a 429 is retried on the provider's next key.
        if (last->outcome.status == 429 && target.keys > 1) key = (key + 1) % target.keys;
      }
      // A half-open circuit admits one probe; a plain model (nowhere else to go) is always tried.
      if (!router.BeginAttempt(candidate.target, decision.router != nullptr)) break;
      client.headers().resize(fixed_headers);  // an earlier attempt's upstream headers go
      // The model that served the answer (a router's choice; the model asked for otherwise).
      client.headers().push_back({"x-kvgate-target", target.name});
      rec.target = target.name;
      if (decision.router != nullptr) rec.route_facts = router.Facts(decision, target.name);
      rec.provider = target.provider;
      rec.provider_type = telemetry::ProviderTypeName(target.type);
      rec.upstream_model = target.upstream_model;
      rec.key_index = key;
      rec.upstream_status = 0;
      rec.upstream_request_id.clear();
      rec.usage = telemetry::Usage{};
      log.set_price(target.price);
      const ProviderConnection& connection = connections_.at(target.provider);
      AttemptPlan plan{.target = &target, .connection = &connection, .key_index = key};
      plan.options = providers::CallOptions{
          .endpoint = call.endpoint,
          .upstream_model = target.upstream_model,
          .api_key = connection.api_keys.empty()
                         ? std::string()
                         : connection.api_keys[static_cast<size_t>(key) % connection.api_keys.size()],
          .stream = call.stream,
          .client_wants_usage = call.client_wants_usage};
      plan.options.cache_helpers = CacheHelpersFor(connection, rec.thread_id, *deps_.recorder);
      plan.options.anthropic_version = call.anthropic_version;
      plan.options.anthropic_beta = call.anthropic_beta;
      // Anthropic Messages to a target that speaks OpenAI chat: the request is translated here,
      // the answer by the ClientStream.
      // The Responses API to a target that speaks only chat: the same, responses_bridge.h.
      const bool translate_messages = call.endpoint == providers::Endpoint::kMessages &&
                                      telemetry::TraitsOf(connection.type).translates_messages;
      const bool translate_responses = call.endpoint == providers::Endpoint::kResponses &&
                                       TranslatesResponses(connection.type);
      const bool translate = translate_messages || translate_responses;
      client.TranslateChatAnswers(translate_messages);
      std::string chat_text;  // the translated body (chat_call.body's bytes)
      InferenceCall chat_call;
      std::optional<AttemptResult> untranslatable;
      if (translate_messages) {
        untranslatable = TranslateForChat(call, connection.type, chat_text, chat_call);
      } else if (translate_responses) {
        untranslatable =
            TranslateResponsesForChat(call, response_threads_, chat_text, chat_call, client);
      } else if (!call.previous_response_of_other_key.empty()) {
        untranslatable = PreviousResponseNotFound(call.previous_response_of_other_key);
      }
      if (translate) {
        plan.options.endpoint = chat_call.endpoint;
        plan.options.client_wants_usage = chat_call.client_wants_usage;
      }
      const int64_t started_ns = deps_.clock->MonotonicNanos();
      json entry = {{"target", target.name}, {"provider", target.provider}, {"status", "ok"},
                    {"http_status", 0}, {"error", nullptr}, {"latency_ms", nullptr}};
      if (target.keys > 1) entry["key"] = key;
      log.BeginAttempt(std::move(entry));
      AttemptResult result;
      if (untranslatable) {
        result = std::move(*untranslatable);
      } else if (translate) {
        result = co_await UpstreamFor(target).Attempt(chat_call, plan, client);
      } else {
        result = co_await UpstreamFor(target).Attempt(call, plan, client);
      }
      const int64_t latency_us = (deps_.clock->MonotonicNanos() - started_ns) / 1000;
      result.outcome.target = candidate.target;
      if (result.outcome.latency_us == 0) result.outcome.latency_us = latency_us;
      router.ReportAttempt(result.outcome);
      log.EndAttempt(AttemptJson(target, key, target.keys, result, rec, latency_us));
      if (result.answered) {
        log.Commit();
        co_return;
      }
      last = std::move(result);
      if (!router.ShouldFallBack(decision.router, last->outcome)) {
        co_await send_last();
        co_return;
      }
    }
  }
  if (last) {
    co_await send_last();
    co_return;
  }
  // Every eligible target's half-open probe was taken by other requests.
  co_await client.SendError(
      providers::MakeOpenAIError(503, "every target of " + rec.model + " is recovering from "
                                      "failures and already probed; retry shortly",
                                 "server_error", "no_eligible_target"),
      "error");
  log.Commit();
}

std::optional<providers::ClientError> Gateway::RefuseEndpoint(
    providers::Endpoint endpoint, const router::RouteDecision& decision,
    const std::string& model) const {
  auto serves = [endpoint](const router::Target& t) {
    if (endpoint == providers::Endpoint::kResponses) return t.capabilities.responses;
    if (endpoint == providers::Endpoint::kEmbeddings) return t.capabilities.embeddings;
    return true;
  };
  const std::vector<router::Target>& targets = deps_.router->targets();
  bool eligible_serves = false, any_serves = false;
  for (size_t i = 0; i < decision.candidates.size(); ++i) {
    const bool s = serves(targets[decision.candidates[i].target]);
    any_serves = any_serves || s;
    if (i < decision.eligible) eligible_serves = eligible_serves || s;
  }
  // Targets that could serve it but are unhealthy now: the 503 that says so, not a 400.
  if (eligible_serves || (decision.eligible == 0 && any_serves)) return std::nullopt;
  const std::string path(providers::EndpointPath(endpoint));
  const std::string_view key = endpoint == providers::Endpoint::kResponses ? "responses"
                                                                            : "embeddings";
  std::string which;
  for (const router::Candidate& c : decision.candidates) {
    const router::Target& t = targets[c.target];
    if (serves(t)) continue;
    which += which.empty() ? "" : "; ";
    const std::string type(telemetry::ProviderTypeName(t.type));
    if (!telemetry::PassesThrough(t.type)) {
      which += "target " + t.name + " is served by provider " + t.provider + " of type " + type +
               ", which cannot serve " + path;
    } else {
      which += "target " + t.name + " (provider " + t.provider + " of type " + type +
               ") has supports." + std::string(key) + ": false";
    }
  }
  // Only the Responses API is translated (for the built-in engine and Anthropic); embeddings
  // pass through to OpenAI-compatible providers or nowhere.
  const std::string how = endpoint == providers::Endpoint::kResponses
                              ? " through to OpenAI-compatible providers (translating it for the "
                                "built-in engine and Anthropic)"
                              : " through to OpenAI-compatible providers only (it is never "
                                "translated, and the built-in engine does not embed)";
  std::string message = "model " + Utf8Snippet(model) + " cannot serve " + path + ": " + which +
                        ". kvgate passes " + path + how + "; use " +
                        (endpoint == providers::Endpoint::kResponses
                             ? "/v1/chat/completions, or a model of such a provider"
                             : "a model of such a provider");
  return providers::MakeOpenAIError(400, std::move(message), "invalid_request_error",
                                    "unsupported_endpoint", "model");
}

Upstream& Gateway::UpstreamFor(const router::Target& target) {
  if (telemetry::IsBuiltInEngine(target.type) && deps_.engines != nullptr) return *deps_.engines;
  return deps_.remote != nullptr ? *deps_.remote : *remote_;
}

void Gateway::ProbeEngines(const raw_json::Object& body, std::string_view api_key_id,
                           router::RequestFacts& facts) const {
  if (deps_.engines == nullptr) return;
  const std::vector<size_t> targets = deps_.router->ProbeTargets(facts.model);
  if (targets.empty()) return;
  json tree;  // the engine tokenizes the chat template's text, built from a tree
  for (size_t t : targets) {
    const router::Target& target = deps_.router->targets()[t];
    if (!telemetry::IsBuiltInEngine(target.type)) continue;  // remote replicas: not asked (yet)
    if (tree.is_null()) {
      tree = json::parse(body.value().text, nullptr, false);
      providers::TakeKvgateFields(tree);
    }
    auto lookup = deps_.engines->Lookup(target, tree, api_key_id);  // the key's own cache
    if (!lookup) continue;
    facts.probes.push_back({.target = t,
                            .prompt_tokens = (*lookup)["prompt_tokens"].get<int64_t>(),
                            .cached_tokens = (*lookup)["cached_tokens"].get<int64_t>(),
                            .load = (*lookup)["running"].get<int64_t>() +
                                    (*lookup)["waiting"].get<int64_t>()});
  }
}

}  // namespace kvgate::gateway
