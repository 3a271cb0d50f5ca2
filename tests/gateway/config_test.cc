#include "gateway/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include "gateway/targets.h"
#include "telemetry/pricing.h"

namespace kvgate::gateway {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

constexpr char kIssueExample[] = R"(
server:   {listen: 127.0.0.1:8080, admin_token: adm, api_keys: [sk-one, sk-two]}
storage:  {sqlite: ./kvgate.db}
providers:
  - {name: openai, type: openai, base_url: https://api.openai.com/v1, api_key: ${OPENAI_API_KEY}}
  - {name: claude, type: anthropic, base_url: https://api.anthropic.com, api_key: ${ANTHROPIC_API_KEY}}
  - {name: ds, type: deepseek, base_url: https://api.deepseek.com/v1/, api_key: ${DEEPSEEK_API_KEY}}
models:
  - {name: gpt-4o-mini, provider: openai, upstream_model: gpt-4o-mini,
     pricing: {input: 0.15, cached_input: 0.075, cache_write_5m: 0, cache_write_1h: 0, output: 0.60}}
  - {name: sonnet, provider: claude, upstream_model: claude-sonnet-4-5}
)";

TEST(ConfigTest, ParsesTheDocumentedShape) {
  auto config = ParseConfig(kIssueExample,
                            FakeEnv({{"OPENAI_API_KEY", "sk-o"}, {"ANTHROPIC_API_KEY", "sk-a"}}));
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->listen_host, "127.0.0.1");
  EXPECT_EQ(config->listen_port, 8080);
  EXPECT_EQ(config->admin_token, "adm");
  ASSERT_EQ(config->api_key_hashes.size(), 2u);
  EXPECT_EQ(config->api_key_hashes[0], HashApiKey("sk-one"));
  EXPECT_NE(config->api_key_hashes[0], "sk-one");  // stored hashed, never in clear
  EXPECT_EQ(config->sqlite_path, "./kvgate.db");
  EXPECT_EQ(config->commit_interval, std::chrono::milliseconds(20));
  ASSERT_EQ(config->providers.size(), 3u);
  EXPECT_EQ(config->providers[0].api_key, "sk-o");
  EXPECT_EQ(config->providers[1].type, "anthropic");
  EXPECT_EQ(config->providers[2].base_url, "https://api.deepseek.com/v1");  // trailing / dropped
  EXPECT_EQ(config->providers[2].api_key, "");  // unset variable -> "" plus a warning
  ASSERT_EQ(config->warnings.size(), 1u);
  EXPECT_NE(config->warnings[0].find("DEEPSEEK_API_KEY"), std::string::npos);
  ASSERT_EQ(config->models.size(), 2u);
  ASSERT_TRUE(config->models[0].pricing.has_value());
  EXPECT_EQ(config->models[0].pricing->base.input, 150'000);        // 0.15 USD/1M exactly
  EXPECT_EQ(config->models[0].pricing->base.cached_input, 75'000);  // 0.075
  EXPECT_EQ(config->models[0].pricing->base.output, 600'000);
  EXPECT_FALSE(config->models[1].pricing.has_value());
  EXPECT_EQ(config->models[1].upstream_model, "claude-sonnet-4-5");
}

TEST(ConfigTest, StorageCommitInterval) {
  auto ok = ParseConfig("storage: {sqlite: /tmp/x.db, commit_interval_ms: 0}\n", FakeEnv({}));
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(ok->commit_interval, std::chrono::milliseconds(0));
  for (const char* bad : {"storage: {commit_interval_ms: -1}\n", "storage: {commit_interval_ms: 10001}\n",
                          "storage: {commit_interval_ms: soon}\n"}) {
    auto r = ParseConfig(bad, FakeEnv({}));
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message.find("storage.commit_interval_ms"), std::string::npos) << r.error().message;
  }
}

TEST(ConfigTest, StorageSharedThreadsIsForPostgres) {
  auto on = ParseConfig("storage: {postgres: \"postgresql://kg@db/kg\"}\n", FakeEnv({}));
  ASSERT_TRUE(on.has_value()) << on.error().message;
  EXPECT_TRUE(on->shared_threads) << "replicas share threads unless told otherwise";
  auto off = ParseConfig("storage: {postgres: \"postgresql://kg@db/kg\", shared_threads: false}\n",
                         FakeEnv({}));
  ASSERT_TRUE(off.has_value()) << off.error().message;
  EXPECT_FALSE(off->shared_threads);
  for (const char* bad : {"storage: {sqlite: /tmp/x.db, shared_threads: true}\n",
                          "storage: {postgres: \"postgresql://kg@db/kg\", shared_threads: maybe}\n"}) {
    auto r = ParseConfig(bad, FakeEnv({}));
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message.find("shared_threads"), std::string::npos) << r.error().message;
  }
}

TEST(ConfigTest, DiagnosisExcerptsAreOnUnlessTurnedOff) {
  auto plain = ParseConfig("storage: {sqlite: /tmp/x.db}\n", FakeEnv({}));
  ASSERT_TRUE(plain.has_value()) << plain.error().message;
  EXPECT_TRUE(plain->diagnosis_excerpts);
  auto off = ParseConfig("diagnosis: {excerpts: false}\n", FakeEnv({}));
  ASSERT_TRUE(off.has_value()) << off.error().message;
  EXPECT_FALSE(off->diagnosis_excerpts);
  for (const char* bad : {"diagnosis: {excerpt: false}\n", "diagnosis: {excerpts: sometimes}\n",
                          "diagnosis: [excerpts]\n"}) {
    auto r = ParseConfig(bad, FakeEnv({}));
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message.find("diagnosis"), std::string::npos) << r.error().message;
  }
}

TEST(ConfigTest, OtlpExportIsOffUnlessConfigured) {
  auto off = ParseConfig("storage: {sqlite: /tmp/x.db}\n", FakeEnv({}));
  ASSERT_TRUE(off.has_value()) << off.error().message;
  EXPECT_FALSE(off->otlp.has_value());
  auto on = ParseConfig(
      "telemetry:\n  otlp: {endpoint: \"http://collector:4318/\", headers: {x-honeycomb-team: "
      "\"${TEAM}\"}, sample_ratio: 0.25, encoding: json, export_interval_s: 30, metrics: false}\n",
      FakeEnv({{"TEAM", "abc"}}));
  ASSERT_TRUE(on.has_value()) << on.error().message;
  ASSERT_TRUE(on->otlp.has_value());
  EXPECT_EQ(on->otlp->endpoint, "http://collector:4318");  // the trailing slash dropped
  ASSERT_EQ(on->otlp->headers.size(), 1u);
  EXPECT_EQ(on->otlp->headers[0].first, "x-honeycomb-team");
  EXPECT_EQ(on->otlp->headers[0].second, "abc");
  EXPECT_DOUBLE_EQ(on->otlp->sample_ratio, 0.25);
  EXPECT_EQ(on->otlp->encoding, telemetry::otlp::Encoding::kJson);
  EXPECT_EQ(on->otlp->export_interval, std::chrono::seconds(30));
  EXPECT_TRUE(on->otlp->traces);
  EXPECT_FALSE(on->otlp->metrics);
  auto defaults = ParseConfig("telemetry: {otlp: {endpoint: http://c:4318}}\n", FakeEnv({}));
  ASSERT_TRUE(defaults.has_value()) << defaults.error().message;
  EXPECT_EQ(defaults->otlp->encoding, telemetry::otlp::Encoding::kProtobuf);
  EXPECT_EQ(defaults->otlp->export_interval, std::chrono::seconds(10));
  EXPECT_DOUBLE_EQ(defaults->otlp->sample_ratio, 1.0);
  for (const char* bad : {"telemetry: {otlp: {endpoint: collector:4318}}\n",
                          "telemetry: {otlp: {}}\n",
                          "telemetry: {otlp: {endpoint: http://c:4318, sample_ratio: 1.5}}\n",
                          "telemetry: {otlp: {endpoint: http://c:4318, encoding: grpc}}\n",
                          "telemetry: {otlp: {endpoint: http://c:4318, export_interval_s: 0}}\n",
                          "telemetry: {otlp: {endpoint: http://c:4318, headers: [a]}}\n",
                          "telemetry: {otlp: {endpoint: http://c:4318, tracez: true}}\n",
                          "telemetry: {otlp: {endpoint: http://c:4318, traces: false, metrics: false}}\n",
                          "telemetry: {otlpx: {}}\n"}) {
    auto r = ParseConfig(bad, FakeEnv({}));
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message.find("telemetry"), std::string::npos) << r.error().message;
  }
}

TEST(ConfigTest, InterpolationDefaultsAndErrors) {
  auto env = FakeEnv({{"A", "1"}});
  EXPECT_EQ(*InterpolateEnv("x${A}y", env), "x1y");
  EXPECT_EQ(*InterpolateEnv("${B:-dflt}", env), "dflt");
  EXPECT_EQ(*InterpolateEnv("$A ${A}", env), "$A 1");
  std::vector<std::string> unset;
  EXPECT_EQ(*InterpolateEnv("[${B}]", env, &unset), "[]");
  EXPECT_EQ(unset, std::vector<std::string>{"B"});
  EXPECT_FALSE(InterpolateEnv("${A", env).has_value());
  EXPECT_FALSE(InterpolateEnv("${1A}", env).has_value());
}

// A value lands escaped inside a quoted scalar (a secret with a quote or a backslash reads back
// as itself), and a commented-out reference is neither replaced nor reported unset.
TEST(ConfigTest, InterpolationRespectsQuotesAndComments) {
  const std::string secret = R"(p"a\s's}, x: #y)";
  auto env = FakeEnv({{"S", secret}, {"A", "1"}});
  std::vector<std::string> unset;
  EXPECT_EQ(*InterpolateEnv("k: \"${S}\"", env), R"(k: "p\"a\\s's}, x: #y")");
  EXPECT_EQ(*InterpolateEnv("k: '${S}'", env), R"(k: 'p"a\s''s}, x: #y')");
  EXPECT_EQ(*InterpolateEnv("k: v # was ${MISSING}\nj: ${A}", env, &unset),
            "k: v # was ${MISSING}\nj: 1");
  EXPECT_TRUE(unset.empty());
  // An apostrophe inside a plain scalar opens nothing; a '#' inside a word is not a comment.
  EXPECT_EQ(*InterpolateEnv("d: don't ${A}, x#${A} # ${MISSING}", env, &unset),
            "d: don't 1, x#1 # ${MISSING}");
  EXPECT_TRUE(unset.empty());
  // Through the whole parser: the quoted secret arrives intact.
  auto config = ParseConfig(
      "# api_key: ${COMMENTED_OUT}\n"
      "server: {admin_token: \"${S}\"}\n"
      "providers:\n  - name: a\n    type: openai\n    base_url: http://x\n    api_key: '${S}'\n"
      "models: [{name: m, provider: a}]\n",
      env, "test.yaml");
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->admin_token, secret);
  ASSERT_EQ(config->providers.size(), 1u);
  EXPECT_EQ(config->providers[0].api_key, secret);
  EXPECT_TRUE(config->warnings.empty()) << config->warnings.front();
}

