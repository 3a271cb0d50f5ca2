// Anthropic Messages passed through to Anthropic providers: the client's own bytes go upstream
// with only `model` spliced in (and kvgate's thread fields cut out), so the tokens Anthropic's
// prompt cache hashes (tools -> system -> messages, cache_control breakpoints) are the client's;
// the Message and its events come back unchanged, and kvgate reads their usage.
#include <optional>
#include <string>
#include <utility>

#include "gateway/providers/internal.h"
#include "gateway/providers/json_splice.h"
#include "gateway/providers/messages.h"
#include "gateway/providers/sse.h"
#include "gateway/providers/sse_translator.h"

namespace kvgate::providers::internal {
namespace {

using telemetry::UsageFlavor;

class MessagesStream final : public SseStreamTranslator {
 public:
  MessagesStream() : SseStreamTranslator("message_stop") {}

 private:
  std::string ErrorEvent(const ClientError& error) const override {
    return AnthropicErrorEvent(ToAnthropicError(error));
  }

  void Handle(const SseEvent& event, Output& out) override {
    std::optional<TypedEvent> typed = ReadTypedEvent(event, out.bytes);
    if (!typed) return;
    const std::optional<raw_json::Value> parsed = typed->data;
    const std::string& type = typed->type;
    const std::string_view data = TrimSpace(event.data);  // (for error messages)
    AppendRawEvent(out.bytes, event.raw);  // every event reaches the client as it came
    if (type == "content_block_delta") {
      std::optional<raw_json::Value> delta = raw_json::Find(*parsed, "delta");
      if (!delta) return;
      for (const char* key : {"text", "partial_json", "thinking"}) {
        std::optional<raw_json::Value> v = raw_json::Find(*delta, key);
        if (v && v->is_string() && v->text.size() > 2) out.has_content = true;
      }
    } else if (type == "message_start") {
      std::optional<raw_json::Value> message = raw_json::Find(*parsed, "message");
      if (message) MergeUsageOf(*message);
      if (message) NoteCacheMissReason(*message);
    } else if (type == "message_delta") {
      MergeUsageOf(*parsed);
      NoteCacheMissReason(*parsed);
      if (std::optional<raw_json::Value> delta = raw_json::Find(*parsed, "delta")) {
        std::optional<raw_json::Value> stop = raw_json::Find(*delta, "stop_reason");
        if (stop && stop->is_string())
          finish_reason_ = AnthropicFinishReason(ParseJson(stop->text));
      }
    } else if (type == "message_stop") {
      completed_ = true;
    } else if (type == "error") {
      std::optional<raw_json::Value> error = raw_json::Find(*parsed, "error");
      std::string message = error ? Decoded(raw_json::Find(*error, "message")) : "";
      if (message.empty()) message = "upstream error: " + Snippet(data);
      upstream_error_ = message;
      client_error_ = std::move(message);
      failed_ = true;
    }
  }

  void NoteCacheMissReason(raw_json::Value holder) {
    if (std::string reason = CacheMissReasonOf(holder); !reason.empty()) {
      cache_miss_reason_ = std::move(reason);
    }
  }

  // Cumulative counts: the last value of each field wins (message_delta repeats the input side).
  void MergeUsageOf(raw_json::Value holder) {
    std::optional<raw_json::Value> usage = raw_json::Find(holder, "usage");
    if (!usage || !usage->is_object()) return;
    MergeUsage(usage_raw_, ParseJson(usage->text));
    usage_ = telemetry::NormalizeUsage(UsageFlavor::kAnthropic, usage_raw_);
  }

  json usage_raw_;
};

}  // namespace

Result<UpstreamCall> BuildAnthropicMessagesCall(const raw_json::Object& client_body,
                                                const CallOptions& options) {
  std::string model;
  if (!options.upstream_model.empty()) raw_json::AppendQuoted(options.upstream_model, model);
  std::string body = SpliceMembers(client_body.value(), [&](const raw_json::Member& m) {
    using Kind = MemberEdit::Kind;
    if (m.KeyIs("model") && !model.empty()) return MemberEdit{Kind::kReplaceValue, model};
    if (m.KeyIs("thread_identifier")) return MemberEdit{Kind::kDrop, ""};
    if (m.KeyIs("metadata") && m.value.is_object() && raw_json::Find(m.value, "thread_id")) {
      // kvgate's metadata.thread_id goes; metadata too when nothing else is left in it.
      bool others = false;
      raw_json::ForEachMember(m.value, [&](const raw_json::Member& inner) {
        others = others || !inner.KeyIs("thread_id");
      });
      if (!others) return MemberEdit{Kind::kDrop, ""};
      return MemberEdit{
          Kind::kReplaceValue, SpliceMembers(m.value, [](const raw_json::Member& inner) {
            return MemberEdit{inner.KeyIs("thread_id") ? Kind::kDrop : Kind::kKeep, ""};
          })};
    }
    return MemberEdit{};
  });
  UpstreamCall call;
  call.path = "/v1/messages";
  call.headers.emplace_back("content-type", "application/json");
  if (!options.api_key.empty()) call.headers.emplace_back("x-api-key", options.api_key);
  call.headers.emplace_back("anthropic-version", options.anthropic_version.empty()
                                                     ? std::string("2023-06-01")
                                                     : options.anthropic_version);
  if (!options.anthropic_beta.empty()) {
    call.headers.emplace_back("anthropic-beta", options.anthropic_beta);
  }
  if (options.stream) call.headers.emplace_back("accept", "text/event-stream");
  call.body = std::move(body);
  return call;
}

Result<Translated> TranslateMessagesResponse(std::string_view upstream_body) {
  Result<raw_json::Value> message = raw_json::Parse(upstream_body);
  if (!message || !message->is_object()) {
    return MakeError(ErrorCode::kCorruptData,
                     "upstream returned a response that is not a JSON "
                     "object: " +
                         Snippet(upstream_body));
  }
  const std::string type = Decoded(raw_json::Find(*message, "type"));
  if (type == "error") {
    std::optional<raw_json::Value> error = raw_json::Find(*message, "error");
    std::string text = error ? Decoded(raw_json::Find(*error, "message")) : "";
    return MakeError(ErrorCode::kUnavailable, "upstream returned an error: " +
                                                  (text.empty() ? Snippet(upstream_body) : text));
  }
  std::optional<raw_json::Value> content = raw_json::Find(*message, "content");
  if (type != "message" || !content || !content->is_array()) {
    return MakeError(ErrorCode::kCorruptData,
                     "upstream response is not an Anthropic Message: " + Snippet(upstream_body));
  }
  Translated out;
  out.body = std::string(upstream_body);
  std::optional<raw_json::Value> usage = raw_json::Find(*message, "usage");
  out.usage = telemetry::NormalizeUsage(UsageFlavor::kAnthropic, usage.value_or(raw_json::Value{}));
  if (std::optional<raw_json::Value> stop = raw_json::Find(*message, "stop_reason")) {
    out.finish_reason = AnthropicFinishReason(ParseJson(stop->text));
  }
  out.provider_cache_miss_reason = CacheMissReasonOf(*message);
  return out;
}

std::unique_ptr<StreamTranslator> NewMessagesStream() { return std::make_unique<MessagesStream>(); }

}  // namespace kvgate::providers::internal
