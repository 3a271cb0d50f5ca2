#include "gateway/client_stream.h"

#include <algorithm>
#include <cctype>

#include "common/json_text.h"

namespace kvgate::gateway {
namespace {

namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

std::string MessageOf(const providers::ClientError& error) {
  if (auto it = error.body.find("error"); it != error.body.end() && it->is_object()) {
    if (auto m = it->find("message"); m != it->end() && m->is_string()) return m->get<std::string>();
  }
  return "";
}

bool EqualNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The headers an answer carries: `headers` less any x-ratelimit-* header named twice but for its
// first occurrence (a limited gateway key's own limits are added before any upstream's, and a
// client must see one value per name).
std::vector<http::Header> AnswerHeaders(const std::vector<http::Header>& headers) {
  constexpr std::string_view kRate = "x-ratelimit-";
  std::vector<http::Header> out;
  out.reserve(headers.size());
  for (const http::Header& h : headers) {
    const std::string_view name = h.name;
    if (name.size() > kRate.size() && EqualNoCase(name.substr(0, kRate.size()), kRate) &&
        std::any_of(out.begin(), out.end(),
                    [name](const http::Header& kept) { return EqualNoCase(kept.name, name); })) {
      continue;
    }
    out.push_back(h);
  }
  return out;
}

}  // namespace

ClientStream::ClientStream(http::ResponseWriter& writer, RequestLog& log, ClientApi api)
    : writer_(writer), log_(log), api_(api), headers_{{"x-request-id", log.record().request_id}} {}

void ClientStream::TranslateChatAnswers(bool translate) {
  translate_ = translate;
  answer_stream_ = translate ? providers::NewMessagesAnswerStream() : nullptr;
  responses_echo_.reset();
  responses_stream_ = nullptr;
  on_responses_answer_ = nullptr;
}

void ClientStream::TranslateChatToResponses(
    std::string echo, std::function<void(const providers::ResponsesOutcome&)> on_answer) {
  TranslateChatAnswers(false);
  responses_stream_ = providers::NewResponsesAnswerStream(echo);
  responses_echo_ = std::move(echo);
  on_responses_answer_ = std::move(on_answer);
}

ClientStream::~ClientStream() {
  if (watching_) writer_.OnClientGone(nullptr);
}

void ClientStream::WatchClientGone(std::function<void()> on_gone) {
  watching_ = on_gone != nullptr;
  writer_.OnClientGone(std::move(on_gone));
}

void ClientStream::RecordClientLeft(std::string why) {
  log_.SetError(started_ ? 200 : 499, "client_disconnected", std::move(why));
}

asio::awaitable<void> ClientStream::SendAnswer(std::string body) {
  if (writer_.client_gone()) {
    RecordClientLeft("the client closed the connection before the response was ready");
    co_return;
  }
  if (translate_) {
    Result<std::string> message = providers::ChatToMessage(body);
    if (!message) {
      // The upstream's answer was read (its usage is recorded) but cannot be told as a Message.
      std::string why = "kvgate cannot translate the upstream's answer: " + message.error().message;
      co_await SendError(providers::MakeOpenAIError(502, std::move(why), "upstream_error",
                                                    "bad_upstream_response"),
                         "upstream_error");
      co_return;
    }
    body = std::move(*message);
    log_.record().response_id = providers::ResponseIdOf(body);
  } else if (responses_echo_) {
    providers::ResponsesOutcome outcome;
    Result<std::string> response = providers::ChatToResponse(body, *responses_echo_, &outcome);
    if (!response) {
      std::string why = "kvgate cannot translate the upstream's answer: " + response.error().message;
      co_await SendError(providers::MakeOpenAIError(502, std::move(why), "upstream_error",
                                                    "bad_upstream_response"),
                         "upstream_error");
      co_return;
    }
    body = std::move(*response);
    log_.record().response_id = outcome.response_id;
    if (on_responses_answer_) on_responses_answer_(outcome);
  }
  started_ = true;
  log_.record().http_status = 200;
  log_.Checkpoint();  // the answer is complete once these bytes leave: make the record durable
  std::vector<http::Header> headers = AnswerHeaders(headers_);  // (before the co_await: GCC 12)
  auto sent = co_await writer_.Send(200, kJson, std::move(body), std::move(headers));
  if (!sent) log_.SetError(200, "client_disconnected", sent.error().message);
}

asio::awaitable<void> ClientStream::SendError(const providers::ClientError& error,
                                              std::string status_word) {
  const providers::ClientError answer =
      api_ == ClientApi::kAnthropicMessages ? providers::ToAnthropicError(error) : error;
  log_.SetError(answer.status, std::move(status_word), MessageOf(error));
  started_ = true;
  std::vector<http::Header> headers = AnswerHeaders(headers_);
  std::string body = JsonText(answer.body);
  co_await writer_.Send(answer.status, kJson, std::move(body), std::move(headers));
}

asio::awaitable<bool> ClientStream::BeginStream() {
  std::vector<http::Header> stream_headers = AnswerHeaders(headers_);
  stream_headers.push_back({"cache-control", "no-cache"});
  auto began = co_await writer_.BeginStream(200, "text/event-stream", std::move(stream_headers));
  if (!began) {
    RecordClientLeft("the client went away before the stream began");
    co_return false;
  }
  started_ = true;
  streaming_ = true;
  log_.record().http_status = 200;
  writer_.SetCutNotice(api_ == ClientApi::kAnthropicMessages
                           ? providers::AnthropicShutdownCutEvent()
                           : providers::ShutdownCutEvent());
  co_return true;
}

asio::awaitable<bool> ClientStream::Write(std::string_view bytes) {
  std::string translated;
  if (answer_stream_) {
    translated = answer_stream_->Feed(bytes);
    if (!answer_stream_->message_id().empty()) {
      log_.record().response_id = answer_stream_->message_id();
    }
    if (translated.empty()) co_return true;
    bytes = translated;
  } else if (responses_stream_) {
    translated = responses_stream_->Feed(bytes);
    if (!responses_stream_->response_id().empty()) {
      log_.record().response_id = responses_stream_->response_id();
    }
    if (responses_stream_->outcome() && on_responses_answer_) {
      on_responses_answer_(*responses_stream_->outcome());
      on_responses_answer_ = nullptr;  // once
    }
    if (translated.empty()) co_return true;
    bytes = translated;
  }
  auto wrote = co_await writer_.WriteChunk(bytes);
  if (!wrote) {
    RecordClientLeft("the client closed the connection mid-stream");
    co_return false;
  }
  co_return true;
}

asio::awaitable<bool> ClientStream::EndStream() {
  if (responses_stream_) {
    if (std::string tail = responses_stream_->Finish(); !tail.empty()) {
      auto wrote = co_await writer_.WriteChunk(tail);
      if (!wrote) {
        RecordClientLeft("the client closed the connection mid-stream");
        co_return false;
      }
    }
  }
  if (answer_stream_) {
    // A chat stream that stopped short of [DONE] (the upstream's own error event was already
    // translated): Anthropic's error event, so the SDK raises rather than return half a message.
    std::string tail = answer_stream_->Finish();
    if (!tail.empty()) {
      auto wrote = co_await writer_.WriteChunk(tail);
      if (!wrote) {
        RecordClientLeft("the client closed the connection mid-stream");
        co_return false;
      }
    }
  }
  auto ended = co_await writer_.EndStream();
  if (!ended) {
    RecordClientLeft("the client closed the connection mid-stream");
    co_return false;
  }
  co_return true;
}

}  // namespace kvgate::gateway