// Found by fuzz/config_fuzz.cc: a value with a line break read back with a space in its place
// from a single-quoted scalar, and a carriage return or another control character was written
// raw into a double-quoted one.
TEST(ConfigTest, InterpolatedControlCharactersReadBackOrFail) {
  auto env = FakeEnv({{"NL", "a\nb"}, {"CR", std::string("a\rb\x01") + "c\x7f"}});
  EXPECT_EQ(*InterpolateEnv("k: \"${CR}\"", env), "k: \"a\\rb\\x01c\\x7F\"");
  EXPECT_EQ(*InterpolateEnv("k: ${CR}", env), "k: \"a\\rb\\x01c\\x7F\"");
  auto single = InterpolateEnv("k: '${NL}'", env);
  ASSERT_FALSE(single.has_value());
  EXPECT_NE(single.error().message.find("line break"), std::string::npos) << single.error().message;
  auto config = ParseConfig("server: {admin_token: \"${CR}\"}\n", env, "test.yaml");
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->admin_token, std::string("a\rb\x01") + "c\x7f");
}

TEST(ConfigTest, ErrorsNameTheField) {
  auto env = FakeEnv({});
  struct Case {
    const char* yaml;
    const char* expect;
  };
  const Case cases[] = {
      {"server: {listen: nonsense}", "server.listen"},
      {"server: {listen: '127.0.0.1:99999'}", "server.listen"},
      {"providers: [{name: a, type: bogus, base_url: http://x}]", "providers[0].type"},
      {"providers: [{name: a, type: openai, base_url: ftp://x}]", "providers[0].base_url"},
      {"providers: [{name: a, type: openai, base_url: http://x}, {name: a, type: openai, "
       "base_url: http://y}]",
       "duplicate provider"},
      {"models: [{name: m, provider: nope}]", "models[0].provider"},
      {"providers: [{name: a, type: openai, base_url: http://x}]\nmodels: [{name: m, provider: a, "
       "pricing: {input: abc}}]",
       "models[0].pricing.input"},
      {"providers: [{name: a, type: openai, base_url: http://x}]\nmodels: [{name: m, provider: a, "
       "pricing: {inptu: 1}}]",
       "inptu"},
      {"providerz: []", "providerz"},
      {"server: [1, 2", "invalid YAML"},
      {"providers: [{name: l, type: local}]", "model_path"},
      {"pricing: {caching_rules: [1]}", "pricing.caching_rules"},
      {"pricing: {caching_rules: {opeani: {min_cacheable_tokens: 1}}}",
       "pricing.caching_rules.opeani: not a provider type"},
      {"pricing: {caching_rules: {local: {ttl_seconds: 300}}}",
       "pricing.caching_rules.local.ttl_seconds: the built-in engine's cache never expires"},
      // Limits that would silently disable themselves or break every request.
      {"server: {body_limit_bytes: -5}", "server.body_limit_bytes must be > 0"},
      {"server: {body_limit_bytes: 0}", "server.body_limit_bytes must be > 0"},
      {"server: {threads: -1}", "server.threads must be between 0"},
      // A typo must not silently leave the admin API or the gateway open.
      {"server: {admin_tokne: x}", "server: unknown key \"admin_tokne\""},
      {"server: {api_key: [k]}", "server: unknown key \"api_key\""},
      {"storage: {sqllite: x.db}", "storage: unknown key \"sqllite\""},
      {"providers: [{name: a, type: openai, base_url: http://x, apikey: k}]",
       "providers[0]: unknown key \"apikey\""},
      {"models: [{name: m, provider: a, price: {input: 1}}]", "models[0]: unknown key \"price\""},
      {"router: {prefer: cheap}", "unknown top-level section \"router\""},
      {"providers: [{name: l, type: local, model_path: m.gguf, threads: -2}]",
       "providers[0].threads must be between 0"},
      {"providers: [{name: l, type: local, model_path: m.gguf, kv_cache_tokens: -5}]",
       "providers[0].kv_cache_tokens must be >= 0"},
  };
  for (const Case& c : cases) {
    auto config = ParseConfig(c.yaml, env, "test.yaml");
    ASSERT_FALSE(config.has_value()) << c.yaml;
    EXPECT_NE(config.error().message.find(c.expect), std::string::npos)
        << c.yaml << " -> " << config.error().message;
  }
}

