// Private to gateway/providers: helpers shared by the adapters, and the per-wire-format entry
// points that provider.cc dispatches to. Not part of the module's API.
#pragma once

#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/utf8.h"
#include "gateway/providers/provider.h"

namespace kvgate::providers::internal {

using nlohmann::json;

// `obj[key]` when `obj` is an object holding `key`, else nullptr. Never throws.
const json* Member(const json& obj, std::string_view key);
// The string at obj[key], or "" when absent or not a string.
std::string_view StringMember(const json& obj, std::string_view key);

// Parses without throwing; the result is_discarded() on malformed input.
json ParseJson(std::string_view text);
// Serializes without throwing on invalid UTF-8 (replaced by U+FFFD). Responses kvgate builds use
// ordered_json so their keys come out in OpenAI's order.
std::string Dump(const json& value);
std::string Dump(const nlohmann::ordered_json& value);

// At most 200 bytes of `text` (then "..."), for error messages about upstream bodies; always
// valid UTF-8 (invalid bytes become U+FFFD).
// The string at `v` decoded (escapes resolved), "" when absent or not a string.
inline std::string Decoded(std::optional<raw_json::Value> v) {
  if (!v) return "";
  return raw_json::DecodeString(*v).value_or("");
}

inline std::string Snippet(std::string_view text) { return Utf8Snippet(text, 200); }

// `s` without leading blanks and trailing blanks or CR (an SSE data field, as compared).
inline std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// options.created, or the current Unix time when it is 0.
int64_t CreatedTime(const CallOptions& options);

// `data: <error body>\n\n`.
std::string ErrorEventBytes(const ClientError& error);

// Appends an SSE event's raw bytes, adding the blank line when the event came without one (the
// last event of a stream that ended early).
void AppendRawEvent(std::string& out, std::string_view raw);
// Whether every non-empty line of an SSE block is a comment (": ..."): keep-alives, which reach
// the client as they came.
bool OnlyComments(std::string_view raw);
// A non-null `error` member of `object` -> its message (the object form's `message`, a bare
// string, else the member's JSON); nullopt when there is none.
std::optional<std::string> ErrorMessageOf(const json& object);

// Anthropic helpers shared by the response and stream translators.
// The `diagnostics.cache_miss_reason` of a Message (or of an event carrying one): the reason,
// "none" for a diagnostics object without one (null: no miss), "" without diagnostics.
std::string CacheMissReasonOf(raw_json::Value message);
std::string CacheMissReasonOf(const json& message);
// `body` (an Anthropic Messages request) with `diagnostics: {previous_message_id: id}` added as
// its last member, every other byte kept; nullopt when it already has a `diagnostics` member or
// is not an object.
std::optional<std::string> AddCacheDiagnostics(std::string_view body, std::string_view id);
// stop_reason -> OpenAI finish_reason ("" for null / absent).
std::string AnthropicFinishReason(const json& stop_reason);
// Anthropic usage -> the OpenAI `usage` object the client sees (absent counts as 0 here; the
// normalized Usage keeps unknowns).
nlohmann::ordered_json AnthropicUsageToOpenAI(const json& usage);
// Merges a later Anthropic usage object into an earlier one: last value wins per field, nulls
// never erase a known value, nested objects (cache_creation) merge per field.
void MergeUsage(json& into, const json& from);
// Anthropic error type -> OpenAI error type.
std::string AnthropicErrorTypeToOpenAI(std::string_view anthropic_type);

// Per-wire-format entry points (callers catch exceptions).
Result<UpstreamCall> BuildOpenAICompatCall(ProviderType type, const raw_json::Object& client_body,
                                           const CallOptions& options);
Result<Translated> TranslateOpenAICompatResponse(ProviderType type, std::string_view upstream_body,
                                                 const CallOptions& options);
std::unique_ptr<StreamTranslator> NewOpenAICompatStream(ProviderType type,
                                                        const CallOptions& options);

// The Responses API and embeddings (openai_responses.cc): requests are built by
// BuildOpenAICompatCall; these read the answers.
Result<Translated> TranslateResponsesResponse(std::string_view upstream_body);
Result<Translated> TranslateEmbeddingsResponse(std::string_view upstream_body);
std::unique_ptr<StreamTranslator> NewResponsesStream();

Result<UpstreamCall> BuildAnthropicCall(const json& client_body, const CallOptions& options);

// Anthropic Messages passed through to Anthropic providers (anthropic_messages.cc): the client's
// bytes with `model` spliced in; the Message and its events unchanged, usage read from them.
Result<UpstreamCall> BuildAnthropicMessagesCall(const raw_json::Object& client_body,
                                                const CallOptions& options);
// The anthropic_auto_cache helper on a whole Messages request body (the client's own bytes, or
// the chat translation's): nullopt when the body already has a cache_control anywhere, or has
// nothing to mark; else the body with breakpoints of `ttl` at the end of `system` and at the last
// cacheable block of the last message. Only those two values are re-encoded (their key order
// kept); every other byte is the input's.
std::optional<std::string> AddAutoCacheBreakpoints(std::string_view messages_body,
                                                   std::string_view ttl);
// Keep-warm's choice of long cache writes on a whole Messages request body: every breakpoint
// (`cache_control` of type ephemeral on a tool, a system block, a message's content block or a
// tool result's) gets `"ttl": "1h"`. nullopt when there is none, or when any names a TTL already:
// a client that names TTLs orders them itself (Anthropic wants longer ones first). Only the values
// of `tools`, `system` and `messages` that hold a breakpoint are re-encoded.
std::optional<std::string> LengthenCacheWrites(std::string_view messages_body);
Result<Translated> TranslateMessagesResponse(std::string_view upstream_body);
std::unique_ptr<StreamTranslator> NewMessagesStream();

// Long message texts set aside while the Anthropic translation works on a tree
// (anthropic_texts.cc): `reduced_body` is the client body with every message text of at least
// `min_raw_bytes` (messages[i].content as a string, messages[i].content[j].text) replaced by a
// placeholder string; RestoreTexts puts each text's raw bytes back where the translated body
// carries its placeholder.
struct SetAsideTexts {
  std::string reduced_body;             // empty when nothing was set aside
  std::vector<std::string_view> texts;  // raw bytes between the quotes, views into the body
  std::string marker;                   // how every placeholder starts, as JSON text
};
SetAsideTexts SetAsideLongTexts(raw_json::Value body, size_t min_raw_bytes);
std::string RestoreTexts(std::string_view translated, const SetAsideTexts& set_aside);
Result<Translated> TranslateAnthropicResponse(std::string_view upstream_body,
                                              const CallOptions& options);
std::unique_ptr<StreamTranslator> NewAnthropicStream(const CallOptions& options);

// AWS Bedrock (bedrock.cc): the chat body through the Anthropic translation, then to InvokeModel
// as it is or to Converse rewritten; the answers back through the Anthropic readers.
Result<UpstreamCall> BuildBedrockCall(const json& client_body, const CallOptions& options);
// An Anthropic Messages request -> a Converse request's JSON (cache_control -> cachePoint).
Result<std::string> MessagesToConverse(const json& messages_body);
Result<Translated> TranslateBedrockResponse(std::string_view upstream_body,
                                            const CallOptions& options);
std::unique_ptr<StreamTranslator> NewBedrockStream(const CallOptions& options);

}  // namespace kvgate::providers::internal
