// OpenAI-compatible providers (OpenAI, DeepSeek, vLLM, SGLang, llama.cpp, OpenRouter, Gemini's
// OpenAI endpoint, kvgate's engine): the body passes through, usage is captured, and the usage
// chunk kvgate asked for on the client's behalf is stripped again.
#include <exception>
#include <string>
#include <utility>

#include "gateway/providers/internal.h"
#include "gateway/providers/sse.h"
#include "gateway/providers/sse_translator.h"

namespace kvgate::providers::internal {
namespace {

// The object NormalizeUsage reads: llama.cpp's whole response / chunk (for `timings`), otherwise
// the `usage` member.
telemetry::Usage NormalizeFrom(ProviderType type, const json& object) {
  const telemetry::UsageFlavor flavor = UsageFlavorFor(type);
  if (type == ProviderType::kLlamaCpp) return telemetry::NormalizeUsage(flavor, object);
  const json* usage = Member(object, "usage");
  return telemetry::NormalizeUsage(flavor, usage != nullptr ? *usage : json());
}

// A non-null `error` member -> its message (the object form or a bare string).
std::optional<std::string> ErrorMessageOf(const json& object) {
  const json* error = Member(object, "error");
  if (error == nullptr || error->is_null()) return std::nullopt;
  if (error->is_string()) return error->get<std::string>();
  std::string_view message = StringMember(*error, "message");
  if (!message.empty()) return std::string(message);
  return Dump(*error);
}

// The last non-null finish_reason among the choices, or "".
std::string FinishReasonOf(const json& object) {
  std::string reason;
  const json* choices = Member(object, "choices");
  if (choices == nullptr || !choices->is_array()) return reason;
  for (const json& choice : *choices) {
    std::string_view r = StringMember(choice, "finish_reason");
    if (!r.empty()) reason = std::string(r);
  }
  return reason;
}

bool NonEmpty(const json* v) {
  if (v == nullptr || v->is_null()) return false;
  if (v->is_string()) return !v->get_ref<const std::string&>().empty();
  if (v->is_array() || v->is_object()) return !v->empty();
  return true;
}

// A parsed chunk carries generated content: text, reasoning, refusal or a tool call.
bool ChunkHasContent(const json& chunk) {
  const json* choices = Member(chunk, "choices");
  if (choices == nullptr || !choices->is_array()) return false;
  for (const json& choice : *choices) {
    if (NonEmpty(Member(choice, "text"))) return true;  // completions
    const json* delta = Member(choice, "delta");
    if (delta == nullptr) continue;
    for (const char* key :
         {"content", "reasoning_content", "reasoning", "refusal", "tool_calls", "function_call"}) {
      if (NonEmpty(Member(*delta, key))) return true;
    }
  }
  return false;
}

// The same question answered on the serialized chunk, for chunks that are not parsed.
bool TextHasContent(std::string_view data) {
  for (std::string_view key : {"content", "reasoning_content", "reasoning", "refusal", "tool_calls",
                               "function_call", "text"}) {
    if (HasNonEmptyKey(data, key)) return true;
  }
  return false;
}

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

class OpenAICompatStream final : public SseStreamTranslator {
 public:
  OpenAICompatStream(ProviderType type, const CallOptions& options)
      : SseStreamTranslator("[DONE]"), type_(type), strip_usage_(!options.client_wants_usage) {}

