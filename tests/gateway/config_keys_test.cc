// server.api_keys: strings, objects with limits, mixed lists, and the errors that name the field.
#include <gtest/gtest.h>

#include <limits>

#include "gateway/config.h"

namespace kvgate::gateway {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string WithKeys(const std::string& keys) {
  return "server: {api_keys: " + keys + "}\n"
         "providers:\n"
         "  - {name: p, type: openai, base_url: https://api.openai.com/v1, api_key: k}\n"
         "models:\n"
         "  - {name: sonnet, provider: p}\n"
         "  - {name: mini, provider: p}\n"
         "routers:\n"
         "  - {name: kvgate-router, strategy: fallback, targets: [{model: sonnet}, {model: mini}]}\n";
}

std::string ErrorOf(const std::string& keys) {
  auto config = ParseConfig(WithKeys(keys), Env({}));
  return config ? "" : config.error().message;
}

TEST(ConfigKeysTest, ObjectsAndStringsMixed) {
  auto config = ParseConfig(
      WithKeys("[sk-plain, {name: team-a, key: '${TEAM_A_KEY}', models: [sonnet, kvgate-router],"
               " max_budget_usd: 50, budget_duration: 30d, rpm: 600, tpm: 2000000,"
               " max_parallel: 20}, {key: sk-bare-object, max_budget_usd: 0.25}]"),
      Env({{"TEAM_A_KEY", "sk-team-a"}}));
  ASSERT_TRUE(config) << config.error().message;
  ASSERT_EQ(config->api_keys.size(), 3u);
  ASSERT_EQ(config->api_key_hashes.size(), 3u);
  const ApiKeyConfig& plain = config->api_keys[0];
  EXPECT_EQ(plain.name, "");
  EXPECT_EQ(plain.key_hash, HashApiKey("sk-plain"));
  EXPECT_FALSE(plain.limits.limited());
  const ApiKeyConfig& a = config->api_keys[1];
  EXPECT_EQ(a.name, "team-a");
  EXPECT_EQ(a.key_hash, HashApiKey("sk-team-a"));  // the interpolated secret, hashed
  EXPECT_EQ(a.limits.models, (std::vector<std::string>{"sonnet", "kvgate-router"}));
  EXPECT_EQ(a.limits.max_budget_pico, 50'000'000'000'000);
  EXPECT_EQ(a.limits.budget_duration_s, 30 * 86400);
  EXPECT_EQ(a.limits.rpm, 600);
  EXPECT_EQ(a.limits.tpm, 2'000'000);
  EXPECT_EQ(a.limits.max_parallel, 20);
  const ApiKeyConfig& b = config->api_keys[2];
  EXPECT_EQ(b.limits.max_budget_pico, 250'000'000'000);  // exact: YAML decimals stay text
  EXPECT_EQ(b.limits.budget_duration_s, 0);               // a lifetime budget
  EXPECT_EQ(b.limits.rpm, 0);
}

TEST(ConfigKeysTest, ErrorsNameTheField) {
  EXPECT_NE(ErrorOf("[{name: a, key: k, rpm: 0}]").find("server.api_keys[0].rpm must be a "
                                                         "positive integer"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[sk-x, {key: k, tpm: many}]").find("server.api_keys[1].tpm"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[{key: k, max_parallel: -2}]").find("server.api_keys[0].max_parallel"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[{key: k, max_budget_usd: lots}]").find("server.api_keys[0].max_budget_usd"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[{key: k, max_budget_usd: -1}]").find("between 0 and"), std::string::npos);
  EXPECT_NE(ErrorOf("[{key: k, max_budget_usd: 1, budget_duration: 1w}]")
                .find("server.api_keys[0].budget_duration must be a duration"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[{key: k, max_budget_usd: 1, budget_duration: 0d}]")
                .find("budget_duration"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[{key: k, budget_duration: 1d}]").find("needs max_budget_usd"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[{name: a}]").find("server.api_keys[0].key is required"), std::string::npos);
  EXPECT_NE(ErrorOf("[{name: a, key: '${UNSET_KEY}'}]").find("server.api_keys[0].key is required"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[{key: k, rpn: 5}]").find("unknown key \"rpn\""), std::string::npos);
  EXPECT_NE(ErrorOf("[{key: k, models: sonnet}]").find("server.api_keys[0].models must be a list"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[{key: k, models: [sonnet, opus]}]")
                .find("server.api_keys[0].models[1]: \"opus\" is not a configured model or router"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[{name: a, key: k}, {name: a, key: j}]").find("duplicate key name \"a\""),
            std::string::npos);
  EXPECT_NE(ErrorOf("[k, {key: k}]").find("server.api_keys[1]: the same key is listed twice"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[{name: 'a b', key: k}]").find("server.api_keys[0].name"), std::string::npos);
  EXPECT_NE(ErrorOf("['']").find("server.api_keys[0] must be a non-empty key"), std::string::npos);
  EXPECT_NE(ErrorOf("[[k]]").find("server.api_keys[0] must be a key string or a mapping"),
            std::string::npos);
  EXPECT_NE(ErrorOf("k").find("server.api_keys must be a list"), std::string::npos);
}

TEST(ConfigKeysTest, BudgetDurations) {
  using nlohmann::json;
  EXPECT_EQ(ParseBudgetDuration(json("45s"), "d"), 45);
  EXPECT_EQ(ParseBudgetDuration(json("30m"), "d"), 1800);
  EXPECT_EQ(ParseBudgetDuration(json("1h"), "d"), 3600);
  EXPECT_EQ(ParseBudgetDuration(json("30d"), "d"), 30 * 86400);
  for (const json& bad : {json("1"), json("h"), json("-1d"), json("1.5h"), json(3600), json("1y"),
                          json("99999d")}) {
    auto parsed = ParseBudgetDuration(bad, "x.budget_duration");
    ASSERT_FALSE(parsed) << bad.dump();
    EXPECT_NE(parsed.error().message.find("x.budget_duration"), std::string::npos);
  }
}

// Counts used to be unbounded (an rpm of INT64_MAX overflowed the remaining-requests header) and
// a NaN budget passed both range checks.
TEST(ConfigKeysTest, LimitsAreBoundedAndErrorsNameTheField) {
  using nlohmann::json;
  struct Case {
    const char* field;
    json value;
  };
  const Case cases[] = {
      {"rpm", std::numeric_limits<int64_t>::max()},
      {"rpm", kMaxKeyRpm + 1},
      {"rpm", std::numeric_limits<uint64_t>::max()},
      {"tpm", kMaxKeyTpm + 1},
      {"max_parallel", kMaxKeyParallel + 1},
      {"max_budget_usd", std::numeric_limits<double>::quiet_NaN()},
      {"max_budget_usd", std::numeric_limits<double>::infinity()},
      {"max_budget_usd", "nan"},
      {"max_budget_usd", 1e300},
  };
  for (const Case& c : cases) {
    const json body = {{c.field, c.value}};
    auto limits = ParseKeyLimits(body, "body", {});
    ASSERT_FALSE(limits) << body.dump();
    EXPECT_NE(limits.error().message.find(std::string("body.") + c.field), std::string::npos)
        << body.dump() << " -> " << limits.error().message;
  }
  auto edge = ParseKeyLimits(json{{"rpm", kMaxKeyRpm},
                                  {"tpm", kMaxKeyTpm},
                                  {"max_parallel", kMaxKeyParallel},
                                  {"max_budget_usd", 1000000},
                                  {"budget_duration", "3650d"}},
                             "body", {});
  ASSERT_TRUE(edge) << edge.error().message;
  EXPECT_EQ(edge->tpm, kMaxKeyTpm);
  EXPECT_EQ(edge->budget_duration_s, kMaxBudgetDurationSeconds);
  EXPECT_NE(ErrorOf("[{key: k, rpm: 9223372036854775807}]").find("server.api_keys[0].rpm"),
            std::string::npos);
  EXPECT_TRUE(ValidateKeyName("team-a.1", "body.name"));
  auto spaced = ValidateKeyName("a b", "body.name");
  ASSERT_FALSE(spaced);
  EXPECT_NE(spaced.error().message.find("body.name"), std::string::npos);
}

TEST(ConfigKeysTest, TheApiBodyTakesTheSameFields) {
  auto limits = ParseKeyLimits(nlohmann::json::parse(R"({"name": "x", "rpm": 5, "tpm": 100,
      "max_budget_usd": 1.5, "budget_duration": "1d", "models": ["sonnet"]})"),
                               "body", {"name"});
  ASSERT_TRUE(limits) << limits.error().message;
  EXPECT_EQ(limits->rpm, 5);
  EXPECT_EQ(limits->max_budget_pico, 1'500'000'000'000);
  auto key_given = ParseKeyLimits(nlohmann::json::parse(R"({"key": "sk-mine"})"), "body", {"name"});
  ASSERT_FALSE(key_given);
  EXPECT_NE(key_given.error().message.find("body: unknown key \"key\""), std::string::npos);
  auto boolean = ParseKeyLimits(nlohmann::json::parse(R"({"max_budget_usd": true})"), "body", {});
  EXPECT_FALSE(boolean);
}

}  // namespace
}  // namespace kvgate::gateway
