// Anthropic Messages SSE -> OpenAI chat.completion.chunk SSE.
//
//   message_start        -> first chunk (delta role assistant, content ""); usage seeded
//   content_block_start  -> tool_use: a tool_calls delta with id, name and "" arguments; text with
//                           initial text: a content delta
//   content_block_delta  -> text_delta: content; input_json_delta: tool_calls arguments delta;
//                           thinking_delta: reasoning_content
//   message_delta        -> a chunk with finish_reason; usage merged (cumulative: last value wins
//                           per field, never summed)
//   message_stop         -> the usage chunk (choices: []) when the client asked for it, then
//                           data: [DONE]
//   content_block_stop   -> a tool_use block that streamed no arguments: arguments "{}"
//   ping, unknown events -> nothing
//   error                -> an OpenAI error event; the stream is over
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/raw_json.h"
#include "gateway/providers/internal.h"
#include "gateway/providers/sse.h"
#include "gateway/providers/sse_translator.h"

namespace kvgate::providers::internal {
namespace {

using ojson = nlohmann::ordered_json;

class AnthropicStream final : public SseStreamTranslator {
 public:
  explicit AnthropicStream(const CallOptions& options)
      : SseStreamTranslator("message_stop"),
        client_wants_usage_(options.client_wants_usage),
        created_(CreatedTime(options)) {
    BuildChunkPrefix("", "");
  }

 private:
  void NoteCacheMissReason(const json& holder) {
    if (std::string reason = CacheMissReasonOf(holder); !reason.empty()) {
      cache_miss_reason_ = std::move(reason);
    }
  }

  // `data: {"id":...,"object":"chat.completion.chunk","created":...,"model":...,"choices":[` —
  // built once per message so content deltas cost one string escape, not a JSON document.
  void BuildChunkPrefix(const std::string& id, const std::string& model) {
    chunk_prefix_ =
        "data: {\"id\":" + Dump(json(id)) +
        ",\"object\":\"chat.completion.chunk\",\"created\":" + std::to_string(created_) +
        ",\"model\":" + Dump(json(model)) + ",\"choices\":[";
  }

  // One chunk with a single choice; `delta` and `finish_reason` are serialized JSON.
  void EmitChunk(std::string& out, std::string_view delta,
                 std::string_view finish_reason = "null") {
    out += chunk_prefix_;
    out += "{\"index\":0,\"delta\":";
    out += delta;
    out += ",\"logprobs\":null,\"finish_reason\":";
    out += finish_reason;
    out += "}]}\n\n";
  }

  void EmitToolDelta(Output& out, int tool_index, ojson call) {
    ojson wrapped = {{"index", tool_index}};
    for (auto& [k, v] : call.items()) wrapped[k] = v;
    ojson delta;
    delta["tool_calls"] = ojson::array({std::move(wrapped)});
    EmitChunk(out.bytes, Dump(delta));
    out.has_content = true;
  }

  void UpdateUsage(const json& usage) {
    MergeUsage(usage_raw_, usage);
    usage_ = telemetry::NormalizeUsage(telemetry::UsageFlavor::kAnthropic, usage_raw_);
  }

  void Handle(const SseEvent& event, Output& out) override {
    if (!event.has_data || TrimSpace(event.data).empty()) return;  // nothing to dispatch
    if (HandleTextDelta(event.data, out)) return;
    const json data = ParseJson(event.data);
    if (data.is_discarded() || !data.is_object()) {
      Fail(out.bytes, "upstream sent malformed JSON in a stream event: " + Snippet(event.data));
      return;
    }
    std::string_view type = StringMember(data, "type");
    if (type.empty()) type = event.event;

    if (type == "message_start") {
      const json* message = Member(data, "message");
      if (message == nullptr) return;
      BuildChunkPrefix(std::string(StringMember(*message, "id")),
                       std::string(StringMember(*message, "model")));
      if (const json* usage = Member(*message, "usage")) UpdateUsage(*usage);
      NoteCacheMissReason(*message);
      EmitChunk(out.bytes, R"({"role":"assistant","content":""})");
    } else if (type == "content_block_start") {
      const json* block = Member(data, "content_block");
      if (block == nullptr) return;
      const std::string_view block_type = StringMember(*block, "type");
      if (block_type == "tool_use") {
        const int tool_index = next_tool_index_++;
        tool_blocks_[BlockIndex(data)] = ToolBlock{.tool_index = tool_index};
        ojson call;
        call["id"] = std::string(StringMember(*block, "id"));
        call["type"] = "function";
        call["function"] = {{"name", std::string(StringMember(*block, "name"))}, {"arguments", ""}};
        EmitToolDelta(out, tool_index, std::move(call));
      } else if (block_type == "text" && !StringMember(*block, "text").empty()) {
        EmitContent(out, "content", StringMember(*block, "text"));
      }
    } else if (type == "content_block_delta") {
      const json* delta = Member(data, "delta");
      if (delta == nullptr) return;
      const std::string_view delta_type = StringMember(*delta, "type");
      if (delta_type == "text_delta") {
        EmitContent(out, "content", StringMember(*delta, "text"));
      } else if (delta_type == "thinking_delta") {
        EmitContent(out, "reasoning_content", StringMember(*delta, "thinking"));
      } else if (delta_type == "input_json_delta") {
        const std::string_view partial = StringMember(*delta, "partial_json");
        auto it = tool_blocks_.find(BlockIndex(data));
        if (partial.empty() || it == tool_blocks_.end()) return;
        it->second.sent_arguments = true;
        ojson call;
        call["function"] = {{"arguments", std::string(partial)}};
        EmitToolDelta(out, it->second.tool_index, std::move(call));
      }
    } else if (type == "content_block_stop") {
      // A call without arguments streams no (or only empty) input_json_delta; OpenAI sends "{}"
      // then, as the non-streaming translation does, and clients json.loads what they got.
      auto it = tool_blocks_.find(BlockIndex(data));
      if (it == tool_blocks_.end() || it->second.sent_arguments) return;
      it->second.sent_arguments = true;
      ojson call;
      call["function"] = {{"arguments", "{}"}};
      EmitToolDelta(out, it->second.tool_index, std::move(call));
    } else if (type == "message_delta") {
      if (const json* usage = Member(data, "usage")) UpdateUsage(*usage);
      NoteCacheMissReason(data);
      const json* delta = Member(data, "delta");
      const json* stop_reason = delta != nullptr ? Member(*delta, "stop_reason") : nullptr;
      std::string reason = AnthropicFinishReason(stop_reason != nullptr ? *stop_reason : json());
      if (!reason.empty()) {
        finish_reason_ = reason;
        EmitChunk(out.bytes, "{}", Dump(json(reason)));
      }
    } else if (type == "message_stop") {
      completed_ = true;
      if (client_wants_usage_) {
        out.bytes += chunk_prefix_;
        out.bytes += "],\"usage\":";
        out.bytes += Dump(AnthropicUsageToOpenAI(usage_raw_));
        out.bytes += "}\n\n";
      }
      out.bytes += "data: [DONE]\n\n";
    } else if (type == "error") {
      const json* error = Member(data, "error");
      const std::string_view anthropic_type = error != nullptr ? StringMember(*error, "type") : "";
      std::string message = error != nullptr ? std::string(StringMember(*error, "message")) : "";
      if (message.empty()) message = "upstream error: " + Snippet(event.data);
      upstream_error_ = message;
      client_error_ = message;
      failed_ = true;
      const int status = anthropic_type == "overloaded_error" ? 503 : 502;
      out.bytes += ErrorEventBytes(MakeOpenAIError(status, std::move(message),
                                                   AnthropicErrorTypeToOpenAI(anthropic_type),
                                                   std::string(anthropic_type)));
    }
    // ping and event types added later by Anthropic: nothing to send.
  }

