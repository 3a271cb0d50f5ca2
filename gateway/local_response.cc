#include "gateway/local_response.h"

#include "common/json_text.h"
#include "common/utf8.h"

namespace kvgate::gateway {

using nlohmann::json;

json UsageJson(const engine::Usage& usage) {
  json out{{"prompt_tokens", usage.prompt_tokens},
           {"completion_tokens", usage.completion_tokens},
           {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
           {"prompt_tokens_details",
            {{"cached_tokens", usage.cached_tokens},
             {"cache_write_tokens", usage.cache_write_tokens},
             {"cache_read_offload_tokens", usage.cached_offload_tokens}}}};
  if (!usage.offload_tier.empty()) {
    out["prompt_tokens_details"]["cache_read_offload_tier"] = usage.offload_tier;
  }
  return out;
}

std::string FinishReasonFor(engine::FinishReason reason) {
  return reason == engine::FinishReason::kLength ? "length" : "stop";
}

json ResponseHead::Base(const char* chat_object) const {
  return {{"id", id}, {"object", chat() ? chat_object : "text_completion"}, {"created", created},
          {"model", model}, {"system_fingerprint", fingerprint}};
}

std::string Chunk(const ResponseHead& head, const json& delta_or_text, const json& finish_reason,
                  const json& logprobs, int32_t index, const std::optional<json>& stop_reason) {
  json chunk = head.Base("chat.completion.chunk");
  json choice = {{"index", index}, {head.chat() ? "delta" : "text", delta_or_text},
                 {"logprobs", logprobs}, {"finish_reason", finish_reason}};
  if (stop_reason) choice["stop_reason"] = *stop_reason;
  chunk["choices"] = json::array({std::move(choice)});
  return "data: " + JsonText(chunk) + "\n\n";
}

std::string UsageChunk(const ResponseHead& head, const engine::Usage& usage) {
  json chunk = head.Base("chat.completion.chunk");
  chunk["choices"] = json::array();
  chunk["usage"] = UsageJson(usage);
  return "data: " + JsonText(chunk) + "\n\n";
}

std::string FullResponse(const ResponseHead& head, json choices, const engine::Usage& usage) {
  json answer = head.Base("chat.completion");
  answer["choices"] = std::move(choices);
  answer["usage"] = UsageJson(usage);
  return JsonText(answer);
}

std::string LogprobsBuilder::TokenText(int32_t token) const {
  const std::string& bytes = tokenizer_.TokenBytes(token);
  if (IsValidUtf8(bytes)) return bytes;
  std::string out = "bytes:";
  for (unsigned char c : bytes) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  }
  return out;
}

void LogprobsBuilder::Add(const engine::TokenLogprobs& lp) {
  auto bytes = [&](int32_t token) {
    json out = json::array();
    for (unsigned char c : tokenizer_.TokenBytes(token)) out.push_back(static_cast<int>(c));
    return out;
  };
  if (chat_) {
    json top = json::array();
    for (const auto& t : lp.top) {
      top.push_back({{"token", TokenText(t.token)}, {"logprob", t.logprob}, {"bytes", bytes(t.token)}});
    }
    pending_.push_back({{"token", TokenText(lp.token)},
                        {"logprob", lp.logprob},
                        {"bytes", bytes(lp.token)},
                        {"top_logprobs", std::move(top)}});
    return;
  }
  json top = json::object();
  for (const auto& t : lp.top) top[TokenText(t.token)] = t.logprob;
  pending_.push_back({{"token", TokenText(lp.token)}, {"logprob", lp.logprob},
                      {"top", std::move(top)}, {"offset", text_offset_}});
  text_offset_ += static_cast<int64_t>(tokenizer_.TokenBytes(lp.token).size());
}

json LogprobsBuilder::Take() {
  if (pending_.empty()) return nullptr;
  json out;
  if (chat_) {
    out = {{"content", std::move(pending_)}, {"refusal", nullptr}};
  } else {
    json tokens = json::array(), logprobs = json::array(), tops = json::array(),
         offsets = json::array();
    for (json& e : pending_) {
      tokens.push_back(std::move(e["token"]));
      logprobs.push_back(e["logprob"]);
      tops.push_back(std::move(e["top"]));
      offsets.push_back(e["offset"]);
    }
    out = {{"tokens", tokens}, {"token_logprobs", logprobs}, {"top_logprobs", tops},
           {"text_offset", offsets}};
  }
  pending_ = json::array();
  return out;
}

}  // namespace kvgate::gateway
