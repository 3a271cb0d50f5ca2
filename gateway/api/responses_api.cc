// POST /v1/responses: the OpenAI Responses API. Passed through to providers that support it; for
// the built-in engine and Anthropic providers (which speak only chat) the request is told as a
// chat request, with the conversation of previous_response_id that kvgate kept, and the chat
// answer told back as a `response` (or the Responses events), the conversation then kept for the
// next turn. A request that continues a response joins that response's thread; a stored response
// that starts a conversation names its thread (its own id).
#include "common/raw_json.h"
#include "gateway/api/apis.h"
#include "gateway/api/client_api.h"
#include "gateway/providers/responses_translate.h"
#include "gateway/thread_directory.h"

namespace kvgate::gateway::api {
namespace {

AttemptResult Refused(providers::ClientError error) {
  return FailedAttempt(std::move(error), "error", router::Failure::kOther);
}

// The answer to a previous_response_id that is unknown, or another gateway key's (the same
// answer: OpenAI's, so that an id of another key's reads exactly as one never made; also for an
// id this replica forgot, or never translated).
AttemptResult PreviousResponseNotFound(const std::string& response_id) {
  return Refused(providers::MakeOpenAIError(
      400, "Previous response with id '" + response_id + "' not found.", "invalid_request_error",
      "previous_response_not_found", "previous_response_id"));
}

// `conversation` (a JSON array of chat messages) with `message` appended.
std::string Appended(const std::string& conversation, const std::string& message) {
  std::string out = conversation;
  while (!out.empty() && out.back() != ']') out.pop_back();
  if (out.empty()) return "[" + message + "]";
  out.pop_back();
  const bool empty = out.find_last_not_of(" \n\t") == 0;  // only the '['
  return out + (empty ? "" : ",") + message + "]";
}

// A chat answer as a `response` or the Responses events; once complete, the conversation it
// finishes is kept for the turn that continues it (a stored response's only).
class ResponsesEncoder final : public AnswerEncoder {
 public:
  // `threads` must outlive the encoder; `remember` false: the response is not stored.
  ResponsesEncoder(providers::ResponsesChat chat, ResponseThreads& threads, bool remember,
                   std::string api_key_id)
      : echo_(std::move(chat.echo)),
        conversation_(std::move(chat.conversation)),
        threads_(threads),
        remember_(remember),
        api_key_id_(std::move(api_key_id)),
        stream_(providers::NewResponsesAnswerStream(echo_)) {}

  Result<std::string> Whole(std::string_view chat_body) override {
    providers::ResponsesOutcome outcome;
    Result<std::string> response = providers::ChatToResponse(chat_body, echo_, &outcome);
    if (!response) return response;
    id_ = outcome.response_id;
    Complete(outcome);
    return response;
  }
  std::string Feed(std::string_view chat_events) override {
    std::string out = stream_->Feed(chat_events);
    if (stream_->outcome()) Complete(*stream_->outcome());
    return out;
  }
  std::string Finish() override { return stream_->Finish(); }
  std::string_view answer_id() const override {
    return id_.empty() ? std::string_view(stream_->response_id()) : std::string_view(id_);
  }

 private:
  void Complete(const providers::ResponsesOutcome& outcome) {
    if (!remember_) return;
    remember_ = false;  // once
    threads_.RememberConversation(outcome.response_id,
                                  Appended(conversation_, outcome.assistant_message), api_key_id_);
  }

  const std::string echo_;
  const std::string conversation_;
  ResponseThreads& threads_;
  bool remember_;
  const std::string api_key_id_;
  std::unique_ptr<providers::ResponsesAnswerStream> stream_;
  std::string id_;  // a whole answer's
};

bool ServesResponses(const router::Target& target) { return target.capabilities.responses; }

class ResponsesCall final : public ApiCall {
 public:
  ResponsesCall(raw_json::Object body, std::string previous_response)
      : ApiCall(body), previous_response_(std::move(previous_response)) {
    std::optional<raw_json::Value> store = body.Find("store");
    stored_ = !(store && store->kind == raw_json::Kind::kBool && !store->is_true());
  }

  boost::asio::awaitable<std::optional<providers::ClientError>> ResolveThread(
      ThreadDirectory& threads, telemetry::RequestRecord& record) override {
    threads_ = &threads;
    api_key_id_ = record.api_key_id;
    const bool keys = !record.api_key_id.empty();
    // Gateway keys: a thread id names a thread of the key's own (thread_scope.h), and another
    // key's response is continued by no one (its id answers as an unknown one, in Plan).
    if (keys && !record.thread_id.empty()) {
      record.thread_id = co_await threads.Scope(record.thread_id, record.api_key_id);
    }
    if (!previous_response_.empty() && (keys || record.thread_id.empty())) {
      ThreadDirectory::PreviousResponse previous =
          co_await threads.ThreadOfResponse(previous_response_, record.api_key_id);
      other_keys_response_ = previous.other_key;
      if (record.thread_id.empty() && !previous.thread_id.empty()) {
        record.thread_id = std::move(previous.thread_id);
        record.thread_source = telemetry::kThreadFromResponseChain;
      } else if (record.thread_id.empty()) {
        // A conversation kvgate has not seen begin (or another key's: the same to this one): the
        // response id names the thread.
        if (Status valid = providers::ValidateThreadId(previous_response_, "previous_response_id");
            !valid) {
          co_return BadRequest(valid.error().message, "invalid_thread_id");
        }
        record.thread_id = co_await threads.Scope(previous_response_, record.api_key_id);
        record.thread_source = telemetry::kThreadFromResponseChain;
        if (!other_keys_response_) {
          threads.responses().Remember(previous_response_, record.thread_id, record.api_key_id);
        }
      }
    }
    // A stored response that starts a conversation names its thread (its own id), so that the
    // turns continuing it land there (docs/api.md). One not stored cannot be continued.
    starts_thread_ = record.thread_id.empty() && stored_;
    co_return std::nullopt;
  }

