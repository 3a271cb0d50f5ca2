// The admin module (gateway/admin/) on its own deps, without a Gateway: a real server on
// 127.0.0.1 port 0 whose handler is AdminApi alone, a real SQLite store, the real router and key
// table. And its query-parameter parsers, which are pure.
#include "gateway/admin/admin_api.h"

#include <gtest/gtest.h>

#include <boost/asio/thread_pool.hpp>

#include "gateway/admin/query_params.h"
#include "gateway/config.h"
#include "gateway/targets.h"
#include "telemetry/key_store.h"
#include "tests/http/test_util.h"
#include "tests/telemetry/store_test_util.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

http::Request Get(std::string path, std::string query) {
  http::Request r;
  r.method = "GET";
  r.target = path + (query.empty() ? "" : "?" + query);
  r.path = std::move(path);
  r.query = std::move(query);
  return r;
}

TEST(AdminQueryParamsTest, LimitBelowOneIsRefusedAndLargeAsksAreCapped) {
  auto absent = admin::LimitParam(Get("/api/requests", ""), 1000);
  ASSERT_TRUE(absent.has_value());
  EXPECT_FALSE(absent->has_value());
  auto zero = admin::LimitParam(Get("/api/requests", "limit=0"), 1000);
  ASSERT_FALSE(zero.has_value());
  EXPECT_EQ(zero.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(zero.error().message, "limit must be at least 1, got 0");
  auto large = admin::LimitParam(Get("/api/requests", "limit=5000"), 1000);
  ASSERT_TRUE(large.has_value());
  EXPECT_EQ(**large, 1000);
  auto word = admin::IntParam(Get("/api/alerts", "limit=12x"), "limit");
  ASSERT_FALSE(word.has_value());
  EXPECT_EQ(word.error().message, "limit must be an integer, got \"12x\"");
}

TEST(AdminQueryParamsTest, TimesAreUnixMicrosOrRfc3339EvenWithAnUnencodedPlus) {
  constexpr int64_t kNewYear = 1'767'225'600'000'000;  // 2026-01-01T00:00:00Z
  auto micros = admin::TimeParam(Get("/api/requests", "since=1767225600000000"), "since");
  ASSERT_TRUE(micros.has_value());
  EXPECT_EQ(**micros, kNewYear);
  // '+' decodes to a space in a query string; the parser puts the offset's sign back.
  auto offset = admin::TimeParam(Get("/api/requests", "until=2026-01-01T01:00:00+01:00"), "until");
  ASSERT_TRUE(offset.has_value()) << offset.error().message;
  EXPECT_EQ(**offset, kNewYear);
  auto bad = admin::TimeParam(Get("/api/requests", "since=yesterday"), "since");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("since must be unix microseconds or an RFC 3339 time"),
            std::string::npos);
}

TEST(AdminQueryParamsTest, RequestFiltersCheckTheStatusAndTheProviderDiagnosis) {
  auto ok = admin::RequestListingFrom(Get("/api/requests", "status=timeout&model=a&limit=7"));
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(ok->query.status, "timeout");
  EXPECT_EQ(ok->query.model, "a");
  EXPECT_EQ(ok->query.limit, 7);
  EXPECT_FALSE(ok->agrees.has_value());
  auto status = admin::RequestListingFrom(Get("/api/requests", "status=fine"));
  ASSERT_FALSE(status.has_value());
  EXPECT_NE(status.error().message.find("status must be one of ok, error"), std::string::npos);
  auto agrees = admin::RequestListingFrom(Get("/api/requests", "provider_diagnosis=disagrees"));
  ASSERT_TRUE(agrees.has_value());
  EXPECT_EQ(agrees->agrees, std::optional<bool>(false));
  auto reported = admin::RequestListingFrom(Get("/api/requests", "provider_diagnosis=reported"));
  ASSERT_TRUE(reported.has_value());
  EXPECT_FALSE(reported->agrees.has_value());
  EXPECT_TRUE(reported->query.provider_diagnosed);
  EXPECT_FALSE(admin::RequestListingFrom(Get("/api/requests", "provider_diagnosis=maybe")));
}

