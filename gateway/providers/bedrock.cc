// AWS Bedrock (provider type bedrock): the chat body goes through the Anthropic translation
// (anthropic_request.cc: tools, tool results, images, cache_control, max_tokens, stop, ...) and
// the Messages request it makes is then sent either
//   - to InvokeModel (models[].api: invoke) almost as it is: `model` and `stream` removed (the
//     path says both), anthropic_version "bedrock-2023-05-31" added; its answers are Anthropic's
//     own (a Message, or Anthropic's events base64-wrapped in event-stream `chunk` messages), read
//     by the Anthropic readers; or
//   - to Converse (api: converse, the default), rewritten as a Converse request (MessagesToConverse
//     below); its answers are rewritten as Anthropic's and read by the same readers, but the usage
//     is Converse's own, normalized with the Bedrock flavour.
// The stream's binary framing is event_stream.h's. The request is signed (SigV4) by the caller,
// which knows the host and the time (gateway/remote_upstream.cc); with an api_key the adapter
// sends it as a bearer token instead.
#include <string>
#include <utility>

#include "common/ids.h"
#include "gateway/providers/event_stream.h"
#include "gateway/providers/internal.h"
#include "gateway/providers/sigv4.h"

namespace kvgate::providers::internal {
namespace {

using ojson = nlohmann::ordered_json;

Error Invalid(std::string message) {
  return Error{ErrorCode::kInvalidArgument, std::move(message)};
}

// A Converse cache point for an Anthropic cache_control (its ttl "1h" kept).
ojson CachePointFor(const json& cache_control) {
  ojson point = {{"type", "default"}};
  if (StringMember(cache_control, "ttl") == "1h") point["ttl"] = "1h";
  return ojson{{"cachePoint", std::move(point)}};
}

bool HasCacheControl(const json& block) {
  const json* c = Member(block, "cache_control");
  return c != nullptr && c->is_object();
}

// image/png -> png, as Converse names image formats.
std::string ImageFormat(std::string_view media_type) {
  if (media_type.starts_with("image/")) media_type.remove_prefix(6);
  if (media_type == "jpg") return "jpeg";
  return std::string(media_type);
}

// A tool_result's content -> Converse toolResult content blocks.
// An Anthropic image block (base64 source) as a Converse image block.
Result<ojson> ImageBlock(const json& block) {
  const json* source = Member(block, "source");
  if (source == nullptr || StringMember(*source, "type") != "base64") {
    return std::unexpected(
        Invalid("Bedrock takes images as base64 data only (a data: URL), not as links"));
  }
  return ojson{{"image",
                {{"format", ImageFormat(StringMember(*source, "media_type"))},
                 {"source", {{"bytes", std::string(StringMember(*source, "data"))}}}}}};
}

Result<ojson> ToolResultContent(const json& content) {
  ojson out = ojson::array();
  if (content.is_string()) {
    out.push_back({{"text", content.get<std::string>()}});
    return out;
  }
  if (!content.is_array()) return out;
  for (const json& block : content) {
    const std::string_view type = StringMember(block, "type");
    if (type == "text") {
      out.push_back({{"text", std::string(StringMember(block, "text"))}});
    } else if (type == "image") {
      Result<ojson> image = ImageBlock(block);
      if (!image) return std::unexpected(image.error());
      out.push_back(std::move(*image));
    } else {
      return std::unexpected(Invalid("a tool result's content block of type " + std::string(type) +
                                     " cannot be sent to Bedrock Converse"));
    }
  }
  return out;
}

// One Anthropic content block -> Converse content blocks appended to `out` (its cachePoint after
// it when it carries cache_control).
Status AppendBlock(const json& block, ojson& out) {
  const std::string_view type = StringMember(block, "type");
  if (type == "text") {
    out.push_back({{"text", std::string(StringMember(block, "text"))}});
  } else if (type == "image") {
    Result<ojson> image = ImageBlock(block);
    if (!image) return std::unexpected(image.error());
    out.push_back(std::move(*image));
  } else if (type == "tool_use") {
    const json* input = Member(block, "input");
    out.push_back({{"toolUse",
                    {{"toolUseId", std::string(StringMember(block, "id"))},
                     {"name", std::string(StringMember(block, "name"))},
                     {"input", input != nullptr ? *input : json::object()}}}});
  } else if (type == "tool_result") {
    const json* content = Member(block, "content");
    auto blocks = ToolResultContent(content != nullptr ? *content : json());
    if (!blocks) return std::unexpected(blocks.error());
    ojson result = {{"toolUseId", std::string(StringMember(block, "tool_use_id"))},
                    {"content", std::move(*blocks)}};
    if (const json* error = Member(block, "is_error");
        error != nullptr && error->is_boolean() && error->get<bool>()) {
      result["status"] = "error";
    }
    out.push_back({{"toolResult", std::move(result)}});
  } else if (type == "thinking" || type == "redacted_thinking") {
    return {};  // the model's earlier reasoning is not sent back through Converse
  } else {
    return std::unexpected(Invalid("a content block of type " + std::string(type) +
                                   " cannot be sent to Bedrock Converse"));
  }
  if (HasCacheControl(block)) out.push_back(CachePointFor(*Member(block, "cache_control")));
  return {};
}

}  // namespace

// An Anthropic Messages request -> a Converse request (docs/providers.md, "Bedrock").
Result<std::string> MessagesToConverse(const json& messages_body) {
  ojson out;
  if (const json* system = Member(messages_body, "system"); system != nullptr) {
    ojson blocks = ojson::array();
    if (system->is_string()) {
      blocks.push_back({{"text", system->get<std::string>()}});
    } else if (system->is_array()) {
      for (const json& block : *system) {
        blocks.push_back({{"text", std::string(StringMember(block, "text"))}});
        if (HasCacheControl(block))
          blocks.push_back(CachePointFor(*Member(block, "cache_control")));
      }
    }
    if (!blocks.empty()) out["system"] = std::move(blocks);
  }
  ojson messages = ojson::array();
  if (const json* in = Member(messages_body, "messages"); in != nullptr && in->is_array()) {
    for (const json& message : *in) {
      ojson content = ojson::array();
      const json* c = Member(message, "content");
      if (c != nullptr && c->is_string()) {
        content.push_back({{"text", c->get<std::string>()}});
      } else if (c != nullptr && c->is_array()) {
        for (const json& block : *c) {
          if (Status s = AppendBlock(block, content); !s) return std::unexpected(s.error());
        }
      }
      messages.push_back(
          {{"role", std::string(StringMember(message, "role"))}, {"content", std::move(content)}});
    }
  }
  out["messages"] = std::move(messages);
  ojson inference;
  if (const json* v = Member(messages_body, "max_tokens"); v != nullptr)
    inference["maxTokens"] = *v;
  if (const json* v = Member(messages_body, "temperature"); v != nullptr)
    inference["temperature"] = *v;
  if (const json* v = Member(messages_body, "top_p"); v != nullptr) inference["topP"] = *v;
  if (const json* v = Member(messages_body, "stop_sequences"); v != nullptr) {
    inference["stopSequences"] = *v;
  }
  if (!inference.empty()) out["inferenceConfig"] = std::move(inference);
  if (const json* tools = Member(messages_body, "tools");
      tools != nullptr && tools->is_array() && !tools->empty()) {
    ojson specs = ojson::array();
    for (const json& tool : *tools) {
      ojson spec = {{"name", std::string(StringMember(tool, "name"))}};
      if (const json* d = Member(tool, "description"); d != nullptr && d->is_string()) {
        spec["description"] = *d;
      }
      const json* schema = Member(tool, "input_schema");
      spec["inputSchema"] = {{"json", schema != nullptr ? *schema : json::object()}};
      specs.push_back({{"toolSpec", std::move(spec)}});
      if (HasCacheControl(tool)) specs.push_back(CachePointFor(*Member(tool, "cache_control")));
    }
    ojson config = {{"tools", std::move(specs)}};
    if (const json* choice = Member(messages_body, "tool_choice"); choice != nullptr) {
      const std::string_view type = StringMember(*choice, "type");
      if (type == "auto") config["toolChoice"] = {{"auto", json::object()}};
      if (type == "any") config["toolChoice"] = {{"any", json::object()}};
      if (type == "tool") {
        config["toolChoice"] = {{"tool", {{"name", std::string(StringMember(*choice, "name"))}}}};
      }
    }
    out["toolConfig"] = std::move(config);
  }
  ojson extra;
  if (const json* v = Member(messages_body, "top_k"); v != nullptr) extra["top_k"] = *v;
  if (const json* v = Member(messages_body, "thinking"); v != nullptr) extra["thinking"] = *v;
  if (!extra.empty()) out["additionalModelRequestFields"] = std::move(extra);
  return Dump(out);
}

Result<UpstreamCall> BuildBedrockCall(const json& client_body, const CallOptions& options) {
  if (options.upstream_model.empty()) return std::unexpected(Invalid("no Bedrock model id"));
  auto call = BuildAnthropicCall(client_body, options);
  if (!call) return call;
  if (const std::string& ttl = options.cache_helpers.anthropic_auto_cache_ttl; !ttl.empty()) {
    if (std::optional<std::string> marked = AddAutoCacheBreakpoints(call->body, ttl)) {
      call->body = std::move(*marked);
      call->cache_helper = "anthropic_auto_cache";
    }
  }
  json messages_body = ParseJson(call->body);
  const bool invoke = options.bedrock_api == BedrockApi::kInvoke;
  call->path = "/model/" + AwsUriEncode(options.upstream_model, /*keep_slash=*/false) +
               (invoke ? (options.stream ? "/invoke-with-response-stream" : "/invoke")
                       : (options.stream ? "/converse-stream" : "/converse"));
  if (invoke) {
    messages_body.erase("model");
    messages_body.erase("stream");
    ojson body = {{"anthropic_version", "bedrock-2023-05-31"}};
    for (auto it = messages_body.begin(); it != messages_body.end(); ++it)
      body[it.key()] = it.value();
    call->body = Dump(body);
  } else {
    auto converse = MessagesToConverse(messages_body);
    if (!converse) return std::unexpected(converse.error());
    call->body = std::move(*converse);
  }
  call->headers.clear();
  call->headers.emplace_back("content-type", "application/json");
  call->headers.emplace_back(
      "accept", options.stream ? "application/vnd.amazon.eventstream" : "application/json");
  if (!options.api_key.empty())
    call->headers.emplace_back("authorization", "Bearer " + options.api_key);
  return call;
}

namespace {

// Converse's stopReason -> Anthropic's stop_reason (the Anthropic readers map it on).
std::string StopReasonOf(std::string_view converse) {
  if (converse == "tool_use" || converse == "max_tokens" || converse == "stop_sequence" ||
      converse == "end_turn") {
    return std::string(converse);
  }
  if (converse == "guardrail_intervened" || converse == "content_filtered") return "refusal";
  if (converse == "model_context_window_exceeded") return "max_tokens";
  return "end_turn";
}

// Converse usage -> Anthropic usage, for the client's OpenAI-shaped usage (the record's usage is
// read from Converse's own object).
json AnthropicUsageOf(const json& usage) {
  json out = json::object();
  for (auto [from, to] : {std::pair{"inputTokens", "input_tokens"},
                          {"outputTokens", "output_tokens"},
                          {"cacheReadInputTokens", "cache_read_input_tokens"},
                          {"cacheWriteInputTokens", "cache_creation_input_tokens"}}) {
    if (const json* v = Member(usage, from); v != nullptr) out[to] = *v;
  }
  return out;
}

telemetry::Usage BedrockUsage(const json& usage) {
  const std::string text = Dump(usage);
  Result<raw_json::Value> parsed = raw_json::Parse(text);
  if (!parsed) return {};
  return telemetry::NormalizeUsage(telemetry::UsageFlavor::kBedrock, *parsed);
}

std::string Base64Decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) continue;  // '=' padding, line breaks
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

// An AWS exception type (throttlingException, ValidationException, ...) -> the Anthropic error
// type the Anthropic stream reader maps to OpenAI's.
std::string ErrorTypeOfException(std::string_view exception) {
  std::string lower;
  for (char c : exception)
    lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (lower.starts_with("throttling")) return "rate_limit_error";
  if (lower.starts_with("validation")) return "invalid_request_error";
  if (lower.starts_with("accessdenied")) return "permission_error";
  if (lower.starts_with("resourcenotfound")) return "not_found_error";
  if (lower.starts_with("serviceunavailable") || lower.starts_with("modelnotready")) {
    return "overloaded_error";
  }
  return "api_error";
}

std::string SseEventOf(std::string_view type, const json& data) {
  return "event: " + std::string(type) + "\ndata: " + Dump(data) + "\n\n";
}

std::string ErrorSse(std::string_view anthropic_type, std::string message) {
  return SseEventOf(
      "error",
      {{"type", "error"}, {"error", {{"type", anthropic_type}, {"message", std::move(message)}}}});
}

// Bedrock's event stream -> Anthropic's SSE events -> the Anthropic stream reader.
class BedrockStream final : public StreamTranslator {
 public:
  explicit BedrockStream(const CallOptions& options)
      : invoke_(options.bedrock_api == BedrockApi::kInvoke),
        model_(options.upstream_model),
        inner_(NewAnthropicStream(options)) {}

