// The built-in engine as the admin sees it: GET /api/engine (each engine's state and the models it
// serves) and POST /api/engine/lookup (how much of a prompt an engine has cached, per gateway key).
#include <algorithm>

#include "gateway/admin/admin_api.h"
#include "gateway/local_provider.h"
#include "gateway/upstream.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;

}  // namespace

json AdminApi::EngineState() const {
  json state = deps_.engines ? deps_.engines->Describe() : json{{"engines", json::array()}};
  // The models each engine serves: what the dashboard's lookup box offers.
  for (json& engine : state["engines"]) {
    json models = json::array();
    for (const router::Target& t : deps_.router->targets()) {
      if (telemetry::IsBuiltInEngine(t.type) && engine.value("provider", "") == t.provider) {
        models.push_back(t.name);
      }
    }
    std::sort(models.begin(), models.end());
    engine["models"] = std::move(models);
  }
  return state;
}

Result<json> AdminApi::EngineLookup(const http::Request& request) const {
  json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("model") ||
      !body["model"].is_string()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the body must be a JSON object with \"model\" and \"messages\" or "
                     "\"prompt\"");
  }
  const std::string model = body["model"].get<std::string>();
  std::optional<size_t> t = deps_.router->FindTarget(model);
  if (!t) return MakeError(ErrorCode::kNotFound, "unknown model " + model);
  const router::Target& target = deps_.router->targets()[*t];
  if (!deps_.upstream_for) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "model " + target.name + " is not served by the built-in engine");
  }
  // Parsed above as a whole, so its raw form is valid: the upstream reads the prompt from it.
  const Result<raw_json::Value> raw = raw_json::Parse(request.body);
  if (!raw) return std::unexpected(raw.error());
  const raw_json::Object prompt(*raw);
  // Through the Upstream seam: the built-in engines answer for their targets, any other
  // upstream says it keeps no cache kvgate can read.
  const Upstream& upstream = deps_.upstream_for(target);
  // Each gateway key's requests are cached under a salt of their own (engine_host.h): the admin
  // names the key to ask about, or sees every key's (the best answer, and each key's hits).
  if (auto key = body.find("api_key_id"); key != body.end() && !key->is_null()) {
    if (!key->is_string()) {
      return MakeError(ErrorCode::kInvalidArgument, "api_key_id must be a string (a key's id)");
    }
    Result<PrefixLookup> one = upstream.LookupPrefix(target, prompt, key->get<std::string>());
    if (!one) return std::unexpected(one.error());
    return PrefixLookupJson(*one);
  }
  Result<PrefixLookup> best = upstream.LookupPrefix(target, prompt, "");
  if (!best) return std::unexpected(best.error());
  if (!deps_.keys->required()) return PrefixLookupJson(*best);
  Result<json> keys = deps_.keys->List();
  if (!keys) return std::unexpected(keys.error());
  json by_key = json::object();
  for (const json& k : (*keys)["keys"]) {
    const std::string id = k.value("id", std::string());
    Result<PrefixLookup> one = upstream.LookupPrefix(target, prompt, id);
    if (!one) return std::unexpected(one.error());
    if (one->cached_tokens > 0) by_key[id] = one->cached_tokens;
    if (one->cached_tokens > best->cached_tokens) best = std::move(one);
  }
  json answer = PrefixLookupJson(*best);
  answer["cached_tokens_by_key"] = std::move(by_key);
  return answer;
}

}  // namespace kvgate::gateway
