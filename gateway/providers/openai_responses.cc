// The OpenAI Responses API and embeddings, passed through to OpenAI-compatible providers: the
// answers go to the client as the upstream sent them; kvgate reads their usage, finish reason and
// errors. (The requests are built by BuildOpenAICompatCall, shared with chat.)
#include <string>
#include <utility>

#include "gateway/providers/internal.h"
#include "gateway/providers/sse.h"
#include "gateway/providers/sse_translator.h"

namespace kvgate::providers::internal {
namespace {

using telemetry::UsageFlavor;

// OpenAI's finish-reason vocabulary for a Responses API `response` object: "stop" for a completed
// response ("tool_calls" when its output calls a function), the incomplete_details reason for an
// incomplete one ("length" for max_output_tokens), "" otherwise.
std::string FinishReasonOf(raw_json::Value response) {
  const std::string status = Decoded(raw_json::Find(response, "status"));
  if (status == "completed") {
    bool calls = false;
    if (std::optional<raw_json::Value> output = raw_json::Find(response, "output")) {
      raw_json::ForEachElement(*output, [&](raw_json::Value item) {
        const std::string type = Decoded(raw_json::Find(item, "type"));
        calls = calls || type == "function_call" || type == "custom_tool_call";
      });
    }
    return calls ? "tool_calls" : "stop";
  }
  if (status == "incomplete") {
    std::optional<raw_json::Value> details = raw_json::Find(response, "incomplete_details");
    const std::string reason = details ? Decoded(raw_json::Find(*details, "reason")) : "";
    if (reason == "max_output_tokens") return "length";
    return reason.empty() ? "length" : reason;
  }
  return "";
}

// The message of a failed response's `error` ({"code", "message"}), else a sentence that says so.
std::string FailureMessageOf(raw_json::Value response) {
  std::optional<raw_json::Value> error = raw_json::Find(response, "error");
  std::string message = error ? Decoded(raw_json::Find(*error, "message")) : "";
  if (message.empty()) message = "the upstream reported the response as failed";
  return message;
}

telemetry::Usage UsageOf(raw_json::Value object, UsageFlavor flavor) {
  std::optional<raw_json::Value> usage = raw_json::Find(object, "usage");
  return telemetry::NormalizeUsage(flavor, usage.value_or(raw_json::Value{}));
}

// A 2xx body: a JSON object without an error. Returns the parsed object.
Result<raw_json::Value> ReadAnswer(std::string_view upstream_body) {
  Result<raw_json::Value> parsed = raw_json::Parse(upstream_body);
  if (!parsed || !parsed->is_object()) {
    return MakeError(ErrorCode::kCorruptData, "upstream returned a response that is not a JSON "
                                              "object: " + Snippet(upstream_body));
  }
  std::optional<raw_json::Value> error = raw_json::Find(*parsed, "error");
  if (error && !error->is_null()) {
    return MakeError(ErrorCode::kUnavailable,
                     "upstream returned an error: " + *ErrorMessageOf(ParseJson(upstream_body)));
  }
  return parsed;
}

// Responses API events pass through as they came. The final events carry the whole response:
// response.completed and response.incomplete end the answer, response.failed ends it as an
// upstream error (the client gets the event itself, which the SDK turns into its own error);
// an `error` event, or any event with a top-level `error` object, does the same.
class ResponsesStream final : public SseStreamTranslator {
 public:
  ResponsesStream() : SseStreamTranslator("response.completed") {}

 private:
  void Handle(const SseEvent& event, Output& out) override {
    std::optional<TypedEvent> typed = ReadTypedEvent(event, out.bytes);
    if (!typed) return;
    const std::optional<raw_json::Value> parsed = typed->data;
    const std::string& type = typed->type;
    const std::string_view data = TrimSpace(event.data);  // (for error messages)
    // An `error` event, or any event carrying a top-level error object (the SDK raises on one).
    std::optional<raw_json::Value> error = raw_json::Find(*parsed, "error");
    if (type == "error" || (error && !error->is_null())) {
      AppendRawEvent(out.bytes, event.raw);
      std::string message = Decoded(raw_json::Find(*parsed, "message"));
      if (message.empty()) message = ErrorMessageOf(ParseJson(data)).value_or(Snippet(data));
      upstream_error_ = message;
      client_error_ = std::move(message);
      failed_ = true;
      return;
    }
    if (type == "response.completed" || type == "response.incomplete" ||
        type == "response.failed") {
      std::optional<raw_json::Value> response = raw_json::Find(*parsed, "response");
      if (!response || !response->is_object()) {
        Fail(out.bytes, "upstream sent a " + type + " event without its response: " +
                            Snippet(data));
        return;
      }
      AppendRawEvent(out.bytes, event.raw);
      usage_ = UsageOf(*response, UsageFlavor::kOpenAIResponses);
      if (type == "response.failed") {
        std::string message = FailureMessageOf(*response);
        upstream_error_ = message;
        client_error_ = std::move(message);
        failed_ = true;
        return;
      }
      finish_reason_ = FinishReasonOf(*response);
      completed_ = true;
      return;
    }
    AppendRawEvent(out.bytes, event.raw);
    // Generated text, reasoning text, refusals, tool-call arguments: every *.delta event.
    if (type.ends_with(".delta")) {
      std::optional<raw_json::Value> delta = raw_json::Find(*parsed, "delta");
      if (delta && !delta->is_null() && delta->text != "\"\"") out.has_content = true;
    }
  }
};

}  // namespace

Result<Translated> TranslateResponsesResponse(std::string_view upstream_body) {
  Result<raw_json::Value> response = ReadAnswer(upstream_body);
  if (!response) return std::unexpected(response.error());
  if (Decoded(raw_json::Find(*response, "status")) == "failed") {
    return MakeError(ErrorCode::kUnavailable,
                     "upstream returned a failed response: " + FailureMessageOf(*response));
  }
  std::optional<raw_json::Value> output = raw_json::Find(*response, "output");
  if (!output || !output->is_array()) {
    return MakeError(ErrorCode::kCorruptData,
                     "upstream response has no 'output' array: " + Snippet(upstream_body));
  }
  Translated out;
  out.body = std::string(upstream_body);
  out.usage = UsageOf(*response, UsageFlavor::kOpenAIResponses);
  out.finish_reason = FinishReasonOf(*response);
  return out;
}

Result<Translated> TranslateEmbeddingsResponse(std::string_view upstream_body) {
  Result<raw_json::Value> list = ReadAnswer(upstream_body);
  if (!list) return std::unexpected(list.error());
  std::optional<raw_json::Value> data = raw_json::Find(*list, "data");
  if (!data || !data->is_array()) {
    return MakeError(ErrorCode::kCorruptData,
                     "upstream response has no 'data' array: " + Snippet(upstream_body));
  }
  Translated out;
  out.body = std::string(upstream_body);
  out.usage = UsageOf(*list, UsageFlavor::kOpenAIEmbeddings);
  return out;
}

std::unique_ptr<StreamTranslator> NewResponsesStream() {
  return std::make_unique<ResponsesStream>();
}

}  // namespace kvgate::providers::internal