  // A text or thinking delta, nearly every event of a stream, read from its bytes: its text goes
  // out as the upstream escaped it (a valid JSON string either way), without a JSON document per
  // event. False for any other event, or one whose shape this reader does not vouch for (escaped
  // type names, a non-string text); Handle then parses it into a tree as before.
  bool HandleTextDelta(std::string_view data, Output& out) {
    Result<raw_json::Value> parsed = raw_json::Parse(data);
    if (!parsed || !parsed->is_object()) return false;
    const char* end = parsed->text.data() + parsed->text.size();
    std::string_view type, delta_type;  // raw, quotes included
    std::optional<raw_json::Value> text, thinking;
    raw_json::WalkMembers(parsed->text.data(), end, [&](std::string_view key, const char*& p) {
      if (raw_json::KeyIs(key, "type")) {
        type = raw_json::ReadMember(p, end).text;
      } else if (raw_json::KeyIs(key, "delta")) {
        delta_type = {};
        text.reset();
        thinking.reset();
        p = raw_json::WalkMembers(p, end, [&](std::string_view delta_key, const char*& d) {
          if (raw_json::KeyIs(delta_key, "type")) {
            delta_type = raw_json::ReadMember(d, end).text;
          } else if (raw_json::KeyIs(delta_key, "text")) {
            text = raw_json::ReadMember(d, end);
          } else if (raw_json::KeyIs(delta_key, "thinking")) {
            thinking = raw_json::ReadMember(d, end);
          } else {
            raw_json::SkipMember(d, end);
          }
        });
      } else {
        raw_json::SkipMember(p, end);
      }
    });
    if (type != R"("content_block_delta")") return false;
    std::string_view key;
    std::optional<raw_json::Value> value;
    if (delta_type == R"("text_delta")") {
      key = "content";
      value = text;
    } else if (delta_type == R"("thinking_delta")") {
      key = "reasoning_content";
      value = thinking;
    } else {
      return false;
    }
    if (!value || !value->is_string()) return false;
    if (value->text.size() > 2) EmitQuotedContent(out, key, value->text);  // "": nothing to send
    return true;
  }

  void EmitContent(Output& out, std::string_view key, std::string_view text) {
    if (!text.empty()) EmitQuotedContent(out, key, Dump(json(std::string(text))));
  }

  // A chunk whose delta is {key: quoted_text}; `quoted_text` is a JSON string literal.
  void EmitQuotedContent(Output& out, std::string_view key, std::string_view quoted_text) {
    std::string delta = "{\"";
    delta += key;
    delta += "\":";
    delta += quoted_text;
    delta += "}";
    EmitChunk(out.bytes, delta);
    out.has_content = true;
  }

  static int64_t BlockIndex(const json& data) {
    const json* index = Member(data, "index");
    return index != nullptr && index->is_number_integer() ? index->get<int64_t>() : -1;
  }

  // Constant after construction.
  const bool client_wants_usage_;
  const int64_t created_;

  std::string chunk_prefix_;
  // A tool_use block being streamed: its OpenAI tool index, and whether any arguments went out.
  struct ToolBlock {
    int tool_index = 0;
    bool sent_arguments = false;
  };
  std::map<int64_t, ToolBlock> tool_blocks_;  // by Anthropic content block index
  int next_tool_index_ = 0;
  json usage_raw_;  // merged Anthropic usage
};

}  // namespace

std::unique_ptr<StreamTranslator> NewAnthropicStream(const CallOptions& options) {
  return std::make_unique<AnthropicStream>(options);
}

}  // namespace kvgate::providers::internal