// An unquoted reference whose value has YAML syntax in it (a '#' would start a comment, ': ' a
// mapping, ',' or '}' end a flow item) still reads back as exactly that value.
TEST(ConfigTest, UnquotedReferencesKeepValuesWithYamlSyntax) {
  const std::string secret = "pa#ss: w{o}rd, [x] \"q\" 'a' \\ &*!|>%@`";
  auto env = FakeEnv({{"S", secret}, {"H", "example.com"}, {"N", "7"}});
  auto config = ParseConfig(
      "server: {admin_token: ${S}, threads: ${N}}\n"
      "providers:\n"
      "  - {name: a, type: openai, base_url: http://${H}:8080/v1, api_key: ${S}}\n"
      "  - name: b\n    type: openai\n    base_url: http://x\n    api_key: ${S}   # comment\n"
      "models: [{name: m, provider: a}]\n",
      env, "test.yaml");
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->admin_token, secret);
  EXPECT_EQ(config->threads, 7);
  ASSERT_EQ(config->providers.size(), 2u);
  EXPECT_EQ(config->providers[0].api_key, secret);
  EXPECT_EQ(config->providers[1].api_key, secret);
  EXPECT_EQ(config->providers[0].base_url, "http://example.com:8080/v1");
  // Inside a longer unquoted value it cannot be written safely: an error that names the variable
  // (never its value, which may be a secret).
  auto bad = InterpolateEnv("base_url: http://${S}/v1\n", env);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("${S}"), std::string::npos) << bad.error().message;
  EXPECT_EQ(bad.error().message.find("pa#ss"), std::string::npos) << bad.error().message;
}

