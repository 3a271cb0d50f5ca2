// OpenAI chat answers -> Anthropic Messages answers (a Message, or Anthropic's event stream),
// and errors in Anthropic's shape; messages.h has the rules.
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/ids.h"
#include "common/json_text.h"
#include "common/json_writer.h"
#include "gateway/providers/internal.h"
#include "gateway/providers/messages.h"
#include "gateway/providers/sse.h"

namespace kvgate::providers {
namespace {

using internal::Decoded;

// A non-negative count at `key`, 0 when absent or malformed.
int64_t CountOf(std::optional<raw_json::Value> object, std::string_view key) {
  if (!object) return 0;
  std::optional<raw_json::Value> v = raw_json::Find(*object, key);
  if (!v || v->kind != raw_json::Kind::kNumber) return 0;
  return std::max<int64_t>(0, std::atoll(std::string(v->text).c_str()));
}

// Anthropic's stop_reason and stop_sequence for an OpenAI choice ("" for none).
struct Stop {
  std::string reason;
  std::string sequence;  // with reason "stop_sequence": the stop string that ended the answer
};

// An OpenAI choice's finish_reason, in Anthropic's terms. OpenAI does not say which stop string
// ended an answer; vLLM and kvgate's engine do, as a string `stop_reason` (an integer there is a
// stop token id, Anthropic's end_turn).
Stop StopOf(raw_json::Value choice) {
  const std::string finish_reason = Decoded(raw_json::Find(choice, "finish_reason"));
  if (finish_reason.empty()) return {};
  if (finish_reason == "length") return {"max_tokens", ""};
  if (finish_reason == "tool_calls" || finish_reason == "function_call") return {"tool_use", ""};
  if (finish_reason == "content_filter") return {"refusal", ""};
  if (std::optional<raw_json::Value> matched = raw_json::Find(choice, "stop_reason");
      finish_reason == "stop" && matched && matched->is_string()) {
    std::string sequence = Decoded(matched);
    if (!sequence.empty()) return {"stop_sequence", std::move(sequence)};
  }
  return {"end_turn", ""};
}

void WriteStopReason(JsonWriter& w, const Stop& stop) {
  w.Key("stop_reason");
  if (stop.reason.empty()) {
    w.Null();
  } else {
    w.String(stop.reason);
  }
  w.Key("stop_sequence");
  if (stop.sequence.empty()) {
    w.Null();
  } else {
    w.String(stop.sequence);
  }
}

// The counts of an OpenAI usage object, in Anthropic's terms.
struct Counts {
  int64_t input = 0, cache_write = 0, cache_read = 0, output = 0;
  static Counts Of(raw_json::Value usage) {
    Counts c;
    std::optional<raw_json::Value> details = raw_json::Find(usage, "prompt_tokens_details");
    c.cache_read = CountOf(details, "cached_tokens");
    c.cache_write = CountOf(details, "cache_write_tokens");
    c.input = std::max<int64_t>(0, CountOf(usage, "prompt_tokens") - c.cache_read - c.cache_write);
    c.output = CountOf(usage, "completion_tokens");
    return c;
  }
  void Write(JsonWriter& w) const {
    w.BeginObject().Key("input_tokens").Int(input);
    w.Key("cache_creation_input_tokens").Int(cache_write);
    w.Key("cache_read_input_tokens").Int(cache_read);
    w.Key("output_tokens").Int(output).EndObject();
  }
};

// A tool call's arguments (a JSON string holding an object) as the tool_use input; {} when they
// are not an object (a model that wrote broken JSON).
std::string InputOf(std::optional<raw_json::Value> arguments) {
  std::string decoded = Decoded(arguments);
  Result<raw_json::Value> parsed = raw_json::Parse(decoded);
  if (!parsed || !parsed->is_object()) return "{}";
  std::string out;
  raw_json::AppendMinified(*parsed, out);
  return out;
}

std::string Event(std::string_view name, std::string_view data) {
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  out += data;
  out += "\n\n";
  return out;
}

constexpr std::string_view kAnthropicTypes[] = {
    "invalid_request_error", "authentication_error", "billing_error",    "permission_error",
    "not_found_error",       "request_too_large",    "rate_limit_error", "api_error",
    "timeout_error",         "overloaded_error"};

std::string AnthropicTypeFor(int status, std::string_view code) {
  const bool known = std::find(std::begin(kAnthropicTypes), std::end(kAnthropicTypes), code) !=
                     std::end(kAnthropicTypes);
  const bool server_side =
      code == "api_error" || code == "overloaded_error" || code == "timeout_error";
  // An upstream Anthropic type survives when it still fits the status the client gets (an
  // upstream 401 is kvgate's 502: the gateway's credentials, not the client's).
  if (known && (status >= 500) == server_side) return std::string(code);
  switch (status) {
    case 401:
      return "authentication_error";
    case 402:
      return "billing_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    case 504:
      return "timeout_error";
    default:
      break;
  }
  return status < 500 ? "invalid_request_error" : "api_error";
}

class AnswerStream final : public MessagesAnswerStream {
 public:
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

  const std::string& message_id() const override { return message_id_; }