 private:
  void Handle(const SseEvent& event, Output& out) override {
    if (!event.has_data) {
      AppendRawEvent(out.bytes, event.raw);  // comments / keep-alives reach the client too
      return;
    }
    const std::string_view data = TrimSpace(event.data);
    if (data == "[DONE]") {
      completed_ = true;
      AppendRawEvent(out.bytes, event.raw);
      return;
    }
    const bool has_usage = HasNonNullKey(data, "usage");
    const bool needs_parse = has_usage || event.event == "error" || HasNonNullKey(data, "error") ||
                             HasNonNullKey(data, "finish_reason") ||
                             (type_ == ProviderType::kLlamaCpp && HasNonNullKey(data, "timings"));
    if (!needs_parse) {
      // The fast path: most content chunks go out byte for byte, validated (a SAX pass, no DOM)
      // but neither parsed into a document nor re-serialized.
      if (!json::accept(data.begin(), data.end())) {
        Fail(out.bytes, "upstream sent malformed JSON in a stream event: " + Snippet(data));
        return;
      }
      if (TextHasContent(data)) out.has_content = true;
      AppendRawEvent(out.bytes, event.raw);
      return;
    }

    json chunk = ParseJson(data);
    if (chunk.is_discarded() || !chunk.is_object()) {
      Fail(out.bytes, "upstream sent malformed JSON in a stream event: " + Snippet(data));
      return;
    }
    if (std::optional<std::string> message = ErrorMessageOf(chunk);
        message.has_value() || event.event == "error") {
      std::string text = message.value_or(Snippet(data));
      upstream_error_ = text;
      client_error_ = text;
      failed_ = true;
      const json* error = Member(chunk, "error");
      if (error != nullptr && error->is_object()) {
        AppendRawEvent(out.bytes, event.raw);  // already OpenAI-shaped
      } else {
        out.bytes += ErrorEventBytes(MakeOpenAIError(502, std::move(text), "upstream_error"));
      }
      return;
    }
    if (std::string reason = FinishReasonOf(chunk); !reason.empty())
      finish_reason_ = std::move(reason);
    const bool content = ChunkHasContent(chunk);
    const json* usage = Member(chunk, "usage");
    const bool usage_present = usage != nullptr && !usage->is_null();
    if (usage_present ||
        (type_ == ProviderType::kLlamaCpp && Member(chunk, "timings") != nullptr)) {
      usage_ = NormalizeFrom(type_, chunk);
    }
    if (usage_present && strip_usage_) {
      const json* choices = Member(chunk, "choices");
      if (choices == nullptr || (choices->is_array() && choices->empty()))
        return;  // the extra chunk
      chunk.erase("usage");
      out.bytes += "data: ";
      out.bytes += Dump(chunk);
      out.bytes += "\n\n";
      if (content) out.has_content = true;
      return;
    }
    if (content) out.has_content = true;
    AppendRawEvent(out.bytes, event.raw);
  }

  // Constant after construction.
  const ProviderType type_;
  const bool strip_usage_;

};

}  // namespace

Result<UpstreamCall> BuildOpenAICompatCall(ProviderType type, const json& client_body,
                                           const CallOptions& options) {
  (void)type;
  json body = client_body;
  TakeKvgateFields(body);
  if (!options.upstream_model.empty()) body["model"] = options.upstream_model;
  if (options.stream) {
    body["stream"] = true;
    json& stream_options = body["stream_options"];
    if (!stream_options.is_object()) stream_options = json::object();
    stream_options["include_usage"] = true;
  } else {
    if (body.contains("stream")) body["stream"] = false;
    body.erase("stream_options");  // only valid with stream: true
  }

  UpstreamCall call;
  call.path = options.endpoint == Endpoint::kCompletions ? "/completions" : "/chat/completions";
  call.headers.emplace_back("content-type", "application/json");
  if (!options.api_key.empty())
    call.headers.emplace_back("authorization", "Bearer " + options.api_key);
  if (options.stream) call.headers.emplace_back("accept", "text/event-stream");
  call.body = Dump(body);
  return call;
}

Result<Translated> TranslateOpenAICompatResponse(ProviderType type, std::string_view upstream_body,
                                                 const CallOptions& options) {
  (void)options;
  json response = ParseJson(upstream_body);
  if (response.is_discarded() || !response.is_object()) {
    return MakeError(
        ErrorCode::kCorruptData,
        "upstream returned a response that is not a JSON object: " + Snippet(upstream_body));
  }
  if (std::optional<std::string> message = ErrorMessageOf(response); message.has_value()) {
    return MakeError(ErrorCode::kUnavailable, "upstream returned an error: " + *message);
  }
  const json* choices = Member(response, "choices");
  if (choices == nullptr || !choices->is_array()) {
    return MakeError(ErrorCode::kCorruptData,
                     "upstream response has no 'choices' array: " + Snippet(upstream_body));
  }
  Translated out;
  out.body = std::string(upstream_body);
  out.usage = NormalizeFrom(type, response);
  out.finish_reason = FinishReasonOf(response);
  return out;
}

std::unique_ptr<StreamTranslator> NewOpenAICompatStream(ProviderType type,
                                                        const CallOptions& options) {
  return std::make_unique<OpenAICompatStream>(type, options);
}

}  // namespace kvgate::providers::internal
