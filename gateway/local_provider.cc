// The `local` provider: the built-in engine behind the OpenAI API, in-process.
//
// Threads: each engine runs Step() on its own thread. A request's coroutine hands the engine a
// callback that pushes TokenEvents into a per-request Channel and pokes a timer on the coroutine's
// executor; the coroutine drains the channel and writes to its client. Nothing blocks an event loop.
#include "gateway/local_provider.h"

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdlib>
#include <deque>
#include <limits>
#include <thread>

#include "common/ids.h"
#include "common/json_text.h"
#include "common/mutex.h"
#include "common/thread_name.h"
#include "gateway/engine_metrics.h"
#include "gateway/local_answer.h"
#include "gateway/local_response.h"
#include "gateway/local_tools.h"
#include "gateway/request_log.h"
#include "local_engine/chat_template.h"
#include "local_engine/device.h"
#include "local_engine/engine.h"
#include "telemetry/metrics.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
namespace asio = boost::asio;


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

// One engine and the thread that steps it.
class EngineHost {
 public:
  EngineHost(std::string name, std::unique_ptr<engine::Engine> engine, engine::ChatTemplate tmpl,
             int64_t max_output_tokens_default, bool share_prefix_cache_across_keys)
      : name_(std::move(name)),
        engine_(std::move(engine)),
        template_(std::move(tmpl)),
        max_output_tokens_default_(max_output_tokens_default),
        share_prefix_cache_(share_prefix_cache_across_keys),
        // A new id per start: its prefix cache starts empty, and a thread's turns on another
        // instance than the last one explain a lost cache ("engine_restarted").
        instance_(NewId("kvgate-engine")),
        thread_([this] {
          NameThisThread("engine-" + name_);
          Loop();
        }) {}
  ~EngineHost() { Stop(); }

  void Stop() {
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    // The step in flight stops between layers rather than finish a prefill nobody waits for.
    engine_->CancelAll();
    cv_.SignalAll();
    if (thread_.joinable()) thread_.join();
  }

  Result<uint64_t> Add(engine::EngineRequest request) {
    auto id = engine_->AddRequest(std::move(request));
    if (id) {
      requests_total_.fetch_add(1);
      cv_.SignalAll();
    }
    return id;
  }
  void Cancel(uint64_t id) {
    engine_->Cancel(id);
    cv_.SignalAll();
  }

  const std::string& name() const { return name_; }
  const std::string& instance() const { return instance_; }
  engine::Engine& engine() { return *engine_; }
  const engine::Engine& engine() const { return *engine_; }
  const engine::ChatTemplate& chat_template() const { return template_; }
  // A request without max_tokens: at most this many completion tokens (0: no bound but the
  // context).
  int64_t max_output_tokens_default() const { return max_output_tokens_default_; }
  // The cache salt of a request of gateway key `api_key_id` (share_prefix_cache_across_keys: none).
  uint64_t CacheSalt(std::string_view api_key_id) const {
    return share_prefix_cache_ ? 0 : PrefixCacheSalt(api_key_id);
  }

  json Describe() const {
    const engine::CacheStats c = engine_->cache_stats();
    return json{{"provider", name_},
                {"instance", instance_},
                {"backend", std::string(engine_->backend_name())},
                {"block_size", engine::kBlockSize},
                {"kv_cache_dtype", std::string(engine::KvDtypeName(engine_->kv_cache_dtype()))},
                {"kv_bytes_per_token", engine_->kv_bytes_per_token()},
                {"prefix_cache_scope", share_prefix_cache_ ? "shared" : "per_key"},
                {"pool_blocks", c.blocks.num_blocks},
                {"used_blocks", c.blocks.used_blocks},
                {"cached_free_blocks", c.blocks.cached_free_blocks},
                {"kv_cache_usage_perc", KvCacheUsagePerc(c)},
                {"running", c.running},
                {"waiting", c.waiting},
                {"prefix_cache_queries_tokens", c.blocks.queries_tokens},
                {"prefix_cache_hits_tokens", c.blocks.hit_tokens},
                {"cache_written_blocks", c.blocks.written_blocks},
                {"evictions", c.blocks.evictions},
                {"preemptions", c.preemptions},
                {"forks", c.blocks.forks},
                {"fork_copies", c.blocks.fork_copies},
                {"aborted_steps", c.aborted_steps},
                {"requests_total", requests_total_.load()},
                {"prompt_tokens_total", prompt_tokens_.load()},
                {"generation_tokens_total", generation_tokens_.load()},
                {"step_errors_total", step_errors_.load()},
                {"offload", OffloadJson(c)}};
  }
  EngineCounters counters() const {
    return {requests_total_.load(), prompt_tokens_.load(), generation_tokens_.load(),
            step_errors_.load()};
  }
  void CountFinished(const engine::Usage& usage) {
    prompt_tokens_.fetch_add(static_cast<uint64_t>(usage.prompt_tokens));
    generation_tokens_.fetch_add(static_cast<uint64_t>(usage.completion_tokens));
  }