TEST(AdminQueryParamsTest, ThreadQueriesCheckOrderAndClampOffset) {
  auto q = admin::ThreadQueryFrom(Get("/api/threads", "order=asc&offset=-5&q=th_&limit=900"));
  ASSERT_TRUE(q.has_value()) << q.error().message;
  EXPECT_FALSE(q->descending);
  EXPECT_EQ(q->offset, 0);
  EXPECT_EQ(q->id_prefix, "th_");
  EXPECT_EQ(q->limit, 500);
  auto order = admin::ThreadQueryFrom(Get("/api/threads", "order=up"));
  ASSERT_FALSE(order.has_value());
  EXPECT_EQ(order.error().message, "order must be asc or desc, got \"up\"");
}

TEST(AdminQueryParamsTest, OverviewWindowsEndAtTheNextWholeBucket) {
  const int64_t now = 1'767'225'600'000'000 + 90'000'000;  // 00:01:30
  auto hour = admin::OverviewRangeFrom(Get("/api/overview", "window=1h"), now);
  ASSERT_TRUE(hour.has_value());
  EXPECT_EQ(hour->bucket_seconds, 60);
  EXPECT_EQ(hour->until_us, 1'767'225'600'000'000 + 120'000'000);
  EXPECT_EQ(hour->until_us - hour->since_us, 3600'000'000);
  auto day = admin::OverviewRangeFrom(Get("/api/overview", ""), now);
  ASSERT_TRUE(day.has_value());
  EXPECT_EQ(day->bucket_seconds, 900);
  EXPECT_EQ(day->until_us - day->since_us, 86400'000'000);
  EXPECT_FALSE(admin::OverviewRangeFrom(Get("/api/overview", "window=2h"), now));
}

constexpr char kConfig[] = R"(
server: {listen: 127.0.0.1:0, admin_token: adm, api_keys: [{name: team, key: sk-team, models: [a]}]}
providers:
  - {name: pa, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: a}
models:
  - {name: b, provider: pa, upstream_model: gpt-4o-mini}
  - {name: a, provider: pa, upstream_model: gpt-4o}
routers:
  - {name: both, strategy: fallback, targets: [{model: a}, {model: b}]}
)";

class AdminApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = ParseConfig(kConfig, [](const std::string&) { return std::nullopt; });
    ASSERT_TRUE(config.has_value()) << config.error().message;
    config_ = *config;
    auto store = telemetry::TelemetryStore::Open(dir_.File("t.db"), clock_);
    ASSERT_TRUE(store.has_value()) << store.error().message;
    store_ = std::move(*store);
    auto targets = BuildTargets(config_, catalog_, nullptr);
    ASSERT_TRUE(targets.has_value());
    auto router = router::Router::Create(std::move(*targets), config_.routing, clock_, &registry_);
    ASSERT_TRUE(router.has_value()) << router.error().message;
    router_ = std::move(*router);
    auto key_store = telemetry::KeyStore::Open(dir_.File("t.db"));
    ASSERT_TRUE(key_store.has_value()) << key_store.error().message;
    key_store_ = std::move(*key_store);
    keys_ = std::make_unique<VirtualKeys>(clock_, key_store_.get());
    ASSERT_TRUE(keys_->Load(config_.api_keys).has_value());
    admin_.emplace(AdminDeps{.admin_token = config_.admin_token,
                             .store = store_.get(),
                             .clock = &clock_,
                             .router = router_.get(),
                             .keys = keys_.get(),
                             .blocking_pool = &pool_});
    http::ServerOptions options;
    options.port = 0;
    options.threads = 1;
    auto server =
        http::Server::Start(options, [this](http::Request& request, http::ResponseWriter& writer) {
          return Serve(request, writer);
        });
    ASSERT_TRUE(server.has_value()) << server.error().message;
    server_ = std::move(*server);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    pool_.join();
    server_.reset();
    if (store_) store_->Close();
  }

  // /v1/models as the key in X-Test-Key sees them (the gateway authenticates; here the test does).
  asio::awaitable<void> Serve(http::Request& request, http::ResponseWriter& writer) {
    if (request.path.rfind("/v1/models", 0) == 0) {
      const std::string_view secret = request.header("x-test-key");
      std::shared_ptr<KeyState> key = secret.empty() ? nullptr : keys_->Find(HashApiKey(secret));
      co_await admin_->HandleModels(request, key.get(), writer);
      co_return;
    }
    co_await admin_->Handle(request, writer);
  }

  testing::RawResponse Call(const std::string& method, const std::string& target,
                            const std::string& headers = "Authorization: Bearer adm\r\n",
                            const std::string& body = "") {
    SCOPED_TRACE(method + " " + target);
    testing::RawConn conn;
    EXPECT_EQ(conn.Connect(server_->port()), 0);
    conn.Send(method + " " + target + " HTTP/1.1\r\nHost: x\r\n" + headers +
              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    auto r = testing::ReadResponse(conn);
    EXPECT_TRUE(r.has_value());
    return r.value_or(testing::RawResponse{});
  }
  static std::string Code(const testing::RawResponse& r) {
    return json::parse(r.body)["error"].value("code", std::string());
  }

  telemetry::testing::TempDir dir_;
  FakeClock clock_;
  telemetry::PriceCatalog catalog_ = telemetry::PriceCatalog::BuiltIn();
  telemetry::MetricsRegistry registry_;
  GatewayConfig config_;
  std::unique_ptr<telemetry::TelemetryStore> store_;
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<telemetry::KeyStore> key_store_;
  std::unique_ptr<VirtualKeys> keys_;
  asio::thread_pool pool_{1};
  std::optional<AdminApi> admin_;
  std::unique_ptr<http::Server> server_;
};