TEST(ConfigTest, DefaultsFromEnvironment) {
  auto config = DefaultConfig(FakeEnv({{"ANTHROPIC_API_KEY", "sk-a"}}), "/nonexistent/model.gguf");
  EXPECT_EQ(config.listen_host, "127.0.0.1");
  EXPECT_EQ(config.listen_port, 8080);
  EXPECT_EQ(config.sqlite_path, "./kvgate.db");
  ASSERT_EQ(config.providers.size(), 1u);
  EXPECT_EQ(config.providers[0].type, "anthropic");
  EXPECT_EQ(config.providers[0].api_key, "sk-a");
  EXPECT_FALSE(config.models.empty());
  EXPECT_TRUE(ValidateConfig(config).has_value());
  bool warned_model = false;
  for (const auto& w : config.warnings) warned_model |= w.find("bundled model") != std::string::npos;
  EXPECT_TRUE(warned_model);
}

TEST(ConfigTest, LocalProviderDeviceAndMemoryFraction) {
  auto env = FakeEnv({});
  auto config = ParseConfig(R"(
providers:
  - {name: a, type: local, model_path: m.gguf}
  - {name: b, type: local, model_path: m.gguf, device: cuda, gpu_memory_fraction: 0.5}
  - {name: c, type: local, model_path: m.gguf, device: cpu, gpu_memory_fraction: 1}
  - {name: d, type: local, model_path: m.gguf, device: cuda, gpu_memory_fraction: "0.25",
     kv_cache_tokens: 4096, cuda_graphs: true, fp8_gemm: true}
)",
                            env);
  ASSERT_TRUE(config.has_value()) << config.error().message;
  ASSERT_EQ(config->providers.size(), 4u);
  EXPECT_EQ(config->providers[0].device, "cpu");
  EXPECT_DOUBLE_EQ(config->providers[0].gpu_memory_fraction, 0.9);
  EXPECT_EQ(config->providers[1].device, "cuda");
  EXPECT_DOUBLE_EQ(config->providers[1].gpu_memory_fraction, 0.5);
  EXPECT_DOUBLE_EQ(config->providers[2].gpu_memory_fraction, 1.0);
  EXPECT_DOUBLE_EQ(config->providers[3].gpu_memory_fraction, 0.25);
  EXPECT_EQ(config->providers[3].kv_cache_tokens, 4096);
  EXPECT_FALSE(config->providers[1].cuda_graphs) << "cuda graphs are off unless asked for";
  EXPECT_TRUE(config->providers[3].cuda_graphs);
  EXPECT_FALSE(config->providers[1].fp8_gemm) << "fp8 GEMMs are off unless asked for";
  EXPECT_TRUE(config->providers[3].fp8_gemm);

  struct Case {
    const char* yaml;
    const char* expect;
  };
  const Case cases[] = {
      {"providers: [{name: l, type: local, model_path: m, device: gpu}]",
       "providers[0].device must be cpu or cuda"},
      {"providers: [{name: l, type: local, model_path: m, device: CUDA}]", "providers[0].device"},
      {"providers: [{name: l, type: local, model_path: m, gpu_memory_fraction: 0}]",
       "providers[0].gpu_memory_fraction must be in (0, 1], got 0"},
      {"providers: [{name: l, type: local, model_path: m, gpu_memory_fraction: 1.5}]",
       "providers[0].gpu_memory_fraction must be in (0, 1], got 1.5"},
      {"providers: [{name: l, type: local, model_path: m, gpu_memory_fraction: -0.1}]",
       "providers[0].gpu_memory_fraction must be in (0, 1]"},
      {"providers: [{name: l, type: local, model_path: m, gpu_memory_fraction: 90%}]",
       "providers[0].gpu_memory_fraction must be a number"},
      {"providers: [{name: l, type: local, model_path: m, gpu_memory_fraction: [0.5]}]",
       "providers[0].gpu_memory_fraction must be a number"},
      {"providers: [{name: l, type: local, model_path: m, gpu_memory_fraction: nan}]",
       "providers[0].gpu_memory_fraction must be a number"},
      {"providers: [{name: l, type: local, model_path: m, cuda_graphs: true}]",
       "providers[0].cuda_graphs needs device: cuda"},
      {"providers: [{name: l, type: local, model_path: m, device: cuda, cuda_graphs: 1}]",
       "providers[0].cuda_graphs must be true or false"},
      {"providers: [{name: l, type: local, model_path: m, fp8_gemm: true}]",
       "providers[0].fp8_gemm needs device: cuda"},
      {"providers: [{name: l, type: local, model_path: m, device: cuda, fp8_gemm: yes please}]",
       "providers[0].fp8_gemm must be true or false"},
  };
  for (const Case& c : cases) {
    auto bad = ParseConfig(c.yaml, env, "test.yaml");
    ASSERT_FALSE(bad.has_value()) << c.yaml;
    EXPECT_NE(bad.error().message.find(c.expect), std::string::npos)
        << c.yaml << " -> " << bad.error().message;
  }
}

