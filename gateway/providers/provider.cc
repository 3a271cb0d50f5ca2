// Provider types, kvgate's own request fields, the shared helpers, and the dispatch from the public
// API to each wire format, with the catch-all that keeps exceptions inside the module.
#include "gateway/providers/provider.h"

#include <array>

#include <charconv>
#include <chrono>
#include <exception>
#include <utility>

#include "common/json_text.h"
#include "common/str_cat.h"
#include "common/utf8.h"
#include "gateway/providers/internal.h"

namespace kvgate::providers {

using nlohmann::json;

namespace {

// The Anthropic adapter's types (the Messages wire); every other type goes to openai_compat.cc.
bool SpeaksMessagesWire(ProviderType type) {
  return TraitsOf(type).wire == telemetry::Wire::kAnthropicMessages;
}

bool SpeaksBedrockWire(ProviderType type) { return TraitsOf(type).wire == telemetry::Wire::kBedrock; }

// A thread id value: strings as is, integers in decimal (an integer is a number without fraction
// or exponent); anything else is no id.
std::optional<std::string> ThreadIdFrom(raw_json::Value value) {
  if (value.is_string()) {
    std::optional<std::string> s = raw_json::DecodeString(value);
    if (!s || s->empty()) return std::nullopt;
    return s;
  }
  if (value.kind == raw_json::Kind::kNumber &&
      value.text.find_first_of(".eE") == std::string_view::npos) {
    // As a tree would have it: -0 is 0, and integers beyond 64 bits are doubles (no id).
    const char* first = value.text.data();
    const char* last = first + value.text.size();
    if (value.text[0] == '-') {
      int64_t v = 0;
      if (std::from_chars(first, last, v).ec != std::errc()) return std::nullopt;
      return std::to_string(v);
    }
    uint64_t v = 0;
    if (std::from_chars(first, last, v).ec != std::errc()) return std::nullopt;
    return std::to_string(v);
  }
  return std::nullopt;
}

// The same rule for a value in a tree (the Anthropic and engine paths): one owner of the rule.
std::optional<std::string> ThreadIdFrom(const json& value) {
  const std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  Result<raw_json::Value> parsed = raw_json::Parse(text);
  return parsed ? ThreadIdFrom(*parsed) : std::nullopt;
}

}  // namespace

telemetry::UsageFlavor UsageFlavorFor(ProviderType type) { return TraitsOf(type).usage; }

bool IsOpenAICompatible(ProviderType type) {
  return TraitsOf(type).wire != telemetry::Wire::kAnthropicMessages &&
         TraitsOf(type).wire != telemetry::Wire::kBedrock;
}

bool ClientWantsStreamUsage(const raw_json::Object& client_body) {
  std::optional<raw_json::Value> options = client_body.Find("stream_options");
  if (!options) return false;
  std::optional<raw_json::Value> include = raw_json::Find(*options, "include_usage");
  return include && include->is_true();
}

Status ValidateModelName(std::string_view name) {
  if (name.size() <= kMaxModelNameBytes) return {};
  return MakeError(ErrorCode::kInvalidArgument,
                   StrCat("model is ", name.size(), " bytes long; a model name is at most ",
                          kMaxModelNameBytes, " bytes"));
}

Status ValidateThreadId(std::string_view id, std::string_view source) {
  if (id.size() > kMaxThreadIdBytes) {
    return MakeError(ErrorCode::kInvalidArgument,
                     StrCat(source, " is ", id.size(), " bytes long; a thread id is at most ",
                            kMaxThreadIdBytes, " bytes"));
  }
  if (!IsValidUtf8(id)) {
    return MakeError(ErrorCode::kInvalidArgument, StrCat(source, " is not valid UTF-8"));
  }
  for (char c : id) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return MakeError(ErrorCode::kInvalidArgument,
                       StrCat(source, " contains a control character"));
    }
  }
  return {};
}

