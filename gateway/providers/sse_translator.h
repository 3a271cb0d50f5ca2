// The skeleton every SSE stream translator shares: feed bytes to the SSE parser, hand each event
// to the provider's Handle(), turn parse failures, early ends and internal errors into exactly one
// OpenAI error event, and keep the outcome (usage, finish reason, completed, errors).
// Subclasses implement Handle() and set the protected state; they never write error events
// themselves except through Fail().
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "gateway/providers/provider.h"
#include "gateway/providers/sse.h"

namespace kvgate::providers::internal {

class SseStreamTranslator : public StreamTranslator {
 public:
  Output Feed(std::string_view upstream_bytes) final;
  std::string Finish(bool upstream_eof, std::string_view failure_message) final;

  const telemetry::Usage& usage() const final { return usage_; }
  std::string_view finish_reason() const final { return finish_reason_; }
  std::string_view provider_cache_miss_reason() const final { return cache_miss_reason_; }
  bool completed() const final { return completed_; }
  std::optional<std::string> upstream_error() const final { return upstream_error_; }
  std::optional<std::string> client_error() const final { return client_error_; }

 protected:
  // `terminal_event` names the provider's last event in the "ended before ..." message.
  explicit SseStreamTranslator(std::string terminal_event)
      : terminal_event_(std::move(terminal_event)) {}

  // One parsed upstream event; appends client bytes to `out`. Sets completed_ on the terminal
  // event, or calls Fail().
  virtual void Handle(const SseEvent& event, Output& out) = 0;
  // The upstream ended its body cleanly without the terminal event. A provider whose streams can
  // be whole without it appends what the client still needs, sets completed_ and returns true;
  // by default such a stream is incomplete.
  virtual bool EndWithoutTerminal(Output& out) {
    (void)out;
    return false;
  }

  // The event that tells the client its stream failed: OpenAI's `data: {"error": ...}` by
  // default; a translator whose client speaks another API (Anthropic Messages) writes its own.
  virtual std::string ErrorEvent(const ClientError& error) const;

  // An event of a pass-through stream (the client speaks the upstream's API): its JSON data and
  // its type (the data's own "type"; else the `event:` line). Nullopt when there is nothing more
  // to do with it: a comment-only event (relayed to `out`), an empty one, or data that is not a
  // JSON object (the stream is failed).
  struct TypedEvent {
    raw_json::Value data;
    std::string type;
  };
  std::optional<TypedEvent> ReadTypedEvent(const SseEvent& event, std::string& out);

  bool done() const { return completed_ || failed_; }
  // Appends the error event (ErrorEvent) for `message` and ends the stream.
  void Fail(std::string& out, std::string message, std::string code = "malformed_upstream_stream");

  telemetry::Usage usage_;
  std::string finish_reason_;
  std::string cache_miss_reason_;  // set by the Anthropic translators (CacheMissReasonOf)
  bool completed_ = false;
  bool failed_ = false;
  std::optional<std::string> upstream_error_;
  std::optional<std::string> client_error_;

 private:
  void Drain(Output& out);

  const std::string terminal_event_;
  SseParser parser_;
  bool finished_ = false;
};

}  // namespace kvgate::providers::internal
