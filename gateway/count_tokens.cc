// POST /v1/messages/count_tokens: Anthropic's token counter for Messages clients (Claude Code and
// the Anthropic SDKs' messages.count_tokens), answered with the tokenizer of the model that would
// serve the request, by its Upstream (Upstream::CountTokens): Anthropic's own for models on
// anthropic providers (the body is passed through as /v1/messages would pass it), the built-in
// engine's for local models (the Messages body translated to chat, rendered with the model's chat
// template). Other providers publish no counter,
// so a model on one gets a 400 rather than an estimate. A router counts with the first of its
// targets, in its order, that can.
//
// Counting is free at Anthropic and here: nothing is recorded as a turn (it would join the
// conversation's thread and disturb its cache diagnosis) and no key limit is charged; the key's
// model allow-list still applies.
#include "gateway/gateway.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/json_text.h"
#include "common/utf8.h"
#include "gateway/providers/messages.h"

namespace kvgate::gateway {
namespace {

namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

// The targets that can count: their provider has a tokenizer kvgate can reach.
bool CanCount(const router::Target& t) {
  return telemetry::TraitsOf(t.type).counting != telemetry::TokenCounting::kNone;
}

// An Anthropic-shaped refusal.
providers::ClientError Refusal(int status, std::string message, std::string type, std::string code,
                               std::string param = "") {
  return providers::ToAnthropicError(providers::MakeOpenAIError(
      status, std::move(message), std::move(type), std::move(code), std::move(param)));
}

}  // namespace

// Everything before the count, outside the coroutine (GCC 12 miscompiles some temporaries in
// coroutine bodies): the key, the body, the model and the target that counts it.
std::expected<Gateway::CountTarget, providers::ClientError> Gateway::CountTokensTarget(
    const http::Request& request) const {
  Result<std::shared_ptr<KeyState>> key = AuthenticateKey(request);
  if (!key) {
    return std::unexpected(
        Refusal(401, key.error().message, "invalid_request_error", "invalid_api_key"));
  }
  Result<raw_json::Value> parsed = raw_json::Parse(request.body);
  if (!parsed) {
    return std::unexpected(
        Refusal(400, "We could not parse the JSON body of your request: " + parsed.error().message,
                "invalid_request_error", "invalid_json"));
  }
  if (!parsed->is_object()) {
    return std::unexpected(Refusal(400, "The request body must be a JSON object",
                                   "invalid_request_error", "invalid_json"));
  }
  std::optional<raw_json::Value> model = raw_json::Find(*parsed, "model");
  std::optional<std::string> name = model ? raw_json::DecodeString(*model) : std::nullopt;
  if (!name || name->empty()) {
    return std::unexpected(Refusal(400, "model: Field required (a non-empty string)",
                                   "invalid_request_error", "missing_model", "model"));
  }
  if (Status valid = providers::ValidateModelName(*name); !valid) {
    return std::unexpected(Refusal(400, valid.error().message, "invalid_request_error",
                                   "invalid_model", "model"));
  }
  if (*key && !(*key)->AllowsModel(*name)) {
    return std::unexpected(Refusal(403, "this API key may not use model " + Utf8Snippet(*name),
                                   "invalid_request_error", "model_not_allowed", "model"));
  }
  const router::Router& router = *deps_.router;
  const router::Target* target = nullptr;
  if (std::optional<size_t> t = router.FindTarget(*name)) {
    target = &router.targets()[*t];
  } else if (const router::RouterConfig* r = router.FindRouter(*name)) {
    for (const router::RouterConfig::TargetRef& ref : r->targets) {
      std::optional<size_t> rt = router.FindTarget(ref.model);
      if (rt && CanCount(router.targets()[*rt])) {
        target = &router.targets()[*rt];
        break;
      }
    }
    if (target == nullptr) {
      return std::unexpected(Refusal(
          400, "no target of router " + *name + " can count tokens (count_tokens is served for "
               "models on anthropic providers and the built-in engine)",
          "invalid_request_error", "count_tokens_unsupported", "model"));
    }
  } else {
    return std::unexpected(Refusal(404, "The model `" + Utf8Snippet(*name) + "` does not exist "
                                        "or is not configured in this kvgate (see GET /v1/models)",
                                   "invalid_request_error", "model_not_found", "model"));
  }
  if (!CanCount(*target)) {
    return std::unexpected(
        Refusal(400,
                "count_tokens counts with the model's own tokenizer: it is served for models on "
                "anthropic providers and the built-in engine, and " +
                    target->name + " is on a " +
                    std::string(telemetry::ProviderTypeName(target->type)) + " provider",
                "invalid_request_error", "count_tokens_unsupported", "model"));
  }
  return CountTarget{.target = target, .body = *parsed};
}

asio::awaitable<void> Gateway::HandleCountTokens(http::Request& request,
                                                 http::ResponseWriter& writer) {
  std::expected<CountTarget, providers::ClientError> planned = CountTokensTarget(request);
  if (!planned) {
    co_await writer.Send(planned.error().status, kJson, JsonText(planned.error().body));
    co_return;
  }
  const router::Target& target = *planned->target;
  const CountTokensCall call{.body = raw_json::Object(planned->body),
                             .anthropic_version = std::string(request.header("anthropic-version")),
                             .anthropic_beta = std::string(request.header("anthropic-beta")),
                             .worker_index = request.worker_index};
  TokenCount counted =
      co_await UpstreamFor(target).CountTokens(call, target, connections_.at(target.provider));
  co_await writer.Send(counted.status, kJson, std::move(counted.body), std::move(counted.headers));
}

}  // namespace kvgate::gateway
