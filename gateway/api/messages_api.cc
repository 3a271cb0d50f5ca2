// POST /v1/messages: Anthropic Messages clients (Claude Code, the Anthropic SDKs). Passed through
// to Anthropic providers; for every other provider the request is told in OpenAI chat's terms
// (providers/messages.h) and the chat answer told back as a Message or Anthropic's events. Errors
// and the stream-cut event are Anthropic's.
#include <algorithm>

#include "gateway/api/apis.h"
#include "gateway/api/client_api.h"
#include "gateway/providers/messages.h"

namespace kvgate::gateway::api {
namespace {

// A chat answer as a Message, or as Anthropic's events.
class MessagesEncoder final : public AnswerEncoder {
 public:
  Result<std::string> Whole(std::string_view chat_body) override {
    Result<std::string> message = providers::ChatToMessage(chat_body);
    if (message) id_ = providers::ResponseIdOf(*message);
    return message;
  }
  std::string Feed(std::string_view chat_events) override { return stream_->Feed(chat_events); }
  std::string Finish() override { return stream_->Finish(); }
  std::string_view answer_id() const override {
    return id_.empty() ? std::string_view(stream_->message_id()) : std::string_view(id_);
  }

 private:
  std::unique_ptr<providers::MessagesAnswerStream> stream_ = providers::NewMessagesAnswerStream();
  std::string id_;  // a whole answer's
};

class MessagesCall final : public ApiCall {
 public:
  MessagesCall(raw_json::Object body, std::string version, std::string beta)
      : ApiCall(body), version_(std::move(version)), beta_(std::move(beta)) {}

  std::expected<WirePlan, AttemptResult> Plan(const InferenceCall& call,
                                              providers::ProviderType type,
                                              providers::CallOptions& options) override {
    options.anthropic_version = version_;
    options.anthropic_beta = beta_;
    WirePlan plan;
    const telemetry::ProviderTraits& traits = telemetry::TraitsOf(type);
    if (!traits.translates_messages) return plan;  // its own wire: passed through
    // OpenAI itself refuses top_k; the servers that sample locally take it.
    Result<std::string> chat = providers::MessagesToChat(body(), {.top_k = traits.accepts_top_k});
    if (!chat) return std::unexpected(Untranslatable(chat.error()));
    if (auto failed = PlanChat(call, std::move(*chat), options, plan)) {
      return std::unexpected(std::move(*failed));
    }
    plan.encoder = std::make_unique<MessagesEncoder>();
    return plan;
  }

 private:
  // The client's anthropic-version and anthropic-beta headers ("" when absent), for Anthropic.
  const std::string version_;
  const std::string beta_;
};

providers::ClientError ShapeAnthropic(const providers::ClientError& error) {
  return providers::ToAnthropicError(error);
}

class MessagesApi final : public ClientApi {
 public:
  MessagesApi()
      : ClientApi({.shape_error = &ShapeAnthropic,
                   .error_event = &providers::AnthropicErrorEvent,
                   .cut_event = providers::AnthropicShutdownCutEvent()}) {}
  providers::Endpoint endpoint() const override { return providers::Endpoint::kMessages; }

  std::expected<std::unique_ptr<ApiCall>, providers::ClientError> Read(
      const http::Request& request, const raw_json::Object& body,
      telemetry::RequestRecord& record) const override {
    // Messages clients also name their conversation by an agent's session header (Claude
    // Code's) or metadata.user_id (docs/api.md).
    Result<providers::ClientThread> named = providers::MessagesThreadIdOf(
        body, request.header("x-thread-id"), AgentSessionHeader(request));
    if (!named) return std::unexpected(BadRequest(named.error().message, "invalid_thread_id"));
    record.thread_id = std::move(named->id);
    record.thread_source = named->source;
    if (auto error = ReadModelAndStream(body, record)) return std::unexpected(std::move(*error));
    // Passed on only as printable ASCII (what their values are): nothing a client sends can
    // reach another server's request head as anything but these two fields.
    auto printable = [&request](std::string_view name) {
      std::string_view v = request.header(name);
      const bool ok = std::all_of(v.begin(), v.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
      return ok ? std::string(v) : std::string();
    };
    return std::make_unique<MessagesCall>(body, printable("anthropic-version"),
                                          printable("anthropic-beta"));
  }
};

}  // namespace

std::unique_ptr<ClientApi> NewMessagesApi() { return std::make_unique<MessagesApi>(); }

}  // namespace kvgate::gateway::api
