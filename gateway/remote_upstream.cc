// Attempts on remote providers: the adapter builds the upstream call, the per-loop HTTP client
// sends it, the adapter translates the answer (buffered or streamed) for the client.
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <charconv>

#include "common/ascii.h"
#include "common/clock.h"
#include "common/json_text.h"
#include "common/redact.h"
#include "common/utf8.h"
#include "gateway/request_log.h"
#include "gateway/providers/messages.h"
#include "gateway/upstream.h"

namespace kvgate::gateway {
namespace {

namespace asio = boost::asio;
using router::Failure;

// After a client leaves a stream that had begun, the upstream is read on to its usage: the
// provider bills the answer whether or not anyone reads it, and a client that hangs up before the
// usage event must not make the turn free. For at most this long and this many bytes; past
// either, the upstream request is closed and what it did not report is kvgate's estimate
// (Usage::estimated).
constexpr std::chrono::seconds kDrainTime{10};
constexpr size_t kDrainBytes = size_t{4} << 20;

// Fills what a stream cut short did not report with kvgate's estimate, marked as such: the input
// as one token per 4 bytes of the request body (an overestimate: JSON punctuation counts), the
// output as one token per content event received (providers stream about one token per event).
void EstimateUnreported(telemetry::Usage& usage, size_t body_bytes, int64_t content_events) {
  if (!usage.TotalInput() && !usage.reported_input) {
    const int64_t input = int64_t((body_bytes + 3) / 4);
    usage.cache_read = usage.cache_read.value_or(0);
    for (std::optional<int64_t>* w :
         {&usage.cache_write_5m, &usage.cache_write_1h, &usage.cache_write_no_ttl}) {
      *w = w->value_or(0);
    }
    usage.uncached = std::max<int64_t>(0, input - *usage.cache_read);
    usage.reported_input = input;
    usage.estimated = true;
  }
  if (!usage.output) {
    usage.output = content_events;
    usage.estimated = true;
  }
}

// Rate-limit and retry headers a client SDK acts on; passed through from the upstream.
void CopyUpstreamHeaders(const upstream::Response& head, std::vector<http::Header>& out) {
  for (const auto& h : head.headers) {
    const std::string lower = AsciiLowered(h.name);
    if (lower == "retry-after" || lower == "retry-after-ms" || lower.rfind("x-ratelimit-", 0) == 0 ||
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
// coding, but a server may compress anyway. (Content codings are case-insensitive, RFC 9110
// 8.4.1.) An error status is kept: a compressed 429 is still a 429 to the client.
std::string UnreadableEncoding(const upstream::Response& head, const std::string& provider) {
  std::string_view encoding = head.header("content-encoding");
  if (encoding.empty() || EqualsIgnoreCase(encoding, "identity")) return "";
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
// ({"error": {...}} or {"error": "text"}; not "error": null), as some servers send with 200.
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
    if (h.name.size() != 12 || !EqualsIgnoreCase(h.name, "content-type")) continue;
    if (h.value.starts_with("text/event-stream")) return false;
    json = json || h.value.starts_with("application/json");
  }
  return json;
}

// The client sent the request again after a reused keep-alive connection failed under it
// (upstream::Client::Send): that first try may have reached the upstream, so it is an attempt of
// its own in the record, listed before the current attempt's entry (which BeginAttempt put last
// and EndAttempt replaces).
void RecordResend(RequestLog& log, const router::Target& target, int key, const Error& first_try) {
  if (log.committed()) return;
  nlohmann::json entry = {{"target", target.name},
                          {"provider", target.provider},
                          {"status", "upstream_error"},
                          {"http_status", 0},
                          {"error", Utf8Snippet(first_try.message, 300)},
                          {"latency_ms", nullptr}};
  if (target.keys > 1) entry["key"] = key;
  nlohmann::json& attempts = log.record().attempts;
  attempts.insert(attempts.empty() ? attempts.end() : attempts.end() - 1, std::move(entry));
}

void RedactStrings(const SecretRedactor& redactor, nlohmann::json& value) {
  if (value.is_string()) {
    redactor.RedactInPlace(value.get_ref<std::string&>());
  } else if (value.is_structured()) {
    for (nlohmann::json& member : value) RedactStrings(redactor, member);
  }
}

// A stream translator whose error events and error messages carry no provider key. Only the
// piece with the error event is scanned (error events end a stream) and the bytes Finish adds; a
// stream that goes well is relayed untouched.
class KeyRedactingTranslator final : public providers::StreamTranslator {
 public:
  KeyRedactingTranslator(std::unique_ptr<providers::StreamTranslator> inner,
                         const SecretRedactor& redactor)
      : inner_(std::move(inner)), redactor_(redactor) {}

  Output Feed(std::string_view upstream_bytes) override {
    Output out = inner_->Feed(upstream_bytes);
    if (!out.bytes.empty() && inner_->client_error()) redactor_.RedactInPlace(out.bytes);
    return out;
  }
  std::string Finish(bool upstream_eof, std::string_view failure_message) override {
    std::string tail = inner_->Finish(upstream_eof, redactor_.Redact(failure_message));
    redactor_.RedactInPlace(tail);
    return tail;
  }
  const telemetry::Usage& usage() const override { return inner_->usage(); }
  std::string_view finish_reason() const override { return inner_->finish_reason(); }
  std::string_view provider_cache_miss_reason() const override {
    return inner_->provider_cache_miss_reason();
  }
  bool completed() const override { return inner_->completed(); }
  std::optional<std::string> upstream_error() const override {
    return Redacted(inner_->upstream_error());
  }
  std::optional<std::string> client_error() const override {
    return Redacted(inner_->client_error());
  }

 private:
  std::optional<std::string> Redacted(std::optional<std::string> text) const {
    if (text) redactor_.RedactInPlace(*text);
    return text;
  }

  const std::unique_ptr<providers::StreamTranslator> inner_;
  const SecretRedactor& redactor_;
};

// Every string an upstream sends kvgate on the error path passes through this class's exits:
// Failed() (the error a client gets when nothing was sent, and the attempt's message), the
// stream translator (KeyRedactingTranslator), and the transport error of a stream that had
// begun. Each takes the provider keys out (SecretRedactor) before the text is relayed, recorded,
// journaled or logged; a 2xx answer is never rewritten.
class RemoteUpstream final : public Upstream {
 public:
  RemoteUpstream(std::function<upstream::Client&(size_t)> client_for, const Clock& clock,
                 const SecretRedactor& redactor)
      : client_for_(std::move(client_for)), clock_(clock), redactor_(redactor) {}

  asio::awaitable<AttemptResult> Attempt(const InferenceCall& call, const AttemptPlan& plan,
                                         ClientStream& client) override;
  // Anthropic providers: their count_tokens endpoint. Others: the default refusal.
  asio::awaitable<TokenCount> CountTokens(const CountTokensCall& call,
                                          const router::Target& target,
                                          const ProviderConnection& connection) override;

 private:
  int64_t Micros(int64_t since_ns) const { return (clock_.MonotonicNanos() - since_ns) / 1000; }

  // A failure before anything reached the client.
  AttemptResult Failed(providers::ClientError error, std::string status_word, Failure failure,
                       int status = 0) const {
    RedactError(redactor_, error);
    return FailedAttempt(std::move(error), std::move(status_word), failure, status);
  }
  // The upstream answered an error status (its body buffered).
  AttemptResult FailedStatus(const upstream::Response& head, providers::ProviderType type,
                             std::string_view body) const {
    AttemptResult r = Failed(providers::TranslateUpstreamError(type, head.status, body),
                             "upstream_error", Failure::kStatus, head.status);
    r.outcome.retry_after_ms = RetryAfterMs(head);
    return r;
  }
  AttemptResult Transport(const Error& error, const std::string& provider) const {
    if (error.code == ErrorCode::kDeadlineExceeded) {
      return Failed(providers::MakeOpenAIError(504, "upstream " + provider + " timed out: " +
                                                        error.message,
                                               "upstream_error", "upstream_timeout"),
                    "timeout", Failure::kTimeout);
    }
    return Failed(providers::MakeOpenAIError(502, "upstream " + provider + " failed: " + error.message,
                                             "upstream_error", "upstream_unavailable"),
                  "upstream_error", Failure::kConnect);
  }

  // Bedrock: the SigV4 headers (host, x-amz-date, x-amz-security-token, authorization) for the
  // request as it will go out, signed now with the connection's credentials.
  void SignForAws(const ProviderConnection& connection, const upstream::OutgoingRequest& out,
                  std::vector<std::pair<std::string, std::string>>& headers) const {
    const upstream::Url& url = connection.url;
    const bool default_port = (url.scheme == "https" && url.port == 443) ||
                              (url.scheme == "http" && url.port == 80);
    providers::SigV4Request request;
    request.method = out.method;
    request.host = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
    if (!default_port) request.host += ":" + std::to_string(url.port);
    std::string path = url.base_path + out.path;
    if (const size_t q = path.find('?'); q != std::string::npos) {
      request.query = path.substr(q + 1);
      path.resize(q);
    }
    request.path = std::move(path);
    request.headers = headers;
    request.body = out.body;
    for (auto& header : providers::SignSigV4(request, connection.aws, connection.region, "bedrock",
                                             clock_.NowUnixMicros() / 1'000'000)) {
      headers.push_back(std::move(header));
    }
  }

  asio::awaitable<AttemptResult> Buffered(const InferenceCall& call, const AttemptPlan& plan,
                                          upstream::OutgoingRequest out, ClientStream& client);
  asio::awaitable<AttemptResult> Streamed(const InferenceCall& call, const AttemptPlan& plan,
                                          upstream::OutgoingRequest out, ClientStream& client);

  std::function<upstream::Client&(size_t)> client_for_;
  const Clock& clock_;
  const SecretRedactor& redactor_;
};

asio::awaitable<AttemptResult> RemoteUpstream::Attempt(const InferenceCall& call,
                                                       const AttemptPlan& plan,
                                                       ClientStream& client) {
  const ProviderConnection& connection = *plan.connection;
  auto built = providers::BuildUpstreamCall(connection.type, call.body, plan.options);
  if (!built) {
    const bool internal = built.error().code == ErrorCode::kInternal;
    co_return Failed(providers::MakeOpenAIError(internal ? 500 : 400, built.error().message,
                                                internal ? "server_error" : "invalid_request_error",
                                                internal ? "internal_error" : "invalid_request"),
                     "error", Failure::kOther);
  }
  client.record().cache_helper = built->cache_helper;
  upstream::OutgoingRequest out{
      .method = "POST", .path = std::move(built->path), .body = std::move(built->body)};
  if (!connection.aws.empty() && plan.options.api_key.empty()) {
    SignForAws(connection, out, built->headers);
  }
  out.headers.reserve(built->headers.size());
  for (auto& [name, value] : built->headers) out.headers.push_back({std::move(name), std::move(value)});
  if (!plan.traceparent.empty()) out.headers.push_back({"traceparent", plan.traceparent});
  out.on_resend = [&client, &plan](const Error& first_try) {
    RecordResend(client.log(), *plan.target, plan.key_index, first_try);
  };
  if (call.stream) co_return co_await Streamed(call, plan, std::move(out), client);
  co_return co_await Buffered(call, plan, std::move(out), client);
}

asio::awaitable<AttemptResult> RemoteUpstream::Buffered(const InferenceCall& call,
                                                        const AttemptPlan& plan,
                                                        upstream::OutgoingRequest out,
                                                        ClientStream& client) {
  const ProviderConnection& connection = *plan.connection;
  auto& rec = client.record();
  const int64_t started_ns = clock_.MonotonicNanos();
  // A client that leaves while the upstream works (its timeout, a user's "stop") gets the
  // upstream request closed too: nobody will read the answer, and servers like vLLM stop
  // generating when their connection closes.
  upstream::Abandon abandon;
  out.abandon = &abandon;
  client.WatchClientGone([&abandon] { abandon.Fire(); });
  auto response = co_await client_for_(call.worker_index).Send(connection.url, std::move(out));
  client.WatchClientGone(nullptr);
  AttemptResult answered;
  answered.answered = true;
  // (An answer that had all arrived when the client left is still read for its usage below.)
  if (!response && abandon.fired()) {
    client.RecordClientLeft("the client closed the connection while upstream " + connection.name +
                            " was answering; kvgate closed the upstream request");
    answered.outcome.failure = Failure::kOther;
    answered.message = "client left";
    co_return answered;
  }
  if (!response) co_return Transport(response.error(), connection.name);
  rec.upstream_status = response->status;
  rec.upstream_request_id = UpstreamRequestId(*response);
  if (std::string why = UnreadableEncoding(*response, connection.name); !why.empty()) {
    const int status = UnreadableStatus(response->status);
    AttemptResult r = Failed(providers::MakeOpenAIError(status, std::move(why), "upstream_error",
                                                        "bad_upstream_response"),
                             "upstream_error", Failure::kStatus, status);
    CopyUpstreamHeaders(*response, client.headers());
    co_return r;
  }
  if (response->status < 200 || response->status >= 300) {
    AttemptResult r = FailedStatus(*response, connection.type, response->body);
    // The upstream's Retry-After and rate-limit headers reach the client if this error is its
    // answer (the loop drops them when another attempt answers instead).
    CopyUpstreamHeaders(*response, client.headers());
    co_return r;
  }
  auto translated = providers::TranslateResponse(connection.type, response->body, plan.options);
  if (!translated) {
    co_return Failed(providers::MakeOpenAIError(502,
                                                "upstream " + connection.name +
                                                    " sent a response kvgate cannot read: " +
                                                    translated.error().message,
                                                "upstream_error", "bad_upstream_response"),
                     "upstream_error", Failure::kStatus, 502);
  }
  CopyUpstreamHeaders(*response, client.headers());
  rec.usage = std::move(translated->usage);
  rec.finish_reason = translated->finish_reason;
  rec.provider_cache_miss_reason = translated->provider_cache_miss_reason;
  rec.response_id = providers::ResponseIdOf(translated->body);
  answered.outcome.latency_us = Micros(started_ns);
  co_await client.SendAnswer(std::move(translated->body));
  co_return answered;
}

asio::awaitable<AttemptResult> RemoteUpstream::Streamed(const InferenceCall& call,
                                                        const AttemptPlan& plan,
                                                        upstream::OutgoingRequest out,
                                                        ClientStream& client) {
  const ProviderConnection& connection = *plan.connection;
  auto& rec = client.record();
  RequestLog& log = client.log();
  const int64_t started_ns = clock_.MonotonicNanos();
  upstream::Abandon abandon;
  out.abandon = &abandon;
  // A client that leaves before its stream began closes the upstream request at once; one that
  // leaves mid-stream starts the drain (kDrainTime), whose timer closes it if the usage is late.
  asio::steady_timer drain_timer(co_await asio::this_coro::executor);
  bool draining = false;
  size_t drained_bytes = 0;
  int64_t content_events = 0;
  auto start_drain = [&drain_timer, &draining, &abandon] {
    if (draining) return;
    draining = true;
    drain_timer.expires_after(kDrainTime);
    drain_timer.async_wait([&abandon](boost::system::error_code ec) {
      if (!ec) abandon.Fire();  // (cancelled before this frame ends: ec is set then)
    });
  };
  client.WatchClientGone([&client, &abandon, &start_drain] {
    if (client.streaming()) {
      start_drain();
    } else {
      abandon.Fire();
    }
  });

  // Answer the client's head only once the upstream's head is known, so an upstream 4xx/5xx is a
  // plain JSON error with the right status (and another target may still be tried), not a
  // broken stream.
  std::unique_ptr<providers::StreamTranslator> translator =
      std::make_unique<KeyRedactingTranslator>(
          providers::NewStreamTranslator(connection.type, plan.options), redactor_);
  bool client_gone = false;
  std::string error_body;  // a non-2xx upstream body, buffered
  std::optional<upstream::Response> error_head;
  std::string unreadable;    // why the upstream's answer cannot be streamed, when it cannot
  bool json_answer = false;  // a 2xx JSON document instead of a stream: buffered like an error
  std::optional<int64_t> ttft_us;
  auto on_head = [&](const upstream::Response& head) -> asio::awaitable<bool> {
    rec.upstream_status = head.status;
    rec.upstream_request_id = UpstreamRequestId(head);
    unreadable = UnreadableEncoding(head, connection.name);
    if (!unreadable.empty()) {
      error_head = head;
      co_return false;
    }
    if (head.status < 200 || head.status >= 300 || IsJsonNotStream(head)) {
      json_answer = head.status >= 200 && head.status < 300;
      error_head = head;
      co_return true;  // buffer the body
    }
    CopyUpstreamHeaders(head, client.headers());
    const bool began = co_await client.BeginStream();
    if (!began) client_gone = true;
    co_return began;
  };
  // Set when the stream's final event arrived: the client's stream was ended and the turn
  // recorded right then, whatever the upstream does with the rest of its body.
  bool answered = false;
  auto record_stream = [&] {
    rec.usage = translator->usage();
    rec.finish_reason = std::string(translator->finish_reason());
    rec.provider_cache_miss_reason = std::string(translator->provider_cache_miss_reason());
    log.Commit();
  };
  upstream::BodySink sink = [&](std::string_view bytes) -> asio::awaitable<upstream::SinkVerdict> {
    if (!client.streaming()) {
      if (error_body.size() < 1 << 20) error_body.append(bytes);
      co_return upstream::SinkVerdict::kContinue;
    }
    auto piece = translator->Feed(bytes);
    if (rec.response_id.empty()) rec.response_id = providers::ResponseIdOfStream(piece.bytes);
    if (piece.has_content) {
      ++content_events;
      log.MarkFirstToken();
      if (!ttft_us) ttft_us = Micros(started_ns);
    }
    if (translator->completed()) {  // these bytes complete the answer: journal it first
      rec.usage = translator->usage();
      rec.finish_reason = std::string(translator->finish_reason());
      rec.provider_cache_miss_reason = std::string(translator->provider_cache_miss_reason());
      client.Checkpoint();
    }
    if (!draining && !piece.bytes.empty()) {
      const bool wrote = co_await client.Write(piece.bytes);
      if (!wrote) start_drain();
    }
    if (draining) {
      drained_bytes += bytes.size();
      if (!translator->completed()) {
        co_return drained_bytes > kDrainBytes ? upstream::SinkVerdict::kAbort
                                              : upstream::SinkVerdict::kContinue;
      }
      // The client is gone, but the usage came: the turn is recorded as billed.
      answered = true;
      client.RecordClientLeft("the client closed the connection mid-stream; kvgate read the "
                              "upstream on to its usage");
      record_stream();
      co_return upstream::SinkVerdict::kFinished;
    }
    if (!translator->completed()) co_return upstream::SinkVerdict::kContinue;
    // The final event ([DONE], message_stop) ends the answer even if the upstream keeps its body
    // open: the client and the record must not wait for the upstream to close it.
    answered = true;
    co_await client.EndStream();
    record_stream();
    co_return upstream::SinkVerdict::kFinished;
  };

  auto result = co_await client_for_(call.worker_index)
                    .SendStreaming(connection.url, std::move(out), on_head, sink);
  client.WatchClientGone(nullptr);
  if (!result) redactor_.RedactInPlace(result.error().message);
  drain_timer.cancel();
  AttemptResult done;
  done.answered = true;
  done.outcome.latency_us = Micros(started_ns);
  done.outcome.ttft_us = ttft_us;
  if (answered) {
    if (draining) done.outcome.failure = Failure::kOther;  // the client left: no success to count
    co_return done;
  }
  client_gone = client_gone || abandon.fired() || draining;
  if (!client.streaming()) {
    if (abandon.fired()) {
      client.RecordClientLeft("the client closed the connection while upstream " +
                              connection.name + " was answering; kvgate closed the upstream "
                              "request");
      done.outcome.failure = Failure::kOther;
      co_return done;
    }
    if (client_gone) {
      done.outcome.failure = Failure::kOther;
      co_return done;  // BeginStream recorded it
    }
    if (!unreadable.empty()) {
      CopyUpstreamHeaders(*error_head, client.headers());
      const int status = UnreadableStatus(error_head->status);
      co_return Failed(providers::MakeOpenAIError(status, std::move(unreadable), "upstream_error",
                                                  "bad_upstream_response"),
                       "upstream_error", Failure::kStatus, status);
    }
    if (!result) co_return Transport(result.error(), connection.name);
    if (json_answer) {
      // Its own error message if it carries an error object (as a 502: it came with a 200),
      // else what came instead of a stream. A whole answer (a server that ignored "stream")
      // was generated and billed: its usage is recorded all the same.
      providers::ClientError error;
      if (HasErrorObject(error_body)) {
        error = providers::TranslateUpstreamError(connection.type, 502, error_body);
      } else {
        if (auto whole = providers::TranslateResponse(connection.type, error_body, plan.options)) {
          rec.usage = std::move(whole->usage);
          rec.finish_reason = whole->finish_reason;
          rec.provider_cache_miss_reason = whole->provider_cache_miss_reason;
        }
        error = providers::MakeOpenAIError(
            502, "upstream " + connection.name + " answered a streaming request with a JSON "
                 "document instead of an event stream: " + Utf8Snippet(error_body),
            "upstream_error", "bad_upstream_response");
      }
      co_return Failed(std::move(error), "upstream_error", Failure::kStatus, 502);
    }
    CopyUpstreamHeaders(*error_head, client.headers());
    co_return FailedStatus(*error_head, connection.type, error_body);
  }

  // The stream had begun: whatever happens now ends it, and no other target can take over.
  if (client_gone) {
    client.RecordClientLeft(draining ? "the client closed the connection mid-stream; the upstream's "
                                       "usage did not come within kvgate's drain, so its unreported "
                                       "tokens are estimated"
                                     : "the client closed the connection mid-stream");
    done.outcome.failure = Failure::kOther;
    rec.usage = translator->usage();
    rec.finish_reason = std::string(translator->finish_reason());
    rec.provider_cache_miss_reason = std::string(translator->provider_cache_miss_reason());
    EstimateUnreported(rec.usage, call.body.value().text.size(), content_events);
    log.Commit();
    co_return done;
  }
  std::string tail = result ? translator->Finish(true)
                            : translator->Finish(false, result.error().message);
  // No co_await inside && / || / ?: anywhere in this file: GCC 12 miscompiles those.
  bool wrote = true;
  if (!tail.empty()) wrote = co_await client.Write(tail);
  if (wrote) wrote = co_await client.EndStream();
  if (!wrote) {
    done.outcome.failure = Failure::kOther;  // the client left; Write/EndStream recorded it
  } else if (!result) {
    const bool timeout = result.error().code == ErrorCode::kDeadlineExceeded;
    log.SetError(200, timeout ? "timeout" : "upstream_error",
                 "upstream stream failed: " + result.error().message);
    done.outcome.failure = timeout ? Failure::kTimeout : Failure::kConnect;
    done.message = result.error().message;
  } else if (auto client_error = translator->client_error()) {
    // An upstream error event, a malformed stream or an early end: the client got an error event.
    log.SetError(200, "upstream_error", *client_error);
    done.outcome.failure = Failure::kStatus;
    done.outcome.status = 502;
    done.message = *client_error;
  } else if (!translator->completed()) {
    log.SetError(200, "upstream_error", "upstream ended the stream before its final event");
    done.outcome.failure = Failure::kStatus;
    done.outcome.status = 502;
    done.message = "upstream ended the stream before its final event";
  }
  record_stream();
  co_return done;
}

asio::awaitable<TokenCount> RemoteUpstream::CountTokens(const CountTokensCall& call,
                                                        const router::Target& target,
                                                        const ProviderConnection& connection) {
  if (connection.type != providers::ProviderType::kAnthropic) {
    co_return co_await Upstream::CountTokens(call, target, connection);
  }
  auto refused = [](const providers::ClientError& refusal,
                    std::vector<http::Header> headers = {}) {
    return TokenCount{.status = refusal.status, .body = JsonText(refusal.body),
                      .headers = std::move(headers)};
  };
  // The same bytes /v1/messages would send (model spliced, kvgate's thread fields cut), to the
  // counter beside it.
  providers::CallOptions options;
  options.endpoint = providers::Endpoint::kMessages;
  options.upstream_model = target.upstream_model;
  if (!connection.api_keys.empty()) options.api_key = connection.api_keys.front();
  options.anthropic_version = call.anthropic_version;
  options.anthropic_beta = call.anthropic_beta;
  Result<providers::UpstreamCall> built =
      providers::BuildUpstreamCall(connection.type, call.body, options);
  if (!built) {
    co_return refused(providers::ToAnthropicError(providers::MakeOpenAIError(
        400, built.error().message, "invalid_request_error", "invalid_request")));
  }
  upstream::OutgoingRequest out;
  out.path = built->path + "/count_tokens";
  out.body = std::move(built->body);
  for (auto& [name, value] : built->headers) out.headers.push_back({name, value});
  Result<upstream::Response> response =
      co_await client_for_(call.worker_index).Send(connection.url, std::move(out));
  if (response && response->status >= 200 && response->status < 300) {
    co_return TokenCount{.status = response->status, .body = std::move(response->body)};
  }
  providers::ClientError refusal;
  std::vector<http::Header> headers;
  if (!response) {
    const bool timeout = response.error().code == ErrorCode::kDeadlineExceeded;
    refusal = providers::ToAnthropicError(providers::MakeOpenAIError(
        timeout ? 504 : 502,
        "upstream " + connection.name + " did not answer: " + response.error().message,
        "upstream_error", timeout ? "upstream_timeout" : "upstream_unreachable"));
  } else {
    // Its errors as for /v1/messages: the status kvgate answers with, in Anthropic's shape (an
    // upstream 401 is kvgate's credentials at fault, a 502, not the client's).
    refusal = providers::ToAnthropicError(
        providers::TranslateUpstreamError(connection.type, response->status, response->body));
    if (std::string_view retry = response->header("retry-after"); !retry.empty()) {
      headers.push_back({"retry-after", std::string(retry)});
    }
  }
  // An upstream's error text may quote the key kvgate sent (an Anthropic 401 quoting it, say).
  RedactError(redactor_, refusal);
  co_return refused(refusal, std::move(headers));
}

}  // namespace

std::optional<int64_t> RetryAfterMs(const upstream::Response& head) {
  auto parse = [](std::string_view text) -> std::optional<double> {
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    double v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || v < 0 || end == text.data()) return std::nullopt;
    return v;
  };
  if (auto ms = parse(head.header("retry-after-ms"))) return static_cast<int64_t>(*ms);
  if (auto s = parse(head.header("retry-after"))) return static_cast<int64_t>(*s * 1000);
  return std::nullopt;
}

void RedactError(const SecretRedactor& redactor, providers::ClientError& error) {
  if (!redactor.empty()) RedactStrings(redactor, error.body);
}

std::unique_ptr<Upstream> NewRemoteUpstream(std::function<upstream::Client&(size_t)> client_for,
                                            const Clock& clock, const SecretRedactor& redactor) {
  return std::make_unique<RemoteUpstream>(std::move(client_for), clock, redactor);
}

}  // namespace kvgate::gateway