 private:
  void Handle(const SseEvent& event, std::string& out) {
    if (!event.has_data) return;  // comments and keep-alives: Anthropic streams have ping
    const std::string_view data = internal::TrimSpace(event.data);
    if (data.empty()) return;
    if (data == "[DONE]") {
      Start(out, "", "");
      CloseBlock(out);
      JsonWriter delta;
      delta.BeginObject().Key("type").String("message_delta").Key("delta").BeginObject();
      WriteStopReason(delta, stop_.reason.empty() ? Stop{"end_turn", ""} : stop_);
      delta.EndObject().Key("usage");
      counts_.Write(delta);
      delta.EndObject();
      out += Event("message_delta", delta.Take());
      out += Event("message_stop", R"({"type":"message_stop"})");
      done_ = true;
      return;
    }
    Result<raw_json::Value> chunk = raw_json::Parse(data);
    if (!chunk || !chunk->is_object()) {
      Fail(out, "malformed JSON in a stream event: " + internal::Snippet(data));
      return;
    }
    std::optional<raw_json::Value> error = raw_json::Find(*chunk, "error");
    if (event.event == "error" || (error && !error->is_null())) {
      std::string message =
          internal::ErrorMessageOf(internal::ParseJson(data)).value_or(internal::Snippet(data));
      std::string code = error ? Decoded(raw_json::Find(*error, "code")) : "";
      out += AnthropicErrorEvent(ToAnthropicError(
          MakeOpenAIError(502, std::move(message), "upstream_error", std::move(code))));
      done_ = true;
      return;
    }
    Start(out, Decoded(raw_json::Find(*chunk, "id")), Decoded(raw_json::Find(*chunk, "model")));
    if (std::optional<raw_json::Value> usage = raw_json::Find(*chunk, "usage");
        usage && usage->is_object()) {
      counts_ = Counts::Of(*usage);
    }
    std::optional<raw_json::Value> choices = raw_json::Find(*chunk, "choices");
    if (!choices) return;
    raw_json::ForEachElement(*choices, [&](raw_json::Value choice) {
      if (Stop stop = StopOf(choice); !stop.reason.empty()) stop_ = std::move(stop);
      std::optional<raw_json::Value> delta = raw_json::Find(choice, "delta");
      if (!delta) return;
      if (std::optional<raw_json::Value> text = raw_json::Find(*delta, "content");
          text && text->is_string() && text->text.size() > 2) {
        if (open_ < 0 || open_tool_) StartBlock(out, R"({"type":"text","text":""})", false);
        WriteDelta(out, open_, "text_delta", "text", text->text);
      }
      if (std::optional<raw_json::Value> calls = raw_json::Find(*delta, "tool_calls")) {
        raw_json::ForEachElement(*calls, [&](raw_json::Value call) { HandleToolCall(call, out); });
      }
    });
  }

  void HandleToolCall(raw_json::Value call, std::string& out) {
    const int64_t index = CountOf(call, "index");
    std::optional<raw_json::Value> function = raw_json::Find(call, "function");
    auto it = tool_blocks_.find(index);
    if (it == tool_blocks_.end()) {
      JsonWriter block;
      block.BeginObject().Key("type").String("tool_use");
      block.Key("id").String(Decoded(raw_json::Find(call, "id")));
      block.Key("name").String(function ? Decoded(raw_json::Find(*function, "name")) : "");
      block.Key("input").BeginObject().EndObject().EndObject();
      StartBlock(out, block.Take(), true);
      it = tool_blocks_.emplace(index, open_).first;
    }
    std::optional<raw_json::Value> arguments =
        function ? raw_json::Find(*function, "arguments") : std::nullopt;
    if (arguments && arguments->is_string() && arguments->text.size() > 2) {
      WriteDelta(out, it->second, "input_json_delta", "partial_json", arguments->text);
    }
  }

  // message_start, once, with zero counts (the real ones come in message_delta).
  void Start(std::string& out, const std::string& chat_id, const std::string& model) {
    if (started_) return;
    started_ = true;
    message_id_ = chat_id.empty() ? NewId("msg") : MessageIdFor(chat_id);
    JsonWriter w;
    w.BeginObject().Key("type").String("message_start").Key("message").BeginObject();
    w.Key("id").String(message_id_).Key("type").String("message").Key("role").String("assistant");
    w.Key("model").String(model).Key("content").BeginArray().EndArray();
    WriteStopReason(w, Stop{});
    w.Key("usage");
    Counts{}.Write(w);
    w.EndObject().EndObject();
    out += Event("message_start", w.Take());
  }

  void StartBlock(std::string& out, std::string_view block, bool tool) {
    CloseBlock(out);
    open_ = next_index_++;
    open_tool_ = tool;
    JsonWriter w;
    w.BeginObject().Key("type").String("content_block_start").Key("index").Int(open_);
    w.Key("content_block").Raw(block).EndObject();
    out += Event("content_block_start", w.Take());
    if (open_ == 0) out += Event("ping", R"({"type": "ping"})");
  }

