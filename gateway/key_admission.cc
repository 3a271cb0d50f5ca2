// The gateway's side of its keys on the request path: admission of an inference request by its
// key (the model allow-list, then the budget and rate limits of virtual_keys.h). Kept apart from
// the hall (inference.cc), which only calls in here; the admin API over the keys is
// admin/keys_api.cc.
#include <algorithm>

#include "common/raw_json.h"
#include "common/utf8.h"
#include "gateway/client_stream.h"
#include "gateway/gateway.h"

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
    providers::ClientError error =
        providers::MakeOpenAIError(403,
                                   "key " + key->label() + " may not use model `" +
                                       Utf8Snippet(model) + "` (it may use: " + allowed + ")",
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
    providers::ClientError error =
        providers::MakeOpenAIError(refusal.status, std::move(refusal.message),
                                   std::move(refusal.type), std::move(refusal.code));
    co_await client.SendError(error, "error");
    co_return std::nullopt;
  }
  for (http::Header& h : keys_->RateLimitHeaders(*key)) client.headers().push_back(std::move(h));
  co_return std::move(*admitted);
}

}  // namespace kvgate::gateway
