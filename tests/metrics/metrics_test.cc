#include "telemetry/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace kvgate::telemetry {
namespace {

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(MetricsRegistryTest, CounterExposesHelpTypeAndLabels) {
  MetricsRegistry registry;
  auto family = registry.AddCounter("demo_requests_total", "Requests.", {"model", "status"});
  ASSERT_TRUE(family.has_value()) << family.error().ToString();
  (*family)->WithLabels({"gpt-4o", "ok"})->Inc(3);
  (*family)->WithLabels({"gpt-4o", "ok"})->Inc();
  const std::string text = registry.Expose();
  EXPECT_EQ(text,
            "# HELP demo_requests_total Requests.\n"
            "# TYPE demo_requests_total counter\n"
            "demo_requests_total{model=\"gpt-4o\",status=\"ok\"} 4\n");
}

TEST(MetricsRegistryTest, LabelValuesAreEscaped) {
  MetricsRegistry registry;
  auto family = registry.AddGauge("demo_gauge", "Help with \\ and\nnewline.", {"path"});
  ASSERT_TRUE(family.has_value());
  (*family)->WithLabels({"a\\b\"c\nd"})->Set(1.5);
  const std::string text = registry.Expose();
  EXPECT_TRUE(Contains(text, "# HELP demo_gauge Help with \\\\ and\\nnewline.\n")) << text;
  EXPECT_TRUE(Contains(text, "demo_gauge{path=\"a\\\\b\\\"c\\nd\"} 1.5\n")) << text;
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  MetricsRegistry registry;
  auto family = registry.AddHistogram("demo_seconds", "Durations.", {"m"}, {0.1, 1, 10});
  ASSERT_TRUE(family.has_value());
  Histogram* h = (*family)->WithLabels({"x"});
  h->Observe(0.05);
  h->Observe(0.1);  // upper bounds are inclusive
  h->Observe(0.5);
  h->Observe(100);
  const std::string text = registry.Expose();
  EXPECT_TRUE(Contains(text, "# TYPE demo_seconds histogram\n"));
  EXPECT_TRUE(Contains(text, "demo_seconds_bucket{m=\"x\",le=\"0.1\"} 2\n")) << text;
  EXPECT_TRUE(Contains(text, "demo_seconds_bucket{m=\"x\",le=\"1\"} 3\n")) << text;
  EXPECT_TRUE(Contains(text, "demo_seconds_bucket{m=\"x\",le=\"10\"} 3\n")) << text;
  EXPECT_TRUE(Contains(text, "demo_seconds_bucket{m=\"x\",le=\"+Inf\"} 4\n")) << text;
  EXPECT_TRUE(Contains(text, "demo_seconds_sum{m=\"x\"} 100.65\n")) << text;
  EXPECT_TRUE(Contains(text, "demo_seconds_count{m=\"x\"} 4\n")) << text;
}

TEST(MetricsRegistryTest, UnlabelledSeriesHaveNoBraces) {
  MetricsRegistry registry;
  auto c = registry.AddCounter("plain_total", "P.", {});
  ASSERT_TRUE(c.has_value());
  (*c)->WithLabels({})->Inc(7);
  EXPECT_TRUE(Contains(registry.Expose(), "\nplain_total 7\n"));
}

TEST(MetricsRegistryTest, DecimalCounterIsExactFixedPoint) {
  MetricsRegistry registry;
  auto c = registry.AddCounter("money_usd_total", "Money.", {"k"}, 12);
  ASSERT_TRUE(c.has_value());
  (*c)->WithLabels({"a"})->Inc(1'500'000'000'000);  // 1.5 USD
  (*c)->WithLabels({"b"})->Inc(75);                 // 75 pico-USD
  (*c)->WithLabels({"c"})->Inc(3'000'000'000'000);  // 3 USD, no trailing ".0"
  const std::string text = registry.Expose();
  EXPECT_TRUE(Contains(text, "money_usd_total{k=\"a\"} 1.5\n")) << text;
  EXPECT_TRUE(Contains(text, "money_usd_total{k=\"b\"} 0.000000000075\n")) << text;
  EXPECT_TRUE(Contains(text, "money_usd_total{k=\"c\"} 3\n")) << text;
}

TEST(MetricsRegistryTest, RejectsInvalidRegistrations) {
  MetricsRegistry registry;
  EXPECT_FALSE(registry.AddCounter("no_suffix", "x", {}).has_value());
  EXPECT_FALSE(registry.AddCounter("9bad_total", "x", {}).has_value());
  EXPECT_FALSE(registry.AddGauge("g", "x", {"__reserved"}).has_value());
  EXPECT_FALSE(registry.AddGauge("g2", "x", {"a", "a"}).has_value());
  EXPECT_FALSE(registry.AddGauge("g3", "x", {"bad-name"}).has_value());
  EXPECT_FALSE(registry.AddHistogram("h", "x", {"le"}, {1}).has_value());
  EXPECT_FALSE(registry.AddHistogram("h", "x", {}, {2, 1}).has_value());
  EXPECT_FALSE(registry.AddHistogram("h", "x", {}, {}).has_value());
  ASSERT_TRUE(registry.AddGauge("dup", "x", {}).has_value());
  auto again = registry.AddCounter("dup", "x", {});
  EXPECT_FALSE(again.has_value());
  auto again_gauge = registry.AddGauge("dup", "x", {});
  ASSERT_FALSE(again_gauge.has_value());
  EXPECT_EQ(again_gauge.error().code, ErrorCode::kInvalidArgument);
}

TEST(MetricsRegistryTest, WrongLabelCountReturnsNull) {
  MetricsRegistry registry;
  auto c = registry.AddCounter("x_total", "x", {"a", "b"});
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ((*c)->WithLabels({"only-one"}), nullptr);
  EXPECT_NE((*c)->WithLabels({"1", "2"}), nullptr);
  EXPECT_EQ((*c)->WithLabels({"1", "2"}), (*c)->WithLabels({"1", "2"}));
}

TEST(MetricsRegistryTest, SectionsAreAppendedAfterFamilies) {
  MetricsRegistry registry;
  ASSERT_TRUE(registry.AddGauge("first", "f", {}).has_value());
  registry.AddSection([](std::string& out) {
    out += "# HELP engine_x X.\n# TYPE engine_x gauge\nengine_x 2";  // no trailing newline
  });
  const std::string text = registry.Expose();
  EXPECT_TRUE(text.ends_with("engine_x 2\n")) << text;
}

TEST(MetricsRegistryTest, ConcurrentIncrementsAreNotLost) {
  MetricsRegistry registry;
  auto c = registry.AddCounter("race_total", "r", {"t"});
  auto h = registry.AddHistogram("race_seconds", "r", {"t"}, {1});
  ASSERT_TRUE(c.has_value() && h.has_value());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10'000; ++i) {
        (*c)->WithLabels({std::to_string(t % 2)})->Inc();
        (*h)->WithLabels({"x"})->Observe(0.5);
        if (i % 1000 == 0) (void)registry.Expose();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ((*c)->WithLabels({"0"})->Value() + (*c)->WithLabels({"1"})->Value(), 80'000u);
  EXPECT_EQ((*h)->WithLabels({"x"})->CumulativeCounts().back(), 80'000u);
}

RequestRecord SampleRecord() {
  RequestRecord r;
  r.model = "gpt-4o";
  r.provider = "openai";
  r.status = "ok";
  r.endpoint = "chat.completions";
  r.http_status = 200;
  r.upstream_status = 200;
  r.latency_us = 1'200'000;
  r.ttft_us = 300'000;
  r.usage.cache_read = 1024;
  r.usage.cache_write_5m = 0;
  r.usage.cache_write_1h = 0;
  r.usage.cache_write_no_ttl = 0;
  r.usage.uncached = 1024;
  r.usage.output = 100;
  r.cost.priced = true;
  r.cost.complete = true;
  r.cost.total = 2'500'000'000;  // 0.0025 USD
  return r;
}

TEST(GatewayMetricsTest, ObserveUpdatesEveryFamily) {
  MetricsRegistry registry;
  auto metrics = GatewayMetrics::Create(registry);
  ASSERT_TRUE(metrics.has_value()) << metrics.error().ToString();
  RequestRecord r = SampleRecord();
  (*metrics)->Observe(r);
  RequestRecord second = SampleRecord();
  second.usage.cache_read = 0;  // ratio is cumulative: 1024 / (2048 + 1024)
  second.usage.uncached = 1024;
  second.endpoint = "responses";
  (*metrics)->Observe(second);
  RequestRecord failed = SampleRecord();
  failed.status = "upstream_error";
  failed.upstream_status = 503;
  failed.usage = Usage{};  // nothing known: no tokens, no ratio change
  failed.cost = Cost{};
  failed.ttft_us.reset();
  (*metrics)->Observe(failed);
  RequestRecord timeout = failed;
  timeout.status = "timeout";
  timeout.upstream_status = 0;
  (*metrics)->Observe(timeout);
  (*metrics)->ObserveAlertDelivery("slack", "delivered");

  const std::string text = registry.Expose();
  const std::string mp = "model=\"gpt-4o\",target=\"gpt-4o\",provider=\"openai\"";
  EXPECT_TRUE(Contains(text, "kvgate_requests_total{" + mp + ",status=\"ok\"} 2\n")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_requests_total{" + mp + ",status=\"upstream_error\"} 1\n"));
  // The endpoint each request came to (SampleRecord's is chat.completions).
  EXPECT_TRUE(Contains(text, "kvgate_endpoint_requests_total{endpoint=\"chat.completions\","
                             "status=\"ok\"} 1\n")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_endpoint_requests_total{endpoint=\"responses\","
                             "status=\"ok\"} 1\n")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_tokens_total{" + mp + ",kind=\"cache_read\"} 1024\n"));
  EXPECT_TRUE(Contains(text, "kvgate_tokens_total{" + mp + ",kind=\"uncached\"} 2048\n"));
  EXPECT_TRUE(Contains(text, "kvgate_tokens_total{" + mp + ",kind=\"output\"} 200\n"));
  // Zero counts add nothing, and no series is created for them.
  EXPECT_FALSE(Contains(text, "kind=\"cache_write\"")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_cost_usd_total{" + mp + "} 0.005\n")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_request_duration_seconds_count{" + mp + "} 4\n"));
  EXPECT_TRUE(Contains(text, "kvgate_request_duration_seconds_bucket{" + mp + ",le=\"1\"} 0\n"));
  EXPECT_TRUE(Contains(text, "kvgate_request_duration_seconds_bucket{" + mp + ",le=\"2.5\"} 4\n"));
  EXPECT_TRUE(Contains(text, "kvgate_time_to_first_token_seconds_count{" + mp + "} 2\n"));
  EXPECT_TRUE(Contains(text, "kvgate_cache_hit_ratio{" + mp + "} 0.3333333333333333\n")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_upstream_errors_total{provider=\"openai\",code=\"503\"} 1\n"))
      << text;
  EXPECT_TRUE(
      Contains(text, "kvgate_upstream_errors_total{provider=\"openai\",code=\"timeout\"} 1\n"))
      << text;
  EXPECT_TRUE(
      Contains(text, "kvgate_alert_deliveries_total{channel=\"slack\",outcome=\"delivered\"} 1\n"));
}

TEST(GatewayMetricsTest, DiagnosedMissesAndSavingsAreCountedByCause) {
  MetricsRegistry registry;
  auto metrics = GatewayMetrics::Create(registry);
  ASSERT_TRUE(metrics.has_value());
  RequestRecord expired = SampleRecord();
  expired.cache_diagnosis = {{"cause", "expired"}, {"detail", "idle"}};
  expired.cost.missed = 1'500'000'000;  // 0.0015 USD
  expired.cost.saved = 250'000'000;     // 0.00025 USD
  (*metrics)->Observe(expired);
  (*metrics)->Observe(expired);
  RequestRecord changed = SampleRecord();
  changed.cache_diagnosis = {{"cause", "prompt_changed"}};
  changed.cost.missed = 7;
  changed.cost.saved = -40;  // writes cost more than reads saved: adds nothing
  (*metrics)->Observe(changed);
  RequestRecord below = SampleRecord();
  below.cache_diagnosis = {{"cause", "below_minimum"}};
  (*metrics)->Observe(below);
  RequestRecord odd = SampleRecord();
  odd.cache_diagnosis = {{"cause", "no_such_cause"}};  // not one of kvgate's: no series
  odd.cost.missed = 99;
  (*metrics)->Observe(odd);

  const std::string text = registry.Expose();
  const std::string mtp = "model=\"gpt-4o\",target=\"gpt-4o\",provider=\"openai\"";
  EXPECT_TRUE(Contains(text, "kvgate_cache_misses_total{" + mtp + ",cause=\"expired\"} 2\n"))
      << text;
  EXPECT_TRUE(Contains(text, "kvgate_cache_misses_total{" + mtp + ",cause=\"prompt_changed\"} 1\n"));
  EXPECT_TRUE(Contains(text, "kvgate_cache_misses_total{" + mtp + ",cause=\"below_minimum\"} 1\n"));
  EXPECT_FALSE(Contains(text, "no_such_cause")) << text;
  EXPECT_TRUE(
      Contains(text, "kvgate_cache_miss_cost_usd_total{" + mtp + ",cause=\"expired\"} 0.003\n"))
      << text;
  EXPECT_TRUE(Contains(text, "kvgate_cache_miss_cost_usd_total{" + mtp +
                                 ",cause=\"prompt_changed\"} 0.000000000007\n"))
      << text;
  EXPECT_TRUE(Contains(text, "kvgate_cache_saved_usd_total{" + mtp + "} 0.0005\n")) << text;
}

TEST(GatewayMetricsTest, ScopeSeriesExistAtZeroAndBoundTheLabels) {
  MetricsRegistry registry;
  MetricsScope scope;
  scope.routes = {{"gpt-4o", "gpt-4o", "openai"},
                  {"claude", "claude", "anthropic"},
                  {"chain", "gpt-4o", "openai"},
                  {"chain", "claude", "anthropic"}};
  auto metrics = GatewayMetrics::Create(registry, scope);
  ASSERT_TRUE(metrics.has_value());
  std::string text = registry.Expose();
  for (const char* route : {"model=\"gpt-4o\",target=\"gpt-4o\",provider=\"openai\"",
                            "model=\"chain\",target=\"claude\",provider=\"anthropic\""}) {
    const std::string r = route;
    EXPECT_TRUE(Contains(text, "kvgate_requests_total{" + r + ",status=\"ok\"} 0\n")) << text;
    for (const char* kind : {"cache_read", "cache_write", "uncached", "output"}) {
      EXPECT_TRUE(Contains(text, "kvgate_tokens_total{" + r + ",kind=\"" + kind + "\"} 0\n"));
      EXPECT_TRUE(
          Contains(text, "kvgate_tokens_unreported_total{" + r + ",kind=\"" + kind + "\"} 0\n"));
    }
    EXPECT_TRUE(Contains(text, "kvgate_cost_usd_total{" + r + "} 0\n"));
    EXPECT_TRUE(Contains(text, "kvgate_cache_saved_usd_total{" + r + "} 0\n"));
    for (std::string_view cause : kMissCauses) {
      const std::string c(cause);
      EXPECT_TRUE(Contains(text, "kvgate_cache_misses_total{" + r + ",cause=\"" + c + "\"} 0\n"));
      EXPECT_TRUE(
          Contains(text, "kvgate_cache_miss_cost_usd_total{" + r + ",cause=\"" + c + "\"} 0\n"));
    }
    EXPECT_TRUE(Contains(text, "kvgate_request_duration_seconds_count{" + r + "} 0\n"));
    EXPECT_TRUE(Contains(text, "kvgate_time_to_first_token_seconds_count{" + r + "} 0\n"));
  }
  // No route the config cannot take.
  EXPECT_FALSE(Contains(text, "model=\"gpt-4o\",target=\"claude\"")) << text;

  // A routed turn: the router's name as model, the model that served it as target.
  RequestRecord routed = SampleRecord();
  routed.model = "chain";
  routed.target = "claude";
  routed.provider = "anthropic";
  (*metrics)->Observe(routed);
  // A name outside the scope (a dated alias a provider resolved, say) collapses to "other".
  RequestRecord alias = SampleRecord();
  alias.model = "gpt-4o-2024-08-06";
  alias.target = "gpt-4o-2024-08-06";
  (*metrics)->Observe(alias);
  text = registry.Expose();
  EXPECT_TRUE(Contains(text, "kvgate_requests_total{model=\"chain\",target=\"claude\","
                             "provider=\"anthropic\",status=\"ok\"} 1\n"))
      << text;
  EXPECT_TRUE(Contains(text, "kvgate_tokens_total{model=\"chain\",target=\"claude\","
                             "provider=\"anthropic\",kind=\"cache_read\"} 1024\n"));
  EXPECT_TRUE(Contains(text, "kvgate_requests_total{model=\"other\",target=\"other\","
                             "provider=\"openai\",status=\"ok\"} 1\n"))
      << text;
  EXPECT_FALSE(Contains(text, "2024-08-06")) << text;
}

TEST(GatewayMetricsTest, UnreportedCountsAreCountedApartFromZero) {
  MetricsRegistry registry;
  auto metrics = GatewayMetrics::Create(registry);
  ASSERT_TRUE(metrics.has_value());
  RequestRecord r = SampleRecord();
  r.usage.cache_read.reset();      // vLLM without prompt_tokens_details: unknown
  r.usage.cache_write_1h.reset();  // one write part unknown: the writes are unknown
  r.usage.uncached = 0;            // known zero: not unreported
  (*metrics)->Observe(r);
  RequestRecord failed = SampleRecord();
  failed.status = "upstream_error";
  failed.usage = Usage{};  // a failed request reports nothing: not a turn with unknown usage
  (*metrics)->Observe(failed);
  const std::string text = registry.Expose();
  const std::string mtp = "model=\"gpt-4o\",target=\"gpt-4o\",provider=\"openai\"";
  EXPECT_TRUE(
      Contains(text, "kvgate_tokens_unreported_total{" + mtp + ",kind=\"cache_read\"} 1\n"))
      << text;
  EXPECT_TRUE(
      Contains(text, "kvgate_tokens_unreported_total{" + mtp + ",kind=\"cache_write\"} 1\n"));
  EXPECT_FALSE(Contains(text, "kvgate_tokens_unreported_total{" + mtp + ",kind=\"uncached\"}"));
  EXPECT_FALSE(Contains(text, "kvgate_tokens_unreported_total{" + mtp + ",kind=\"output\"}"));
  EXPECT_FALSE(Contains(text, "kvgate_tokens_total{" + mtp + ",kind=\"cache_read\"}"));
}

TEST(GatewayMetricsTest, CreateTwiceOnOneRegistryFails) {
  MetricsRegistry registry;
  ASSERT_TRUE(GatewayMetrics::Create(registry).has_value());
  EXPECT_FALSE(GatewayMetrics::Create(registry).has_value());
}

TEST(OpenMetricsTest, ExemplarsNameTheTraceAndCountersDropTotal) {
  MetricsRegistry registry;
  auto metrics = GatewayMetrics::Create(registry);
  ASSERT_TRUE(metrics.has_value());
  RequestRecord traced = SampleRecord();  // 1.2 s, TTFT 0.3 s
  traced.request_id = "req_0123abcd";
  traced.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  (*metrics)->Observe(traced);
  RequestRecord untraced = SampleRecord();
  untraced.request_id = "req_00ff11ee";
  untraced.latency_us = 40'000;  // the 0.05 bucket
  (*metrics)->Observe(untraced);
  registry.AddSection([](std::string& out) {
    out += "# HELP engine_things_total Things \"quoted\".\n# TYPE engine_things_total counter\n"
           "engine_things_total 3\n# HELP odd_counter No suffix.\n# TYPE odd_counter counter\n"
           "odd_counter 1\n";
  });

  const std::string om = registry.Expose(ExpositionFormat::kOpenMetrics);
  const std::string mtp = "model=\"gpt-4o\",target=\"gpt-4o\",provider=\"openai\"";
  EXPECT_TRUE(Contains(om, "kvgate_request_duration_seconds_bucket{" + mtp +
                               ",le=\"2.5\"} 2 # {trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\"} "
                               "1.2\n"))
      << om;
  // Without a traceparent, the request id's hex.
  EXPECT_TRUE(Contains(om, "kvgate_request_duration_seconds_bucket{" + mtp +
                               ",le=\"0.05\"} 1 # {trace_id=\"00ff11ee\"} 0.04\n"))
      << om;
  EXPECT_TRUE(Contains(om, "# TYPE kvgate_requests counter\n")) << om;
  EXPECT_TRUE(Contains(om, "# HELP kvgate_requests Requests handled")) << om;
  EXPECT_TRUE(Contains(om, "kvgate_requests_total{" + mtp + ",status=\"ok\"} 2\n")) << om;
  EXPECT_TRUE(Contains(om, "# HELP engine_things Things \\\"quoted\\\".\n# TYPE engine_things "
                           "counter\nengine_things_total 3\n"))
      << om;
  EXPECT_TRUE(Contains(om, "# TYPE odd_counter unknown\n")) << om;
  EXPECT_TRUE(om.ends_with("odd_counter 1\n# EOF\n")) << om;
  // The text format is unchanged: no exemplars, no EOF, counter families with _total.
  const std::string text = registry.Expose();
  EXPECT_FALSE(Contains(text, "trace_id")) << text;
  EXPECT_FALSE(Contains(text, "# EOF")) << text;
  EXPECT_TRUE(Contains(text, "# TYPE kvgate_requests_total counter\n")) << text;
}

TEST(OpenMetricsTest, AcceptHeaderPicksTheFormat) {
  EXPECT_EQ(NegotiateExposition(""), ExpositionFormat::kText);
  EXPECT_EQ(NegotiateExposition("text/plain"), ExpositionFormat::kText);
  EXPECT_EQ(NegotiateExposition("*/*"), ExpositionFormat::kText);
  // What Prometheus 2.x sends.
  EXPECT_EQ(NegotiateExposition("application/openmetrics-text;version=1.0.0,application/"
                                "openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;"
                                "q=0.5,*/*;q=0.1"),
            ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(NegotiateExposition("text/plain;q=0.9, application/openmetrics-text; q=0.5"),
            ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(NegotiateExposition("application/openmetrics-text;q=0"), ExpositionFormat::kText);
  EXPECT_EQ(NegotiateExposition("application/openmetrics-textual"), ExpositionFormat::kText);
}

// promtool is the reference parser for the exposition format; CI installs it (scripts/setup.sh).
TEST(PromtoolTest, ExpositionPassesPromtoolCheckMetrics) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not found on PATH (Debian package 'prometheus'); "
                    "exposition not validated by the reference parser";
  }
  MetricsRegistry registry;
  MetricsScope scope;
  scope.routes = {{"we\"ird\\model\nname", "we\"ird\\model\nname", "openai"},
                  {"gpt-4o", "gpt-4o", "openai"}};
  auto metrics = GatewayMetrics::Create(registry, scope);
  ASSERT_TRUE(metrics.has_value());
  RequestRecord r = SampleRecord();
  r.model = "we\"ird\\model\nname";
  r.cache_diagnosis = {{"cause", "expired"}};
  r.cost.missed = 12'345;
  (*metrics)->Observe(r);
  (*metrics)->Observe(SampleRecord());
  (*metrics)->ObserveAlertDelivery("webhook", "failed");
  registry.AddSection([](std::string& out) {
    out += "# HELP engine_kv_cache_usage_perc KV cache usage.\n";
    out += "# TYPE engine_kv_cache_usage_perc gauge\n";
    out += "engine_kv_cache_usage_perc 0.25\n";
  });
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvgate_metrics_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "metrics.prom";
  {
    std::ofstream out(file);
    out << registry.Expose();
  }
  const auto log = dir / "promtool.log";
  const std::string cmd =
      "promtool check metrics < '" + file.string() + "' > '" + log.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << "promtool output:\n" << output << "\nexposition:\n" << registry.Expose();
  std::filesystem::remove_all(dir);
}

// The promtool test above must be able to fail: a malformed exposition is rejected.
TEST(PromtoolTest, PromtoolRejectsBrokenExposition) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not found on PATH (Debian package 'prometheus')";
  }
  const auto file = std::filesystem::temp_directory_path() /
                    ("kvgate_broken_" + std::to_string(::getpid()) + ".prom");
  {
    std::ofstream out(file);
    out << "# TYPE x counter\nx{a=\"unterminated} 1\n";
  }
  const std::string cmd = "promtool check metrics < '" + file.string() + "' > /dev/null 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace kvgate::telemetry