Result<ClientThread> ThreadIdOf(const raw_json::Object& body, std::string_view header) {
  auto checked = [](std::string id, std::string_view where,
                    std::string_view source) -> Result<ClientThread> {
    if (Status s = ValidateThreadId(id, where); !s) return std::unexpected(s.error());
    return ClientThread{std::move(id), source};
  };
  if (std::optional<raw_json::Value> v = body.Find("thread_identifier")) {
    if (std::optional<std::string> id = ThreadIdFrom(*v)) {
      return checked(std::move(*id), "thread_identifier", telemetry::kThreadFromBody);
    }
  }
  if (!header.empty()) {
    return checked(std::string(header), "the X-Thread-Id header", telemetry::kThreadFromHeader);
  }
  if (std::optional<raw_json::Value> meta = body.Find("metadata")) {
    if (std::optional<raw_json::Value> v = raw_json::Find(*meta, "thread_id")) {
      if (std::optional<std::string> id = ThreadIdFrom(*v)) {
        return checked(std::move(*id), "metadata.thread_id", telemetry::kThreadFromBody);
      }
    }
  }
  return ClientThread{};
}

std::optional<std::string> UnsupportedFeature(const json& body, std::string_view upstream) {
  auto field = [&](const char* key) -> const json* {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  auto unsupported = [&](std::string what) {
    return what + " is not supported by " + std::string(upstream);
  };
  if (const json* v = field("logprobs"); v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
    return unsupported("'logprobs'");
  }
  if (field("top_logprobs") != nullptr) return unsupported("'top_logprobs'");
  if (const json* v = field("echo"); v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
    return unsupported("'echo'");
  }
  if (const json* v = field("suffix");
      v != nullptr && !(v->is_string() && v->get_ref<const std::string&>().empty())) {
    return unsupported("'suffix'");
  }
  if (const json* v = field("best_of");
      v != nullptr && !(v->is_number_integer() && v->get<int64_t>() <= 1)) {
    return unsupported("'best_of' > 1");
  }
  if (const json* v = field("response_format"); v != nullptr) {
    auto type = v->is_object() ? v->find("type") : v->end();
    const bool text = v->is_object() && type != v->end() && type->is_string() &&
                      type->get_ref<const std::string&>() == "text";
    if (!text) {
      std::string name = v->is_object() && type != v->end() && type->is_string()
                             ? type->get<std::string>()
                             : v->dump();
      return unsupported("'response_format' of type " + name);
    }
  }
  return std::nullopt;
}

std::optional<std::string> TakeKvgateFields(json& body) {
  if (!body.is_object()) return std::nullopt;
  std::optional<std::string> thread_id;
  if (auto it = body.find("thread_identifier"); it != body.end()) {
    thread_id = ThreadIdFrom(*it);
    body.erase(it);
  }
  if (auto meta = body.find("metadata"); meta != body.end() && meta->is_object()) {
    if (auto it = meta->find("thread_id"); it != meta->end()) {
      if (!thread_id.has_value()) thread_id = ThreadIdFrom(*it);
      meta->erase(it);
      if (meta->empty()) body.erase(meta);
    }
  }
  return thread_id;
}

// Message texts shorter than this go through the Anthropic translation's tree: a placeholder
// costs about as much as a short text.
constexpr size_t kMinSetAsideTextBytes = 64;

namespace {

// An Anthropic request with the helpers that are on: anthropic_auto_cache's breakpoints, and the
// cache diagnostics' previous message id (after the prompt: it changes no cached byte).
Result<UpstreamCall> WithAutoCache(Result<UpstreamCall> call, const CallOptions& options) {
  if (!call) return call;
  const std::string& long_ttl = options.cache_helpers.anthropic_write_ttl;
  const std::string& ttl =
      long_ttl.empty() ? options.cache_helpers.anthropic_auto_cache_ttl : long_ttl;
  bool marked_here = false;
  if (!options.cache_helpers.anthropic_auto_cache_ttl.empty()) {
    if (std::optional<std::string> marked = internal::AddAutoCacheBreakpoints(call->body, ttl)) {
      call->body = std::move(*marked);
      call->cache_helper = "anthropic_auto_cache";
      marked_here = true;
    }
  }
  if (!long_ttl.empty() && !marked_here) {
    if (std::optional<std::string> longer = internal::LengthenCacheWrites(call->body)) {
      call->body = std::move(*longer);
    }
  }
  const std::string& previous = options.cache_helpers.anthropic_previous_message_id;
  if (!previous.empty()) {
    if (std::optional<std::string> asked = internal::AddCacheDiagnostics(call->body, previous)) {
      call->body = std::move(*asked);
    }
  }
  return call;
}

}  // namespace

namespace {

// The readers of an endpoint whose answer is its own API's, whatever the provider (the
// Responses API, embeddings, Anthropic Messages passed through); null where the provider type's
// adapter reads a chat or completions answer.
struct NativeReaders {
  Result<Translated> (*answer)(std::string_view upstream_body) = nullptr;
  std::unique_ptr<StreamTranslator> (*stream)() = nullptr;
};

const NativeReaders& NativeReadersOf(Endpoint endpoint) {
  // In Endpoint's order (endpoint.h).
  static const std::array<NativeReaders, kEndpointCount> kReaders = {{
      {},  // chat completions
      {},  // completions
      {&internal::TranslateResponsesResponse, &internal::NewResponsesStream},
      {&internal::TranslateEmbeddingsResponse, nullptr},
      {&internal::TranslateMessagesResponse, &internal::NewMessagesStream},
  }};
  return kReaders[static_cast<size_t>(endpoint)];
}

}  // namespace

Result<UpstreamCall> BuildUpstreamCall(ProviderType type, const raw_json::Object& client_body,
                                       const CallOptions& options) {
  try {
    if (!client_body.is_object()) {
      return MakeError(ErrorCode::kInvalidArgument, "the request body must be a JSON object");
    }
    const EndpointTraits& endpoint = EndpointTraitsOf(options.endpoint);
    if (endpoint.chat_messages) {
      std::optional<raw_json::Value> messages = client_body.Find("messages");
      if (!messages || !messages->is_array()) {
        return MakeError(ErrorCode::kInvalidArgument, "'messages' must be an array");
      }
    }
    if (endpoint.anthropic_only) {
      if (!SpeaksMessagesWire(type)) {
        return MakeError(ErrorCode::kInvalidArgument,
                         StrCat(endpoint.path, " passes through to providers of type anthropic "
                                "only, not ", ProviderTypeName(type)));
      }
      return WithAutoCache(internal::BuildAnthropicMessagesCall(client_body, options), options);
    }
    if (SpeaksBedrockWire(type)) {
      if (endpoint.openai_only) {
        return MakeError(ErrorCode::kInvalidArgument,
                         StrCat(endpoint.path, " is not served by providers of type bedrock"));
      }
      json tree = internal::ParseJson(client_body.value().text);
      TakeKvgateFields(tree);
      return internal::BuildBedrockCall(tree, options);
    }
    if (SpeaksMessagesWire(type) && endpoint.openai_only) {
      return MakeError(ErrorCode::kInvalidArgument,
                       StrCat(endpoint.path, " is not served by providers of type anthropic"));
    }
    if (SpeaksMessagesWire(type)) {
      // The Messages translation rewrites every field: it works on a tree, built without the long
      // message texts, which it copies verbatim (anthropic_texts.cc).
      const internal::SetAsideTexts set_aside =
          internal::SetAsideLongTexts(client_body.value(), kMinSetAsideTextBytes);
      json tree = internal::ParseJson(set_aside.texts.empty() ? client_body.value().text
                                                              : set_aside.reduced_body);
      TakeKvgateFields(tree);
      auto call = internal::BuildAnthropicCall(tree, options);
      if (call && !set_aside.texts.empty()) call->body = internal::RestoreTexts(call->body, set_aside);
      return WithAutoCache(std::move(call), options);
    }
    return internal::BuildOpenAICompatCall(type, client_body, options);
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInternal,
                     std::string("building the upstream request failed: ") + e.what());
  }
}