  Output Feed(std::string_view upstream_bytes) override {
    Output out;
    if (done_) return out;
    decoder_.Feed(upstream_bytes);
    std::string sse;
    while (!done_) {
      auto next = decoder_.Next();
      if (!next) {
        sse += ErrorSse("api_error", "Bedrock's event stream is corrupt: " + next.error().message);
        done_ = true;
        break;
      }
      if (!*next) break;
      Translate(**next, sse);
    }
    if (!sse.empty()) out = inner_->Feed(sse);
    return out;
  }

  std::string Finish(bool upstream_eof, std::string_view failure_message) override {
    std::string out;
    if (!done_ && upstream_eof && decoder_.pending() > 0) {
      done_ = true;
      out = inner_
                ->Feed(ErrorSse("api_error", "Bedrock's event stream ended inside a frame (" +
                                                 std::to_string(decoder_.pending()) +
                                                 " bytes of a truncated message)"))
                .bytes;
    }
    return out + inner_->Finish(upstream_eof, failure_message);
  }

  const telemetry::Usage& usage() const override {
    return invoke_ || !usage_seen_ ? inner_->usage() : usage_;
  }
  std::string_view finish_reason() const override { return inner_->finish_reason(); }
  std::string_view provider_cache_miss_reason() const override { return ""; }
  bool completed() const override { return inner_->completed(); }
  std::optional<std::string> upstream_error() const override { return inner_->upstream_error(); }
  std::optional<std::string> client_error() const override { return inner_->client_error(); }

