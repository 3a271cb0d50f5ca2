// POST /v1/embeddings: passed through to OpenAI-compatible providers that support it; never
// translated (the built-in engine does not embed). No conversation: not fingerprinted, and it
// does not stream.
#include "gateway/api/apis.h"
#include "gateway/api/client_api.h"

namespace kvgate::gateway::api {
namespace {

class EmbeddingsCall final : public ApiCall {
 public:
  explicit EmbeddingsCall(raw_json::Object body) : ApiCall(body) {}
  bool whole_prompt() const override { return false; }
  void FillNeeds(router::RequestFacts& facts) const override { facts.embeddings_api = true; }
  std::expected<WirePlan, AttemptResult> Plan(const InferenceCall&, providers::ProviderType,
                                              providers::CallOptions&) override {
    return WirePlan{};
  }
};

bool Embeds(const router::Target& target) { return target.capabilities.embeddings; }

class EmbeddingsApi final : public ClientApi {
 public:
  EmbeddingsApi() : ClientApi(OpenAIStyle()) {}
  providers::Endpoint endpoint() const override { return providers::Endpoint::kEmbeddings; }

  std::expected<std::unique_ptr<ApiCall>, providers::ClientError> Read(
      const http::Request& request, const raw_json::Object& body,
      telemetry::RequestRecord& record) const override {
    if (auto error = ReadOpenAIRequest(request, body, record)) {
      return std::unexpected(std::move(*error));
    }
    if (record.stream) {
      return std::unexpected(
          BadRequest("embeddings do not stream: 'stream' must be false or "
                     "absent",
                     "unsupported_parameter", "stream"));
    }
    return std::make_unique<EmbeddingsCall>(body);
  }

  std::optional<providers::ClientError> RefuseTargets(const router::RouteDecision& decision,
                                                      const std::vector<router::Target>& targets,
                                                      const std::string& model) const override {
    return RefuseUnserved(decision, targets, model, &Embeds, "/v1/embeddings", "embeddings",
                          " through to OpenAI-compatible providers only (it is never translated, "
                          "and the built-in engine does not embed)",
                          "a model of such a provider");
  }
};

}  // namespace

std::unique_ptr<ClientApi> NewEmbeddingsApi() { return std::make_unique<EmbeddingsApi>(); }

}  // namespace kvgate::gateway::api
