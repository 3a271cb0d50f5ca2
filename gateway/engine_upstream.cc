// The engine upstream: LocalEngines (local_provider.h) over the engine hosts (engine_host.h). An
// attempt reads the request with the engine's adapter (engine_request.h), tokenizes its prompt,
// submits it to the host and relays the answer to the client, streamed or whole.
//
// Threads: each engine runs Step() on its own thread. A request's coroutine hands the engine a
// callback that pushes TokenEvents into a per-request Channel and pokes a timer on the coroutine's
// executor; the coroutine drains the channel and writes to its client. Nothing blocks an event
// loop.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <deque>

#include "common/ids.h"
#include "common/json_text.h"
#include "common/mutex.h"
#include "gateway/engine_host.h"
#include "gateway/engine_metrics.h"
#include "gateway/engine_request.h"
#include "gateway/local_answer.h"
#include "gateway/local_response.h"
#include "gateway/providers/messages.h"
#include "gateway/request_log.h"
#include "telemetry/metrics.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;
using router::Failure;

// Engine thread -> request coroutine. Shared by the callback and the coroutine.
struct Channel {
  explicit Channel(asio::any_io_executor executor) : executor(executor), wakeup(executor) {
    wakeup.expires_at(asio::steady_timer::time_point::max());
  }
  asio::any_io_executor executor;
  asio::steady_timer wakeup;  // used on `executor` only
  Mutex mu;
  std::deque<EngineEvent> events GUARDED_BY(mu);
};

// An attempt that ends with nothing sent: `error` is what the client would get.
AttemptResult Refused(providers::ClientError error, Failure failure) {
  const int status = error.status;
  return FailedAttempt(std::move(error), "error", failure, status);
}
AttemptResult Refused(int status, std::string message, const char* type, const char* code,
                      Failure failure) {
  return Refused(providers::MakeOpenAIError(status, std::move(message), type, code), failure);
}

// An Anthropic-shaped answer to a count.
TokenCount CountRefusal(int status, std::string message, std::string type, std::string code) {
  const providers::ClientError refusal = providers::ToAnthropicError(
      providers::MakeOpenAIError(status, std::move(message), std::move(type), std::move(code)));
  return TokenCount{.status = refusal.status, .body = JsonText(refusal.body)};
}

class LocalEnginesImpl final : public LocalEngines {
 public:
  explicit LocalEnginesImpl(std::map<std::string, std::unique_ptr<EngineHost>> hosts)
      : hosts_(std::move(hosts)) {}

  asio::awaitable<AttemptResult> Attempt(const InferenceCall& call, const AttemptPlan& plan,
                                         ClientStream& client) override;

  Result<PrefixLookup> LookupPrefix(const router::Target& target, const raw_json::Object& body,
                                    std::string_view api_key_id) const override {
    json tree = json::parse(body.value().text, nullptr, false);
    if (!tree.is_object()) {
      return MakeError(ErrorCode::kInvalidArgument, "the prompt must be a JSON object");
    }
    providers::TakeKvgateFields(tree);
    return Lookup(target, tree, api_key_id);
  }

  // The Messages body translated to chat (as /v1/messages serves it on the engine), rendered and
  // tokenized as a request would be (a count carries no max_tokens). Only the prompt's length is
  // answered, never what is cached: no key's salt is needed.
  asio::awaitable<TokenCount> CountTokens(const CountTokensCall& call, const router::Target& target,
                                          const ProviderConnection& /*connection*/) override {
    Result<std::string> chat = providers::MessagesToChat(call.body, {.prompt_only = true});
    if (!chat) {
      co_return CountRefusal(400, chat.error().message, "invalid_request_error", "invalid_request");
    }
    Result<PrefixLookup> counted = Lookup(target, json::parse(*chat), "");
    if (!counted) {
      const bool down = counted.error().code == ErrorCode::kNotFound;
      co_return CountRefusal(down ? 503 : 400, counted.error().message,
                             down ? "server_error" : "invalid_request_error",
                             down ? "engine_unavailable" : "invalid_request");
    }
    co_return TokenCount{.body = JsonText(json{{"input_tokens", counted->prompt_tokens}})};
  }

  std::optional<int64_t> ContextLength(const std::string& provider) const override {
    auto it = hosts_.find(provider);
    if (it == hosts_.end()) return std::nullopt;
    return it->second->engine().dims().context_length;
  }

  void Stop() override {
    for (auto& [_, host] : hosts_) host->Stop();
  }
  json Describe() const override {
    json engines = json::array();
    for (const auto& [_, host] : hosts_) engines.push_back(host->Describe());
    return json{{"engines", engines}};
  }
  // vLLM's metric names and meanings under kvgate_engine_ (vLLM: vllm:<name>), per provider,
  // and the offload tier's (engine_metrics.h).
  void ExposeMetrics(std::string& out) const override {
    std::vector<EngineSnapshot> engines;
    for (const auto& [name, host] : hosts_) {
      engines.push_back({name, host->engine().cache_stats(), host->counters()});
    }
    AppendEngineMetrics(engines, out);
  }