  void CloseBlock(std::string& out) {
    if (open_ < 0) return;
    JsonWriter w;
    w.BeginObject().Key("type").String("content_block_stop").Key("index").Int(open_).EndObject();
    out += Event("content_block_stop", w.Take());
    open_ = -1;
  }

  // `quoted` is a JSON string literal (the upstream's own escapes).
  static void WriteDelta(std::string& out, int64_t index, std::string_view type,
                         std::string_view key, std::string_view quoted) {
    JsonWriter w;
    w.BeginObject().Key("type").String("content_block_delta").Key("index").Int(index);
    w.Key("delta").BeginObject().Key("type").String(type).Key(key).Raw(quoted).EndObject();
    w.EndObject();
    out += Event("content_block_delta", w.Take());
  }

  void Fail(std::string& out, std::string message) {
    out += AnthropicErrorEvent(ToAnthropicError(
        MakeOpenAIError(502, std::move(message), "upstream_error", "stream_incomplete")));
    done_ = true;
  }

  SseParser parser_;
  bool started_ = false;
  bool done_ = false;
  std::string message_id_;
  int64_t open_ = -1;  // the content block being streamed, -1 when none
  bool open_tool_ = false;
  int64_t next_index_ = 0;
  std::map<int64_t, int64_t> tool_blocks_;  // OpenAI tool call index -> content block index
  Stop stop_;
  Counts counts_;
};

}  // namespace

std::string MessageIdFor(std::string_view chat_id) {
  for (std::string_view prefix : {"chatcmpl-", "chatcmpl_"}) {
    if (chat_id.starts_with(prefix)) chat_id.remove_prefix(prefix.size());
  }
  return "msg_" + std::string(chat_id);
}

Result<std::string> ChatToMessage(std::string_view chat_completion) {
  Result<raw_json::Value> chat = raw_json::Parse(chat_completion);
  std::optional<raw_json::Value> choices =
      chat && chat->is_object() ? raw_json::Find(*chat, "choices") : std::nullopt;
  if (!choices || !choices->is_array() || raw_json::Elements(*choices).empty()) {
    return MakeError(ErrorCode::kCorruptData,
                     "the answer is not a chat.completion: " + internal::Snippet(chat_completion));
  }
  const raw_json::Value choice = raw_json::Elements(*choices).front();
  std::optional<raw_json::Value> message = raw_json::Find(choice, "message");
  JsonWriter content;
  content.BeginArray();
  if (message) {
    if (std::optional<raw_json::Value> text = raw_json::Find(*message, "content");
        text && text->is_string() && text->text.size() > 2) {
      content.BeginObject().Key("type").String("text").Key("text").Raw(text->text).EndObject();
    }
    if (std::optional<raw_json::Value> calls = raw_json::Find(*message, "tool_calls")) {
      raw_json::ForEachElement(*calls, [&](raw_json::Value call) {
        std::optional<raw_json::Value> function = raw_json::Find(call, "function");
        content.BeginObject().Key("type").String("tool_use");
        content.Key("id").String(Decoded(raw_json::Find(call, "id")));
        content.Key("name").String(function ? Decoded(raw_json::Find(*function, "name")) : "");
        content.Key("input").Raw(
            InputOf(function ? raw_json::Find(*function, "arguments") : std::nullopt));
        content.EndObject();
      });
    }
  }
  content.EndArray();
  std::optional<raw_json::Value> usage = raw_json::Find(*chat, "usage");
  JsonWriter w;
  w.BeginObject().Key("id").String(MessageIdFor(Decoded(raw_json::Find(*chat, "id"))));
  w.Key("type").String("message").Key("role").String("assistant");
  w.Key("model").String(Decoded(raw_json::Find(*chat, "model")));
  w.Key("content").Raw(content.Take());
  WriteStopReason(w, StopOf(choice));
  w.Key("usage");
  Counts::Of(usage.value_or(raw_json::Value{})).Write(w);
  w.EndObject();
  return w.Take();
}

std::unique_ptr<MessagesAnswerStream> NewMessagesAnswerStream() {
  return std::make_unique<AnswerStream>();
}

ClientError ToAnthropicError(const ClientError& openai_error) {
  std::string message, code;
  if (auto it = openai_error.body.find("error"); it != openai_error.body.end() && it->is_object()) {
    message = std::string(internal::StringMember(*it, "message"));
    code = std::string(internal::StringMember(*it, "code"));
  }
  ClientError out;
  out.status = openai_error.status;
  const std::string type = AnthropicTypeFor(out.status, code);
  if (code == "overloaded_error") out.status = 529;  // Anthropic's own status for it
  try {
    out.body = nlohmann::json{{"type", "error"},
                              {"error", {{"type", type}, {"message", std::move(message)}}}};
  } catch (const std::exception&) {
    out.body = nullptr;
  }
  return out;
}

std::string AnthropicErrorEvent(const ClientError& error) {
  return Event("error", JsonText(error.body));
}

const std::string& AnthropicShutdownCutEvent() {
  static const std::string event = AnthropicErrorEvent(ToAnthropicError(MakeOpenAIError(
      503, "kvgate is shutting down and cut this stream before it ended; retry the request",
      "server_error", "server_shutting_down")));
  return event;
}

}  // namespace kvgate::providers