TEST_F(AdminApiTest, AccessIsOpenAndEverythingElseNeedsTheAdminToken) {
  auto access = Call("GET", "/api/access", "");
  ASSERT_EQ(access.status, 200) << access.body;
  EXPECT_EQ(json::parse(access.body), (json{{"token_required", true}, {"warning", nullptr}}));
  auto none = Call("GET", "/api/routes", "");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(Code(none), "invalid_admin_token");
  EXPECT_EQ(Call("GET", "/api/routes", "Authorization: Bearer adn\r\n").status, 401);
  EXPECT_EQ(Call("GET", "/api/routes", "Authorization: Bearer admin\r\n").status, 401);
  EXPECT_EQ(Call("GET", "/api/routes", "authorization: BEARER adm\r\n").status, 200);
  EXPECT_EQ(Call("GET", "/api/routes", "X-Admin-Token: adm\r\n").status, 200);
  EXPECT_FALSE(admin_->Authorized(Get("/api/routes", "")));
}

TEST_F(AdminApiTest, UnknownPathsAre404AndWrongMethods405WithAllow) {
  auto unknown = Call("GET", "/api/nothing");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(Code(unknown), "not_found");
  auto post = Call("POST", "/api/requests");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.header("allow"), "GET, HEAD");
  EXPECT_EQ(Code(post), "method_not_allowed");
  EXPECT_EQ(Call("GET", "/api/engine/lookup").header("allow"), "POST");
  EXPECT_EQ(Call("PUT", "/api/keys").header("allow"), "GET, HEAD, POST");
  EXPECT_EQ(Call("GET", "/api/keys/k1/rotate").header("allow"), "POST");
  EXPECT_EQ(Call("POST", "/api/access", "").header("allow"), "GET, HEAD");
}

TEST_F(AdminApiTest, TheReadApiQueriesTheStoreAndRefusesBadParameters) {
  store_->Record(telemetry::testing::MakeRecord(
      "req_one", "th_one", clock_.NowUnixMicros(), "a", telemetry::UsageFlavor::kOpenAIChat,
      R"({"prompt_tokens": 10, "completion_tokens": 2})"));
  ASSERT_TRUE(store_->Flush().has_value());
  auto listed = Call("GET", "/api/requests?model=a");
  ASSERT_EQ(listed.status, 200) << listed.body;
  const json requests = json::parse(listed.body)["requests"];
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0]["request_id"], "req_one");
  auto one = Call("GET", "/api/requests/req_one");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body)["thread_id"], "th_one");
  EXPECT_EQ(Call("GET", "/api/requests/req_none").status, 404);
  auto threads = Call("GET", "/api/threads");
  ASSERT_EQ(threads.status, 200) << threads.body;
  EXPECT_EQ(json::parse(threads.body)["threads"].size(), 1u);
  EXPECT_EQ(Call("GET", "/api/overview?window=1h").status, 200);
  auto limit = Call("GET", "/api/requests?limit=0");
  EXPECT_EQ(limit.status, 400);
  EXPECT_EQ(json::parse(limit.body)["error"]["message"], "limit must be at least 1, got 0");
  EXPECT_EQ(Code(limit), "invalid_argument");
  EXPECT_EQ(Call("GET", "/api/overview?window=2h").status, 400);
}