 private:
  // The prompt of `body` as the engine behind `target` would tokenize it, and what of it that
  // engine holds for `api_key_id`'s salt, without touching LRU order or refcounts.
  Result<PrefixLookup> Lookup(const router::Target& target, const json& body,
                              std::string_view api_key_id) const {
    auto it = hosts_.find(target.provider);
    if (it == hosts_.end()) {
      return MakeError(ErrorCode::kNotFound, "engine " + target.provider + " is not running");
    }
    const EngineHost& host = *it->second;
    auto text = EnginePromptOf(body, body.contains("messages"), host.chat_template());
    if (!text) return MakeError(ErrorCode::kInvalidArgument, text.error().message);
    std::vector<int32_t> prompt = host.engine().tokenizer().Encode(*text, true);
    const engine::CacheStats stats = host.engine().cache_stats();
    const engine::CachedPrefix cached =
        host.engine().LookupCachedPrefix(prompt, host.CacheSalt(api_key_id));
    return PrefixLookup{
        .model = target.name,
        .prompt_tokens = static_cast<int64_t>(prompt.size()),
        .cached_tokens = static_cast<int64_t>(cached.pool_tokens + cached.offload_tokens),
        .pool_tokens = static_cast<int64_t>(cached.pool_tokens),
        .offload_tokens = static_cast<int64_t>(cached.offload_tokens),
        .offload_kind = stats.offload_kind == "host" ? "host" : "disk",
        .running = static_cast<int64_t>(stats.running),
        .waiting = static_cast<int64_t>(stats.waiting)};
  }

  std::map<std::string, std::unique_ptr<EngineHost>> hosts_;
};