TEST(ConfigTest, LocalProviderKvCacheDtype) {
  auto env = FakeEnv({});
  auto config = ParseConfig(R"(
providers:
  - {name: a, type: local, model_path: m.gguf}
  - {name: b, type: local, model_path: m.gguf, kv_cache_dtype: int8}
  - {name: c, type: local, model_path: m.gguf, kv_cache_dtype: fp8, kv_cache_tokens: 4096}
  - {name: d, type: local, model_path: m.gguf, kv_cache_dtype: bf16}
  - {name: e, type: local, model_path: m.gguf, device: cuda, kv_cache_dtype: f16}
)",
                            env);
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->providers[0].kv_cache_dtype, "f16") << "f16 unless asked for";
  EXPECT_EQ(config->providers[1].kv_cache_dtype, "int8");
  EXPECT_EQ(config->providers[2].kv_cache_dtype, "fp8");
  EXPECT_EQ(config->providers[3].kv_cache_dtype, "bf16");
  EXPECT_EQ(config->providers[4].kv_cache_dtype, "f16");

  struct Case {
    const char* yaml;
    const char* expect;
  };
  const Case cases[] = {
      {"providers: [{name: l, type: local, model_path: m, kv_cache_dtype: int4}]",
       "providers[0].kv_cache_dtype must be one of f16, bf16, int8, fp8 (got 'int4')"},
      {"providers: [{name: l, type: local, model_path: m, kv_cache_dtype: INT8}]",
       "providers[0].kv_cache_dtype must be one of f16, bf16, int8, fp8 (got 'INT8')"},
      {"providers: [{name: l, type: local, model_path: m, kv_cache_dtype: ''}]",
       "providers[0].kv_cache_dtype must be one of f16, bf16, int8, fp8 (got '')"},
      {"providers: [{name: l, type: local, model_path: m, kv_cache_dtype: [int8]}]",
       "providers[0].kv_cache_dtype"},
      {"providers: [{name: l, type: local, model_path: m, device: cuda, kv_cache_dtype: int8}]",
       "providers[0].kv_cache_dtype int8 needs device: cpu"},
      {"providers: [{name: o, type: openai, base_url: 'https://x', kv_cache_dtype: int8}]",
       "providers[0].kv_cache_dtype is only for type local"},
  };
  for (const Case& c : cases) {
    auto bad = ParseConfig(c.yaml, env, "test.yaml");
    ASSERT_FALSE(bad.has_value()) << c.yaml;
    EXPECT_NE(bad.error().message.find(c.expect), std::string::npos)
        << c.yaml << " -> " << bad.error().message;
  }
}

