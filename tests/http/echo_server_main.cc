// A load-check target, not a test: serves a small fixed answer (GET) or echoes the body (POST) so
// `wrk` can measure the raw server. Usage: kvgate_http_echo [port] [threads]
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "gateway/http/server.h"

namespace {

boost::asio::awaitable<void> Answer(kvgate::http::Request& req, kvgate::http::ResponseWriter& w) {
  if (req.body.empty()) {
    co_await w.Send(200, "application/json", R"({"ok":true})");
  } else {
    co_await w.Send(200, "application/json", std::move(req.body));
  }
}

}  // namespace

int main(int argc, char** argv) {
  kvgate::http::ServerOptions options;
  options.port = argc > 1 ? static_cast<uint16_t>(std::atoi(argv[1])) : 8089;
  options.threads = argc > 2 ? std::atoi(argv[2]) : 0;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // loops inherit the mask; main waits for them
  auto server = kvgate::http::Server::Start(options, Answer);
  if (!server) {
    std::fprintf(stderr, "%s\n", server.error().ToString().c_str());
    return 1;
  }
  std::printf("listening on %u\n", (*server)->port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  (*server)->Stop();
  return 0;
}
