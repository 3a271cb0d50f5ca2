// An incremental parser for Server-Sent Events (the WHATWG "text/event-stream" format), as used by
// every provider's streaming API. Bytes arrive in arbitrary pieces; complete events come out with
// their exact raw bytes so a translator can forward an unchanged event without re-serializing it.
#pragma once

#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kvgate::providers {

// One event. All views point into the parser and stay valid until the next call of any of its
// non-const members.
struct SseEvent {
  // The event's bytes exactly as received, from its first line through its terminating blank line
  // (at end of input, possibly without the blank line).
  std::string_view raw;
  std::string_view event;  // the `event:` field; empty when absent
  std::string_view data;   // `data:` lines joined with '\n' (one leading space per line removed)
  bool has_data = false;   // at least one `data:` line (an event may be comments only)
};

// Line endings "\n", "\r\n" and a lone "\r" are all accepted, mixed freely. Comment lines (":")
// are kept in `raw` only. `id:` and `retry:` lines and unknown fields are ignored. A UTF-8 BOM at
// the very start is skipped. Blank lines that end no event (e.g. several in a row) are consumed
// and produce no event.
//
// The only malformed input the format has is an unbounded event: one whose bytes exceed
// max_event_bytes before its blank line. That is reported as kResourceExhausted and the parser
// stays failed (every later Next returns the same error).
class SseParser {
 public:
  static constexpr size_t kDefaultMaxEventBytes = size_t{16} << 20;

  explicit SseParser(size_t max_event_bytes = kDefaultMaxEventBytes)
      : max_event_bytes_(max_event_bytes) {}

  // Appends the next piece of the stream. Call Next until it returns nullopt afterwards.
  void Append(std::string_view bytes);

  // Declares the end of input: a trailing line without its line ending, and a trailing event
  // without its blank line, are then returned by Next as if terminated.
  void EndOfInput();

  // The next complete event, or nullopt when more bytes are needed (or input ended).
  Result<std::optional<SseEvent>> Next();

 private:
  void ResetEvent();

  // Constant after construction.
  const size_t max_event_bytes_;

  std::string buffer_;      // bytes not yet returned as part of an event
  size_t event_start_ = 0;  // offset in buffer_ of the current event's first byte
  size_t scan_ = 0;         // offset in buffer_ of the first line not yet processed
  bool at_stream_start_ = true;
  bool end_of_input_ = false;
  bool pending_reset_ = false;  // the last Next returned an event; clear its fields first
  std::optional<Error> error_;

  // The event being assembled; offsets are relative to event_start_ so that compaction (which
  // only drops bytes before event_start_) keeps them valid.
  bool has_lines_ = false;
  size_t event_name_offset_ = 0;
  size_t event_name_size_ = 0;
  bool has_event_name_ = false;
  int data_lines_ = 0;
  size_t data_offset_ = 0;  // first data line, while data_lines_ == 1
  size_t data_size_ = 0;
  std::string data_joined_;  // used once data_lines_ >= 2
};

// The loop of a translator from an OpenAI chat stream into another API's events (Anthropic
// Messages, the Responses API): parses `bytes` and hands each event to `handle(event, out)` until
// `done` is set, turning a parse failure or an exception into `fail(out, message)`. Returns what
// was written to `out`.
template <class Handle, class Fail>
std::string TranslateSseEvents(SseParser& parser, const bool& done, std::string_view bytes,
                               Handle&& handle, Fail&& fail) {
  std::string out;
  if (done) return out;
  try {
    parser.Append(bytes);
    while (!done) {
      auto next = parser.Next();
      if (!next) {
        fail(out, "malformed stream: " + next.error().message);
        break;
      }
      if (!next->has_value()) break;
      handle(**next, out);
    }
  } catch (const std::exception& e) {
    if (!done) fail(out, std::string("internal error translating the stream: ") + e.what());
  }
  return out;
}

}  // namespace kvgate::providers
