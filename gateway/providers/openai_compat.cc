// OpenAI-compatible providers (OpenAI, DeepSeek, vLLM, SGLang, llama.cpp, OpenRouter, Gemini's
// OpenAI endpoint, kvgate's engine): the body passes through, usage is captured, and the usage
// chunk kvgate asked for on the client's behalf is stripped again.
#include <array>
#include <exception>
#include <string>
#include <utility>

#include "gateway/providers/internal.h"
#include "gateway/providers/sse.h"
#include "gateway/providers/sse_translator.h"

namespace kvgate::providers::internal {
namespace {

// A value that carries something: not null, "", [] or {}.
bool NonEmpty(std::optional<raw_json::Value> v) {
  if (!v || v->is_null()) return false;
  if (v->is_string()) return v->text.size() > 2;
  if (v->is_array() || v->is_object()) {
    const std::string_view inner = v->text.substr(1, v->text.size() - 2);
    return inner.find_first_not_of(" \t\r\n") != std::string_view::npos;
  }
  return true;
}

bool NonNull(std::optional<raw_json::Value> v) { return v && !v->is_null(); }

// What the choices of one chunk say. Walked in one pass with the chunk (raw_json::WalkMembers): the
// choices are most of a chunk's bytes, and reading them through ForEachMember scanned each byte
// of a delta four times (chunk member, element, choice member, delta member).
struct ChoicesFacts {
  bool any = false;          // false: no "choices", or an empty array (the usage-only chunk)
  bool has_content = false;  // generated text, reasoning, refusal or a tool call
  std::string finish_reason;  // the last non-empty finish_reason among the choices (decoded)
};

// What the translator needs to know about one chunk, read from its bytes (no tree).
struct ChunkFacts {
  ChoicesFacts choices;  // of the last "choices" member (a parser keeps the last duplicate)
  bool has_error = false;
  bool has_timings = false;  // llama.cpp
  std::optional<raw_json::Value> usage;  // the usage member, when present and not null
  bool has_null_usage = false;           // "usage": null (what include_usage puts in every chunk)
};

bool IsContentKey(std::string_view raw_key) {
  for (const char* key : {"content", "reasoning_content", "reasoning", "refusal", "tool_calls",
                          "function_call"}) {
    if (raw_json::KeyIs(raw_key, key)) return true;
  }
  return false;
}

ChoicesFacts WalkChoices(const char*& p, const char* end) {
  ChoicesFacts facts;
  p = raw_json::WalkElements(p, end, [&](const char*& choice) {
    facts.any = true;
    choice = raw_json::WalkMembers(choice, end, [&](std::string_view key, const char*& v) {
      if (raw_json::KeyIs(key, "delta")) {
        v = raw_json::WalkMembers(v, end, [&](std::string_view delta_key, const char*& d) {
          if (!IsContentKey(delta_key)) return raw_json::SkipMember(d, end);
          if (NonEmpty(raw_json::ReadMember(d, end))) facts.has_content = true;
        });
      } else if (raw_json::KeyIs(key, "finish_reason")) {
        const raw_json::Value reason = raw_json::ReadMember(v, end);
        std::optional<std::string> decoded = raw_json::DecodeString(reason);  // null: nullopt
        if (decoded && !decoded->empty()) facts.finish_reason = std::move(*decoded);
      } else if (raw_json::KeyIs(key, "text")) {  // completions
        if (NonEmpty(raw_json::ReadMember(v, end))) facts.has_content = true;
      } else {
        raw_json::SkipMember(v, end);
      }
    });
  });
  return facts;
}

ChunkFacts ReadChunk(raw_json::Value chunk) {
  ChunkFacts facts;
  const char* end = chunk.text.data() + chunk.text.size();
  raw_json::WalkMembers(chunk.text.data(), end, [&](std::string_view key, const char*& p) {
    if (raw_json::KeyIs(key, "choices")) {
      facts.choices = *p == '[' ? WalkChoices(p, end) : (raw_json::SkipMember(p, end), ChoicesFacts{});
      return;
    }
    const raw_json::Value value = raw_json::ReadMember(p, end);
    if (raw_json::KeyIs(key, "usage")) {
      facts.usage = NonNull(value) ? std::optional(value) : std::nullopt;
      facts.has_null_usage = !facts.usage;
    }
    if (raw_json::KeyIs(key, "error")) facts.has_error = NonNull(value);
    if (raw_json::KeyIs(key, "timings")) facts.has_timings = NonNull(value);
  });
  return facts;
}

void AppendKey(std::string_view raw_key, std::string& out) {
  if (out.size() > 1) out += ',';
  out += '"';
  out += raw_key;
  out += "\":";
}

// `object`'s members except those named in `drop`, then `extra` (already serialized members).
// Returns false (nothing appended) when nothing would be left.
bool AppendObjectWithout(raw_json::Value object, std::string_view drop, std::string_view extra,
                         std::string& out) {
  std::string body = "{";
  for (const raw_json::Member& m : raw_json::Members(object)) {
    if (m.KeyIs(drop)) continue;
    AppendKey(m.key, body);
    body += m.value.text;
  }
  if (!extra.empty()) {
    if (body.size() > 1) body += ',';
    body += extra;
  }
  if (body.size() == 1) return false;
  out += body;
  out += '}';
  return true;
}

constexpr std::string_view kTrailingNullUsage = ",\"usage\":null}";

class OpenAICompatStream final : public SseStreamTranslator {
 public:
  OpenAICompatStream(ProviderType type, const CallOptions& options)
      : SseStreamTranslator("[DONE]"), type_(type), strip_usage_(!options.client_wants_usage) {}

