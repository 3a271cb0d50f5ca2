#include "gateway/providers/sse_translator.h"

#include <exception>
#include <utility>

#include "gateway/providers/internal.h"

namespace kvgate::providers::internal {

StreamTranslator::Output SseStreamTranslator::Feed(std::string_view upstream_bytes) {
  Output out;
  if (done()) return out;
  // Most events leave as they came: room for all of them up front, instead of the string
  // doubling (and copying) its way up through a read's worth of events.
  out.bytes.reserve(upstream_bytes.size() + 64);
  try {
    parser_.Append(upstream_bytes);
    Drain(out);
  } catch (const std::exception& e) {
    Fail(out.bytes, std::string("internal error translating the stream: ") + e.what());
  }
  return out;
}

std::string SseStreamTranslator::Finish(bool upstream_eof, std::string_view failure_message) {
  if (finished_) return {};
  finished_ = true;
  Output out;
  try {
    if (upstream_eof && !done()) {
      parser_.EndOfInput();
      Drain(out);
      if (!done()) EndWithoutTerminal(out);
    }
    if (!done()) {
      Fail(out.bytes,
           upstream_eof ? "upstream stream ended before " + terminal_event_
                        : "upstream stream failed: " + std::string(failure_message),
           upstream_eof ? "stream_incomplete" : "stream_failed");
    }
  } catch (const std::exception& e) {
    if (!done()) Fail(out.bytes, std::string("internal error finishing the stream: ") + e.what());
  }
  return std::move(out.bytes);
}

void SseStreamTranslator::Drain(Output& out) {
  while (!done()) {
    auto next = parser_.Next();
    if (!next.has_value()) {
      Fail(out.bytes, "malformed upstream stream: " + next.error().message);
      return;
    }
    if (!next->has_value()) return;
    Handle(**next, out);
  }
}

std::string SseStreamTranslator::ErrorEvent(const ClientError& error) const {
  return ErrorEventBytes(error);
}

void SseStreamTranslator::Fail(std::string& out, std::string message, std::string code) {
  out += ErrorEvent(MakeOpenAIError(502, message, "upstream_error", std::move(code)));
  client_error_ = std::move(message);
  failed_ = true;
}

std::optional<SseStreamTranslator::TypedEvent> SseStreamTranslator::ReadTypedEvent(
    const SseEvent& event, std::string& out) {
  if (!event.has_data) {
    if (OnlyComments(event.raw)) AppendRawEvent(out, event.raw);
    return std::nullopt;
  }
  const std::string_view data = TrimSpace(event.data);
  if (data.empty()) return std::nullopt;
  Result<raw_json::Value> parsed = raw_json::Parse(data);
  if (!parsed || !parsed->is_object()) {
    Fail(out, "upstream sent malformed JSON in a stream event: " + Snippet(data));
    return std::nullopt;
  }
  std::string type = Decoded(raw_json::Find(*parsed, "type"));
  if (type.empty()) type = std::string(event.event);
  return TypedEvent{*parsed, std::move(type)};
}

}  // namespace kvgate::providers::internal
