// The Upstream seam beside attempts: the router's prefix probe, POST /api/engine/lookup and
// POST /v1/messages/count_tokens reach a target's upstream through Upstream::LookupPrefix and
// Upstream::CountTokens (a fake one here, behind a real gateway: gateway_harness.h), and an
// upstream that cannot answers with the defaults.
#include <gtest/gtest.h>

#include <mutex>

#include "tests/gateway/gateway_harness.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

// Looks prefixes up for target "a" only (the default refusal for the others), counts for every
// target; records what it was asked.
class FakeUpstream final : public Upstream {
 public:
  std::vector<std::string> asked() const {
    std::lock_guard lock(mu_);
    return asked_;
  }

  asio::awaitable<AttemptResult> Attempt(const InferenceCall&, const AttemptPlan& plan,
                                         ClientStream& client) override {
    Note("attempt " + plan.target->name);
    // (std::string arguments: GCC 12 cannot copy string literals into a coroutine frame.)
    std::string answer = R"({"id":"chatcmpl-fake"})";
    co_await client.SendAnswer(std::move(answer));
    AttemptResult r;
    r.answered = true;
    co_return r;
  }

  Result<PrefixLookup> LookupPrefix(const router::Target& target, const raw_json::Object& body,
                                    std::string_view api_key_id) const override {
    Note("lookup " + target.name + " key=" + std::string(api_key_id) +
         " messages=" + std::to_string(body.Find("messages").has_value()));
    if (target.name != "a") return Upstream::LookupPrefix(target, body, api_key_id);
    return PrefixLookup{.model = target.name,
                        .prompt_tokens = 30,
                        .cached_tokens = 16,
                        .pool_tokens = 8,
                        .offload_tokens = 8,
                        .offload_kind = "host",
                        .running = 1,
                        .waiting = 2};
  }

  asio::awaitable<TokenCount> CountTokens(const CountTokensCall& call, const router::Target& target,
                                          const ProviderConnection& connection) override {
    Note("count " + target.name + " on " + connection.name + " version=" + call.anthropic_version);
    if (target.name != "a") co_return co_await Upstream::CountTokens(call, target, connection);
    std::string counted = R"({"input_tokens":42})";
    co_return TokenCount{.body = std::move(counted)};
  }

 private:
  void Note(std::string what) const {
    std::lock_guard lock(mu_);
    asked_.push_back(std::move(what));
  }
  mutable std::mutex mu_;
  mutable std::vector<std::string> asked_;
};

constexpr char kConfig[] = R"(
server: {listen: 127.0.0.1:0}
providers:
  - {name: pa, type: anthropic, base_url: "http://127.0.0.1:9", api_key: a}
  - {name: pb, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: b}
models:
  - {name: a, provider: pa, upstream_model: claude-x}
  - {name: b, provider: pb, upstream_model: gpt-4o}
routers:
  - name: both
    strategy: fallback
    targets: [{model: a}, {model: b}]
    affinity: prefix
)";

class UpstreamSeamTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(gateway_.Start(kConfig, fake_)); }

  ::kvgate::testing::RawResponse Post(const std::string& path, const std::string& body,
                                      const std::string& extra_headers = "") {
    SCOPED_TRACE(path);
    return gateway_.Post(path, body, extra_headers);
  }

  FakeUpstream fake_;
  gateway::testing::GatewayHarness gateway_;
};

TEST_F(UpstreamSeamTest, TheRoutersProbeAsksEachTargetsUpstream) {
  const auto r = Post("/v1/chat/completions",
                      R"({"model":"both","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(r.status, 200) << r.body;
  const std::vector<std::string> asked = fake_.asked();
  ASSERT_GE(asked.size(), 3u);
  EXPECT_EQ(asked[0], "lookup a key= messages=1");
  EXPECT_EQ(asked[1], "lookup b key= messages=1");
  EXPECT_EQ(asked[2].rfind("attempt ", 0), 0u) << asked[2];
}

TEST_F(UpstreamSeamTest, TheEngineLookupAnswersFromTheUpstream) {
  const auto r =
      Post("/api/engine/lookup",
           R"({"model":"a","messages":[{"role":"user","content":"hi"}],"api_key_id":"k7"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"model":"a","prompt_tokens":30,"cached_tokens":16,
      "cached_tokens_by_tier":{"pool":8,"host":8},"running":1,"waiting":2})"));
  EXPECT_EQ(fake_.asked(), std::vector<std::string>{"lookup a key=k7 messages=1"});
  // An upstream that keeps no cache kvgate can read: the default refusal, a 400.
  const auto refused = Post("/api/engine/lookup", R"({"model":"b","prompt":"hi"})");
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.body.find("model b is not served by the built-in engine"), std::string::npos)
      << refused.body;
}

TEST_F(UpstreamSeamTest, CountTokensAnswersFromTheUpstream) {
  const std::string body =
      R"({"model":"a","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})";
  const auto r = Post("/v1/messages/count_tokens", body, "anthropic-version: 2023-06-01\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), (json{{"input_tokens", 42}}));
  EXPECT_EQ(fake_.asked(), std::vector<std::string>{"count a on pa version=2023-06-01"});
  // A router counts with its first target that can (a); a target of another provider type is
  // refused before any upstream is asked.
  EXPECT_EQ(Post("/v1/messages/count_tokens",
                 R"({"model":"both","messages":[{"role":"user","content":"hi"}]})")
                .status,
            200);
  const auto refused = Post("/v1/messages/count_tokens",
                            R"({"model":"b","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(json::parse(refused.body)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(fake_.asked().size(), 2u);
}

}  // namespace
}  // namespace kvgate::gateway
