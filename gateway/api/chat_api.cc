// POST /v1/chat/completions and /v1/completions: OpenAI's own API, which every upstream speaks
// (the Anthropic adapter and the built-in engine take it as it is), so it always passes through.
#include "gateway/api/apis.h"
#include "gateway/api/client_api.h"

namespace kvgate::gateway::api {
namespace {

class ChatCall final : public ApiCall {
 public:
  explicit ChatCall(raw_json::Object body) : ApiCall(body) {}
  std::expected<WirePlan, AttemptResult> Plan(const InferenceCall&, providers::ProviderType,
                                              providers::CallOptions&) override {
    return WirePlan{};
  }
};

class ChatApi final : public ClientApi {
 public:
  explicit ChatApi(providers::Endpoint endpoint) : ClientApi(OpenAIStyle()), endpoint_(endpoint) {}

  providers::Endpoint endpoint() const override { return endpoint_; }

  std::expected<std::unique_ptr<ApiCall>, providers::ClientError> Read(
      const http::Request& request, const raw_json::Object& body,
      telemetry::RequestRecord& record) const override {
    if (auto error = ReadOpenAIRequest(request, body, record)) {
      return std::unexpected(std::move(*error));
    }
    // As OpenAI (and vLLM) answer it: stream_options asks for something only a stream carries.
    if (std::optional<raw_json::Value> stream_options = body.Find("stream_options");
        !record.stream && stream_options && !stream_options->is_null()) {
      return std::unexpected(
          BadRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                     "invalid_request", "stream_options"));
    }
    return std::make_unique<ChatCall>(body);
  }

 private:
  const providers::Endpoint endpoint_;
};

}  // namespace

std::unique_ptr<ClientApi> NewChatApi(providers::Endpoint endpoint) {
  return std::make_unique<ChatApi>(endpoint);
}

}  // namespace kvgate::gateway::api
