// libFuzzer target: the SSE parser and the stream translators (Anthropic Messages -> OpenAI chunks,
// and the OpenAI-compatible pass-through with its usage handling) on arbitrary upstream bodies.
//
// Input: byte 0 picks the provider type, byte 1 the options and how the body is cut into pieces,
// the rest is the upstream body. Checked, besides no crash / sanitizer report / escaped exception:
//  - the SSE parser returns the same events however the bytes are split;
//  - a translator writes the same client bytes and reaches the same outcome however the upstream
//    bytes are split (gateway/providers/provider.h: "pieces may split events at any byte");
//  - the client stream is well-formed: every data payload is [DONE] or JSON, it ends with a blank
//    line, and a stream that did not complete ends with exactly one error event (and reports it);
//  - usage counts are unknown or in [0, 2^50] (telemetry/usage.h).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/providers/provider.h"
#include "gateway/providers/sse.h"

namespace {

using kvgate::providers::CallOptions;
using kvgate::providers::NewStreamTranslator;
using kvgate::providers::ProviderType;
using kvgate::providers::SseEvent;
using kvgate::providers::SseParser;
using kvgate::providers::StreamTranslator;

constexpr ProviderType kTypes[] = {
    ProviderType::kOpenAI,     ProviderType::kAnthropic,    ProviderType::kDeepSeek,
    ProviderType::kVllm,       ProviderType::kSglang,       ProviderType::kLlamaCpp,
    ProviderType::kOpenRouter, ProviderType::kGeminiOpenAI, ProviderType::kLocal,
};

[[noreturn]] void Fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "sse_stream_fuzz: %s\n%.*s\n", what,
               static_cast<int>(detail.size() > 2048 ? 2048 : detail.size()), detail.data());
  std::abort();
}

// Piece sizes from a seed: deterministic, 1..64 bytes, so that splits land everywhere.
struct Splitter {
  uint32_t state;
  size_t Next() {
    state = state * 1103515245u + 12345u;
    return 1 + (state >> 16) % 64;
  }
};

struct Event {
  std::string raw, event, data;
  bool has_data;
  bool operator==(const Event&) const = default;
};

// All events of `body`, fed whole (seed 0) or in pieces; "error" ends the list when the parser
// failed.
std::vector<Event> ParseAll(std::string_view body, size_t max_event_bytes, uint32_t seed) {
  SseParser parser(max_event_bytes);
  std::vector<Event> events;
  auto drain = [&] {
    for (;;) {
      auto next = parser.Next();
      if (!next) {
        events.push_back(Event{"error", "", "", false});
        return false;
      }
      if (!*next) return true;
      const SseEvent& e = **next;
      events.push_back(Event{std::string(e.raw), std::string(e.event), std::string(e.data),
                             e.has_data});
    }
  };
  Splitter split{seed};
  for (size_t i = 0; i < body.size();) {
    const size_t n = seed == 0 ? body.size() : split.Next();
    parser.Append(body.substr(i, n));
    i += n;
    if (!drain()) return events;
  }
  parser.EndOfInput();
  drain();
  return events;
}

struct Translation {
  std::string bytes;
  kvgate::telemetry::Usage usage;
  std::string finish_reason;
  bool completed;
  std::optional<std::string> client_error;
};

Translation Translate(ProviderType type, const CallOptions& options, std::string_view body,
                      bool eof, uint32_t seed) {
  auto t = NewStreamTranslator(type, options);
  if (t == nullptr) Fail("NewStreamTranslator returned null", "");
  Translation r;
  Splitter split{seed};
  for (size_t i = 0; i < body.size();) {
    const size_t n = seed == 0 ? body.size() : split.Next();
    r.bytes += t->Feed(body.substr(i, n)).bytes;
    i += n;
  }
  r.bytes += t->Finish(eof, eof ? "" : "connection reset");
  if (!t->Finish(eof).empty()) Fail("a second Finish wrote bytes", body);
  if (!t->Feed("data: [DONE]\n\n").bytes.empty()) Fail("Feed after Finish wrote bytes", body);
  r.usage = t->usage();
  r.finish_reason = std::string(t->finish_reason());
  r.completed = t->completed();
  r.client_error = t->client_error();
  return r;
}

void CheckCount(const std::optional<int64_t>& count, std::string_view body) {
  if (count && (*count < 0 || *count > (int64_t{1} << 50))) Fail("usage count out of range", body);
}

void CheckClientStream(const Translation& t, std::string_view body) {
  SseParser parser;
  parser.Append(t.bytes);
  parser.EndOfInput();
  int errors = 0;
  for (;;) {
    auto next = parser.Next();
    if (!next) Fail("the client stream does not parse as SSE", t.bytes);
    if (!*next) break;
    const SseEvent& e = **next;
    if (!e.has_data || e.data == "[DONE]") continue;
    const auto parsed = nlohmann::json::parse(e.data, nullptr, false);
    if (parsed.is_discarded()) Fail("the client got a data payload that is not JSON", t.bytes);
    if (parsed.is_object() && parsed.contains("error")) ++errors;
  }
  if (!t.bytes.empty() && !t.bytes.ends_with("\n\n") && !t.bytes.ends_with("\r\n\r\n") &&
      !t.bytes.ends_with("\r\r")) {
    Fail("the client stream does not end with a blank line", t.bytes);
  }
  if (t.completed && errors != 0) Fail("a completed stream carries an error event", t.bytes);
  if (!t.completed && (errors != 1 || !t.client_error)) {
    Fail("an unfinished stream must end with exactly one error event", t.bytes);
  }
  const auto& u = t.usage;
  for (const auto* c : {&u.cache_read, &u.cache_write_5m, &u.cache_write_1h,
                        &u.cache_write_no_ttl, &u.uncached, &u.output, &u.reasoning,
                        &u.reported_input}) {
    CheckCount(*c, body);
  }
  if (!u.raw.empty() && nlohmann::json::parse(u.raw, nullptr, false).is_discarded()) {
    Fail("Usage::raw is not JSON", u.raw);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const ProviderType type = kTypes[data[0] % std::size(kTypes)];
  const uint8_t flags = data[1];
  const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);
  const uint32_t seed = 1 + (flags >> 3);

  // The parser alone, with a small event limit now and then so that overflow is reached.
  const size_t max_event = (flags & 4) ? 48 : SseParser::kDefaultMaxEventBytes;
  if (ParseAll(body, max_event, 0) != ParseAll(body, max_event, seed)) {
    Fail("the SSE parser's events depend on how the bytes are split", body);
  }

  CallOptions options;
  options.stream = true;
  options.client_wants_usage = (flags & 1) != 0;
  options.created = 1;  // no clock: both runs must write the same bytes
  options.upstream_model = "m";
  const bool eof = (flags & 2) == 0;
  const Translation whole = Translate(type, options, body, eof, 0);
  const Translation pieces = Translate(type, options, body, eof, seed);
  CheckClientStream(whole, body);
  if (whole.bytes != pieces.bytes) {
    Fail("the client bytes depend on how the upstream bytes are split",
         whole.bytes + "\n---- vs ----\n" + pieces.bytes);
  }
  if (!(whole.usage == pieces.usage) || whole.finish_reason != pieces.finish_reason ||
      whole.completed != pieces.completed || whole.client_error != pieces.client_error) {
    Fail("the outcome depends on how the upstream bytes are split", body);
  }
  (void)kvgate::providers::ResponseIdOfStream(whole.bytes);
  return 0;
}