TEST(ConfigTest, CacheHelpers) {
  auto env = FakeEnv({});
  auto config = ParseConfig(R"(
providers:
  - {name: o, type: openai, base_url: 'https://api.openai.com/v1', prompt_cache_key: thread}
  - {name: a, type: anthropic, base_url: 'https://api.anthropic.com', anthropic_auto_cache: true}
  - {name: h, type: anthropic, base_url: 'https://api.anthropic.com', anthropic_auto_cache: 1h}
  - {name: t, type: anthropic, base_url: 'https://api.anthropic.com', anthropic_auto_cache: {ttl: 1h}}
  - {name: d, type: anthropic, base_url: 'https://api.anthropic.com', anthropic_auto_cache: {}}
  - {name: off, type: openai, base_url: 'https://api.openai.com/v1', prompt_cache_key: false}
)",
                            env);
  ASSERT_TRUE(config.has_value()) << config.error().message;
  const auto& p = config->providers;
  EXPECT_TRUE(p[0].prompt_cache_key_thread);
  EXPECT_EQ(p[0].anthropic_auto_cache_ttl, "");
  EXPECT_EQ(p[1].anthropic_auto_cache_ttl, "5m");
  EXPECT_EQ(p[2].anthropic_auto_cache_ttl, "1h");
  EXPECT_EQ(p[3].anthropic_auto_cache_ttl, "1h");
  EXPECT_EQ(p[4].anthropic_auto_cache_ttl, "5m");
  EXPECT_FALSE(p[5].prompt_cache_key_thread);
  EXPECT_FALSE(p[1].prompt_cache_key_thread) << "off unless asked for";

  const std::pair<const char*, const char*> cases[] = {
      {"providers: [{name: o, type: openai, base_url: 'https://x', prompt_cache_key: user}]",
       "providers[0].prompt_cache_key must be thread (or false: off)"},
      {"providers: [{name: o, type: deepseek, base_url: 'https://x', prompt_cache_key: thread}]",
       "providers[0].prompt_cache_key is OpenAI's parameter: only for type openai"},
      {"providers: [{name: a, type: anthropic, base_url: 'https://x', anthropic_auto_cache: 2h}]",
       "providers[0].anthropic_auto_cache must be true, false, 5m, 1h or {ttl: 5m | 1h}"},
      {"providers: [{name: a, type: anthropic, base_url: 'https://x',"
       " anthropic_auto_cache: {ttl: 5m, at: end}}]",
       "providers[0].anthropic_auto_cache: unknown key \"at\" (known: ttl)"},
      {"providers: [{name: o, type: openai, base_url: 'https://x', anthropic_auto_cache: true}]",
       "providers[0].anthropic_auto_cache is only for type anthropic"},
      {"providers: [{name: a, type: anthropic, base_url: 'https://x',"
       " anthropic_cache_diagnostics: yes please}]",
       "providers[0].anthropic_cache_diagnostics must be true or false"},
      {"providers: [{name: o, type: openai, base_url: 'https://x',"
       " anthropic_cache_diagnostics: true}]",
       "providers[0].anthropic_cache_diagnostics is only for type anthropic"},
  };
  for (const auto& [yaml, expect] : cases) {
    auto bad = ParseConfig(yaml, env, "test.yaml");
    ASSERT_FALSE(bad.has_value()) << yaml;
    EXPECT_NE(bad.error().message.find(expect), std::string::npos)
        << yaml << " -> " << bad.error().message;
  }
}

