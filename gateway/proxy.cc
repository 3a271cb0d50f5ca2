// The inference path: POST /v1/chat/completions and /v1/completions, streaming and not.
// One data flow: parse -> route -> adapter builds the upstream call -> upstream client ->
// adapter translates -> client; the RequestLog records what happened on every path.
#include <boost/algorithm/string/predicate.hpp>
#include <boost/asio/this_coro.hpp>

#include "common/ids.h"
#include "common/json_text.h"
#include "common/raw_json.h"
#include "common/utf8.h"
#include "gateway/gateway.h"
#include "gateway/local_provider.h"
#include "gateway/request_log.h"
#include "gateway/tracked_writer.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

asio::awaitable<void> SendError(http::ResponseWriter& writer, RequestLog& log,
                                const providers::ClientError& error, std::string status,
                                std::vector<http::Header> headers) {
  std::string message;
  if (auto it = error.body.find("error"); it != error.body.end() && it->contains("message") &&
                                          (*it)["message"].is_string()) {
    message = (*it)["message"].get<std::string>();
  }
  log.SetError(error.status, std::move(status), message);
  co_await writer.Send(error.status, kJson, JsonText(error.body), std::move(headers));
}

// Rate-limit and retry headers a client SDK acts on; passed through from the upstream.
void CopyUpstreamHeaders(const upstream::Response& head, std::vector<http::Header>& out) {
  for (const auto& h : head.headers) {
    std::string lower = h.name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "retry-after" || lower.rfind("x-ratelimit-", 0) == 0 ||
        lower.rfind("anthropic-ratelimit-", 0) == 0) {
      out.push_back(h);
    }
  }
}

std::string UpstreamRequestId(const upstream::Response& head) {
  for (const char* name : {"x-request-id", "request-id", "x-amzn-requestid"}) {
    if (auto v = head.header(name); !v.empty()) return std::string(v);
  }
  return "";
}

// Why an upstream answer cannot be read as it came, or "" when it can: kvgate asks for identity
// coding, but a server may compress anyway.
// (Content codings are case-insensitive, RFC 9110 8.4.1.) An error status is kept: a compressed
// 429 is still a 429 to the client, with the status as its message.
std::string UnreadableEncoding(const upstream::Response& head, const std::string& provider) {
  std::string_view encoding = head.header("content-encoding");
  if (encoding.empty() || boost::iequals(encoding, "identity")) return "";
  std::string why = "upstream " + provider + " answered";
  if (head.status < 200 || head.status >= 300) why += " HTTP " + std::to_string(head.status);
  return why + " with Content-Encoding " + std::string(encoding) + ", which kvgate does not decode";
}

// The status a client gets for an answer kvgate cannot decode: the upstream's own error status,
// else 502.
int UnreadableStatus(int upstream_status) {
  return upstream_status >= 400 && upstream_status < 600 ? upstream_status : 502;
}

// An answer to a streaming request that came as a JSON document with an error object in it
// ({"error": {...}} or {"error": "text"}; not "error": null), as some servers send with status
// 200.
bool HasErrorObject(std::string_view body) {
  Result<raw_json::Value> document = raw_json::Parse(body);
  if (!document || !document->is_object()) return false;
  std::optional<raw_json::Value> error = raw_json::Find(*document, "error");
  if (!error) return false;
  if (error->is_string()) return true;
  return error->is_object() && !raw_json::Object(*error).members().empty();
}

// An answer to a streaming request that is a JSON document, not an event stream (an error sent
// with status 200, or a server that ignored "stream": true).
bool IsJsonNotStream(const upstream::Response& head) {
  bool json = false;
  for (const http::Header& h : head.headers) {  // (a repeated Content-Type: any event stream wins)
    if (h.name.size() != 12 || !boost::iequals(h.name, "content-type")) continue;
    if (h.value.starts_with("text/event-stream")) return false;
    json = json || h.value.starts_with("application/json");
  }
  return json;
}

