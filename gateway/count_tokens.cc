// POST /v1/messages/count_tokens: Anthropic's token counter for Messages clients (Claude Code and
// the Anthropic SDKs' messages.count_tokens), answered with the tokenizer of the model that would
// serve the request: Anthropic's own for models on anthropic providers (the body is passed through
// as /v1/messages would pass it), the built-in engine's for local models (the Messages body
// translated to chat, rendered with the model's chat template). Other providers publish no counter,
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
#include "gateway/local_provider.h"
#include "gateway/providers/messages.h"

namespace kvgate::gateway {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

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

std::expected<std::string, providers::ClientError> Gateway::CountWithEngine(
    const router::Target& target, const raw_json::Object& body) const {
  // The prompt the engine would compute for this Messages request, counted as it would be (a
  // count carries no max_tokens).
  Result<std::string> chat = providers::MessagesToChat(body, {.prompt_only = true});
  if (!chat) {
    return std::unexpected(
        Refusal(400, chat.error().message, "invalid_request_error", "invalid_request"));
  }
  if (deps_.engines == nullptr) {
    return std::unexpected(Refusal(503, "the built-in engine is not running", "server_error",
                                   "engine_unavailable"));
  }
  // Only the prompt's length is answered, never what is cached: no key's salt is needed.
  Result<json> counted = deps_.engines->Lookup(target, json::parse(*chat), "");
  if (!counted) {
    const bool down = counted.error().code == ErrorCode::kNotFound;
    return std::unexpected(Refusal(down ? 503 : 400, counted.error().message,
                                   down ? "server_error" : "invalid_request_error",
                                   down ? "engine_unavailable" : "invalid_request"));
  }
  return JsonText(json{{"input_tokens", (*counted)["prompt_tokens"]}});
}

asio::awaitable<void> Gateway::HandleCountTokens(http::Request& request,
                                                 http::ResponseWriter& writer) {
  std::expected<CountTarget, providers::ClientError> planned = CountTokensTarget(request);
  if (!planned) {
    co_await writer.Send(planned.error().status, kJson, JsonText(planned.error().body));
    co_return;
  }
  const router::Target& target = *planned->target;
  const raw_json::Object body(planned->body);
  if (telemetry::TraitsOf(target.type).counting == telemetry::TokenCounting::kEngineTokenizer) {
    std::expected<std::string, providers::ClientError> counted = CountWithEngine(target, body);
    if (counted) {
      co_await writer.Send(200, kJson, std::move(*counted));
    } else {
      co_await writer.Send(counted.error().status, kJson, JsonText(counted.error().body));
    }
    co_return;
  }

  // Anthropic: the same bytes /v1/messages would send (model spliced, kvgate's thread fields
  // cut), to the counter beside it.
  const ProviderConnection& connection = connections_.at(target.provider);
  providers::CallOptions options;
  options.endpoint = providers::Endpoint::kMessages;
  options.upstream_model = target.upstream_model;
  if (!connection.api_keys.empty()) options.api_key = connection.api_keys.front();
  options.anthropic_version = std::string(request.header("anthropic-version"));
  options.anthropic_beta = std::string(request.header("anthropic-beta"));
  Result<providers::UpstreamCall> built =
      providers::BuildUpstreamCall(connection.type, body, options);
  if (!built) {
    providers::ClientError refusal =
        Refusal(400, built.error().message, "invalid_request_error", "invalid_request");
    co_await writer.Send(refusal.status, kJson, JsonText(refusal.body));
    co_return;
  }
  upstream::OutgoingRequest out;
  out.path = built->path + "/count_tokens";
  out.body = std::move(built->body);
  for (auto& [name, value] : built->headers) out.headers.push_back({name, value});
  Result<upstream::Response> response =
      co_await ClientFor(request.worker_index).Send(connection.url, std::move(out));
  if (response && response->status >= 200 && response->status < 300) {
    co_await writer.Send(response->status, kJson, std::move(response->body));
    co_return;
  }
  providers::ClientError refusal = UpstreamCountRefusal(response, connection);
  std::vector<http::Header> headers;
  if (response) {
    if (std::string_view retry = response->header("retry-after"); !retry.empty()) {
      headers.push_back({"retry-after", std::string(retry)});
    }
  }
  co_await writer.Send(refusal.status, kJson, JsonText(refusal.body), std::move(headers));
}

providers::ClientError Gateway::UpstreamCountRefusal(const Result<upstream::Response>& response,
                                                     const ProviderConnection& connection) const {
  providers::ClientError refusal;
  if (!response) {
    const bool timeout = response.error().code == ErrorCode::kDeadlineExceeded;
    refusal =
        Refusal(timeout ? 504 : 502,
                "upstream " + connection.name + " did not answer: " + response.error().message,
                "upstream_error", timeout ? "upstream_timeout" : "upstream_unreachable");
  } else {
    // Its errors as for /v1/messages: the status kvgate answers with, in Anthropic's shape (an
    // upstream 401 is kvgate's credentials at fault, a 502, not the client's).
    refusal = providers::ToAnthropicError(
        providers::TranslateUpstreamError(connection.type, response->status, response->body));
  }
  // An upstream's error text may quote the key kvgate sent (an Anthropic 401 quoting it, say).
  RedactError(redactor_, refusal);
  return refusal;
}

}  // namespace kvgate::gateway