  // A prompt the provider completes from its own state is not the prompt kvgate sees.
  bool whole_prompt() const override { return previous_response_.empty(); }
  bool thread_from_answer() const override { return starts_thread_; }

  void FillNeeds(router::RequestFacts& facts) const override { facts.responses_api = true; }

  // The engines serve a Responses request as the chat request it becomes: the probe asks about
  // that (its stored conversation included); nothing when it cannot be translated (the attempt
  // then answers the 400), as when its conversation is another key's.
  std::optional<std::string> ProbeBody() const override {
    std::optional<std::string> history;
    if (!previous_response_.empty()) {
      if (threads_ == nullptr || other_keys_response_) return std::nullopt;
      history = threads_->responses().FindConversation(previous_response_, api_key_id_);
      if (!history) return std::nullopt;
    }
    providers::ResponsesChat chat =
        providers::ResponsesToChat(body().value().text, history ? &*history : nullptr);
    if (chat.error) return std::nullopt;
    return std::move(chat.chat_body);
  }

  std::expected<WirePlan, AttemptResult> Plan(const InferenceCall& call,
                                              providers::ProviderType type,
                                              providers::CallOptions& options) override {
    WirePlan plan;
    if (!TranslatesResponses(type)) {
      if (other_keys_response_)
        return std::unexpected(PreviousResponseNotFound(previous_response_));
      return plan;  // passed through
    }
    std::optional<std::string> history;
    if (!previous_response_.empty()) {
      if (!other_keys_response_ && threads_ != nullptr) {
        history = threads_->responses().FindConversation(previous_response_, api_key_id_);
      }
      if (!history) return std::unexpected(PreviousResponseNotFound(previous_response_));
    }
    providers::ResponsesChat chat =
        providers::ResponsesToChat(body().value().text, history ? &*history : nullptr);
    if (chat.error) return std::unexpected(Refused(std::move(*chat.error)));
    if (auto failed = PlanChat(call, std::move(chat.chat_body), options, plan)) {
      return std::unexpected(std::move(*failed));
    }
    plan.encoder = std::make_unique<ResponsesEncoder>(std::move(chat), threads_->responses(),
                                                      stored_, api_key_id_);
    return plan;
  }

  // The response's thread bookkeeping: a later request may continue this response.
  void OnAnswerId(telemetry::RequestRecord& record) override {
    if (threads_ == nullptr) return;
    if (record.thread_id.empty() && starts_thread_ &&
        providers::ValidateThreadId(record.response_id, "the response id")) {
      // A new id, so its key's own (unless a client of another key named a thread so first).
      record.thread_id = threads_->ClaimNew(record.response_id, record.api_key_id);
      record.thread_source = telemetry::kThreadFromResponseChain;
    }
    threads_->responses().Remember(record.response_id, record.thread_id, record.api_key_id);
  }

 private:
  // Whether a Responses request to a provider of `type` is told as chat (rather than passed
  // through, or refused).
  static bool TranslatesResponses(providers::ProviderType type) {
    return telemetry::TraitsOf(type).translates_responses;
  }

  const std::string previous_response_;  // "" when the request continues none
  bool stored_ = true;
  // Set by ResolveThread.
  ThreadDirectory* threads_ = nullptr;
  std::string api_key_id_;
  bool other_keys_response_ = false;  // previous_response_ is another gateway key's
  bool starts_thread_ = false;
};

class ResponsesApi final : public ClientApi {
 public:
  ResponsesApi() : ClientApi(OpenAIStyle()) {}
  providers::Endpoint endpoint() const override { return providers::Endpoint::kResponses; }

  std::expected<std::unique_ptr<ApiCall>, providers::ClientError> Read(
      const http::Request& request, const raw_json::Object& body,
      telemetry::RequestRecord& record) const override {
    if (auto error = ReadOpenAIRequest(request, body, record)) {
      return std::unexpected(std::move(*error));
    }
    std::string previous_response;
    if (std::optional<raw_json::Value> previous = body.Find("previous_response_id");
        previous && !previous->is_null()) {
      previous_response = raw_json::DecodeString(*previous).value_or("");
      if (previous_response.empty()) {
        return std::unexpected(BadRequest("previous_response_id must be a non-empty string",
                                          "invalid_type", "previous_response_id"));
      }
    }
    return std::make_unique<ResponsesCall>(body, std::move(previous_response));
  }

  std::optional<providers::ClientError> RefuseTargets(const router::RouteDecision& decision,
                                                      const std::vector<router::Target>& targets,
                                                      const std::string& model) const override {
    return RefuseUnserved(decision, targets, model, &ServesResponses, "/v1/responses", "responses",
                          " through to OpenAI-compatible providers (translating it for the "
                          "built-in engine and Anthropic)",
                          "/v1/chat/completions, or a model of such a provider");
  }
};

}  // namespace

std::unique_ptr<ClientApi> NewResponsesApi() { return std::make_unique<ResponsesApi>(); }

}  // namespace kvgate::gateway::api
