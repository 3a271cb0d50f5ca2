// A ResponseWriter wrapper that remembers what its handler has sent and adds fixed headers (the
// x-request-id) to the response head. The gateway's last barrier reads it: an exception that
// escapes a handler is answered as a whole 500 when nothing was sent yet, or as an error event
// that ends a stream already under way.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "gateway/http/server.h"

namespace kvgate::gateway {

class TrackedWriter final : public http::ResponseWriter {
 public:
  TrackedWriter(http::ResponseWriter& inner, std::vector<http::Header> tags)
      : inner_(inner), tags_(std::move(tags)) {}

  boost::asio::awaitable<Status> Send(int status, std::string_view content_type, std::string body,
                                      std::vector<http::Header> extra_headers) override {
    status_ = status;
    extra_headers.insert(extra_headers.end(), tags_.begin(), tags_.end());
    return inner_.Send(status, content_type, std::move(body), std::move(extra_headers));
  }
  boost::asio::awaitable<Status> BeginStream(int status, std::string_view content_type,
                                             std::vector<http::Header> extra_headers) override {
    status_ = status;
    streaming_ = true;
    extra_headers.insert(extra_headers.end(), tags_.begin(), tags_.end());
    return inner_.BeginStream(status, content_type, std::move(extra_headers));
  }
  boost::asio::awaitable<Status> WriteChunk(std::string_view data) override {
    return inner_.WriteChunk(data);
  }
  boost::asio::awaitable<Status> EndStream() override {
    ended_ = true;
    return inner_.EndStream();
  }
  void SetCutNotice(std::string_view chunk) override { inner_.SetCutNotice(chunk); }
  void OnClientGone(std::function<void()> on_gone) override {
    inner_.OnClientGone(std::move(on_gone));
  }
  bool client_gone() const override { return inner_.client_gone(); }

  // The status of the response head the handler started (0: none yet).
  int status() const { return status_; }
  // A stream was begun and not yet ended: only an error event can still reach the client.
  bool stream_open() const { return streaming_ && !ended_; }

 private:
  http::ResponseWriter& inner_;
  std::vector<http::Header> tags_;
  int status_ = 0;
  bool streaming_ = false;
  bool ended_ = false;
};

}  // namespace kvgate::gateway
