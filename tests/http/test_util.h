// Blocking POSIX socket helpers for the HTTP tests: a raw client that speaks bytes, and a tiny
// HTTP/1.1 response reader (Content-Length and chunked). Deliberately not Beast, so the tests do
// not share the code under test.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace kvgate::testing {

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class RawConn {
 public:
  RawConn() = default;
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  ~RawConn() { Close(); }

  // Half-closes: the server reads EOF, the client still reads.
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  // Returns 0 on success, else errno (e.g. ECONNREFUSED).
  int Connect(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      const int err = errno;
      Close();
      return err;
    }
    return 0;
  }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Appends what arrives within timeout to pending(). Returns >0 bytes, 0 on EOF, -1 on timeout,
  // -2 on error.
  int ReadSome(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r == 0) return -1;
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0) return -2;
    pending_.append(buf, static_cast<size_t>(n));
    return static_cast<int>(n);
  }

  // Waits for the peer to close. True on EOF or reset within timeout.
  bool WaitClosed(int timeout_ms) {
    const int64_t end = NowMs() + timeout_ms;
    while (NowMs() < end) {
      const int r = ReadSome(static_cast<int>(end - NowMs()));
      if (r == 0 || r == -2) return true;
    }
    return false;
  }

  std::string& pending() { return pending_; }
  int fd() const { return fd_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string pending_;
};

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(Lower(name));
    return it == headers.end() ? "" : it->second;
  }
};

// Reads one response from conn (keeping any bytes after it in pending()). nullopt on timeout/EOF.
inline std::optional<RawResponse> ReadResponse(RawConn& conn, int timeout_ms = 5000,
                                               bool head_request = false) {
  const int64_t end = NowMs() + timeout_ms;
  auto need = [&](auto pred) {
    while (!pred()) {
      const int64_t left = end - NowMs();
      if (left <= 0 || conn.ReadSome(static_cast<int>(left)) <= 0) return false;
    }
    return true;
  };
  std::string& buf = conn.pending();
  if (!need([&] { return buf.find("\r\n\r\n") != std::string::npos; })) return std::nullopt;
  const size_t head_end = buf.find("\r\n\r\n");
  RawResponse r;
  std::string head = buf.substr(0, head_end);
  buf.erase(0, head_end + 4);
  r.status = std::atoi(head.substr(9, 3).c_str());
  size_t pos = head.find("\r\n");
  while (pos != std::string::npos) {
    const size_t next = head.find("\r\n", pos + 2);
    std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos
                                                                      : next - pos - 2);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[Lower(line.substr(0, colon))] = value;
    }
    pos = next;
  }
  if (head_request) return r;
  if (Lower(r.header("transfer-encoding")) == "chunked") {
    for (;;) {
      if (!need([&] { return buf.find("\r\n") != std::string::npos; })) return std::nullopt;
      const size_t line_end = buf.find("\r\n");
      const size_t size = std::strtoul(buf.substr(0, line_end).c_str(), nullptr, 16);
      if (!need([&] { return buf.size() >= line_end + 2 + size + 2; })) return std::nullopt;
      r.body.append(buf, line_end + 2, size);
      buf.erase(0, line_end + 2 + size + 2);
      if (size == 0) break;
    }
  } else if (!r.header("content-length").empty()) {
    const size_t len = std::strtoul(r.header("content-length").c_str(), nullptr, 10);
    if (!need([&] { return buf.size() >= len; })) return std::nullopt;
    r.body = buf.substr(0, len);
    buf.erase(0, len);
  }
  return r;
}

// Sends all of data on a raw fd. False on error.
inline bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads one HTTP request (headers + Content-Length body) from fd, keeping extra bytes in `carry`.
// Returns "" on EOF, error or after timeout_ms.
inline std::string ReadHttpRequest(int fd, std::string& carry, int timeout_ms = 5000) {
  const int64_t end = NowMs() + timeout_ms;
  auto fill = [&]() {
    const int64_t left = end - NowMs();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    carry.append(buf, static_cast<size_t>(n));
    return true;
  };
  while (carry.find("\r\n\r\n") == std::string::npos) {
    if (!fill()) return "";
  }
  const size_t head_end = carry.find("\r\n\r\n") + 4;
  size_t length = 0;
  const std::string head = Lower(carry.substr(0, head_end));
  const size_t cl = head.find("content-length:");
  if (cl != std::string::npos) length = std::strtoul(head.c_str() + cl + 15, nullptr, 10);
  while (carry.size() < head_end + length) {
    if (!fill()) return "";
  }
  std::string request = carry.substr(0, head_end + length);
  carry.erase(0, head_end + length);
  return request;
}

// Makes the coming close of fd send an RST instead of a FIN.
inline void ArmReset(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

// A blocking test server on 127.0.0.1:0 that runs a script per accepted connection, each on its
// own thread. The script gets the fd (closed when the script returns; scripts never close it
// themselves), the connection's index, and a stop flag set when the server is destroyed.
class ScriptedServer {
 public:
  using Script = std::function<void(int fd, int index, const std::atomic<bool>& stop)>;

  explicit ScriptedServer(Script script) : script_(std::move(script)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_fd_, 64);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  ~ScriptedServer() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    ::close(listen_fd_);
    MutexLock lock(&mu_);
    for (std::thread& t : workers_) t.join();
  }

  uint16_t port() const { return port_; }
  int connections() const { return accepted_.load(); }

 private:
  void AcceptLoop() {
    for (;;) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) < 0 || stop_) return;
      if (!(p.revents & POLLIN)) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (stop_) return;
        continue;
      }
      const int index = accepted_++;
      MutexLock lock(&mu_);
      workers_.emplace_back([this, fd, index] {
        script_(fd, index, stop_);
        ::close(fd);
      });
    }
  }

  Script script_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  Mutex mu_;
  std::vector<std::thread> workers_ GUARDED_BY(mu_);
};

}  // namespace kvgate::testing