TEST_F(AdminApiTest, WithoutEnginesOrAlertingTheirRoutesSaySo) {
  auto engine = Call("GET", "/api/engine");
  ASSERT_EQ(engine.status, 200) << engine.body;
  EXPECT_EQ(json::parse(engine.body), (json{{"engines", json::array()}}));
  auto lookup = Call("POST", "/api/engine/lookup", "Authorization: Bearer adm\r\n",
                     R"({"model": "a", "prompt": "hi"})");
  EXPECT_EQ(lookup.status, 400);
  EXPECT_EQ(json::parse(lookup.body)["error"]["message"],
            "model a is not served by the built-in engine");
  EXPECT_EQ(
      Call("POST", "/api/engine/lookup", "Authorization: Bearer adm\r\n", R"({"model": "zz"})")
          .status,
      404);
  auto monitors = Call("GET", "/api/monitors");
  EXPECT_EQ(monitors.status, 404);
  EXPECT_EQ(json::parse(monitors.body)["error"]["message"], "alerting is not configured");
  auto routes = Call("GET", "/api/routes");
  ASSERT_EQ(routes.status, 200) << routes.body;
  EXPECT_TRUE(json::parse(routes.body).is_object());
}

TEST_F(AdminApiTest, KeysAreMadeListedAndRevoked) {
  const std::string auth = "Authorization: Bearer adm\r\n";
  auto made = Call("POST", "/api/keys", auth, R"({"name": "ci", "models": ["both"]})");
  ASSERT_EQ(made.status, 201) << made.body;
  const json key = json::parse(made.body);
  const std::string id = key.value("id", std::string());
  ASSERT_FALSE(id.empty()) << made.body;
  EXPECT_EQ(Call("POST", "/api/keys", auth, R"({"models": ["gpt-9"]})").status, 400);
  auto not_object = Call("POST", "/api/keys", auth, "[1]");
  EXPECT_EQ(not_object.status, 400);
  EXPECT_EQ(json::parse(not_object.body)["error"]["message"], "the body must be a JSON object");
  auto listed = Call("GET", "/api/keys");
  ASSERT_EQ(listed.status, 200) << listed.body;
  EXPECT_EQ(json::parse(listed.body)["keys"].size(), 2u);
  EXPECT_EQ(Call("GET", "/api/keys/" + id).status, 200);
  EXPECT_EQ(Call("GET", "/api/keys/" + id + "/x/y").status, 404);
  EXPECT_EQ(Call("DELETE", "/api/keys/" + id).status, 200);
}

TEST_F(AdminApiTest, TheModelListIsWhatTheKeySees) {
  auto all = Call("GET", "/v1/models", "");
  ASSERT_EQ(all.status, 200) << all.body;
  std::vector<std::string> names;
  const json data = json::parse(all.body)["data"];
  for (const json& m : data) names.push_back(m["id"]);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "both"}));
  auto team = Call("GET", "/v1/models", "X-Test-Key: sk-team\r\n");
  ASSERT_EQ(team.status, 200) << team.body;
  ASSERT_EQ(json::parse(team.body)["data"].size(), 1u);
  EXPECT_EQ(json::parse(team.body)["data"][0]["id"], "a");
  auto hidden = Call("GET", "/v1/models/b", "X-Test-Key: sk-team\r\n");
  EXPECT_EQ(hidden.status, 404);
  EXPECT_EQ(Code(hidden), "model_not_found");
  auto router = Call("GET", "/v1/models/both", "");
  ASSERT_EQ(router.status, 200) << router.body;
  EXPECT_EQ(json::parse(router.body)["kvgate_router"],
            (json{{"strategy", "fallback"}, {"targets", {"a", "b"}}}));
  EXPECT_EQ(json::parse(Call("GET", "/v1/models/a", "").body)["owned_by"], "pa");
}

}  // namespace
}  // namespace kvgate::gateway
