#include "gateway/client_stream.h"

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

}  // namespace

ClientStream::ClientStream(http::ResponseWriter& writer, RequestLog& log)
    : writer_(writer), log_(log), headers_{{"x-request-id", log.record().request_id}} {}

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
  started_ = true;
  log_.record().http_status = 200;
  log_.Checkpoint();  // the answer is complete once these bytes leave: make the record durable
  std::vector<http::Header> headers = headers_;  // (built before the co_await: GCC 12)
  auto sent = co_await writer_.Send(200, kJson, std::move(body), std::move(headers));
  if (!sent) log_.SetError(200, "client_disconnected", sent.error().message);
}

asio::awaitable<void> ClientStream::SendError(const providers::ClientError& error,
                                              std::string status_word) {
  log_.SetError(error.status, std::move(status_word), MessageOf(error));
  started_ = true;
  std::vector<http::Header> headers = headers_;
  std::string body = JsonText(error.body);
  co_await writer_.Send(error.status, kJson, std::move(body), std::move(headers));
}

asio::awaitable<bool> ClientStream::BeginStream() {
  std::vector<http::Header> stream_headers = headers_;
  stream_headers.push_back({"cache-control", "no-cache"});
  auto began = co_await writer_.BeginStream(200, "text/event-stream", std::move(stream_headers));
  if (!began) {
    RecordClientLeft("the client went away before the stream began");
    co_return false;
  }
  started_ = true;
  streaming_ = true;
  log_.record().http_status = 200;
  writer_.SetCutNotice(providers::ShutdownCutEvent());
  co_return true;
}

asio::awaitable<bool> ClientStream::Write(std::string_view bytes) {
  auto wrote = co_await writer_.WriteChunk(bytes);
  if (!wrote) {
    RecordClientLeft("the client closed the connection mid-stream");
    co_return false;
  }
  co_return true;
}

asio::awaitable<bool> ClientStream::EndStream() {
  auto ended = co_await writer_.EndStream();
  if (!ended) {
    RecordClientLeft("the client closed the connection mid-stream");
    co_return false;
  }
  co_return true;
}

}  // namespace kvgate::gateway
