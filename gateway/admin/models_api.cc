// The model list, GET /v1/models and /v1/models/{model}: every target and router by name, as
// OpenAI's model objects (a router adds its strategy and targets under "kvgate_router").
#include <algorithm>

#include "common/json_text.h"
#include "gateway/admin/admin_api.h"
#include "gateway/providers/provider.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

}  // namespace

std::optional<json> AdminApi::ModelJson(std::string_view name) const {
  if (std::optional<size_t> t = deps_.router->FindTarget(name)) {
    const router::Target& target = deps_.router->targets()[*t];
    json model{
        {"id", target.name}, {"object", "model"}, {"created", 0}, {"owned_by", target.provider}};
    // A comparison price (pricing: {as: ...}) says so: its costs are another model's rates.
    if (!target.price_as.empty()) {
      model["kvgate_pricing"] = {{"as", target.price_as}, {"comparison", true}};
    }
    return model;
  }
  if (const router::RouterConfig* r = deps_.router->FindRouter(name)) {
    json targets = json::array();
    for (const auto& ref : r->targets) targets.push_back(ref.model);
    return json{
        {"id", r->name},
        {"object", "model"},
        {"created", 0},
        {"owned_by", "kvgate-router"},
        {"kvgate_router", {{"strategy", router::StrategyName(r->strategy)}, {"targets", targets}}}};
  }
  return std::nullopt;
}

std::string AdminApi::ModelsJson(const KeyState* key) const {
  std::vector<std::string> names;
  for (const router::Target& t : deps_.router->targets()) names.push_back(t.name);
  for (const router::RouterConfig& r : deps_.router->routers()) names.push_back(r.name);
  if (key != nullptr) {  // a key with a model allow-list sees only those models
    std::erase_if(names, [key](const std::string& name) { return !key->AllowsModel(name); });
  }
  std::sort(names.begin(), names.end());
  json data = json::array();
  for (const std::string& name : names) data.push_back(*ModelJson(name));
  return JsonText(json{{"object", "list"}, {"data", data}});
}

asio::awaitable<void> AdminApi::HandleModels(const http::Request& request, const KeyState* key,
                                             http::ResponseWriter& writer) {
  if (request.path == "/v1/models") {
    co_await writer.Send(200, kJson, ModelsJson(key));
    co_return;
  }
  // GET /v1/models/{model}: one model, as OpenAI's "retrieve model" answers.
  const std::string name = http::PercentDecode(std::string_view(request.path).substr(11));
  std::optional<json> model = ModelJson(name);
  if (key != nullptr && !key->AllowsModel(name)) model.reset();
  if (!model) {
    std::string body =
        JsonText(providers::MakeOpenAIError(404, "The model '" + name + "' does not exist",
                                            "invalid_request_error", "model_not_found", "model")
                     .body);
    co_await writer.Send(404, kJson, std::move(body));
    co_return;
  }
  co_await writer.Send(200, kJson, JsonText(*model));
}

}  // namespace kvgate::gateway
