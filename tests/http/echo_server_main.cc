// A load-check target, not a test. Two modes, for `wrk`:
//   kvgate_http_echo PORT THREADS            a small fixed answer (GET) or the body echoed (POST)
//   kvgate_http_echo PORT THREADS URL        a proxy: each request is sent to URL + target through
//                                            the upstream Client of the loop that runs it
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "gateway/http/server.h"
#include "gateway/upstream/client.h"

namespace {

namespace asio = boost::asio;
using kvgate::http::Request;
using kvgate::http::ResponseWriter;

asio::awaitable<void> Answer(Request& req, ResponseWriter& w) {
  if (req.body.empty()) {
    co_await w.Send(200, "application/json", R"({"ok":true})");
  } else {
    co_await w.Send(200, "application/json", std::move(req.body));
  }
}

struct Proxy {
  kvgate::upstream::Url url;
  std::vector<std::unique_ptr<kvgate::upstream::Client>> clients;  // one per loop

  asio::awaitable<void> operator()(Request& req, ResponseWriter& w) const {
    kvgate::upstream::OutgoingRequest out;
    out.method = req.method;
    out.path = req.target;
    out.body = std::move(req.body);
    if (std::string_view ct = req.header("content-type"); !ct.empty()) {
      out.headers.push_back({"Content-Type", std::string(ct)});
    }
    auto r = co_await clients[req.worker_index]->Send(url, std::move(out));
    if (!r) {
      co_await w.Send(502, "text/plain", r.error().ToString());
      co_return;
    }
    const std::string content_type(r->header("content-type"));
    co_await w.Send(r->status, content_type, std::move(r->body));
  }
};

}  // namespace

int main(int argc, char** argv) {
  kvgate::http::ServerOptions options;
  options.port = argc > 1 ? static_cast<uint16_t>(std::atoi(argv[1])) : 8089;
  options.threads = argc > 2 ? std::atoi(argv[2]) : 0;
  if (options.threads <= 0) options.threads = static_cast<int>(std::thread::hardware_concurrency());
  auto proxy = std::make_shared<Proxy>();
  kvgate::http::Handler handler = Answer;
  if (argc > 3) {
    auto url = kvgate::upstream::Url::Parse(argv[3]);
    if (!url) {
      std::fprintf(stderr, "%s\n", url.error().ToString().c_str());
      return 2;
    }
    proxy->url = *url;
    proxy->clients.resize(static_cast<size_t>(options.threads));
    options.on_thread_start = [proxy](size_t index, asio::any_io_executor executor) {
      proxy->clients[index] = kvgate::upstream::Client::Create(executor, {});
    };
    handler = [proxy](Request& req, ResponseWriter& w) { return (*proxy)(req, w); };
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // loops inherit the mask; main waits for signals
  auto server = kvgate::http::Server::Start(options, handler);
  if (!server) {
    std::fprintf(stderr, "%s\n", server.error().ToString().c_str());
    return 1;
  }
  std::printf("listening on %u\n", (*server)->port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  (*server)->Stop();
  proxy->clients.clear();  // after the loops stopped, before the server goes
  return 0;
}