 private:
  void Translate(const EventStreamMessage& message, std::string& sse) {
    const std::string_view kind = message.Header(":message-type");
    const json payload = ParseJson(message.payload);
    if (kind == "exception" || kind == "error") {
      std::string type(message.Header(":exception-type"));
      if (type.empty()) type = std::string(message.Header(":error-code"));
      std::string text(StringMember(payload, "message"));
      if (text.empty()) text = std::string(message.Header(":error-message"));
      sse += ErrorSse(ErrorTypeOfException(type), "Bedrock " + type + ": " + text);
      done_ = true;
      return;
    }
    const std::string_view event = message.Header(":event-type");
    if (payload.is_discarded()) {
      sse += ErrorSse("api_error", "Bedrock sent an event whose payload is not JSON");
      done_ = true;
      return;
    }
    if (invoke_) {
      if (event != "chunk") return;
      const json inner = ParseJson(Base64Decode(StringMember(payload, "bytes")));
      if (!inner.is_object()) {
        sse += ErrorSse("api_error", "Bedrock sent a chunk that is not an Anthropic event");
        done_ = true;
        return;
      }
      sse += SseEventOf(StringMember(inner, "type"), inner);
      return;
    }
    if (event == "messageStart") {
      sse += SseEventOf("message_start", {{"type", "message_start"},
                                          {"message",
                                           {{"id", NewId("msg_bdrk_")},
                                            {"type", "message"},
                                            {"role", "assistant"},
                                            {"model", model_},
                                            {"content", json::array()},
                                            {"usage", json::object()}}}});
    } else if (event == "contentBlockStart") {
      const int index = payload.value("contentBlockIndex", 0);
      const json* start = Member(payload, "start");
      const json* tool = start != nullptr ? Member(*start, "toolUse") : nullptr;
      if (tool != nullptr) {
        sse += SseEventOf("content_block_start", {{"type", "content_block_start"},
                                                  {"index", index},
                                                  {"content_block",
                                                   {{"type", "tool_use"},
                                                    {"id", StringMember(*tool, "toolUseId")},
                                                    {"name", StringMember(*tool, "name")},
                                                    {"input", json::object()}}}});
        open_block_ = index;
      }
    } else if (event == "contentBlockDelta") {
      const int index = payload.value("contentBlockIndex", 0);
      const json* delta = Member(payload, "delta");
      if (delta == nullptr) return;
      // Converse opens text and reasoning blocks implicitly, with their first delta; Anthropic's
      // stream names each block before its deltas.
      auto open = [&](const char* type, const char* field) {
        if (open_block_ == index) return;
        sse +=
            SseEventOf("content_block_start", {{"type", "content_block_start"},
                                               {"index", index},
                                               {"content_block", {{"type", type}, {field, ""}}}});
        open_block_ = index;
      };
      auto emit = [&](json body) {
        sse += SseEventOf(
            "content_block_delta",
            {{"type", "content_block_delta"}, {"index", index}, {"delta", std::move(body)}});
      };
      if (const json* text = Member(*delta, "text"); text != nullptr && text->is_string()) {
        open("text", "text");
        emit({{"type", "text_delta"}, {"text", *text}});
      } else if (const json* tool = Member(*delta, "toolUse"); tool != nullptr) {
        emit({{"type", "input_json_delta"}, {"partial_json", StringMember(*tool, "input")}});
      } else if (const json* reasoning = Member(*delta, "reasoningContent"); reasoning != nullptr) {
        if (const json* t = Member(*reasoning, "text"); t != nullptr && t->is_string()) {
          open("thinking", "thinking");
          emit({{"type", "thinking_delta"}, {"thinking", *t}});
        }
      }
    } else if (event == "contentBlockStop") {
      sse += SseEventOf("content_block_stop", {{"type", "content_block_stop"},
                                               {"index", payload.value("contentBlockIndex", 0)}});
      open_block_ = -1;
    } else if (event == "messageStop") {
      stop_reason_ = StopReasonOf(StringMember(payload, "stopReason"));
    } else if (event == "metadata") {
      // The last event: its usage is the turn's. The stop reason came just before it.
      const json* usage = Member(payload, "usage");
      if (usage != nullptr && usage->is_object()) {
        usage_ = BedrockUsage(*usage);
        usage_seen_ = true;
      }
      sse += SseEventOf("message_delta",
                        {{"type", "message_delta"},
                         {"delta",
                          {{"stop_reason", stop_reason_.empty() ? "end_turn" : stop_reason_},
                           {"stop_sequence", nullptr}}},
                         {"usage", usage != nullptr ? AnthropicUsageOf(*usage) : json::object()}});
      sse += SseEventOf("message_stop", {{"type", "message_stop"}});
    }
  }