 private:
  void Loop() {
    while (true) {
      {
        MutexLock lock(&mu_);
        while (!stopping_ && !engine_->HasWork()) cv_.Wait(&mu_);
        if (stopping_) return;
      }
      if (auto status = engine_->Step(); !status) {
        // A broken invariant in the engine: stop stepping it rather than spin on the error.
        step_errors_.fetch_add(1);
        std::fprintf(stderr, "kvgate: engine %s: %s\n", name_.c_str(),
                     status.error().message.c_str());
        MutexLock lock(&mu_);
        while (!stopping_) cv_.Wait(&mu_);
        return;
      }
    }
  }

  // Constant after construction.
  const std::string name_;
  const std::unique_ptr<engine::Engine> engine_;
  const engine::ChatTemplate template_;
  const int64_t max_output_tokens_default_;
  const bool share_prefix_cache_;
  const std::string instance_;

  Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> requests_total_{0}, prompt_tokens_{0}, generation_tokens_{0},
      step_errors_{0};
  std::thread thread_;  // last: starts after everything above exists
};

// The first request field that asks for what the engine does not do (the legacy function
// calling, logit_bias; tools on /v1/completions), or nullopt. The request gets a 400 naming it
// (docs/api.md): an answer that silently lacks what was asked for is worse than an error. Empty
// values ask for nothing.
std::optional<std::string> UnsupportedByEngine(const json& body, bool chat) {
  for (const char* key : {"functions", "logit_bias", "function_call", "tools", "tool_choice"}) {
    if (chat && (std::string_view(key) == "tools" || std::string_view(key) == "tool_choice")) continue;
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if ((it->is_array() || it->is_object()) && it->empty()) continue;
    if (it->is_string() && *it == "none") continue;  // tool_choice / function_call: "none"
    return std::string(key);
  }
  return std::nullopt;
}

// What response_format asks of the built-in engine: nothing (absent, null or {type: text}), any
// JSON object (json_object) or a value of a JSON Schema (json_schema, its keys in declared order:
// `body` is the request parsed as ordered_json). Errors name the field.
std::expected<std::shared_ptr<const engine::JsonGrammar>, FieldError> GrammarFrom(
    const ordered_json& body) {
  auto it = body.find("response_format");
  if (it == body.end()) return nullptr;
  const ordered_json& format = *it;
  if (format.is_null()) return nullptr;
  auto fail = [](std::string param, std::string message) {
    return std::unexpected(FieldError{std::move(param), std::move(message), "invalid_request"});
  };
  if (!format.is_object()) return fail("response_format", "response_format must be an object");
  auto type = format.find("type");
  if (type == format.end() || !type->is_string()) {
    return fail("response_format.type", "response_format.type must be a string");
  }
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "text") return nullptr;
  if (name == "json_object") return engine::JsonObjectGrammar();
  if (name != "json_schema") {
    return fail("response_format.type", "response_format.type must be text, json_object or "
                                        "json_schema, not '" + name + "'");
  }
  auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object()) {
    return fail("response_format.json_schema", "response_format.json_schema must be an object");
  }
  auto schema_name = spec->find("name");
  if (schema_name == spec->end() || !schema_name->is_string() ||
      schema_name->get_ref<const std::string&>().empty()) {
    return fail("response_format.json_schema.name",
                "response_format.json_schema.name must be a non-empty string");
  }
  if (auto strict = spec->find("strict"); strict != spec->end() && !strict->is_null() &&
                                          !strict->is_boolean()) {
    return fail("response_format.json_schema.strict",
                "response_format.json_schema.strict must be a boolean");
  }
  auto schema = spec->find("schema");
  if (schema == spec->end()) {
    return fail("response_format.json_schema.schema",
                "response_format.json_schema.schema is required by the built-in engine");
  }
  auto grammar = engine::CompileJsonSchema(*schema, "response_format.json_schema.schema");
  if (!grammar) {
    return std::unexpected(FieldError{grammar.error().path,
                                      "Invalid schema for response_format '" +
                                          schema_name->get<std::string>() + "': " +
                                          grammar.error().path + ": " + grammar.error().message,
                                      "invalid_json_schema"});
  }
  return *grammar;
}

