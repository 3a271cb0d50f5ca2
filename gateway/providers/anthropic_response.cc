// Anthropic Message -> OpenAI chat.completion, and the usage/finish-reason vocabulary shared with
// the stream translator.
#include <string>
#include <utility>

#include "gateway/providers/internal.h"

namespace kvgate::providers::internal {
namespace {

using ojson = nlohmann::ordered_json;

// A non-negative integer count, 0 when absent or malformed (client-facing shape only).
int64_t CountOrZero(const json& obj, std::string_view key) {
  const json* v = Member(obj, key);
  if (v == nullptr) return 0;
  if (v->is_number_unsigned()) return static_cast<int64_t>(v->get<uint64_t>());
  if (v->is_number_integer()) return v->get<int64_t>() > 0 ? v->get<int64_t>() : 0;
  return 0;
}

}  // namespace

std::string AnthropicFinishReason(const json& stop_reason) {
  if (!stop_reason.is_string()) return "";
  const auto& r = stop_reason.get_ref<const std::string&>();
  if (r == "end_turn" || r == "stop_sequence" || r == "pause_turn") return "stop";
  if (r == "max_tokens" || r == "model_context_window_exceeded") return "length";
  if (r == "tool_use") return "tool_calls";
  if (r == "refusal") return "content_filter";
  return "stop";
}

ojson AnthropicUsageToOpenAI(const json& usage) {
  const int64_t input = CountOrZero(usage, "input_tokens");
  const int64_t write = CountOrZero(usage, "cache_creation_input_tokens");
  const int64_t read = CountOrZero(usage, "cache_read_input_tokens");
  const int64_t output = CountOrZero(usage, "output_tokens");
  const int64_t prompt = input + write + read;
  ojson out;
  out["prompt_tokens"] = prompt;
  out["completion_tokens"] = output;
  out["total_tokens"] = prompt + output;
  out["prompt_tokens_details"] = {{"cached_tokens", read}, {"cache_write_tokens", write}};
  return out;
}

void MergeUsage(json& into, const json& from) {
  if (!from.is_object()) return;
  if (!into.is_object()) into = json::object();
  for (auto it = from.begin(); it != from.end(); ++it) {
    if (it.value().is_null()) continue;
    json& slot = into[it.key()];
    if (slot.is_object() && it.value().is_object()) {
      MergeUsage(slot, it.value());
    } else {
      slot = it.value();
    }
  }
}

Result<Translated> TranslateAnthropicResponse(std::string_view upstream_body,
                                              const CallOptions& options) {
  const json message = ParseJson(upstream_body);
  if (message.is_discarded() || !message.is_object()) {
    return MakeError(
        ErrorCode::kCorruptData,
        "upstream returned a response that is not a JSON object: " + Snippet(upstream_body));
  }
  if (StringMember(message, "type") == "error") {
    const json* error = Member(message, "error");
    std::string text = error != nullptr ? std::string(StringMember(*error, "message")) : "";
    return MakeError(ErrorCode::kUnavailable, "upstream returned an error: " +
                                                  (text.empty() ? Snippet(upstream_body) : text));
  }
  const json* content = Member(message, "content");
  if (StringMember(message, "type") != "message" || content == nullptr || !content->is_array()) {
    return MakeError(ErrorCode::kCorruptData,
                     "upstream response is not an Anthropic Message: " + Snippet(upstream_body));
  }

  std::string text;
  std::string reasoning;
  ojson tool_calls = ojson::array();
  for (const json& block : *content) {
    const std::string_view type = StringMember(block, "type");
    if (type == "text") {
      text += StringMember(block, "text");
    } else if (type == "thinking") {
      reasoning += StringMember(block, "thinking");
    } else if (type == "tool_use") {
      const json* input = Member(block, "input");
      ojson call;
      call["id"] = std::string(StringMember(block, "id"));
      call["type"] = "function";
      call["function"] = {{"name", std::string(StringMember(block, "name"))},
                          {"arguments", input != nullptr ? Dump(*input) : std::string("{}")}};
      tool_calls.push_back(std::move(call));
    }
  }

  Translated out;
  out.provider_cache_miss_reason = CacheMissReasonOf(message);
  const json* stop_reason = Member(message, "stop_reason");
  out.finish_reason = AnthropicFinishReason(stop_reason != nullptr ? *stop_reason : json());
  const json* usage = Member(message, "usage");
  out.usage = telemetry::NormalizeUsage(telemetry::UsageFlavor::kAnthropic,
                                        usage != nullptr ? *usage : json());

  ojson reply;
  reply["role"] = "assistant";
  if (text.empty() && !tool_calls.empty()) {
    reply["content"] = nullptr;
  } else {
    reply["content"] = std::move(text);
  }
  if (!reasoning.empty()) reply["reasoning_content"] = std::move(reasoning);
  if (!tool_calls.empty()) reply["tool_calls"] = std::move(tool_calls);

  ojson choice;
  choice["index"] = 0;
  choice["message"] = std::move(reply);
  choice["logprobs"] = nullptr;
  if (out.finish_reason.empty()) {
    choice["finish_reason"] = nullptr;
  } else {
    choice["finish_reason"] = out.finish_reason;
  }

  ojson body;
  body["id"] = std::string(StringMember(message, "id"));
  body["object"] = "chat.completion";
  body["created"] = CreatedTime(options);
  body["model"] = std::string(StringMember(message, "model"));
  body["choices"] = ojson::array({std::move(choice)});
  body["usage"] = AnthropicUsageToOpenAI(usage != nullptr ? *usage : json());
  out.body = Dump(body);
  return out;
}

}  // namespace kvgate::providers::internal