// Maps an upstream transport failure to the client-visible error.
providers::ClientError TransportError(const Error& error, const std::string& provider) {
  if (error.code == ErrorCode::kDeadlineExceeded) {
    return providers::MakeOpenAIError(504, "upstream " + provider + " timed out: " + error.message,
                                      "upstream_error", "upstream_timeout");
  }
  return providers::MakeOpenAIError(502, "upstream " + provider + " failed: " + error.message,
                                    "upstream_error", "upstream_unavailable");
}


}  // namespace

asio::awaitable<void> Gateway::HandleInference(http::Request& request,
                                               http::ResponseWriter& writer,
                                               providers::Endpoint endpoint) {
  RequestLog log(*deps_.recorder, *deps_.clock, request.arrival_monotonic_ns);
  auto& rec = log.record();
  rec.request_id = NewId("req");
  rec.endpoint = endpoint == providers::Endpoint::kChatCompletions ? "chat.completions"
                                                                   : "completions";
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
  if (tracked.status() == 0) {
    std::vector<http::Header> headers{{"x-request-id", rec.request_id}};
    co_await tracked.Send(500, kJson, InternalErrorJson(rec.request_id), std::move(headers));
  } else if (tracked.stream_open()) {
    co_await tracked.WriteChunk("data: " + InternalErrorJson(rec.request_id) + "\n\n");
    co_await tracked.EndStream();
  }
  log.Commit();
}