asio::awaitable<AttemptResult> LocalEnginesImpl::Attempt(const InferenceCall& call,
                                                         const AttemptPlan& plan,
                                                         ClientStream& client) {
  auto& rec = client.record();
  RequestLog& log = client.log();
  const router::Target& target = *plan.target;
  auto host_it = hosts_.find(target.provider);
  if (host_it == hosts_.end()) {
    co_return Refused(503, "engine " + target.provider + " is not running", "server_error",
                      "engine_unavailable", Failure::kConnect);
  }
  EngineHost& host = *host_it->second;
  rec.system_fingerprint = host.instance();
  const bool chat = providers::EndpointTraitsOf(call.endpoint).chat_messages;
  std::expected<EngineCall, providers::ClientError> engine_call = EngineCallFrom(
      call.body.value().text, call.endpoint,
      {.chat_template = &host.chat_template(), .max_choices = host.engine().max_choices()});
  if (!engine_call) co_return Refused(std::move(engine_call.error()), Failure::kOther);
  std::vector<int32_t> prompt = host.engine().tokenizer().Encode(engine_call->prompt, true);
  if (auto fits =
          FitToContext(*engine_call, call.endpoint, static_cast<int64_t>(prompt.size()),
                       host.engine().dims().context_length, host.max_output_tokens_default());
      !fits) {
    co_return Refused(std::move(fits.error()), Failure::kOther);
  }
  const int32_t n = engine_call->n;
  const bool tools = engine_call->tools;
  const int32_t logprobs = engine_call->sampling.logprobs;

  auto executor = co_await asio::this_coro::executor;
  // Owned by this coroutine alone: the engine (which may keep a cancelled request until its next
  // step, or until it is destroyed at shutdown) holds only a weak reference, so the channel's
  // timer never outlives the event loop it belongs to.
  auto channel = std::make_shared<Channel>(executor);
  engine::EngineRequest request{
      .prompt = std::move(prompt),
      .sampling = std::move(engine_call->sampling),
      .on_token =
          [weak = std::weak_ptr<Channel>(channel)](const engine::TokenEvent& e) {
            std::shared_ptr<Channel> channel = weak.lock();
            if (!channel) return;  // the request's coroutine is gone
            {
              MutexLock lock(&channel->mu);
              channel->events.push_back(
                  EngineEvent{e.choice, std::string(e.text), e.finished, e.finish_reason, e.usage,
                              e.error, e.logprobs ? std::optional(*e.logprobs) : std::nullopt,
                              std::string(e.stop_string)});
            }
            asio::post(channel->executor, [weak] {
              if (auto alive = weak.lock()) alive->wakeup.cancel();
            });
          },
      .n = engine_call->n,
      .cache_salt = host.CacheSalt(rec.api_key_id)};
  auto id = host.Add(std::move(request));
  if (!id) {
    co_return Refused(400, id.error().message, "invalid_request_error", "invalid_request",
                      Failure::kOther);
  }
  // If this coroutine ends early (client gone, shutdown), the engine must stop working for it,
  // and what it did so far is still counted: the engine reports usage with every token.
  struct CancelGuard {
    EngineHost& host;
    uint64_t id;
    RequestLog& log;
    std::optional<engine::Usage> seen;  // the latest usage the engine reported
    bool done = false;
    ~CancelGuard() {
      if (done) return;
      host.Cancel(id);
      if (seen) {
        host.CountFinished(*seen);
        log.record().usage =
            telemetry::NormalizeUsage(telemetry::UsageFlavor::kKvgateEngine, UsageJson(*seen));
      }
    }
  } guard{host, *id, log};

  const ResponseHead head{.id = chat ? NewId("chatcmpl") : NewId("cmpl"),
                          .created = std::time(nullptr),
                          .model = rec.model,
                          .endpoint = call.endpoint,
                          .fingerprint = host.instance()};
  rec.response_id = head.id;
  AttemptResult answered;
  answered.answered = true;
  const bool streaming = plan.options.stream;
  EngineAnswer answer(head, n, tools, logprobs, host.engine().tokenizer());
  if (streaming) {
    const bool began = co_await client.BeginStream();
    if (!began) co_return answered;  // recorded: the client went away
    if (chat) {
      const bool wrote = co_await client.Write(answer.OpeningChunks());
      if (!wrote) co_return answered;
    }
  }

  // A client that leaves (its timeout, a user's stop) frees the engine within a sweep of the
  // server's, even mid-prefill with no token yet; no socket is peeked per batch of tokens.
  bool client_left = false;
  client.WatchClientGone([&client_left, &channel] {
    client_left = true;
    channel->wakeup.cancel();
  });
  struct StopWatch {  // the callback refers to this frame: it must not outlive it
    ClientStream& client;
    ~StopWatch() { client.WatchClientGone(nullptr); }
  } stop_watch{client};

  while (!answer.finished()) {
    if (client_left) {
      client.RecordClientLeft(streaming ? "the client closed the connection mid-stream"
                                        : "the client closed the connection before the response "
                                          "was ready");
      co_return answered;  // the guard cancels the engine request
    }
    std::deque<EngineEvent> batch;
    {
      MutexLock lock(&channel->mu);
      batch.swap(channel->events);
    }
    if (batch.empty()) {
      co_await channel->wakeup.async_wait(asio::as_tuple(asio::use_awaitable));
      channel->wakeup.expires_at(asio::steady_timer::time_point::max());
      continue;
    }
    std::string out;
    for (EngineEvent& e : batch) {
      if (!e.text.empty()) log.MarkFirstToken();
      out += answer.Add(std::move(e), streaming);
    }
    guard.seen = answer.usage();
    if (streaming && !out.empty()) {
      const bool wrote = co_await client.Write(out);
      if (!wrote) co_return answered;  // the guard cancels the engine request
    }
  }
  guard.done = true;
  const engine::Usage usage = answer.usage();
  host.CountFinished(usage);
  rec.usage = telemetry::NormalizeUsage(telemetry::UsageFlavor::kKvgateEngine, UsageJson(usage));
  rec.finish_reason = answer.FinishReason(0);
  if (!answer.error().empty()) {
    rec.finish_reason = "error";
    std::string message = "the built-in engine failed: " + answer.error();
    if (!streaming) {  // nothing was sent: another target may still answer
      co_return Refused(500, std::move(message), "server_error", "engine_error", Failure::kStatus);
    }
    log.SetError(200, "error", message);
    json err = {
        {"error", {{"message", message}, {"type", "server_error"}, {"code", "engine_error"}}}};
    const bool wrote = co_await client.Write("data: " + JsonText(err) + "\n\n");
    if (wrote) co_await client.EndStream();
    co_return answered;
  }
  if (streaming) {
    std::string tail = answer.ClosingChunks();
    if (call.client_wants_usage) tail += UsageChunk(head, usage);
    tail += "data: [DONE]\n\n";
    client.Checkpoint();  // the tail completes the answer: journal it first
    const bool wrote = co_await client.Write(tail);
    if (wrote) co_await client.EndStream();
  } else {
    co_await client.SendAnswer(answer.Whole());
  }
  co_return answered;
}

}  // namespace

std::unique_ptr<LocalEngines> NewLocalEngines(
    std::map<std::string, std::unique_ptr<EngineHost>> hosts) {
  return std::make_unique<LocalEnginesImpl>(std::move(hosts));
}

}  // namespace kvgate::gateway
