#include "telemetry/alerts/rules.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvgate::telemetry::alerts {
namespace {

using nlohmann::json;

TEST(DurationTest, ParsesUnitsAndRejectsGarbage) {
  EXPECT_EQ(ParseDurationSeconds(json("45s")).value(), 45);
  EXPECT_EQ(ParseDurationSeconds(json("5m")).value(), 300);
  EXPECT_EQ(ParseDurationSeconds(json("2h")).value(), 7200);
  EXPECT_EQ(ParseDurationSeconds(json("1d")).value(), 86400);
  EXPECT_EQ(ParseDurationSeconds(json("90")).value(), 90);
  EXPECT_EQ(ParseDurationSeconds(json(30)).value(), 30);
  for (json bad : {json("5x"), json("m"), json(""), json("0s"), json(-3), json(1.5), json(nullptr),
                   json("-5m"), json("99999999999999h")}) {
    EXPECT_FALSE(ParseDurationSeconds(bad).has_value()) << bad.dump();
  }
}

// A duration that fits the 12-character form but not a year, or not an int64 once in
// microseconds, used to be accepted, then written back as "8639999999913600s", which the same
// parser refused at the next start.
TEST(DurationTest, IsBoundedToAYearSoNothingOverflows) {
  EXPECT_EQ(ParseDurationSeconds(json("366d")).value(), kMaxMonitorDurationSeconds);
  EXPECT_EQ(ParseDurationSeconds(json(kMaxMonitorDurationSeconds)).value(),
            kMaxMonitorDurationSeconds);
  EXPECT_EQ(ParseDurationSeconds(json("8784h")).value(), kMaxMonitorDurationSeconds);
  for (json bad : {json("367d"), json("99999999999d"), json("999999999999"), json("8785h"),
                   json(kMaxMonitorDurationSeconds + 1), json(std::numeric_limits<int64_t>::max()),
                   json(std::numeric_limits<uint64_t>::max()), json("8639999999913600s")}) {
    auto parsed = ParseDurationSeconds(bad);
    ASSERT_FALSE(parsed.has_value()) << bad.dump() << " -> " << parsed.value();
    EXPECT_NE(parsed.error().message.find("366d"), std::string::npos) << parsed.error().message;
  }
}

TEST(RuleTest, NumbersOutOfBoundsNameTheirField) {
  const json base = json::parse(R"({"name":"x","metric":"cost","condition":"above",
      "threshold":1})");
  struct Case {
    const char* field;
    json value;
    const char* named;
  };
  const Case cases[] = {
      {"window", "99999999999d", "monitor.window"},
      {"window", std::numeric_limits<int64_t>::max(), "monitor.window"},
      {"cooldown", "99999999999d", "monitor.cooldown"},
      {"cooldown", "400d", "monitor.cooldown"},
      {"min_requests", int64_t{1} << 40, "monitor.min_requests"},
      {"min_requests", std::numeric_limits<uint64_t>::max(), "monitor.min_requests"},
      {"threshold", std::numeric_limits<double>::quiet_NaN(), "monitor.threshold"},
      {"threshold", std::numeric_limits<double>::infinity(), "monitor.threshold"},
      {"threshold", -0.5, "monitor.threshold"},
  };
  for (const Case& c : cases) {
    json body = base;
    body[c.field] = c.value;
    auto rule = ParseRule(body);
    ASSERT_FALSE(rule.has_value()) << body.dump();
    EXPECT_EQ(rule.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(rule.error().message.find(c.named), std::string::npos)
        << body.dump() << " -> " << rule.error().message;
  }
  // At the bounds a rule is accepted, and what it is stored as reads back the same.
  json edge = base;
  edge["window"] = "366d";
  edge["cooldown"] = kMaxMonitorDurationSeconds;
  edge["min_requests"] = kMaxMinRequests;
  auto rule = ParseRule(edge);
  ASSERT_TRUE(rule.has_value()) << rule.error().ToString();
  auto again = ParseRule(ToJson(*rule));
  ASSERT_TRUE(again.has_value()) << again.error().ToString();
  EXPECT_EQ(ToJson(*again), ToJson(*rule));
}

TEST(RuleTest, APendingPeriodAndAResolveThresholdOnTheResolvedSide) {
  auto rule = ParseRule(json::parse(R"({"name":"hits","metric":"cache_hit_rate",
      "condition":"below","threshold":0.5,"resolve_threshold":0.6,"for":"2m"})"));
  ASSERT_TRUE(rule.has_value()) << rule.error().ToString();
  EXPECT_EQ(rule->pending_seconds, 120);
  EXPECT_EQ(rule->resolve_threshold, 0.6);
  // Stored and read back as it was.
  auto back = ParseRule(ToJson(*rule));
  ASSERT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(back->pending_seconds, 120);
  EXPECT_EQ(back->resolve_threshold, 0.6);
  auto plain = ParseRule(json::parse(R"({"name":"c","metric":"cost","condition":"above",
      "threshold":1})"));
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->pending_seconds, 0);
  EXPECT_EQ(plain->resolve_threshold, std::nullopt);
  auto plain_back = ParseRule(ToJson(*plain));
  ASSERT_TRUE(plain_back.has_value()) << plain_back.error().ToString();
  EXPECT_EQ(plain_back->resolve_threshold, std::nullopt);
  // A resolve threshold past the fire threshold would resolve while the condition holds.
  for (const char* text :
       {R"({"name":"x","metric":"cache_hit_rate","condition":"below","threshold":0.5,
            "resolve_threshold":0.4})",
        R"({"name":"x","metric":"cost","condition":"above","threshold":1,
            "resolve_threshold":2})",
        R"({"name":"x","metric":"cost","condition":"above","threshold":1,
            "resolve_threshold":"low"})",
        R"({"name":"x","metric":"cost","condition":"above","threshold":1,"for":"400d"})",
        R"({"name":"x","metric":"cost","condition":"above","threshold":1,"for":-5})"}) {
    auto bad = ParseRule(json::parse(text));
    ASSERT_FALSE(bad.has_value()) << text;
    const bool names_field = bad.error().message.find("monitor.resolve_threshold") !=
                                 std::string::npos ||
                             bad.error().message.find("monitor.for") != std::string::npos;
    EXPECT_TRUE(names_field) << bad.error().message;
  }
}