asio::awaitable<void> Gateway::ServeInference(http::Request& request,
                                              http::ResponseWriter& writer,
                                              providers::Endpoint endpoint, RequestLog& log) {
  auto& rec = log.record();
  std::vector<http::Header> headers{{"x-request-id", rec.request_id}};

  // Authentication (gateway keys are optional).
  if (Result<std::string> key = Authenticate(request); !key) {
    co_await SendError(writer, log,
                       providers::MakeOpenAIError(401, key.error().message,
                                                  "invalid_request_error", "invalid_api_key"),
                       "error", headers);
    co_return;
  } else {
    rec.api_key_id = std::move(*key);
  }

  // A compressed body would read as malformed JSON; say what is wrong instead (RFC 9110 15.5.16).
  if (std::string_view encoding = request.header("content-encoding");
      !encoding.empty() && encoding != "identity") {
    providers::ClientError error = providers::MakeOpenAIError(
        415, "Content-Encoding " + std::string(encoding) + " is not supported; send the body "
             "uncompressed", "invalid_request_error", "unsupported_content_encoding");
    co_await SendError(writer, log, error, "error", headers);
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
    providers::ClientError error = providers::MakeOpenAIError(400, std::move(message),
                                                              "invalid_request_error", "invalid_json");
    co_await SendError(writer, log, error, "error", headers);
    co_return;
  }
  const raw_json::Object body(*parsed);
  if (Result<std::string> thread_id = providers::ThreadIdOf(body, request.header("x-thread-id"));
      !thread_id) {
    co_await SendError(writer, log,
                       providers::MakeOpenAIError(400, thread_id.error().message,
                                                  "invalid_request_error", "invalid_thread_id"),
                       "error", headers);
    co_return;
  } else {
    rec.thread_id = std::move(*thread_id);
  }
  std::optional<raw_json::Value> model = body.Find("model");
  std::optional<std::string> model_name = model ? raw_json::DecodeString(*model) : std::nullopt;
  if (!model_name || model_name->empty()) {
    co_await SendError(writer, log,
                       providers::MakeOpenAIError(400, "you must provide a model parameter",
                                                  "invalid_request_error", "missing_model",
                                                  "model"),
                       "error", headers);
    co_return;
  }
  rec.model = std::move(*model_name);
  std::optional<raw_json::Value> stream = body.Find("stream");
  if (stream && stream->kind != raw_json::Kind::kBool && !stream->is_null()) {
    co_await SendError(writer, log,
                       providers::MakeOpenAIError(400, "stream must be a boolean",
                                                  "invalid_request_error", "invalid_type",
                                                  "stream"),
                       "error", headers);
    co_return;
  }
  rec.stream = stream && stream->is_true();
  // As OpenAI (and vLLM) answer it: stream_options asks for something only a stream carries.
  if (std::optional<raw_json::Value> stream_options = body.Find("stream_options");
      !rec.stream && stream_options && !stream_options->is_null()) {
    co_await SendError(writer, log,
                       providers::MakeOpenAIError(
                           400, "The 'stream_options' parameter is only allowed when 'stream' is "
                                "enabled.", "invalid_request_error", "invalid_request",
                           "stream_options"),
                       "error", headers);
    co_return;
  }
  const bool wants_usage = providers::ClientWantsStreamUsage(body);
  if (!rec.thread_id.empty()) log.set_prompt(*parsed);  // request.body outlives the log

  const Route* route = FindRoute(rec.model);
  if (route == nullptr) {
    co_await SendError(writer, log,
                       providers::MakeOpenAIError(
                           404,
                           "The model `" + rec.model +
                               "` does not exist or is not configured in this kvgate "
                               "(see GET /v1/models)",
                           "invalid_request_error", "model_not_found", "model"),
                       "error", headers);
    co_return;
  }
  rec.provider = route->provider_name;
  rec.provider_type = std::string(providers::ProviderTypeName(route->type));
  rec.upstream_model = route->upstream_model;
  log.set_price(route->price);

  providers::CallOptions options{.endpoint = endpoint,
                                 .upstream_model = route->upstream_model,
                                 .api_key = route->api_key,
                                 .stream = rec.stream,
                                 .client_wants_usage = wants_usage};

  if (route->type == providers::ProviderType::kLocal) {
    if (deps_.engines == nullptr) {
      co_await SendError(writer, log,
                         providers::MakeOpenAIError(503, "the built-in engine is not running",
                                                    "server_error", "engine_unavailable"),
                         "error", headers);
      co_return;
    }
    // The engine renders the chat template from a tree.
    nlohmann::json tree = nlohmann::json::parse(body.value().text);
    providers::TakeKvgateFields(tree);
    co_await deps_.engines->Serve(*route, tree, options, writer, log, std::move(headers));
    co_return;
  }

  auto call = providers::BuildUpstreamCall(route->type, body, options);
  if (!call) {
    bool internal = call.error().code == ErrorCode::kInternal;
    co_await SendError(writer, log,
                       providers::MakeOpenAIError(internal ? 500 : 400, call.error().message,
                                                  internal ? "server_error" : "invalid_request_error",
                                                  internal ? "internal_error" : "invalid_request"),
                       "error", headers);
    co_return;
  }
  upstream::OutgoingRequest out{
      .method = "POST", .path = std::move(call->path), .body = std::move(call->body)};
  out.headers.reserve(call->headers.size());
  for (auto& [name, value] : call->headers)
    out.headers.push_back({std::move(name), std::move(value)});

  upstream::Client& client = ClientFor(request.worker_index);
  // A client that leaves while the upstream works (its timeout, a user's "stop") gets the
  // upstream request closed too: nobody will read the answer, and servers like vLLM stop
  // generating when their connection closes.
  upstream::Abandon abandon;
  out.abandon = &abandon;
  writer.OnClientGone([&abandon] { abandon.Fire(); });
  auto abandoned_message = [&] {  // (built only when needed: the common path allocates nothing)
    return "the client closed the connection while upstream " + route->provider_name +
           " was answering; kvgate closed the upstream request";
  };

  if (!rec.stream) {
    auto response = co_await client.Send(route->url, std::move(out));
    writer.OnClientGone(nullptr);
    // (An answer that had all arrived when the client left is still read for its usage below.)
    if (!response && abandon.fired()) {
      log.SetError(499, "client_disconnected", abandoned_message());
      log.Commit();
      co_return;
    }
    if (!response) {
      co_await SendError(writer, log, TransportError(response.error(), route->provider_name),
                         response.error().code == ErrorCode::kDeadlineExceeded ? "timeout"
                                                                               : "upstream_error",
                         headers);
      co_return;
    }
    rec.upstream_status = response->status;
    rec.upstream_request_id = UpstreamRequestId(*response);
    CopyUpstreamHeaders(*response, headers);
    if (std::string why = UnreadableEncoding(*response, route->provider_name); !why.empty()) {
      co_await SendError(writer, log,
                         providers::MakeOpenAIError(UnreadableStatus(response->status), std::move(why),
                                                    "upstream_error", "bad_upstream_response"),
                         "upstream_error", headers);
      co_return;
    }
    if (response->status < 200 || response->status >= 300) {
      co_await SendError(writer, log,
                         providers::TranslateUpstreamError(route->type, response->status,
                                                           response->body),
                         "upstream_error", headers);
      co_return;
    }
    auto translated =
        providers::TranslateResponse(route->type, response->body, options);
    if (!translated) {
      co_await SendError(writer, log,
                         providers::MakeOpenAIError(502,
                                                    "upstream " + route->provider_name +
                                                        " sent a response kvgate cannot read: " +
                                                        translated.error().message,
                                                    "upstream_error", "bad_upstream_response"),
                         "upstream_error", headers);
      co_return;
    }
    rec.usage = std::move(translated->usage);
    rec.finish_reason = translated->finish_reason;
    rec.response_id = providers::ResponseIdOf(translated->body);
    rec.http_status = 200;
    // A client that gave up while the upstream worked (its timeout) closed the connection; a
    // write would still succeed into the socket buffer, so ask the socket.
    if (writer.client_gone()) {
      log.SetError(499, "client_disconnected",
                   "the client closed the connection before the response was ready");
      log.Commit();
      co_return;
    }
    auto sent = co_await writer.Send(200, kJson, std::move(translated->body), std::move(headers));
    if (!sent) log.SetError(200, "client_disconnected", sent.error().message);
    log.Commit();
    co_return;
  }

  // Streaming: answer the client's head only once the upstream's head is known, so an upstream
  // 4xx/5xx becomes a plain JSON error with the right status, not a broken stream.
  auto translator = providers::NewStreamTranslator(route->type, options);
  bool streaming_to_client = false;
  bool client_gone = false;
  std::string error_body;  // a non-2xx upstream body, buffered
  int upstream_status = 0;

  std::string unreadable;    // why the upstream's answer cannot be streamed, when it cannot
  bool json_answer = false;  // a 2xx JSON document instead of a stream: buffered like an error
  auto on_head = [&](const upstream::Response& head) -> asio::awaitable<bool> {
    upstream_status = head.status;
    rec.upstream_status = head.status;
    rec.upstream_request_id = UpstreamRequestId(head);
    CopyUpstreamHeaders(head, headers);
    unreadable = UnreadableEncoding(head, route->provider_name);
    if (!unreadable.empty()) co_return false;
    if (head.status < 200 || head.status >= 300) co_return true;  // buffer the error body
    if (IsJsonNotStream(head)) {
      json_answer = true;
      co_return true;  // buffered too
    }
    std::vector<http::Header> stream_headers = headers;
    stream_headers.push_back({"cache-control", "no-cache"});
    auto began = co_await writer.BeginStream(200, "text/event-stream", std::move(stream_headers));
    if (!began) {
      client_gone = true;
      co_return false;
    }
    writer.SetCutNotice(providers::ShutdownCutEvent());
    streaming_to_client = true;
    co_return true;
  };
  // The turn's outcome as the translator saw it, recorded once the client's stream is over.
  auto record_stream = [&] {
    rec.usage = translator->usage();
    rec.finish_reason = std::string(translator->finish_reason());
    log.Commit();
  };
  // Set when the stream's final event arrived: the client's stream was ended and the turn
  // recorded right then, whatever the upstream does with the rest of its body.
  bool answered = false;
  upstream::BodySink sink = [&](std::string_view bytes) -> asio::awaitable<upstream::SinkVerdict> {
    if (!streaming_to_client) {
      if (error_body.size() < 1 << 20) error_body.append(bytes);
      co_return upstream::SinkVerdict::kContinue;
    }
    auto piece = translator->Feed(bytes);
    if (piece.has_content) log.MarkFirstToken();
    if (rec.response_id.empty()) rec.response_id = providers::ResponseIdOfStream(piece.bytes);
    if (!piece.bytes.empty()) {
      auto wrote = co_await writer.WriteChunk(piece.bytes);
      if (!wrote) {
        client_gone = true;
        co_return upstream::SinkVerdict::kAbort;
      }
    }
    if (!translator->completed()) co_return upstream::SinkVerdict::kContinue;
    // The final event ([DONE], message_stop) ends the answer even if the upstream keeps its body
    // open: the client and the record must not wait for the upstream to close it.
    answered = true;
    rec.http_status = 200;
    auto ended = co_await writer.EndStream();
    if (!ended) log.SetError(200, "client_disconnected", "the client closed the connection mid-stream");
    record_stream();
    co_return upstream::SinkVerdict::kFinished;
  };

  auto result = co_await client.SendStreaming(route->url, std::move(out), on_head, sink);
  writer.OnClientGone(nullptr);
  if (answered) co_return;
  client_gone = client_gone || abandon.fired();
  if (!streaming_to_client) {
    if (abandon.fired()) {
      log.SetError(499, "client_disconnected", abandoned_message());
    } else if (client_gone) {
      log.SetError(499, "client_disconnected", "the client went away before the stream began");
    } else if (!unreadable.empty()) {
      co_await SendError(writer, log,
                         providers::MakeOpenAIError(UnreadableStatus(upstream_status), std::move(unreadable),
                                                    "upstream_error", "bad_upstream_response"),
                         "upstream_error", headers);
    } else if (json_answer && result) {
      // Its own error message if it carries an error object (as a 502: it came with a 200),
      // else what came instead of a stream. A whole answer (a server that ignored "stream")
      // was generated and billed: its usage is recorded all the same.
      providers::ClientError error;
      if (HasErrorObject(error_body)) {
        error = providers::TranslateUpstreamError(route->type, 502, error_body);
      } else {
        if (auto whole = providers::TranslateResponse(route->type, error_body, options)) {
          rec.usage = std::move(whole->usage);
          rec.finish_reason = whole->finish_reason;
        }
        error = providers::MakeOpenAIError(
            502, "upstream " + route->provider_name + " answered a streaming request with a JSON "
                 "document instead of an event stream: " + Utf8Snippet(error_body),
            "upstream_error", "bad_upstream_response");
      }
      co_await SendError(writer, log, error, "upstream_error", headers);
    } else if (!result) {
      co_await SendError(writer, log, TransportError(result.error(), route->provider_name),
                         result.error().code == ErrorCode::kDeadlineExceeded ? "timeout"
                                                                             : "upstream_error",
                         headers);
    } else {
      co_await SendError(writer, log,
                         providers::TranslateUpstreamError(route->type, upstream_status,
                                                           error_body),
                         "upstream_error", headers);
    }
    log.Commit();
    co_return;
  }

  rec.http_status = 200;
  if (client_gone) {
    log.SetError(200, "client_disconnected", "the client closed the connection mid-stream");
  } else {
    std::string tail = result ? translator->Finish(true)
                              : translator->Finish(false, result.error().message);
    // No co_await inside && / || / ?: anywhere in this file: GCC 12 miscompiles those.
    if (!tail.empty()) {
      auto wrote = co_await writer.WriteChunk(tail);
      if (!wrote) client_gone = true;
    }
    if (!client_gone) co_await writer.EndStream();
    if (client_gone) {
      log.SetError(200, "client_disconnected", "the client closed the connection mid-stream");
    } else if (!result) {
      log.SetError(200,
                   result.error().code == ErrorCode::kDeadlineExceeded ? "timeout"
                                                                       : "upstream_error",
                   "upstream stream failed: " + result.error().message);
    } else if (auto client_error = translator->client_error()) {
      // An upstream error event, a malformed stream or an early end: the client got an error event.
      log.SetError(200, "upstream_error", *client_error);
    } else if (!translator->completed()) {
      log.SetError(200, "upstream_error", "upstream ended the stream before its final event");
    }
  }
  record_stream();
}

}  // namespace kvgate::gateway