 private:
  void Handle(const SseEvent& event, Output& out) override {
    if (!event.has_data) {
      // Comments (keep-alives) reach the client too; other fields without data (retry:, id:
      // alone) are nothing OpenAI sends, and some clients choke on them.
      if (OnlyComments(event.raw)) AppendRawEvent(out.bytes, event.raw);
      return;
    }
    const std::string_view data = TrimSpace(event.data);
    if (data.empty()) return;  // an empty data field dispatches nothing (WHATWG SSE)
    if (data == "[DONE]") {
      completed_ = true;
      AppendRawEvent(out.bytes, event.raw);
      return;
    }
    // Validated and read once from its bytes, never parsed into a tree: only an error chunk
    // (rare, and the end of the stream) is.
    Result<raw_json::Value> parsed = raw_json::Parse(data);
    if (!parsed) {
      Fail(out.bytes, "upstream sent malformed JSON in a stream event: " + Snippet(data));
      return;
    }
    const ChunkFacts facts = ReadChunk(*parsed);
    if (event.event == "error" || facts.has_error) {
      HandleError(event, data, out);
      return;
    }
    if (!facts.choices.finish_reason.empty()) finish_reason_ = facts.choices.finish_reason;
    const bool llama_timings = type_ == ProviderType::kLlamaCpp && facts.has_timings;
    if (facts.usage || llama_timings) {
      // llama.cpp's usage includes `timings`, a sibling of `usage`: it reads the whole chunk.
      usage_ = telemetry::NormalizeUsage(
          UsageFlavorFor(type_),
          type_ == ProviderType::kLlamaCpp ? *parsed : facts.usage.value_or(raw_json::Value{}));
    }
    if (facts.choices.has_content) out.has_content = true;
    if (facts.has_null_usage && strip_usage_ && data.ends_with(kTrailingNullUsage)) {
      // The common shape (OpenAI puts it last): cut the suffix, no second walk of the chunk.
      out.bytes += "data: ";
      out.bytes += data.substr(0, data.size() - kTrailingNullUsage.size());
      out.bytes += "}\n\n";
      return;
    }
    if ((facts.usage || facts.has_null_usage) && strip_usage_) {
      if (facts.usage && !facts.choices.any) return;  // the extra chunk kvgate asked for
      // The chunk minus its usage member (the `"usage": null` that include_usage adds to every
      // chunk, or the usage the client did not ask for), every other byte as the upstream sent
      // it: the client sees the stream it would have had without kvgate's request.
      out.bytes += "data: ";
      AppendObjectWithout(*parsed, "usage", "", out.bytes);
      out.bytes += "\n\n";
      return;
    }
    AppendRawEvent(out.bytes, event.raw);
  }

  // Some OpenAI-compatible servers end a finished stream without "data: [DONE]". A clean end of
  // the body after a finish_reason is a whole answer; the client still gets its [DONE]. (A cut
  // before any finish_reason, or a reset, stays an error.)
  bool EndWithoutTerminal(Output& out) override {
    if (finish_reason_.empty()) return false;
    out.bytes += "data: [DONE]\n\n";
    completed_ = true;
    return true;
  }

  void HandleError(const SseEvent& event, std::string_view data, Output& out) {
    json chunk = ParseJson(data);
    std::optional<std::string> message;
    if (chunk.is_object()) message = ErrorMessageOf(chunk);
    std::string text = message.value_or(Snippet(data));
    upstream_error_ = text;
    client_error_ = text;
    failed_ = true;
    const json* error = chunk.is_object() ? Member(chunk, "error") : nullptr;
    if (error != nullptr && error->is_object()) {
      AppendRawEvent(out.bytes, event.raw);  // already OpenAI-shaped
    } else {
      out.bytes += ErrorEventBytes(MakeOpenAIError(502, std::move(text), "upstream_error"));
    }
  }