TEST(RuleTest, ARateNeedsTwentyRequestsUnlessTheMonitorSaysOtherwise) {
  auto rule = [](std::string_view metric) {
    return ParseRule(json{{"name", "m"}, {"metric", metric}, {"condition", "above"},
                          {"threshold", 0.5}, {"scope", metric == "budget" ? "api_key" : "global"}})
        .value();
  };
  for (std::string_view metric : {"error_rate", "cache_hit_rate", "latency_p95", "ttft_p95"}) {
    EXPECT_EQ(rule(metric).min_requests, 20) << metric;
  }
  for (std::string_view metric : {"cost", "cache_drop", "budget"}) {
    EXPECT_EQ(rule(metric).min_requests, 1) << metric;
  }
  auto explicit_one = ParseRule(json::parse(R"({"name":"m","metric":"error_rate",
      "condition":"above","threshold":0.5,"min_requests":1})"));
  ASSERT_TRUE(explicit_one.has_value());
  EXPECT_EQ(explicit_one->min_requests, 1);
}

TEST(RuleTest, ParsesAFullRule) {
  auto rule = ParseRule(json::parse(R"({"name":"hit rate low","metric":"cache_hit_rate",
      "scope":"model","condition":"below","threshold":0.5,"window":"10m","min_requests":20,
      "cooldown":"1h","channels":["slack","ops-email"],"enabled":false})"));
  ASSERT_TRUE(rule.has_value()) << rule.error().ToString();
  EXPECT_EQ(rule->metric, Metric::kCacheHitRate);
  EXPECT_EQ(rule->scope, Scope::kModel);
  EXPECT_EQ(rule->condition, Condition::kBelow);
  EXPECT_DOUBLE_EQ(rule->threshold, 0.5);
  EXPECT_EQ(rule->window_seconds, 600);
  EXPECT_EQ(rule->min_requests, 20);
  EXPECT_EQ(rule->cooldown_seconds, 3600);
  EXPECT_EQ(rule->channels, (std::vector<std::string>{"slack", "ops-email"}));
  EXPECT_FALSE(rule->enabled);
  // ToJson -> ParseRule is the identity.
  auto again = ParseRule(ToJson(*rule));
  ASSERT_TRUE(again.has_value()) << again.error().ToString();
  EXPECT_EQ(ToJson(*again), ToJson(*rule));
}

TEST(RuleTest, DefaultsApply) {
  auto rule = ParseRule(
      json::parse(R"({"name":"spend","metric":"cost","condition":"above","threshold":10})"));
  ASSERT_TRUE(rule.has_value());
  EXPECT_EQ(rule->scope, Scope::kGlobal);
  EXPECT_EQ(rule->window_seconds, 300);
  EXPECT_EQ(rule->min_requests, 1);
  EXPECT_TRUE(rule->enabled);
}

TEST(RuleTest, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* field;
  };
  const Case cases[] = {
      {R"({"metric":"cost","condition":"above","threshold":1})", "monitor.name"},
      {R"({"name":"x","metric":"latency","condition":"above","threshold":1})", "monitor.metric"},
      {R"({"name":"x","metric":"cost","condition":"over","threshold":1})", "monitor.condition"},
      {R"({"name":"x","metric":"cost","condition":"above"})", "monitor.threshold"},
      {R"({"name":"x","metric":"cost","condition":"above","threshold":"1"})", "monitor.threshold"},
      {R"({"name":"x","metric":"error_rate","condition":"above","threshold":5})",
       "monitor.threshold"},
      {R"({"name":"x","metric":"cost","condition":"above","threshold":1,"scope":"user"})",
       "monitor.scope"},
      {R"({"name":"x","metric":"cost","condition":"above","threshold":1,"window":"5 min"})",
       "monitor.window"},
      {R"({"name":"x","metric":"cost","condition":"above","threshold":1,"min_requests":0})",
       "monitor.min_requests"},
      {R"({"name":"x","metric":"cost","condition":"above","threshold":1,"channels":"slack"})",
       "monitor.channels"},
      {R"({"name":"x","metric":"cost","condition":"above","threshold":1,"treshold":2})",
       "monitor.treshold"},
  };
  for (const Case& c : cases) {
    auto rule = ParseRule(json::parse(c.body));
    ASSERT_FALSE(rule.has_value()) << c.body;
    EXPECT_EQ(rule.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(rule.error().message.find(c.field), std::string::npos)
        << c.body << " -> " << rule.error().message;
  }
  EXPECT_FALSE(ParseRule(json::array()).has_value());
}

