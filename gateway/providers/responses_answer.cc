// OpenAI chat answers -> Responses API answers (a response object, or the Responses event
// stream); responses_translate.h has the rules.
#include <ctime>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/providers/internal.h"
#include "gateway/providers/responses_translate.h"
#include "gateway/providers/sse.h"

namespace kvgate::providers {
namespace {

using ojson = nlohmann::ordered_json;

std::string Suffix(std::string_view chat_id) {
  // "chatcmpl-" (OpenAI) or "chatcmpl_" (kvgate's own ids).
  constexpr std::string_view kPrefix = "chatcmpl";
  if (chat_id.size() > kPrefix.size() + 1 && chat_id.substr(0, kPrefix.size()) == kPrefix &&
      (chat_id[kPrefix.size()] == '-' || chat_id[kPrefix.size()] == '_')) {
    chat_id.remove_prefix(kPrefix.size() + 1);
  }
  return std::string(chat_id);
}

int64_t Count(const ojson& object, const char* key) {
  if (!object.is_object()) return 0;
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? std::max<int64_t>(0, it->get<int64_t>())
                                                       : 0;
}

ojson UsageOf(const ojson& chat_usage) {
  const int64_t input = Count(chat_usage, "prompt_tokens");
  const int64_t output = Count(chat_usage, "completion_tokens");
  const ojson details = chat_usage.is_object() ? chat_usage.value("prompt_tokens_details", ojson())
                                               : ojson();
  return {{"input_tokens", input},
          // Both keys: OpenAI's API document requires cache_write_tokens too (0 when the chat
          // usage does not say).
          {"input_tokens_details",
           {{"cached_tokens", Count(details, "cached_tokens")},
            {"cache_write_tokens", Count(details, "cache_write_tokens")}}},
          {"output_tokens", output},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", input + output}};
}

ojson TextPart(const std::string& text) {
  return {{"type", "output_text"}, {"annotations", ojson::array()}, {"logprobs", ojson::array()},
          {"text", text}};
}

ojson MessageItem(const std::string& id, const std::string& status, ojson content) {
  return {{"id", id}, {"type", "message"}, {"status", status}, {"content", std::move(content)},
          {"role", "assistant"}};
}

ojson FunctionCallItem(const std::string& id, const std::string& status, const std::string& call_id,
                       const std::string& name, const std::string& arguments) {
  return {{"id", id}, {"type", "function_call"}, {"status", status}, {"arguments", arguments},
          {"call_id", call_id}, {"name", name}};
}

// The response object around `output`, in the field order OpenAI answers with.
ojson Response(const std::string& id, int64_t created, const std::string& status,
               const ojson& echo, const std::string& model, ojson output, ojson usage) {
  ojson r = {{"id", id}, {"object", "response"}, {"created_at", created}, {"status", status},
             {"background", false}, {"error", nullptr},
             {"incomplete_details", status == "incomplete"
                                        ? ojson({{"reason", "max_output_tokens"}})
                                        : ojson()}};
  for (const char* key : {"instructions", "max_output_tokens"}) r[key] = echo.value(key, ojson());
  r["model"] = model.empty() ? echo.value("model", ojson("")) : ojson(model);
  r["output"] = std::move(output);
  r["parallel_tool_calls"] = echo.value("parallel_tool_calls", ojson(true));
  r["previous_response_id"] = echo.value("previous_response_id", ojson());
  r["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  r["service_tier"] = "default";
  for (const char* key : {"store", "temperature", "text", "tool_choice", "tools", "top_p"}) {
    r[key] = echo.value(key, ojson());
  }
  r["truncation"] = "disabled";
  r["usage"] = std::move(usage);
  r["user"] = echo.value("user", ojson());
  r["metadata"] = echo.value("metadata", ojson::object());
  return r;
}

std::string Dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// The chat assistant message for the conversation store.
std::string AssistantMessage(const std::string& text, const ojson& tool_calls) {
  ojson m = {{"role", "assistant"}, {"content", text.empty() && !tool_calls.empty()
                                                    ? ojson() : ojson(text)}};
  if (!tool_calls.empty()) m["tool_calls"] = tool_calls;
  return Dump(m);
}

struct ToolCall {
  std::string item_id, call_id, name, arguments;
};

class AnswerStream final : public ResponsesAnswerStream {
 public:
  explicit AnswerStream(std::string echo) : echo_(ojson::parse(echo, nullptr, false)) {}

  std::string Feed(std::string_view chat_sse) override {
    return TranslateSseEvents(
        parser_, done_, chat_sse,
        [this](const SseEvent& event, std::string& out) { Handle(event, out); },
        [this](std::string& out, std::string message) { Fail(out, std::move(message)); });
  }

  std::string Finish() override {
    std::string out;
    if (!done_) Fail(out, "the stream ended before its final event");
    return out;
  }

  const std::string& response_id() const override { return id_; }
  const std::optional<ResponsesOutcome>& outcome() const override { return outcome_; }

 private:
  void Emit(std::string& out, const std::string& type, ojson fields) {
    ojson data = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto& [k, v] : fields.items()) data[k] = v;
    out += "event: " + type + "\ndata: " + Dump(data) + "\n\n";
  }

  void Fail(std::string& out, const std::string& message) {
    Emit(out, "error", {{"code", "server_error"}, {"message", message}, {"param", nullptr}});
    done_ = true;
  }

  void Start(std::string& out, const ojson& chunk) {
    if (started_) return;
    started_ = true;
    const std::string chat_id = chunk.value("id", "");
    suffix_ = Suffix(chat_id.empty() ? "stream" : chat_id);
    id_ = "resp_" + suffix_;
    model_ = chunk.value("model", "");
    created_ = chunk.value("created", static_cast<int64_t>(std::time(nullptr)));
    ojson started = Response(id_, created_, "in_progress", echo_, model_, ojson::array(), nullptr);
    Emit(out, "response.created", {{"response", started}});
    Emit(out, "response.in_progress", {{"response", started}});
  }

  void OpenText(std::string& out) {
    if (text_open_) return;
    CloseTool(out);
    text_open_ = true;
    text_index_ = output_.size();
    output_.push_back(nullptr);  // filled when the item is done
    message_id_ = "msg_" + suffix_;
    Emit(out, "response.output_item.added",
         {{"output_index", text_index_}, {"item", MessageItem(message_id_, "in_progress", ojson::array())}});
    Emit(out, "response.content_part.added", {{"item_id", message_id_}, {"output_index", text_index_},
                                              {"content_index", 0}, {"part", TextPart("")}});
  }

  void CloseText(std::string& out) {
    if (!text_open_) return;
    text_open_ = false;
    Emit(out, "response.output_text.done", {{"item_id", message_id_}, {"output_index", text_index_},
                                            {"content_index", 0}, {"text", text_},
                                            {"logprobs", ojson::array()}});
    Emit(out, "response.content_part.done", {{"item_id", message_id_}, {"output_index", text_index_},
                                             {"content_index", 0}, {"part", TextPart(text_)}});
    output_[text_index_] = MessageItem(message_id_, Status(), ojson::array({TextPart(text_)}));
    Emit(out, "response.output_item.done", {{"output_index", text_index_}, {"item", output_[text_index_]}});
  }

  void CloseTool(std::string& out) {
    if (!tool_open_) return;
    tool_open_ = false;
    const ToolCall& c = calls_.back();
    const size_t index = output_.size() - 1;
    Emit(out, "response.function_call_arguments.done",
         {{"item_id", c.item_id}, {"output_index", index}, {"arguments", c.arguments}});
    output_[index] = FunctionCallItem(c.item_id, "completed", c.call_id, c.name, c.arguments);
    Emit(out, "response.output_item.done", {{"output_index", index}, {"item", output_[index]}});
  }

  void ToolDelta(std::string& out, const ojson& delta) {
    const int64_t index = delta.value("index", static_cast<int64_t>(calls_.size()) - 1);
    const ojson function = delta.value("function", ojson::object());
    if (index != tool_chat_index_) {  // a new call
      CloseText(out);
      CloseTool(out);
      tool_chat_index_ = index;
      ToolCall c;
      c.call_id = delta.value("id", "call_" + suffix_ + "_" + std::to_string(index));
      c.item_id = "fc_" + suffix_ + "_" + std::to_string(calls_.size());
      c.name = function.value("name", "");
      calls_.push_back(std::move(c));
      tool_open_ = true;
      output_.push_back(nullptr);
      Emit(out, "response.output_item.added",
           {{"output_index", output_.size() - 1},
            {"item", FunctionCallItem(calls_.back().item_id, "in_progress", calls_.back().call_id,
                                      calls_.back().name, "")}});
    }
    std::string arguments = function.value("arguments", "");
    if (arguments.empty()) return;
    calls_.back().arguments += arguments;
    Emit(out, "response.function_call_arguments.delta",
         {{"item_id", calls_.back().item_id}, {"output_index", output_.size() - 1},
          {"delta", arguments}});
  }

  std::string Status() const { return length_ ? "incomplete" : "completed"; }

  void Complete(std::string& out) {
    Start(out, ojson::object());
    if (output_.empty()) OpenText(out);  // an empty answer is still one (empty) message
    CloseText(out);
    CloseTool(out);
    Emit(out, "response." + Status(),
         {{"response", Response(id_, created_, Status(), echo_, model_, output_, UsageOf(usage_))}});
    ojson tool_calls = ojson::array();
    for (const ToolCall& c : calls_) {
      tool_calls.push_back({{"id", c.call_id}, {"type", "function"},
                            {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    outcome_ = ResponsesOutcome{id_, AssistantMessage(text_, tool_calls)};
    done_ = true;
  }

  void Handle(const SseEvent& event, std::string& out) {
    if (!event.has_data) return;
    const std::string_view data = internal::TrimSpace(event.data);
    if (data.empty()) return;
    if (data == "[DONE]") {
      Complete(out);
      return;
    }
    ojson chunk = ojson::parse(data, nullptr, false);
    if (!chunk.is_object()) {
      Fail(out, "malformed JSON in a stream event: " + internal::Snippet(data));
      return;
    }
    if (event.event == "error" || (chunk.contains("error") && !chunk["error"].is_null())) {
      const ojson error = chunk.value("error", ojson::object());
      Emit(out, "error", {{"code", error.is_object() ? error.value("code", ojson()) : ojson()},
                          {"message", error.is_object() ? error.value("message", ojson(""))
                                                        : ojson(internal::Snippet(data))},
                          {"param", nullptr}});
      done_ = true;
      return;
    }
    Start(out, chunk);
    if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = chunk["usage"];
    if (!chunk.contains("choices") || !chunk["choices"].is_array()) return;
    for (const ojson& choice : chunk["choices"]) {
      const ojson delta = choice.value("delta", ojson::object());
      if (delta.contains("content") && delta["content"].is_string()) {
        const std::string piece = delta["content"].get<std::string>();
        if (!piece.empty()) {
          OpenText(out);
          text_ += piece;
          Emit(out, "response.output_text.delta",
               {{"item_id", message_id_}, {"output_index", text_index_}, {"content_index", 0},
                {"delta", piece}, {"logprobs", ojson::array()}});
        }
      }
      if (delta.contains("tool_calls") && delta["tool_calls"].is_array()) {
        for (const ojson& call : delta["tool_calls"]) ToolDelta(out, call);
      }
      if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
        length_ = choice["finish_reason"] == "length";
      }
    }
  }

  const ojson echo_;
  SseParser parser_;
  bool started_ = false, done_ = false, text_open_ = false, tool_open_ = false, length_ = false;
  int64_t sequence_ = 0, created_ = 0, tool_chat_index_ = -1;
  std::string id_, suffix_, model_, message_id_, text_;
  size_t text_index_ = 0;
  ojson output_ = ojson::array();
  ojson usage_;
  std::vector<ToolCall> calls_;
  std::optional<ResponsesOutcome> outcome_;
};

}  // namespace

std::string ResponseIdFor(std::string_view chat_id) { return "resp_" + Suffix(chat_id); }

Result<std::string> ChatToResponse(std::string_view chat_completion, std::string_view echo_text,
                                   ResponsesOutcome* outcome) {
  const ojson chat = ojson::parse(chat_completion, nullptr, false);
  const ojson echo = ojson::parse(echo_text, nullptr, false);
  if (!chat.is_object() || !chat.contains("choices") || !chat["choices"].is_array() ||
      chat["choices"].empty() || !chat["choices"][0].is_object()) {
    return MakeError(ErrorCode::kCorruptData,
                     "the answer is not a chat.completion: " + internal::Snippet(chat_completion));
  }
  const std::string suffix = Suffix(chat.value("id", "chat"));
  const ojson& choice = chat["choices"][0];
  const ojson message = choice.value("message", ojson::object());
  const std::string text = message.contains("content") && message["content"].is_string()
                               ? message["content"].get<std::string>() : "";
  const ojson tool_calls = message.contains("tool_calls") && message["tool_calls"].is_array()
                               ? message["tool_calls"] : ojson::array();
  const bool length = choice.contains("finish_reason") && choice["finish_reason"] == "length";
  const std::string status = length ? "incomplete" : "completed";
  ojson output = ojson::array();
  if (!text.empty() || tool_calls.empty()) {
    output.push_back(MessageItem("msg_" + suffix, status, ojson::array({TextPart(text)})));
  }
  for (size_t i = 0; i < tool_calls.size(); ++i) {
    const ojson& call = tool_calls[i];
    const ojson function = call.value("function", ojson::object());
    output.push_back(FunctionCallItem("fc_" + suffix + "_" + std::to_string(i), "completed",
                                      call.value("id", ""), function.value("name", ""),
                                      function.value("arguments", "")));
  }
  const std::string id = "resp_" + suffix;
  const int64_t created = chat.value("created", static_cast<int64_t>(std::time(nullptr)));
  ojson response = Response(id, created, status, echo, chat.value("model", ""), std::move(output),
                            UsageOf(chat.value("usage", ojson())));
  if (outcome != nullptr) *outcome = ResponsesOutcome{id, AssistantMessage(text, tool_calls)};
  return Dump(response);
}

std::unique_ptr<ResponsesAnswerStream> NewResponsesAnswerStream(std::string echo) {
  return std::make_unique<AnswerStream>(std::move(echo));
}

}  // namespace kvgate::providers
