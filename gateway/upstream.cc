// The Upstream seam's defaults: what an upstream that cannot look prefixes up or count tokens
// answers, and the lookup's JSON.
#include "gateway/upstream.h"

#include "common/json_text.h"
#include "gateway/providers/messages.h"

namespace kvgate::gateway {

nlohmann::json PrefixLookupJson(const PrefixLookup& lookup) {
  return nlohmann::json{
      {"model", lookup.model},
      {"prompt_tokens", lookup.prompt_tokens},
      {"cached_tokens", lookup.cached_tokens},
      // {"pool", "disk"} (no tier, or a file) or {"pool", "host"}.
      {"cached_tokens_by_tier",
       {{"pool", lookup.pool_tokens},
        {lookup.offload_kind == "host" ? "host" : "disk", lookup.offload_tokens}}},
      {"running", lookup.running},
      {"waiting", lookup.waiting}};
}

// Only the built-in engine keeps a cache kvgate can read, so the refusal names it.
Result<PrefixLookup> Upstream::LookupPrefix(const router::Target& target,
                                            const raw_json::Object& /*body*/,
                                            std::string_view /*api_key_id*/) const {
  return MakeError(ErrorCode::kInvalidArgument,
                   "model " + target.name + " is not served by the built-in engine");
}

boost::asio::awaitable<TokenCount> Upstream::CountTokens(const CountTokensCall& /*call*/,
                                                         const router::Target& target,
                                                         const ProviderConnection& /*connection*/) {
  const providers::ClientError refusal = providers::ToAnthropicError(providers::MakeOpenAIError(
      400,
      "count_tokens counts with the model's own tokenizer, and the provider of " + target.name +
          " publishes none kvgate can reach",
      "invalid_request_error", "count_tokens_unsupported", "model"));
  co_return TokenCount{.status = refusal.status, .body = JsonText(refusal.body)};
}

}  // namespace kvgate::gateway