TEST(ChannelTest, ParsesEachTypeAndRedactsSecrets) {
  auto slack = ParseChannel(json::parse(
      R"({"name":"slack","type":"slack","url":"https://hooks.slack.com/services/T/B/secret"})"));
  ASSERT_TRUE(slack.has_value()) << slack.error().ToString();
  EXPECT_EQ(ToJson(*slack)["url"], "https://hooks.slack.com/***");
  auto hook = ParseChannel(json::parse(
      R"({"name":"ops","type":"webhook","url":"https://example.com/h","secret":"whsec_YWJj"})"));
  ASSERT_TRUE(hook.has_value());
  EXPECT_EQ(ToJson(*hook)["secret"], "***");
  auto mail = ParseChannel(json::parse(R"({"name":"mail","type":"email",
      "url":"smtp://mail.example.com:587","username":"u","password":"p",
      "from":"kvgate@example.com","to":["a@example.com"]})"));
  ASSERT_TRUE(mail.has_value());
  EXPECT_FALSE(ToJson(*mail).contains("password"));
}

TEST(ChannelTest, RejectsBadChannels) {
  const char* bad[] = {
      R"({"type":"slack","url":"https://x"})",
      R"({"name":"a","type":"pager","url":"https://x"})",
      R"({"name":"a","type":"webhook","url":"https://x"})",
      R"({"name":"a","type":"webhook","url":"https://x","secret":"plain"})",
      // Every delivery would fail: the part after whsec_ must be standard base64.
      R"({"name":"a","type":"webhook","url":"https://x","secret":"whsec_"})",
      R"({"name":"a","type":"webhook","url":"https://x","secret":"whsec_not*base64!"})",
      R"({"name":"a","type":"webhook","url":"https://x","secret":"whsec_YW=j"})",
      R"({"name":"a","type":"webhook","url":"https://x","secret":"whsec_YWJ jZGVm"})",
      R"({"name":"a","type":"webhook","url":"https://x","secret":"whsec_YWJjZ"})",
      R"({"name":"a","type":"slack","url":"ftp://x"})",
      R"({"name":"a","type":"email","url":"http://x","from":"a@b","to":["c@d"]})",
      R"({"name":"a","type":"email","url":"smtp://x:587","to":["c@d"]})",
  };
  for (const char* body : bad) {
    EXPECT_FALSE(ParseChannel(json::parse(body)).has_value()) << body;
  }
  auto bad_secret = ParseChannel(json::parse(
      R"({"name":"ops","type":"webhook","url":"https://x","secret":"whsec_%%%%"})"));
  ASSERT_FALSE(bad_secret.has_value());
  EXPECT_NE(bad_secret.error().message.find("channel ops.secret"), std::string::npos)
      << bad_secret.error().message;
  for (const char* padded : {"whsec_YWI=", "whsec_YQ==", "whsec_YWJj"}) {
    EXPECT_TRUE(ParseChannel(json{{"name", "ok"}, {"type", "webhook"}, {"url", "https://x"},
                                  {"secret", padded}})
                    .has_value())
        << padded;
  }
}

TEST(ChannelTest, CredentialsInAUrlAreRedacted) {
  auto hook = ParseChannel(json::parse(
      R"({"name":"ops","type":"webhook","url":"https://u:pw@example.com/h","secret":"whsec_YWJj"})"));
  ASSERT_TRUE(hook.has_value());
  EXPECT_EQ(ToJson(*hook)["url"], "https://***@example.com/h");
}

TEST(AlertEventTest, JsonRoundTrip) {
  AlertEvent e;
  e.id = "alrt_1";
  e.incident_id = "alrt_1";
  e.kind = "firing";
  e.rule_id = "mon_1";
  e.rule_name = "n";
  e.metric = "cost";
  e.scope = "model";
  e.scope_key = "gpt-4o";
  e.condition = "above";
  e.value = 1.25;
  e.threshold = 1;
  e.requests = 3;
  e.window_seconds = 300;
  e.at_us = 42;
  e.channels = {"a"};
  e.summary = "s";
  auto back = AlertEvent::FromJson(e.ToJson());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->ToJson(), e.ToJson());
  EXPECT_FALSE(AlertEvent::FromJson(json::object()).has_value());
}

}  // namespace
}  // namespace kvgate::telemetry::alerts