Result<Translated> TranslateResponse(ProviderType type, std::string_view upstream_body,
                                     const CallOptions& options) {
  try {
    if (const NativeReaders& native = NativeReadersOf(options.endpoint); native.answer) {
      return native.answer(upstream_body);
    }
    if (SpeaksMessagesWire(type))
      return internal::TranslateAnthropicResponse(upstream_body, options);
    if (SpeaksBedrockWire(type)) return internal::TranslateBedrockResponse(upstream_body, options);
    return internal::TranslateOpenAICompatResponse(type, upstream_body, options);
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInternal,
                     std::string("translating the upstream response failed: ") + e.what());
  }
}

std::unique_ptr<StreamTranslator> NewStreamTranslator(ProviderType type,
                                                      const CallOptions& options) {
  if (const NativeReaders& native = NativeReadersOf(options.endpoint); native.stream) {
    return native.stream();
  }
  if (SpeaksMessagesWire(type)) return internal::NewAnthropicStream(options);
  if (SpeaksBedrockWire(type)) return internal::NewBedrockStream(options);
  return internal::NewOpenAICompatStream(type, options);
}

namespace {

// The "id" of a JSON object's text, or with `nested` (a Responses API event, Anthropic's
// message_start) of that member; "" when there is none.
std::string IdOf(std::string_view text, std::string_view nested = {}) {
  Result<raw_json::Value> body = raw_json::Parse(text);
  if (!body || !body->is_object()) return "";
  std::optional<raw_json::Value> holder = *body;
  if (!nested.empty()) holder = raw_json::Find(*body, nested);
  if (!holder || !holder->is_object()) return "";
  std::optional<raw_json::Value> id = raw_json::Find(*holder, "id");
  if (!id) return "";
  return raw_json::DecodeString(*id).value_or("");
}

}  // namespace

