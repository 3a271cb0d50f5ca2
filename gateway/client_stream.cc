#include "gateway/client_stream.h"

#include <algorithm>
#include <cctype>

#include "common/ascii.h"
#include "common/json_text.h"

namespace kvgate::gateway {
namespace {

namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

// The headers an answer carries: `headers` less any x-ratelimit-* header named twice but for its
// first occurrence (a limited gateway key's own limits are added before any upstream's, and a
// client must see one value per name).
std::vector<http::Header> AnswerHeaders(const std::vector<http::Header>& headers) {
  constexpr std::string_view kRate = "x-ratelimit-";
  std::vector<http::Header> out;
  out.reserve(headers.size());
  for (const http::Header& h : headers) {
    const std::string_view name = h.name;
    if (name.size() > kRate.size() && StartsWithIgnoreCase(name, kRate) &&
        std::any_of(out.begin(), out.end(),
                    [name](const http::Header& kept) { return EqualsIgnoreCase(kept.name, name); })) {
      continue;
    }
    out.push_back(h);
  }
  return out;
}

}  // namespace

ClientStream::ClientStream(http::ResponseWriter& writer, RequestLog& log, const AnswerStyle& style)
    : writer_(writer),
      log_(log),
      style_(style),
      headers_{{"x-request-id", log.record().request_id}} {}

void ClientStream::AnswerIdKnown() {
  if (!on_answer_id_ || log_.record().response_id.empty()) return;
  // With an encoder, the id the upstream gave (a chat id) is not the client's answer's yet.
  if (encoder_ && encoder_->answer_id().empty()) return;
  auto hook = std::move(on_answer_id_);
  on_answer_id_ = nullptr;  // once
  hook(log_.record());
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
  if (encoder_) {
    Result<std::string> answer = encoder_->Whole(body);
    if (!answer) {
      // The upstream's answer was read (its usage is recorded) but cannot be told in the
      // client's API.
      std::string why = "kvgate cannot translate the upstream's answer: " + answer.error().message;
      co_await SendError(providers::MakeOpenAIError(502, std::move(why), "upstream_error",
                                                    "bad_upstream_response"),
                         "upstream_error");
      co_return;
    }
    body = std::move(*answer);
    log_.record().response_id = std::string(encoder_->answer_id());
  }
  AnswerIdKnown();
  started_ = true;
  log_.record().http_status = 200;
  log_.Checkpoint();  // the answer is complete once these bytes leave: make the record durable
  std::vector<http::Header> headers = AnswerHeaders(headers_);  // (before the co_await: GCC 12)
  auto sent = co_await writer_.Send(200, kJson, std::move(body), std::move(headers));
  if (!sent) log_.SetError(200, "client_disconnected", sent.error().message);
}

asio::awaitable<void> ClientStream::SendError(const providers::ClientError& error,
                                              std::string status_word) {
  const providers::ClientError answer = style_.shape_error ? style_.shape_error(error) : error;
  log_.SetError(answer.status, std::move(status_word), error.message());
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
  writer_.SetCutNotice(style_.cut_event);
  co_return true;
}

asio::awaitable<bool> ClientStream::Write(std::string_view bytes) {
  std::string translated;
  if (encoder_) {
    translated = encoder_->Feed(bytes);
    if (!encoder_->answer_id().empty()) log_.record().response_id = encoder_->answer_id();
    AnswerIdKnown();
    if (translated.empty()) co_return true;
    bytes = translated;
  } else {
    AnswerIdKnown();
  }
  auto wrote = co_await writer_.WriteChunk(bytes);
  if (!wrote) {
    RecordClientLeft("the client closed the connection mid-stream");
    co_return false;
  }
  co_return true;
}

asio::awaitable<bool> ClientStream::EndStream() {
  if (encoder_) {
    // E.g. a chat stream that stopped short of [DONE]: Anthropic's error event, so that the SDK
    // raises rather than return half a message.
    if (std::string tail = encoder_->Finish(); !tail.empty()) {
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