TEST(ConfigTest, LocalProviderOffloadTier) {
  auto env = FakeEnv({});
  auto config = ParseConfig(R"(
providers:
  - {name: a, type: local, model_path: m.gguf, offload: {disk: /var/tmp/kv.tier, bytes: 1073741824}}
  - {name: b, type: local, model_path: m.gguf}
  - {name: c, type: local, model_path: m.gguf, device: cuda, offload: {host_bytes: 8589934592}}
)",
                            env);
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->providers[2].offload_host_bytes, 8589934592) << "a host tier on any device";
  EXPECT_EQ(config->providers[2].offload_disk, "");
  EXPECT_EQ(config->providers[0].offload_host_bytes, 0);
  EXPECT_EQ(config->providers[0].offload_disk, "/var/tmp/kv.tier");
  EXPECT_EQ(config->providers[0].offload_bytes, 1073741824);
  EXPECT_EQ(config->providers[1].offload_disk, "") << "no tier unless asked for";
  EXPECT_EQ(config->providers[1].offload_bytes, 0);

  struct Case {
    const char* yaml;
    const char* expect;
  };
  const Case cases[] = {
      {"providers: [{name: l, type: local, model_path: m, offload: /tmp/kv}]",
       "providers[0].offload must be a mapping {disk: PATH, bytes: N}"},
      {"providers: [{name: l, type: local, model_path: m, offload: {bytes: 100}}]",
       "providers[0].offload.disk is required"},
      {"providers: [{name: l, type: local, model_path: m, offload: {disk: '', bytes: 100}}]",
       "providers[0].offload.disk is required"},
      {"providers: [{name: l, type: local, model_path: m, offload: {disk: [a], bytes: 100}}]",
       "providers[0].offload.disk is required"},
      {"providers: [{name: l, type: local, model_path: m, offload: {disk: /tmp/kv}}]",
       "providers[0].offload.bytes is required"},
      {"providers: [{name: l, type: local, model_path: m, offload: {disk: /tmp/kv, bytes: 0}}]",
       "providers[0].offload.bytes is required: the tier's size in bytes, a positive integer"},
      {"providers: [{name: l, type: local, model_path: m, offload: {disk: /tmp/kv, bytes: -1}}]",
       "providers[0].offload.bytes"},
      {"providers: [{name: l, type: local, model_path: m, offload: {disk: /tmp/kv, bytes: 1GB}}]",
       "providers[0].offload.bytes"},
      {"providers: [{name: l, type: local, model_path: m, offload: {disk: /tmp/kv, bytes: 1.5}}]",
       "providers[0].offload.bytes"},
      {"providers: [{name: l, type: local, model_path: m,"
       " offload: {disk: /tmp/kv, bytes: 100, size: 3}}]",
       "providers[0].offload: unknown key \"size\" (known: disk, bytes, host_bytes)"},
      {"providers: [{name: l, type: local, model_path: m, device: cuda,"
       " offload: {disk: /tmp/kv, bytes: 100}}]",
       "providers[0].offload (the disk tier) needs device: cpu"},
      {"providers: [{name: o, type: openai, base_url: 'https://x', offload: {disk: /tmp/kv, bytes: 1}}]",
       "providers[0].offload is only for type local"},
      {"providers: [{name: o, type: openai, base_url: 'https://x', offload: {host_bytes: 1}}]",
       "providers[0].offload is only for type local"},
      {"providers: [{name: l, type: local, model_path: m, offload: {host_bytes: 0}}]",
       "providers[0].offload.host_bytes must be the tier's size in bytes, a positive integer"},
      {"providers: [{name: l, type: local, model_path: m, offload: {host_bytes: 8GB}}]",
       "providers[0].offload.host_bytes must be"},
      {"providers: [{name: l, type: local, model_path: m,"
       " offload: {disk: /tmp/kv, bytes: 100, host_bytes: 100}}]",
       "providers[0].offload: give disk and bytes (a file) or host_bytes (host memory), not both"},
  };
  for (const Case& c : cases) {
    auto bad = ParseConfig(c.yaml, env, "test.yaml");
    ASSERT_FALSE(bad.has_value()) << c.yaml;
    EXPECT_NE(bad.error().message.find(c.expect), std::string::npos)
        << c.yaml << " -> " << bad.error().message;
  }
}

}  // namespace
TEST(ConfigTest, PricingAsAComparisonModel) {
  const std::string yaml = R"(
providers:
  - {name: local, type: local, model_path: /nonexistent.gguf}
models:
  - {name: smollm2, provider: local, pricing: {as: gpt-4o-mini}}
)";
  auto config = ParseConfig(yaml, FakeEnv({}));
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->models[0].price_as, "gpt-4o-mini");
  EXPECT_FALSE(config->models[0].pricing.has_value());
  auto targets = BuildTargets(*config, telemetry::PriceCatalog::BuiltIn(), nullptr);
  ASSERT_TRUE(targets.has_value()) << targets.error().ToString();
  const auto mini = telemetry::PriceCatalog::BuiltIn().Find("gpt-4o-mini");
  ASSERT_TRUE(mini.has_value());
  ASSERT_TRUE((*targets)[0].price.has_value());
  EXPECT_EQ((*targets)[0].price->base.input, mini->base.input);
  EXPECT_EQ((*targets)[0].price->base.cached_input, mini->base.cached_input);
  EXPECT_EQ((*targets)[0].price_as, "gpt-4o-mini");

  // `as` stands alone, names a string, and must be in the catalog.
  for (const char* bad : {"{as: gpt-4o-mini, input: 1}", "{as: 3}", "{as: ''}"}) {
    auto parsed = ParseConfig(std::string(R"(
providers: [{name: local, type: local, model_path: /nonexistent.gguf}]
models: [{name: smollm2, provider: local, pricing: )") + bad + "}]\n",
                              FakeEnv({}));
    ASSERT_FALSE(parsed.has_value()) << bad;
    EXPECT_NE(parsed.error().message.find("models[0].pricing.as"), std::string::npos)
        << parsed.error().message;
  }
  auto unknown = ParseConfig(R"(
providers: [{name: local, type: local, model_path: /nonexistent.gguf}]
models: [{name: smollm2, provider: local, pricing: {as: no-such-model-anywhere}}]
)",
                             FakeEnv({}));
  ASSERT_TRUE(unknown.has_value());
  auto refused = BuildTargets(*unknown, telemetry::PriceCatalog::BuiltIn(), nullptr);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("no-such-model-anywhere"), std::string::npos);
}

TEST(ConfigTest, TheBundledModelIsPricedForComparison) {
  const std::string model = testing::TempDir() + "/bundled.gguf";
  { FILE* f = std::fopen(model.c_str(), "w"); std::fclose(f); }
  auto config = DefaultConfig(FakeEnv({}), model);
  ASSERT_EQ(config.models.size(), 1u);
  EXPECT_EQ(config.models[0].name, "smollm2");
  EXPECT_EQ(config.models[0].price_as, "gpt-4o-mini");
  std::remove(model.c_str());
}

TEST(ConfigTest, ThreadsAuto) {
  auto on = ParseConfig("threads: {auto: true}\n", FakeEnv({}));
  ASSERT_TRUE(on.has_value());
  EXPECT_TRUE(on->auto_threads);
  EXPECT_TRUE(ParseConfig("{}\n", FakeEnv({}))->auto_threads);  // the default
  auto off = ParseConfig("threads: {auto: false}\n", FakeEnv({}));
  ASSERT_TRUE(off.has_value());
  EXPECT_FALSE(off->auto_threads);
  auto bad = ParseConfig("threads: {auto: maybe}\n", FakeEnv({}));
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("threads.auto"), std::string::npos);
  auto typo = ParseConfig("threads: {automatic: true}\n", FakeEnv({}));
  ASSERT_FALSE(typo.has_value());
}