  // Constant after construction.
  const ProviderType type_;
  const bool strip_usage_;
};

}  // namespace

namespace {

// The members BuildOpenAICompatCall rewrites. Each is written once, at the place of its last
// occurrence (the one a parser keeps), or appended when the body lacks it.
enum class Rewritten {
  kNone, kModel, kStream, kStreamOptions, kMetadata, kDropped,
  kMaxTokens, kMaxCompletionTokens,  // for upstreams that know only max_tokens (DeepSeek)
  kCount
};

Rewritten Classify(ProviderType type, const EndpointTraits& endpoint, const raw_json::Member& m) {
  if (endpoint.client_stream_flags) {
    // E.g. the Responses API's stream options are its own (no include_usage: usage always comes
    // in response.completed), and its `stream` is the client's.
    if (m.KeyIs("stream") || m.KeyIs("stream_options")) return Rewritten::kNone;
  } else if (!endpoint.streams) {
    if (m.KeyIs("stream") || m.KeyIs("stream_options")) return Rewritten::kDropped;
  } else if (type == ProviderType::kDeepSeek) {
    // DeepSeek's API has max_tokens only; the OpenAI SDK's newer max_completion_tokens means the
    // same there (no reasoning tokens are billed as output separately).
    if (m.KeyIs("max_tokens")) return Rewritten::kMaxTokens;
    if (m.KeyIs("max_completion_tokens")) return Rewritten::kMaxCompletionTokens;
  }
  if (m.KeyIs("model")) return Rewritten::kModel;
  if (m.KeyIs("stream")) return Rewritten::kStream;
  if (m.KeyIs("stream_options")) return Rewritten::kStreamOptions;
  if (m.KeyIs("metadata")) return Rewritten::kMetadata;
  if (m.KeyIs("thread_identifier")) return Rewritten::kDropped;
  return Rewritten::kNone;
}

}  // namespace

Result<UpstreamCall> BuildOpenAICompatCall(ProviderType type, const raw_json::Object& client_body,
                                           const CallOptions& options) {
  // The client's bytes pass through member by member: nothing is parsed into a tree or re-encoded.
  const EndpointTraits& endpoint = EndpointTraitsOf(options.endpoint);
  const std::vector<raw_json::Member>& members = client_body.members();
  std::vector<Rewritten> kinds(members.size());
  // index + 1 of the last occurrence of each rewritten member
  std::array<size_t, static_cast<size_t>(Rewritten::kCount)> last{};
  for (size_t i = 0; i < members.size(); ++i) {
    kinds[i] = Classify(type, endpoint, members[i]);
    last[static_cast<size_t>(kinds[i])] = i + 1;
  }
  auto is_last = [&](size_t i) { return last[static_cast<size_t>(kinds[i])] == i + 1; };
  auto present = [&](Rewritten k) { return last[static_cast<size_t>(k)] != 0; };

  std::string body;
  body.reserve(client_body.value().text.size() + 96);
  body += '{';
  auto append_model = [&](std::string_view raw_key) {
    AppendKey(raw_key, body);
    raw_json::AppendQuoted(options.upstream_model, body);
  };
  auto append_stream = [&](std::string_view raw_key) {
    AppendKey(raw_key, body);
    body += options.stream ? "true" : "false";
  };
  constexpr std::string_view kIncludeUsage = "\"include_usage\":true";
  for (size_t i = 0; i < members.size(); ++i) {
    const raw_json::Member& m = members[i];
    switch (kinds[i]) {
      case Rewritten::kNone:
        AppendKey(m.key, body);
        body += m.value.text;
        break;
      case Rewritten::kDropped:
      case Rewritten::kCount:
        break;
      case Rewritten::kMaxTokens:
        if (is_last(i)) {
          AppendKey(m.key, body);
          body += m.value.text;
        }
        break;
      case Rewritten::kMaxCompletionTokens:
        // Sent as max_tokens, unless the client gave max_tokens too (that one wins).
        if (is_last(i) && !present(Rewritten::kMaxTokens)) {
          AppendKey("max_tokens", body);
          body += m.value.text;
        }
        break;
      case Rewritten::kModel:
        if (!is_last(i)) break;
        if (options.upstream_model.empty()) {
          AppendKey(m.key, body);
          body += m.value.text;
        } else {
          append_model(m.key);
        }
        break;
      case Rewritten::kStream:
        if (is_last(i)) append_stream(m.key);
        break;
      case Rewritten::kStreamOptions:
        // Only valid with stream: true; when streaming, usage is always asked for.
        if (!is_last(i) || !options.stream) break;
        AppendKey(m.key, body);
        if (!m.value.is_object() ||
            !AppendObjectWithout(m.value, "include_usage", kIncludeUsage, body)) {
          body += '{';
          body += kIncludeUsage;
          body += '}';
        }
        break;
      case Rewritten::kMetadata: {
        if (!is_last(i)) break;
        if (!m.value.is_object() || !raw_json::Find(m.value, "thread_id")) {
          AppendKey(m.key, body);
          body += m.value.text;
          break;
        }
        // kvgate's metadata.thread_id goes; metadata itself when nothing else is left.
        std::string rest;
        if (AppendObjectWithout(m.value, "thread_id", "", rest)) {
          AppendKey(m.key, body);
          body += rest;
        }
        break;
      }
    }
  }
  if (!present(Rewritten::kModel) && !options.upstream_model.empty()) append_model("model");
  if (options.stream && endpoint.client_stream_flags &&
      !raw_json::Find(client_body.value(), "stream")) {
    append_stream("stream");
  }
  if (options.stream && endpoint.openai_sampling) {
    if (!present(Rewritten::kStream)) append_stream("stream");
    if (!present(Rewritten::kStreamOptions)) {
      body += ",\"stream_options\":{";
      body += kIncludeUsage;
      body += '}';
    }
  }
  // The prompt_cache_key helper: the thread's key, unless the client chose one.
  const std::string& cache_key = options.cache_helpers.prompt_cache_key;
  const bool add_cache_key =
      !cache_key.empty() &&
      endpoint.prompt_cache_key &&
      !raw_json::Find(client_body.value(), "prompt_cache_key");
  if (add_cache_key) {
    AppendKey("prompt_cache_key", body);
    raw_json::AppendQuoted(cache_key, body);
  }
  body += '}';

  UpstreamCall call;
  if (add_cache_key) call.cache_helper = "prompt_cache_key";
  // The provider's base URL ends in /v1 (or its equivalent): the endpoint's path without it.
  call.path = std::string(EndpointPath(options.endpoint).substr(3));
  call.headers.emplace_back("content-type", "application/json");
  if (!options.api_key.empty())
    call.headers.emplace_back("authorization", "Bearer " + options.api_key);
  if (options.stream) call.headers.emplace_back("accept", "text/event-stream");
  call.body = std::move(body);
  return call;
}

Result<Translated> TranslateOpenAICompatResponse(ProviderType type, std::string_view upstream_body,
                                                 const CallOptions& options) {
  (void)options;
  // The body goes back to the client unchanged; only usage, finish_reason and a possible error
  // are read, from the raw bytes.
  Result<raw_json::Value> parsed = raw_json::Parse(upstream_body);
  if (!parsed || !parsed->is_object()) {
    return MakeError(
        ErrorCode::kCorruptData,
        "upstream returned a response that is not a JSON object: " + Snippet(upstream_body));
  }
  const raw_json::Object response(*parsed);
  std::optional<raw_json::Value> error = response.Find("error");
  if (error && !error->is_null()) {
    return MakeError(ErrorCode::kUnavailable,
                     "upstream returned an error: " + *ErrorMessageOf(ParseJson(upstream_body)));
  }
  std::optional<raw_json::Value> choices = response.Find("choices");
  if (!choices || !choices->is_array()) {
    return MakeError(ErrorCode::kCorruptData,
                     "upstream response has no 'choices' array: " + Snippet(upstream_body));
  }
  Translated out;
  out.body = std::string(upstream_body);
  if (type == ProviderType::kLlamaCpp) {  // the whole response, for `timings`
    out.usage = telemetry::NormalizeUsage(UsageFlavorFor(type), *parsed);
  } else {
    std::optional<raw_json::Value> usage = response.Find("usage");
    out.usage = telemetry::NormalizeUsage(UsageFlavorFor(type), usage.value_or(raw_json::Value{}));
  }
  raw_json::ForEachElement(*choices, [&](raw_json::Value choice) {
    std::optional<raw_json::Value> reason = raw_json::Find(choice, "finish_reason");
    if (!reason) return;
    std::optional<std::string> text = raw_json::DecodeString(*reason);
    if (text && !text->empty()) out.finish_reason = std::move(*text);
  });
  return out;
}

std::unique_ptr<StreamTranslator> NewOpenAICompatStream(ProviderType type,
                                                        const CallOptions& options) {
  return std::make_unique<OpenAICompatStream>(type, options);
}

}  // namespace kvgate::providers::internal
