// The client's side of one inference request: its response writer, the headers every answer
// carries (x-request-id, the upstream's rate-limit headers), the rules for a client that leaves
// and for a stream cut at shutdown, and the outcome in the request's RequestLog. Every upstream
// (a remote provider, the built-in engine) answers through it, so those rules live in one place;
// the attempt loop reads started() to know whether a failed attempt may still be tried elsewhere.
//
// Single-threaded: used only from the request's coroutine.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "gateway/http/server.h"
#include "gateway/providers/provider.h"
#include "gateway/request_log.h"

namespace kvgate::gateway {

// How the client's API shapes what kvgate itself says (gateway/api/ gives each API's): every
// error it gets (kvgate's own and the upstream's, built OpenAI-shaped), an error as a stream event
// (after `shape_error`), and the event a stream cut at shutdown ends with.
struct AnswerStyle {
  providers::ClientError (*shape_error)(const providers::ClientError&) = nullptr;  // null: as is
  std::string (*error_event)(const providers::ClientError&) = nullptr;  // null: `data: {...}`
  std::string cut_event;
};

// Tells chat answers in the client's API, for an attempt whose upstream answers in OpenAI chat
// while the client speaks another API (gateway/api/: an Anthropic Message, a Responses
// `response`). One per attempt; single-threaded.
class AnswerEncoder {
 public:
  virtual ~AnswerEncoder() = default;
  // A whole chat completion as the client's answer; an error when it cannot be told.
  virtual Result<std::string> Whole(std::string_view chat_body) = 0;
  // Chat stream bytes as the client's events ("" while it holds them back).
  virtual std::string Feed(std::string_view chat_events) = 0;
  // What the client's stream still needs at its end ("" for nothing).
  virtual std::string Finish() = 0;
  // The id of the client's answer, "" until known.
  virtual std::string_view answer_id() const = 0;
};

class ClientStream {
 public:
  // `writer`, `log` and `style` must outlive this object.
  ClientStream(http::ResponseWriter& writer, RequestLog& log, const AnswerStyle& style);
  ~ClientStream();  // stops any client-gone watch
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  RequestLog& log() { return log_; }
  telemetry::RequestRecord& record() { return log_.record(); }
  // Added to whatever is answered; an attempt may add the upstream's headers before it answers.
  std::vector<http::Header>& headers() { return headers_; }

  // A response head went out: from now on only this attempt can answer.
  bool started() const { return started_; }
  bool streaming() const { return streaming_; }
  bool client_gone() const { return writer_.client_gone(); }

  // Set per attempt by the attempt loop: the answers that follow are chat answers that `encoder`
  // tells in the client's API (SendAnswer, Write, EndStream), and the record's response id
  // becomes the client's answer's. Null: answers go out as the upstream sent them.
  void Encode(std::unique_ptr<AnswerEncoder> encoder) { encoder_ = std::move(encoder); }
  // Runs once, with the record, when the answer's id is known (record().response_id), before any
  // byte of that answer reaches the client: the client API's after-answer hook (the Responses
  // API remembers the response's thread, so that a request continuing it finds it).
  void OnAnswerId(std::function<void(telemetry::RequestRecord&)> hook) {
    on_answer_id_ = std::move(hook);
  }

  // Journals the record before the bytes that complete a stream are written (RequestLog::
  // Checkpoint); SendAnswer does it itself.
  void Checkpoint() { log_.Checkpoint(); }
  // A whole JSON answer with status 200. When the client is found gone just before it (a write
  // would still succeed into the socket buffer), nothing is sent and the turn is recorded as
  // client_disconnected with 499; a failed send is recorded as client_disconnected too.
  boost::asio::awaitable<void> SendAnswer(std::string body);
  // An error answer with the error's own status; the record gets the status, `status_word`
  // ("error", "upstream_error", "timeout") and the error's message. REQUIRES: !started().
  boost::asio::awaitable<void> SendError(const providers::ClientError& error,
                                         std::string status_word);

  // Starts a 200 text/event-stream (with the shutdown cut notice). False when the client is gone
  // (recorded as client_disconnected, 499).
  boost::asio::awaitable<bool> BeginStream();
  // One piece of the stream. False when the client is gone (recorded as client_disconnected,
  // with the 200 it had already been sent): stop writing.
  boost::asio::awaitable<bool> Write(std::string_view bytes);
  boost::asio::awaitable<bool> EndStream();
  void MarkFirstToken() { log_.MarkFirstToken(); }

  // While the handler waits on something other than the client: `on_gone` runs once if the
  // client leaves (ResponseWriter::OnClientGone). Replaces an earlier watch; nullptr stops it.
  void WatchClientGone(std::function<void()> on_gone);
  // Records that the client left: 499 before any answer, else client_disconnected on the 200.
  void RecordClientLeft(std::string why);

 private:
  // Runs on_answer_id_ once the answer's id is known (see OnAnswerId).
  void AnswerIdKnown();

  http::ResponseWriter& writer_;
  RequestLog& log_;
  const AnswerStyle& style_;
  std::unique_ptr<AnswerEncoder> encoder_;  // null: no translation
  std::function<void(telemetry::RequestRecord&)> on_answer_id_;
  std::vector<http::Header> headers_;
  bool started_ = false;
  bool streaming_ = false;
  bool watching_ = false;
};

}  // namespace kvgate::gateway
