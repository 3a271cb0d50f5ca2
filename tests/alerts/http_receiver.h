// A tiny HTTP/1.1 server for tests: plain sockets on 127.0.0.1, port 0, one thread, one request
// per connection (answers with Connection: close). The handler decides each answer.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace kvgate::testing {

struct ReceivedRequest {
  std::string method, path;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

struct CannedResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body = "ok";
};

class HttpReceiver {
 public:
  using Handler = std::function<CannedResponse(const ReceivedRequest&)>;

  explicit HttpReceiver(Handler handler) : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~HttpReceiver() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }

  int port() const { return port_; }
  std::string Url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::vector<ReceivedRequest> Requests() const {
    MutexLock lock(&mu_);
    return requests_;
  }
  size_t Count() const {
    MutexLock lock(&mu_);
    return requests_.size();
  }

 private:
  void Loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int conn = ::accept(fd_, nullptr, nullptr);
      if (conn < 0) continue;
      Serve(conn);
      ::close(conn);
    }
  }

  void Serve(int conn) {
    std::string data;
    char buf[4096];
    size_t header_end = std::string::npos;
    size_t content_length = 0;
    ReceivedRequest req;
    while (true) {
      pollfd p{conn, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0) return;
      const ssize_t n = ::recv(conn, buf, sizeof(buf), 0);
      if (n <= 0) return;
      data.append(buf, size_t(n));
      if (header_end == std::string::npos) {
        header_end = data.find("\r\n\r\n");
        if (header_end == std::string::npos) continue;
        ParseHead(data.substr(0, header_end), req);
        if (auto it = req.headers.find("content-length"); it != req.headers.end()) {
          content_length = std::stoul(it->second);
        }
      }
      if (data.size() >= header_end + 4 + content_length) break;
    }
    req.body = data.substr(header_end + 4, content_length);
    const CannedResponse response = handler_(req);
    {
      MutexLock lock(&mu_);
      requests_.push_back(req);
    }
    std::string out = "HTTP/1.1 " + std::to_string(response.status) + " X\r\n";
    for (const auto& [name, value] : response.headers) out += name + ": " + value + "\r\n";
    out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
    out += "Connection: close\r\n\r\n" + response.body;
    size_t sent = 0;
    while (sent < out.size()) {
      const ssize_t n = ::send(conn, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += size_t(n);
    }
  }

  static void ParseHead(const std::string& head, ReceivedRequest& req) {
    size_t pos = head.find("\r\n");
    const std::string request_line = head.substr(0, pos);
    const size_t sp1 = request_line.find(' ');
    const size_t sp2 = request_line.find(' ', sp1 + 1);
    req.method = request_line.substr(0, sp1);
    req.path = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
    while (pos != std::string::npos && pos < head.size()) {
      const size_t start = pos + 2;
      pos = head.find("\r\n", start);
      const std::string line =
          head.substr(start, pos == std::string::npos ? std::string::npos : pos - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return char(std::tolower(c)); });
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      req.headers[name] = value;
    }
  }

  Handler handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable Mutex mu_;
  std::vector<ReceivedRequest> requests_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kvgate::testing