// n (OpenAI's choices): 1 when absent or null; otherwise an integer from 1 to `max` (the engine's
// bound: every choice is a running sequence).
std::expected<int32_t, FieldError> ChoicesFrom(const json& body, int32_t max) {
  auto it = body.find("n");
  if (it == body.end() || it->is_null()) return 1;
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > max) {
    return std::unexpected(FieldError{
        "n", "n must be an integer between 1 and " + std::to_string(max) +
                 " on this engine (each choice is a running sequence: max_running)",
        "invalid_request"});
  }
  return static_cast<int32_t>(it->get<int64_t>());
}

// logprobs / top_logprobs (chat) or logprobs: N (completions), taken out of `body` so that the
// checks for features the engine lacks do not see them: SamplingParams::logprobs (-1: none).
std::expected<int32_t, FieldError> LogprobsFrom(json& body, bool chat) {
  auto take = [&](const char* key) {
    json v;
    if (auto it = body.find(key); it != body.end()) {
      v = std::move(*it);
      body.erase(it);
    }
    return v;
  };
  const json logprobs = take("logprobs");
  const json top = take("top_logprobs");
  const std::string range = "between 0 and " + std::to_string(engine::kMaxTopLogprobs);
  auto fail = [](std::string param, std::string message) {
    return std::unexpected(FieldError{std::move(param), std::move(message), "invalid_request"});
  };
  if (!chat) {
    if (!top.is_null()) return fail("top_logprobs", "top_logprobs is for chat completions");
    if (logprobs.is_null()) return -1;
    if (!logprobs.is_number_integer() || logprobs.get<int64_t>() < 0 ||
        logprobs.get<int64_t>() > engine::kMaxTopLogprobs) {
      return fail("logprobs", "logprobs must be an integer " + range);
    }
    return static_cast<int32_t>(logprobs.get<int64_t>());
  }
  if (!logprobs.is_null() && !logprobs.is_boolean()) {
    return fail("logprobs", "logprobs must be a boolean");
  }
  const bool on = logprobs.is_boolean() && logprobs.get<bool>();
  if (top.is_null()) return on ? 0 : -1;
  if (!top.is_number_integer() || top.get<int64_t>() < 0 ||
      top.get<int64_t>() > engine::kMaxTopLogprobs) {
    return fail("top_logprobs", "top_logprobs must be an integer " + range);
  }
  if (!on) return fail("top_logprobs", "top_logprobs needs logprobs: true");
  return static_cast<int32_t>(top.get<int64_t>());
}