  const bool invoke_;
  const std::string model_;
  std::unique_ptr<StreamTranslator> inner_;
  EventStreamDecoder decoder_;
  bool done_ = false;
  int open_block_ = -1;
  std::string stop_reason_;
  telemetry::Usage usage_;
  bool usage_seen_ = false;
};

}  // namespace

Result<Translated> TranslateBedrockResponse(std::string_view upstream_body,
                                            const CallOptions& options) {
  if (options.bedrock_api == BedrockApi::kInvoke) {
    return TranslateAnthropicResponse(upstream_body, options);
  }
  const json body = ParseJson(upstream_body);
  const json* output = Member(body, "output");
  const json* message = output != nullptr ? Member(*output, "message") : nullptr;
  if (message == nullptr || !message->is_object()) {
    return std::unexpected(
        Error{ErrorCode::kCorruptData,
              "Bedrock's Converse answer has no output.message: " + Snippet(upstream_body)});
  }
  json content = json::array();
  if (const json* blocks = Member(*message, "content"); blocks != nullptr && blocks->is_array()) {
    for (const json& block : *blocks) {
      if (const json* text = Member(block, "text"); text != nullptr && text->is_string()) {
        content.push_back({{"type", "text"}, {"text", *text}});
      } else if (const json* tool = Member(block, "toolUse"); tool != nullptr) {
        const json* input = Member(*tool, "input");
        content.push_back({{"type", "tool_use"},
                           {"id", StringMember(*tool, "toolUseId")},
                           {"name", StringMember(*tool, "name")},
                           {"input", input != nullptr ? *input : json::object()}});
      } else if (const json* reasoning = Member(block, "reasoningContent"); reasoning != nullptr) {
        const json* r = Member(*reasoning, "reasoningText");
        content.push_back(
            {{"type", "thinking"},
             {"thinking", r != nullptr ? std::string(StringMember(*r, "text")) : ""}});
      }
    }
  }
  const json* usage = Member(body, "usage");
  json anthropic = {{"id", NewId("msg_bdrk_")},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"model", options.upstream_model},
                    {"content", std::move(content)},
                    {"stop_reason", StopReasonOf(StringMember(body, "stopReason"))},
                    {"stop_sequence", nullptr},
                    {"usage", usage != nullptr ? AnthropicUsageOf(*usage) : json::object()}};
  auto translated = TranslateAnthropicResponse(Dump(anthropic), options);
  if (!translated) return translated;
  translated->usage =
      usage != nullptr && usage->is_object() ? BedrockUsage(*usage) : telemetry::Usage{};
  return translated;
}

std::unique_ptr<StreamTranslator> NewBedrockStream(const CallOptions& options) {
  return std::make_unique<BedrockStream>(options);
}

}  // namespace kvgate::providers::internal
