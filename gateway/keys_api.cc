// The gateway's side of its keys: admission of an inference request by its key (the model
// allow-list, then the budget and rate limits of virtual_keys.h), and the admin API over them,
// /api/keys. Kept apart from gateway.cc and proxy.cc, which only call in here.
#include <algorithm>

#include "common/raw_json.h"
#include "common/utf8.h"
#include "gateway/client_stream.h"
#include "gateway/gateway.h"
#include "gateway/run_blocking.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

// What a request may produce, as it says (EstimateReservation's output part).
int64_t RequestedOutputTokens(const raw_json::Object& body) {
  for (const char* key : {"max_completion_tokens", "max_tokens", "max_output_tokens"}) {
    std::optional<raw_json::Value> v = body.Find(key);
    if (!v || v->kind != raw_json::Kind::kNumber) continue;
    return std::max<int64_t>(0, std::atoll(std::string(v->text).c_str()));
  }
  return 0;
}

}  // namespace

asio::awaitable<std::optional<KeyAdmission>> Gateway::AdmitKey(
    const std::shared_ptr<KeyState>& key, const std::string& model, const raw_json::Object& body,
    const std::optional<telemetry::Price>& price, ClientStream& client) {
  if (!key) co_return KeyAdmission();
  if (!key->AllowsModel(model)) {
    std::string allowed;
    for (const std::string& m : key->limits().models) allowed += (allowed.empty() ? "" : ", ") + m;
    providers::ClientError error = providers::MakeOpenAIError(
        403, "key " + key->label() + " may not use model `" + Utf8Snippet(model) +
                 "` (it may use: " + allowed + ")",
        "invalid_request_error", "model_not_allowed", "model");
    co_await client.SendError(error, "error");
    co_return std::nullopt;
  }
  const KeyReservation reservation =
      EstimateReservation(body.value().text.size(), RequestedOutputTokens(body), price);
  std::expected<KeyAdmission, KeyRefusal> admitted =
      keys_->Admit(key, reservation.tokens, reservation.pico);
  if (!admitted) {
    KeyRefusal& refusal = admitted.error();
    for (http::Header& h : refusal.headers) client.headers().push_back(std::move(h));
    providers::ClientError error = providers::MakeOpenAIError(
        refusal.status, std::move(refusal.message), std::move(refusal.type),
        std::move(refusal.code));
    co_await client.SendError(error, "error");
    co_return std::nullopt;
  }
  for (http::Header& h : keys_->RateLimitHeaders(*key)) client.headers().push_back(std::move(h));
  co_return std::move(*admitted);
}

asio::awaitable<Gateway::ApiAnswer> Gateway::HandleKeysApi(const http::Request& request) {
  const std::string& method = request.method;
  const bool get = method == "GET" || method == "HEAD";
  const std::string prefix = "/api/keys/";
  std::string id = request.path.rfind(prefix, 0) == 0
                       ? http::PercentDecode(request.path.substr(prefix.size()))
                       : std::string();
  bool rotate = false;
  if (const std::string suffix = "/rotate";
      id.size() > suffix.size() && id.compare(id.size() - suffix.size(), suffix.size(), suffix) == 0) {
    id.resize(id.size() - suffix.size());
    rotate = true;
  }
  ApiAnswer answer;
  VirtualKeys& keys = *keys_;
  auto run = [this](auto fn) { return RunBlocking(blocking_pool_, std::move(fn)); };
  if (request.path == "/api/keys") {
    if (get) {
      answer.result = keys.List();
    } else if (method == "POST") {
      json body = request.body.empty() ? json::object()
                                       : json::parse(request.body, nullptr, false);
      std::vector<std::string> models;  // what an allow-list may name
      for (const router::Target& t : deps_.router->targets()) models.push_back(t.name);
      for (const router::RouterConfig& r : deps_.router->routers()) models.push_back(r.name);
      if (body.is_discarded() || !body.is_object()) {
        answer.result = MakeError(ErrorCode::kInvalidArgument, "the body must be a JSON object");
      } else {
        answer.ok_status = 201;
        answer.result = co_await run([&keys, &body, &models] { return keys.Create(body, models); });
      }
    } else {
      answer.allow = "GET, HEAD, POST";
    }
  } else if (id.empty() || id.find('/') != std::string::npos) {
    answer.result = MakeError(ErrorCode::kNotFound, "Invalid URL (" + method + " " +
                                                        Utf8Snippet(request.path) + ")");
  } else if (rotate) {
    if (method == "POST") {
      answer.result = co_await run([&keys, &id] { return keys.Rotate(id); });
    } else {
      answer.allow = "POST";
    }
  } else if (get) {
    answer.result = keys.Get(id);
  } else if (method == "DELETE") {
    answer.result = co_await run([&keys, &id] { return keys.Revoke(id); });
  } else {
    answer.allow = "GET, HEAD, DELETE";
  }
  co_return answer;
}

}  // namespace kvgate::gateway
