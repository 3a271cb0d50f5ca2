// The client's side of one inference request: its response writer, the headers every answer
// carries (x-request-id, the upstream's rate-limit headers), the rules for a client that leaves
// and for a stream cut at shutdown, and the outcome in the request's RequestLog. Every upstream
// (a remote provider, the built-in engine) answers through it, so those rules live in one place;
// the attempt loop reads started() to know whether a failed attempt may still be tried elsewhere.
//
// Single-threaded: used only from the request's coroutine.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "gateway/http/server.h"
#include "gateway/providers/messages.h"
#include "gateway/providers/provider.h"
#include "gateway/providers/responses_translate.h"
#include "gateway/request_log.h"

namespace kvgate::gateway {

// The API the client speaks, which decides the shape of every error it gets (kvgate's own and
// the upstream's) and of the shutdown cut event.
enum class ClientApi { kOpenAI, kAnthropicMessages };

class ClientStream {
 public:
  // `writer` and `log` must outlive this object.
  ClientStream(http::ResponseWriter& writer, RequestLog& log, ClientApi api = ClientApi::kOpenAI);
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

  // For an Anthropic Messages client served by an OpenAI-chat upstream (the attempt loop sets it
  // per attempt): the answers that follow are chat answers, translated here into Anthropic's
  // (SendAnswer: a Message; Write / EndStream: Anthropic's events), and the record's response
  // id becomes the Message's. False: answers go out as the upstream sent them.
  // False also ends a Responses translation.
  void TranslateChatAnswers(bool translate);
  // For a Responses API client served by a chat upstream (the built-in engine, Anthropic): the
  // answers that follow are chat answers, translated here into a `response` object or the
  // Responses events (`echo`: ResponsesChat::echo), and the record's response id becomes the
  // response's. `on_answer` runs once a translated answer is complete (the conversation store).
  void TranslateChatToResponses(std::string echo,
                                std::function<void(const providers::ResponsesOutcome&)> on_answer);

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
  http::ResponseWriter& writer_;
  RequestLog& log_;
  const ClientApi api_;
  std::unique_ptr<providers::MessagesAnswerStream> answer_stream_;  // null: no translation
  bool translate_ = false;
  // The Responses translation (responses_stream_ only while streaming).
  std::optional<std::string> responses_echo_;
  std::unique_ptr<providers::ResponsesAnswerStream> responses_stream_;
  std::function<void(const providers::ResponsesOutcome&)> on_responses_answer_;
  std::vector<http::Header> headers_;
  bool started_ = false;
  bool streaming_ = false;
  bool watching_ = false;
};

}  // namespace kvgate::gateway