TEST(ConfigTest, ADirectoryIsNotAConfigFile) {
  const std::string dir = ::testing::TempDir();
  auto config = LoadConfigFile(dir, FakeEnv({}));
  ASSERT_FALSE(config.has_value());
  EXPECT_NE(config.error().message.find("is a directory"), std::string::npos)
      << config.error().message;
}

}  // namespace kvgate::gateway

namespace kvgate::gateway {
namespace {

constexpr char kBedrock[] = R"(
providers:
  - {name: br, type: bedrock, region: us-east-1}
models:
  - {name: claude-br, provider: br, upstream_model: "anthropic.claude-sonnet-4-5-20250929-v1:0", api: invoke}
)";

TEST(ConfigTest, BedrockCredentialsFromConfigEnvironmentOrFile) {
  auto in_config = ParseConfig(
      "providers:\n  - {name: br, type: bedrock, region: eu-west-1, aws_access_key_id: ${K},\n"
      "     aws_secret_access_key: ${S}, aws_session_token: ${AWS_SESSION_TOKEN}}\n",
      FakeEnv({{"K", "AKID"}, {"S", "secret"}}));
  ASSERT_TRUE(in_config.has_value()) << in_config.error().message;
  const ProviderConfig& p = in_config->providers[0];
  EXPECT_EQ(p.base_url, "https://bedrock-runtime.eu-west-1.amazonaws.com");
  EXPECT_EQ(p.aws_access_key_id, "AKID");
  EXPECT_EQ(p.aws_secret_access_key, "secret");
  EXPECT_EQ(p.aws_session_token, "");
  EXPECT_TRUE(in_config->warnings.empty());  // the unset session token is not worth one

  auto from_env = ParseConfig(kBedrock, FakeEnv({{"AWS_ACCESS_KEY_ID", "E1"},
                                                 {"AWS_SECRET_ACCESS_KEY", "E2"},
                                                 {"AWS_SESSION_TOKEN", "E3"}}));
  ASSERT_TRUE(from_env.has_value()) << from_env.error().message;
  EXPECT_EQ(from_env->providers[0].aws_access_key_id, "E1");
  EXPECT_EQ(from_env->providers[0].aws_session_token, "E3");
  EXPECT_EQ(from_env->models[0].api, "invoke");

  char path[] = "/tmp/kvgate-aws-credentials-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string file =
      "[default]\naws_access_key_id = D1\naws_secret_access_key = D2\n"
      "[work]\naws_access_key_id=W1\n aws_secret_access_key = W2 \naws_session_token = W3\n";
  ASSERT_EQ(write(fd, file.data(), file.size()), static_cast<ssize_t>(file.size()));
  close(fd);
  auto from_file = ParseConfig(kBedrock, FakeEnv({{"AWS_SHARED_CREDENTIALS_FILE", path},
                                                  {"AWS_PROFILE", "work"}}));
  ASSERT_TRUE(from_file.has_value()) << from_file.error().message;
  EXPECT_EQ(from_file->providers[0].aws_access_key_id, "W1");
  EXPECT_EQ(from_file->providers[0].aws_secret_access_key, "W2");
  EXPECT_EQ(from_file->providers[0].aws_session_token, "W3");
  auto default_profile = ParseConfig(kBedrock, FakeEnv({{"AWS_SHARED_CREDENTIALS_FILE", path}}));
  ASSERT_TRUE(default_profile.has_value());
  EXPECT_EQ(default_profile->providers[0].aws_access_key_id, "D1");
  std::remove(path);

  auto none = ParseConfig(kBedrock, FakeEnv({{"HOME", "/nonexistent-kvgate-home"}}));
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message.find("no AWS credentials"), std::string::npos)
      << none.error().message;
}

TEST(ConfigTest, BedrockKeysAreChecked) {
  const auto env = FakeEnv({{"AWS_ACCESS_KEY_ID", "A"}, {"AWS_SECRET_ACCESS_KEY", "B"}});
  auto bearer = ParseConfig(
      "providers:\n  - {name: br, type: bedrock, region: us-east-1, api_key: k}\n", env);
  ASSERT_TRUE(bearer.has_value()) << bearer.error().message;
  EXPECT_TRUE(bearer->providers[0].aws_access_key_id.empty());  // the key, not the environment
  for (const auto& [yaml, message] : std::vector<std::pair<std::string, std::string>>{
           {"providers:\n  - {name: br, type: bedrock}\n", "region is required"},
           {"providers:\n  - {name: o, type: openai, base_url: http://x, region: us-east-1}\n",
            "only for type bedrock"},
           {"providers:\n  - {name: br, type: bedrock, region: r, api_key: k, "
            "aws_access_key_id: a, aws_secret_access_key: b}\n",
            "not both"},
           {"providers:\n  - {name: o, type: openai, base_url: http://x}\n"
            "models:\n  - {name: m, provider: o, api: invoke}\n",
            "api is only for models of bedrock providers"},
           {std::string(kBedrock).replace(std::string(kBedrock).find("api: invoke"), 11, "api: x"),
            "api must be converse or invoke"}}) {
    auto r = ParseConfig(yaml, env);
    ASSERT_FALSE(r.has_value()) << yaml;
    EXPECT_NE(r.error().message.find(message), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace kvgate::gateway
