// What every client API shares: the model and stream fields, the default thread (scoped to the
// gateway key), the router's content facts, the refusal of targets that cannot serve an API, and
// the plan of a translated attempt.
#include <algorithm>
#include <cstdlib>

#include "common/utf8.h"
#include "gateway/api/client_api.h"
#include "gateway/thread_directory.h"

namespace kvgate::gateway::api {
namespace {

// True for a non-empty array (tools, functions) or any other non-null value.
bool Present(const raw_json::Object& body, std::string_view key) {
  std::optional<raw_json::Value> v = body.Find(key);
  if (!v || v->is_null()) return false;
  return !v->is_array() || !raw_json::Elements(*v).empty();
}

std::optional<std::string> TypeOf(raw_json::Value object) {
  std::optional<raw_json::Value> type = raw_json::Find(object, "type");
  return type ? raw_json::DecodeString(*type) : std::nullopt;
}

}  // namespace

boost::asio::awaitable<std::optional<providers::ClientError>> ApiCall::ResolveThread(
    ThreadDirectory& threads, telemetry::RequestRecord& record) {
  // Gateway keys: a thread id names a thread of the key's own (thread_scope.h).
  if (!record.api_key_id.empty() && !record.thread_id.empty()) {
    record.thread_id = co_await threads.Scope(record.thread_id, record.api_key_id);
  }
  co_return std::nullopt;
}

void ApiCall::FillContentFacts(router::RequestFacts& facts) const {
  const raw_json::Object& body = body_;
  facts.tools = Present(body, "tools") || Present(body, "functions");
  if (std::optional<raw_json::Value> format = body.Find("response_format");
      format && !format->is_null()) {
    std::optional<std::string> name = TypeOf(*format);
    facts.response_format = !name || *name != "text";
  }
  // The Responses API's structured output is text.format.
  if (std::optional<raw_json::Value> text = body.Find("text"); text && text->is_object()) {
    std::optional<raw_json::Value> format = raw_json::Find(*text, "format");
    std::optional<std::string> name = format ? TypeOf(*format) : std::nullopt;
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
        std::optional<std::string> name = TypeOf(part);
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

providers::ClientError BadRequest(std::string message, std::string code, std::string param) {
  return providers::MakeOpenAIError(400, std::move(message), "invalid_request_error",
                                    std::move(code), std::move(param));
}

std::optional<providers::ClientError> ReadModelAndStream(const raw_json::Object& body,
                                                         telemetry::RequestRecord& record) {
  std::optional<raw_json::Value> model = body.Find("model");
  std::optional<std::string> name = model ? raw_json::DecodeString(*model) : std::nullopt;
  if (!name || name->empty()) {
    return BadRequest("you must provide a model parameter", "missing_model", "model");
  }
  if (Status valid = providers::ValidateModelName(*name); !valid) {
    record.model = Utf8Snippet(*name, providers::kMaxModelNameBytes);  // recorded, cut
    return BadRequest(valid.error().message, "invalid_model", "model");
  }
  record.model = std::move(*name);
  std::optional<raw_json::Value> stream = body.Find("stream");
  if (stream && stream->kind != raw_json::Kind::kBool && !stream->is_null()) {
    return BadRequest("stream must be a boolean", "invalid_type", "stream");
  }
  record.stream = stream && stream->is_true();
  return std::nullopt;
}

std::optional<providers::ClientError> ReadOpenAIRequest(const http::Request& request,
                                                        const raw_json::Object& body,
                                                        telemetry::RequestRecord& record) {
  Result<providers::ClientThread> named =
      providers::ThreadIdOf(body, request.header("x-thread-id"));
  if (named && named->id.empty()) {
    if (providers::AgentSession session = AgentSessionHeader(request); !session.value.empty()) {
      named = providers::ClientThread{std::string(session.value), telemetry::kThreadFromHeader};
      if (Status valid = providers::ValidateThreadId(
              session.value, "the " + std::string(session.header) + " header");
          !valid) {
        named = std::unexpected(valid.error());
      }
    }
  }
  if (!named) return BadRequest(named.error().message, "invalid_thread_id");
  record.thread_id = std::move(named->id);
  record.thread_source = named->source;
  return ReadModelAndStream(body, record);
}

providers::AgentSession AgentSessionHeader(const http::Request& request) {
  for (std::string_view name : providers::kAgentSessionHeaders) {
    if (std::string_view value = request.header(name); !value.empty()) return {name, value};
  }
  return {};
}

AnswerStyle OpenAIStyle() {
  return {.shape_error = nullptr, .cut_event = providers::ShutdownCutEvent()};
}

AttemptResult Untranslatable(const Error& error) {
  const bool internal = error.code != ErrorCode::kInvalidArgument;
  return FailedAttempt(
      providers::MakeOpenAIError(internal ? 500 : 400, error.message,
                                 internal ? "server_error" : "invalid_request_error",
                                 internal ? "internal_error" : "invalid_request"),
      "error", router::Failure::kOther);
}

std::optional<AttemptResult> PlanChat(const InferenceCall& call, std::string text,
                                      providers::CallOptions& options, WirePlan& plan) {
  plan.translated_text = std::make_unique<std::string>(std::move(text));
  Result<raw_json::Value> parsed = raw_json::Parse(*plan.translated_text);
  if (!parsed) {
    return Untranslatable(MakeError(ErrorCode::kInternal,
                                    "the translated request is not valid "
                                    "JSON: " +
                                        parsed.error().message)
                              .error());
  }
  InferenceCall& chat = plan.translated.emplace(call);
  chat.endpoint = providers::Endpoint::kChatCompletions;
  chat.body = raw_json::Object(*parsed);
  chat.client_wants_usage = true;
  options.endpoint = chat.endpoint;
  options.client_wants_usage = true;
  return std::nullopt;
}

std::optional<providers::ClientError> RefuseUnserved(
    const router::RouteDecision& decision, const std::vector<router::Target>& targets,
    const std::string& model, bool (*serves)(const router::Target&), std::string_view path,
    std::string_view support, std::string_view how, std::string_view advice) {
  bool eligible_serves = false, any_serves = false;
  for (size_t i = 0; i < decision.candidates.size(); ++i) {
    const bool s = serves(targets[decision.candidates[i].target]);
    any_serves = any_serves || s;
    if (i < decision.eligible) eligible_serves = eligible_serves || s;
  }
  // Targets that could serve it but are unhealthy now: the 503 that says so, not a 400.
  if (eligible_serves || (decision.eligible == 0 && any_serves)) return std::nullopt;
  std::string which;
  for (const router::Candidate& c : decision.candidates) {
    const router::Target& t = targets[c.target];
    if (serves(t)) continue;
    which += which.empty() ? "" : "; ";
    const std::string type(telemetry::ProviderTypeName(t.type));
    if (!telemetry::PassesThrough(t.type)) {
      which += "target " + t.name + " is served by provider " + t.provider + " of type " + type +
               ", which cannot serve " + std::string(path);
    } else {
      which += "target " + t.name + " (provider " + t.provider + " of type " + type +
               ") has supports." + std::string(support) + ": false";
    }
  }
  std::string message = "model " + Utf8Snippet(model) + " cannot serve " + std::string(path) +
                        ": " + which + ". kvgate passes " + std::string(path) + std::string(how) +
                        "; use " + std::string(advice);
  return providers::MakeOpenAIError(400, std::move(message), "invalid_request_error",
                                    "unsupported_endpoint", "model");
}

}  // namespace kvgate::gateway::api