std::string ResponseIdOf(std::string_view client_body) { return IdOf(client_body); }

std::string ResponseIdOfStream(std::string_view sse_bytes) {
  size_t pos = 0;
  while ((pos = sse_bytes.find("data:", pos)) != std::string_view::npos) {
    pos += 5;
    const size_t end = sse_bytes.find('\n', pos);
    const std::string_view data =
        sse_bytes.substr(pos, end == sse_bytes.npos ? sse_bytes.npos : end - pos);
    std::string id = IdOf(data);
    if (id.empty()) id = IdOf(data, "response");
    if (id.empty()) id = IdOf(data, "message");
    if (!id.empty()) return id;
    if (end == std::string_view::npos) break;
    pos = end;
  }
  return "";
}

namespace internal {

const json* Member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string_view StringMember(const json& obj, std::string_view key) {
  const json* v = Member(obj, key);
  if (v == nullptr || !v->is_string()) return {};
  return v->get_ref<const std::string&>();
}

json ParseJson(std::string_view text) {
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

std::string Dump(const json& value) { return JsonText(value); }

std::string Dump(const nlohmann::ordered_json& value) { return JsonText(value); }

int64_t CreatedTime(const CallOptions& options) {
  if (options.created != 0) return options.created;
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ErrorEventBytes(const ClientError& error) {
  std::string out = "data: ";
  out += Dump(error.body);
  out += "\n\n";
  return out;
}

std::optional<std::string> ErrorMessageOf(const json& object) {
  const json* error = Member(object, "error");
  if (error == nullptr || error->is_null()) return std::nullopt;
  if (error->is_string()) return error->get<std::string>();
  std::string_view message = StringMember(*error, "message");
  if (!message.empty()) return std::string(message);
  return Dump(*error);
}

bool OnlyComments(std::string_view raw) {
  while (!raw.empty()) {
    const size_t end = raw.find_first_of("\r\n");
    const std::string_view line = raw.substr(0, end);
    if (!line.empty() && line.front() != ':') return false;
    if (end == std::string_view::npos) break;
    raw.remove_prefix(end + 1);
  }
  return true;
}

void AppendRawEvent(std::string& out, std::string_view raw) {
  out.append(raw);
  if (raw.ends_with("\n\n") || raw.ends_with("\r\n\r\n") || raw.ends_with("\r\r")) return;
  out.append(raw.ends_with('\n') ? "\n" : "\n\n");
}

}  // namespace internal

const std::string& ShutdownCutEvent() {
  static const std::string event = internal::ErrorEventBytes(MakeOpenAIError(
      503, "kvgate is shutting down and cut this stream before it ended; retry the request",
      "server_error", "server_shutting_down"));
  return event;
}

}  // namespace kvgate::providers