Result<engine::SamplingParams> SamplingFrom(const json& body) {
  if (std::optional<std::string> unsupported =
          providers::UnsupportedFeature(body, "the built-in engine")) {
    return MakeError(ErrorCode::kInvalidArgument, std::move(*unsupported));
  }
  engine::SamplingParams p;
  p.temperature = 1.0f;  // OpenAI's default
  auto number = [&](const char* key, float& slot) -> Status {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return {};
    if (!it->is_number()) {
      return MakeError(ErrorCode::kInvalidArgument, std::string(key) + " must be a number");
    }
    slot = it->get<float>();
    return {};
  };
  for (auto [key, slot] : {std::pair{"temperature", &p.temperature}, {"top_p", &p.top_p},
                           {"min_p", &p.min_p}, {"presence_penalty", &p.presence_penalty},
                           {"frequency_penalty", &p.frequency_penalty},
                           {"repetition_penalty", &p.repetition_penalty}}) {
    if (auto s = number(key, *slot); !s) return std::unexpected(s.error());
  }
  for (auto [key, value] : {std::pair{"presence_penalty", p.presence_penalty},
                            {"frequency_penalty", p.frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {  // OpenAI's range
      return MakeError(ErrorCode::kInvalidArgument, std::string(key) + " must be between -2 and 2");
    }
  }
  auto integer = [&](const char* key) -> Result<std::optional<int64_t>> {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::optional<int64_t>{};
    if (!it->is_number_integer()) {
      return MakeError(ErrorCode::kInvalidArgument, std::string(key) + " must be an integer");
    }
    return std::optional<int64_t>{it->get<int64_t>()};
  };
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    auto v = integer(key);
    if (!v) return std::unexpected(v.error());
    if (*v) {
      if (**v < 1) return MakeError(ErrorCode::kInvalidArgument, std::string(key) + " must be >= 1");
      p.max_tokens = static_cast<int32_t>(std::min<int64_t>(**v, 1 << 20));
      break;
    }
  }
  auto top_k = integer("top_k");
  if (!top_k) return std::unexpected(top_k.error());
  if (*top_k) p.top_k = static_cast<int32_t>(**top_k);
  auto seed = integer("seed");
  if (!seed) return std::unexpected(seed.error());
  if (*seed) p.seed = static_cast<uint64_t>(**seed);
  if (auto stop = body.find("stop"); stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 4) {
      for (const auto& s : *stop) {
        if (!s.is_string()) return MakeError(ErrorCode::kInvalidArgument, "stop must be strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      return MakeError(ErrorCode::kInvalidArgument, "stop must be a string or up to 4 strings");
    }
  }
  if (auto s = engine::ValidateSamplingParams(p); !s) return std::unexpected(s.error());
  return p;
}

// The prompt text for the engine: the chat template over the messages (with the tools when
// `tools` is active), or the raw prompt.
std::expected<std::string, FieldError> PromptText(const EngineHost& host, const json& body,
                                                  providers::Endpoint endpoint,
                                                  const ToolRequest& tools) {
  if (endpoint == providers::Endpoint::kCompletions) {
    auto prompt = body.find("prompt");
    if (prompt == body.end() || !prompt->is_string()) {
      return std::unexpected(
          FieldError{"prompt", "prompt must be a string for the built-in engine", "invalid_request"});
    }
    return prompt->get<std::string>();
  }
  auto messages = body.find("messages");
  auto chat = ChatMessagesFor(messages == body.end() ? json() : *messages, tools,
                              host.chat_template().default_system);
  if (!chat) return std::unexpected(chat.error());
  auto text = engine::ApplyChatTemplate(host.chat_template(), *chat, /*add_generation_prompt=*/true);
  if (!text) return std::unexpected(FieldError{"messages", text.error().message, "invalid_request"});
  return *text;
}

// An attempt that ends with nothing sent: `error` is what the client would get.
AttemptResult Refused(int status, std::string message, const char* type, const char* code,
                      router::Failure failure, std::string param = "") {
  AttemptResult r;
  r.message = message;
  r.error = providers::MakeOpenAIError(status, std::move(message), type, code, std::move(param));
  r.status_word = "error";
  r.outcome.failure = failure;
  r.outcome.status = status;
  return r;
}

// Why an explicit max_tokens or the prompt itself does not fit the engine's context (OpenAI's
// wording and code: clients look for it to trim history), or "" when it fits.
std::string TooLong(int64_t prompt_tokens, int64_t context_length, bool asked_max,
                    int64_t max_tokens, const std::string& what) {
  if (prompt_tokens >= context_length) {
    return "This model's maximum context length is " + std::to_string(context_length) +
           " tokens. However, your " + what + " resulted in " + std::to_string(prompt_tokens) +
           " tokens" +
           (prompt_tokens == context_length ? ", which leaves no room for a completion" : "") +
           ". Please reduce the length of the " + what + ".";
  }
  // An explicit max_tokens must fit beside the prompt (OpenAI and vLLM refuse it too): otherwise
  // a "length" finish would come before max_tokens.
  if (asked_max && prompt_tokens + max_tokens > context_length) {
    return "This model's maximum context length is " + std::to_string(context_length) +
           " tokens. However, you requested " + std::to_string(prompt_tokens + max_tokens) +
           " tokens (" + std::to_string(prompt_tokens) + " in the " + what + ", " +
           std::to_string(max_tokens) + " in the completion). Please reduce the length of the " +
           what + " or completion.";
  }
  return "";
}

class LocalEnginesImpl final : public LocalEngines {
 public:
  explicit LocalEnginesImpl(std::map<std::string, std::unique_ptr<EngineHost>> hosts)
      : hosts_(std::move(hosts)) {}

  asio::awaitable<AttemptResult> Attempt(const InferenceCall& call, const AttemptPlan& plan,
                                         ClientStream& client) override;

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

  Result<json> Lookup(const router::Target& target, const json& body,
                      std::string_view api_key_id) const override {
    auto it = hosts_.find(target.provider);
    if (it == hosts_.end()) {
      return MakeError(ErrorCode::kNotFound, "engine " + target.provider + " is not running");
    }
    const EngineHost& host = *it->second;
    const bool chat = body.contains("messages");
    // (The body's key order is gone here: a tool's parameters are described in sorted order,
    // which may differ from the request's and so count fewer cached tokens.)
    auto tools = chat ? ParseToolRequest(ordered_json(body)) : ToolRequest{};
    if (!tools) return MakeError(ErrorCode::kInvalidArgument, tools.error().message);
    auto text = PromptText(host, body,
                           chat ? providers::Endpoint::kChatCompletions
                                : providers::Endpoint::kCompletions,
                           *tools);
    if (!text) return MakeError(ErrorCode::kInvalidArgument, text.error().message);
    std::vector<int32_t> prompt = host.engine().tokenizer().Encode(*text, true);
    const engine::CacheStats stats = host.engine().cache_stats();
    const engine::CachedPrefix cached =
        host.engine().LookupCachedPrefix(prompt, host.CacheSalt(api_key_id));
    return json{{"model", target.name},
                {"prompt_tokens", prompt.size()},
                {"cached_tokens", cached.pool_tokens + cached.offload_tokens},
                // {"pool", "disk"} (no tier, or a file) or {"pool", "host"}: the tier by its kind.
                {"cached_tokens_by_tier",
                 {{"pool", cached.pool_tokens},
                  {stats.offload_kind == "host" ? "host" : "disk", cached.offload_tokens}}},
                {"running", stats.running},
                {"waiting", stats.waiting}};
  }

 private:
  std::map<std::string, std::unique_ptr<EngineHost>> hosts_;
};

asio::awaitable<AttemptResult> LocalEnginesImpl::Attempt(const InferenceCall& call,
                                                         const AttemptPlan& plan,
                                                         ClientStream& client) {
  using router::Failure;
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
  // The engine renders the chat template from a tree; schemas (response_format, tools) are read
  // from an ordered one, so that objects are generated with their keys in the declared order.
  json body = json::parse(call.body.value().text, nullptr, false);
  const ordered_json ordered = ordered_json::parse(call.body.value().text, nullptr, false);
  providers::TakeKvgateFields(body);
  const bool chat = call.endpoint == providers::Endpoint::kChatCompletions;
  auto bad_field = [](const FieldError& e) {
    return Refused(400, e.message, "invalid_request_error", e.code.c_str(), router::Failure::kOther,
                   e.param);
  };
  if (std::optional<std::string> param = UnsupportedByEngine(body, chat)) {
    co_return Refused(400, "'" + *param + "' is not supported by the built-in engine",
                      "invalid_request_error", "unsupported_parameter", Failure::kOther, *param);
  }
  auto grammar = GrammarFrom(ordered);
  if (!grammar) co_return bad_field(grammar.error());
  body.erase("response_format");
  auto tools = chat ? ParseToolRequest(ordered) : ToolRequest{};
  if (!tools) co_return bad_field(tools.error());
  for (const char* key : {"tools", "tool_choice", "parallel_tool_calls"}) body.erase(key);
  if (tools->active()) {
    if (*grammar) {
      co_return bad_field({"response_format",
                           "response_format other than text beside tools is not supported by the "
                           "built-in engine (unless tool_choice is none)"});
    }
    auto tool_grammar = ToolGrammar(*tools);
    if (!tool_grammar) co_return bad_field(tool_grammar.error());
    *grammar = std::move(*tool_grammar);
  }
  auto logprobs = LogprobsFrom(body, chat);
  if (!logprobs) co_return bad_field(logprobs.error());
  auto choices = ChoicesFrom(body, host.engine().max_choices());
  if (!choices) co_return bad_field(choices.error());
  auto sampling = SamplingFrom(body);
  if (!sampling) {
    co_return Refused(400, sampling.error().message, "invalid_request_error", "invalid_request",
                      Failure::kOther);
  }
  sampling->json_grammar = std::move(*grammar);
  sampling->logprobs = *logprobs;
  const int32_t request_logprobs = *logprobs;
  auto prompt_text = PromptText(host, body, call.endpoint, *tools);
  if (!prompt_text) co_return bad_field(prompt_text.error());
  std::vector<int32_t> prompt = host.engine().tokenizer().Encode(*prompt_text, true);
  bool asked_max = false;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    asked_max = asked_max || (body.contains(key) && !body[key].is_null());
  }
  const std::string what = chat ? "messages" : "prompt";
  const int64_t context_length = host.engine().dims().context_length;
  if (std::string too_long = TooLong(static_cast<int64_t>(prompt.size()), context_length,
                                     asked_max, sampling->max_tokens, what);
      !too_long.empty()) {
    co_return Refused(400, std::move(too_long), "invalid_request_error", "context_length_exceeded",
                      Failure::kOther, what);
  }
  if (!asked_max) {
    // To the end of the context, bounded by the provider's max_output_tokens_default.
    int64_t room = context_length - static_cast<int64_t>(prompt.size());
    if (host.max_output_tokens_default() > 0) room = std::min(room, host.max_output_tokens_default());
    sampling->max_tokens = static_cast<int32_t>(std::min<int64_t>(room, 1 << 30));
  }

  auto executor = co_await asio::this_coro::executor;
  // Owned by this coroutine alone: the engine (which may keep a cancelled request until its next
  // step, or until it is destroyed at shutdown) holds only a weak reference, so the channel's
  // timer never outlives the event loop it belongs to.
  auto channel = std::make_shared<Channel>(executor);
  engine::EngineRequest request{
      .prompt = std::move(prompt),
      .sampling = std::move(*sampling),
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
      .n = *choices,
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
  EngineAnswer answer(head, *choices, tools->active(), request_logprobs, host.engine().tokenizer());
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
    json err = {{"error", {{"message", message}, {"type", "server_error"}, {"code", "engine_error"}}}};
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

uint64_t PrefixCacheSalt(std::string_view api_key_id) {
  if (api_key_id.empty()) return 0;
  // A prefix separates this use of the hash from any other of the same id.
  const std::string digest = HashApiKey("kvgate prefix cache salt\n" + std::string(api_key_id));
  uint64_t salt = std::strtoull(digest.substr(0, 16).c_str(), nullptr, 16);
  return salt != 0 ? salt : 1;
}

Result<std::unique_ptr<LocalEngines>> LocalEngines::Start(const GatewayConfig& config) {
  std::map<std::string, std::unique_ptr<EngineHost>> hosts;
  for (const auto& p : config.providers) {
    if (p.type != "local") continue;
    const auto device = engine::ParseDevice(p.device);
    if (!device) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "provider " + p.name + ": device must be cpu or cuda, got " + p.device);
    }
    // Before the model is read: a missing GPU or a build without CUDA is the whole story.
    if (auto s = engine::CheckDevice(*device); !s) {
      return MakeError(s.error().code,
                       "provider " + p.name + ": " + s.error().message + "; use device: cpu");
    }
    const auto dtype = engine::ParseKvCacheDtype(p.kv_cache_dtype);
    if (!dtype) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "provider " + p.name + ": kv_cache_dtype " + dtype.error().message);
    }
    engine::EngineOptions options;
    options.model_path = p.model_path;
    options.device = *device;
    options.kv_cache_dtype = *dtype;
    options.gpu_memory_fraction = p.gpu_memory_fraction;
    options.cuda_graphs = p.cuda_graphs;
    options.fp8_gemm = p.fp8_gemm;
    options.offload = {.disk_path = p.offload_disk,
                       .bytes = p.offload_bytes,
                       .host_bytes = p.offload_host_bytes};
    options.threads = p.threads > 0 ? p.threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (p.kv_cache_tokens > 0) {
      const int64_t blocks = (p.kv_cache_tokens + engine::kBlockSize - 1) / engine::kBlockSize;
      if (blocks > std::numeric_limits<int32_t>::max()) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "provider " + p.name + ": kv_cache_tokens " +
                             std::to_string(p.kv_cache_tokens) + " is too large");
      }
      options.num_kv_blocks = static_cast<int32_t>(blocks);
    }
    auto created = engine::Engine::Create(options);
    if (!created) {
      return MakeError(created.error().code,
                       "provider " + p.name + " (" + p.model_path + "): " + created.error().message);
    }
    auto tmpl = engine::ChatTemplateFromGguf((*created)->gguf());
    if (!tmpl) {
      return MakeError(tmpl.error().code, "provider " + p.name + " (" + p.model_path +
                                              "): chat template: " + tmpl.error().message);
    }
    hosts.emplace(p.name, std::make_unique<EngineHost>(p.name, std::move(*created), *tmpl,
                                                       p.max_output_tokens_default,
                                                       p.share_prefix_cache_across_keys));
  }
  return std::unique_ptr<LocalEngines>(new LocalEnginesImpl(std::move(hosts)));
}

}  // namespace kvgate::gateway
