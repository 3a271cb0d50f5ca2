// A real gateway for tests of the inference path with a fake Upstream behind it: a real server on
// 127.0.0.1 port 0, a real SQLite store, the real router and recorder; every remote target is
// answered by `remote` instead of the HTTP client.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "gateway/config.h"
#include "gateway/gateway.h"
#include "gateway/recorder.h"
#include "gateway/targets.h"
#include "tests/http/test_util.h"
#include "tests/telemetry/store_test_util.h"

namespace kvgate::gateway::testing {

class GatewayHarness {
 public:
  ~GatewayHarness() { Stop(); }

  // Starts a gateway for `config_yaml` (its sqlite_path is replaced by a temporary file) whose
  // remote targets `remote` answers. Fails the test (and returns false) on any error.
  bool Start(const std::string& config_yaml, Upstream& remote) {
    auto config = ParseConfig(config_yaml, [](const std::string&) { return std::nullopt; });
    if (!config) {
      ADD_FAILURE() << config.error().message;
      return false;
    }
    config_ = *config;
    config_.sqlite_path = dir_.File("t.db");
    auto store = telemetry::TelemetryStore::Open(config_.sqlite_path, clock_);
    auto metrics = telemetry::GatewayMetrics::Create(registry_);
    if (!store || !metrics) {
      ADD_FAILURE() << "store or metrics";
      return false;
    }
    store_ = std::move(*store);
    metrics_ = std::move(*metrics);
    auto targets = BuildTargets(config_, catalog_, nullptr);
    if (!targets) {
      ADD_FAILURE() << targets.error().message;
      return false;
    }
    auto router = router::Router::Create(std::move(*targets), config_.routing, clock_, &registry_);
    if (!router) {
      ADD_FAILURE() << router.error().message;
      return false;
    }
    router_ = std::move(*router);
    recorder_ = std::make_unique<Recorder>(*store_, *metrics_, *router_);
    GatewayDeps deps{.store = store_.get(),
                     .metrics = metrics_.get(),
                     .recorder = recorder_.get(),
                     .clock = &clock_,
                     .router = router_.get(),
                     .remote = &remote};
    auto gateway = Gateway::Create(config_, deps);
    if (!gateway) {
      ADD_FAILURE() << gateway.error().message;
      return false;
    }
    gateway_ = std::move(*gateway);
    http::ServerOptions options;
    options.port = 0;
    options.threads = 1;
    gateway_->PrepareLoops(1);
    options.on_thread_start = [g = gateway_.get()](size_t i, boost::asio::any_io_executor e) {
      g->OnLoopStart(i, std::move(e));
    };
    auto server = http::Server::Start(options, gateway_->handler());
    if (!server) {
      ADD_FAILURE() << server.error().message;
      return false;
    }
    server_ = std::move(*server);
    return true;
  }

  void Stop() {
    if (server_) server_->Stop();
    if (gateway_) {
      gateway_->ReleaseClients();
      gateway_->FinishBlockingWork();
    }
    server_.reset();
    gateway_.reset();
    if (store_) store_->Close();
    store_.reset();
  }

  // POSTs `body` to `path` with `extra_headers` ("Name: value\r\n" lines); the whole response.
  ::kvgate::testing::RawResponse Post(const std::string& path, const std::string& body,
                                      const std::string& extra_headers = "") {
    ::kvgate::testing::RawConn conn;
    EXPECT_EQ(conn.Connect(server_->port()), 0);
    conn.Send("POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
              extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    auto r = ::kvgate::testing::ReadResponse(conn);
    EXPECT_TRUE(r.has_value());
    return r.value_or(::kvgate::testing::RawResponse{});
  }

  // The stored record of a request (committed just after its answer is written: polled).
  nlohmann::json Stored(const std::string& request_id) {
    for (int i = 0; i < 200; ++i) {
      EXPECT_TRUE(store_->Flush().has_value());
      if (auto row = store_->GetRequest(request_id)) return *row;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "request " << request_id << " was not recorded";
    return nlohmann::json();
  }

  telemetry::TelemetryStore& store() { return *store_; }
  telemetry::MetricsRegistry& registry() { return registry_; }
  FakeClock& clock() { return clock_; }

 private:
  telemetry::testing::TempDir dir_;
  FakeClock clock_;
  telemetry::PriceCatalog catalog_ = telemetry::PriceCatalog::BuiltIn();
  telemetry::MetricsRegistry registry_;
  GatewayConfig config_;
  std::unique_ptr<telemetry::TelemetryStore> store_;
  std::unique_ptr<telemetry::GatewayMetrics> metrics_;
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<Recorder> recorder_;
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<http::Server> server_;
};

}  // namespace kvgate::gateway::testing
