// kvgate: the gateway (`serve`), the engine alone (`engine`), and engine tools (`generate`,
// `kv-size`). main owns every long-lived object and passes them down; nothing is global.
#include <signal.h>
#include <chrono>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "gateway/alerting.h"
#include "gateway/config.h"
#include "gateway/gateway.h"
#include "gateway/sigv4_command.h"
#include "gateway/http/server.h"
#include "gateway/local_provider.h"
#include "gateway/recorder.h"
#include "gateway/targets.h"
#include "local_engine/cli_generate.h"
#include "local_engine/device.h"
#include "local_engine/kv_size.h"
#include "telemetry/key_store.h"
#include "telemetry/metrics.h"
#include "telemetry/store.h"

#ifdef KVGATE_WITH_MIMALLOC
#include <mimalloc.h>
#endif

namespace {

using namespace kvgate;

// How often a replica on PostgreSQL re-reads the gateway keys and their spend (docs/deployment.md:
// a budget may overshoot by what the other replicas spend in this time).
constexpr std::chrono::milliseconds kSharedKeysRefresh(2'000);

constexpr char kUsage[] =
    "usage: kvgate <command> [options]\n"
    "\n"
    "commands:\n"
    "  serve     [--config FILE] [--listen HOST:PORT] [--db PATH]\n"
    "            run the gateway (default: 127.0.0.1:8080, ./kvgate.db, providers from\n"
    "            OPENAI_API_KEY / ANTHROPIC_API_KEY / DEEPSEEK_API_KEY / ..., and the bundled\n"
    "            model on the built-in engine as `smollm2`)\n"
    "  engine    --model PATH [--port N] [--host H] [--kv-cache-tokens N] [--name NAME] [--db PATH]\n"
    "            [--device cpu|cuda] [--gpu-memory-fraction F] [--kv-cache-dtype f16|bf16|int8|fp8]\n"
    "            the built-in engine alone as an OpenAI-compatible server (model name: NAME,\n"
    "            default smollm2), for other gateways or a kvgate on another host; KV pool:\n"
    "            16384 tokens on cpu, on cuda F (default 0.9) of the GPU memory left after the\n"
    "            weights unless --kv-cache-tokens is given; its element type f16 (default),\n"
    "            bf16, or int8 / fp8 (half the memory per token; cpu only)\n"
    "  generate  --model PATH [--chat] --prompt TEXT --max-tokens N [--temperature T] [--seed S]\n"
    "            [--device cpu|cuda] [--cuda-graphs] [--kv-cache-dtype f16|bf16|int8|fp8]\n"
    "            run the built-in engine once and stream the text to stdout\n"
    "  kv-size   [--model NAME | --gguf PATH | --hf-config PATH] [--dtype T] [--context N]\n"
    "            [--gpu-mem SIZE] [--gpu-memory-utilization F] [--weights SIZE]\n"
    "            KV-cache bytes per token and sessions that fit in GPU memory\n"
    "  sigv4-sign  < REQUEST.json\n"
    "            the Bedrock signer: a request as JSON on stdin, its AWS SigV4 headers as JSON on\n"
    "            stdout (to check it against other SigV4 implementations)\n"
    "  version   print the version\n"
    "\n"
    "`kvgate <command> --help` lists that command's own flags.\n";

// Each command's own flags, for `kvgate <command> --help` (generate and kv-size print theirs).
constexpr char kServeUsage[] =
    "usage: kvgate serve [--config FILE] [--listen HOST:PORT] [--db PATH]\n"
    "  run the gateway\n"
    "  --config FILE       the YAML config (docs/configuration.md); without one: providers from\n"
    "                      OPENAI_API_KEY / ANTHROPIC_API_KEY / DEEPSEEK_API_KEY /\n"
    "                      GEMINI_API_KEY / OPENROUTER_API_KEY, and the bundled model on the\n"
    "                      built-in engine as `smollm2`\n"
    "  --listen HOST:PORT  where to listen, over the config's server.listen (default\n"
    "                      127.0.0.1:8080)\n"
    "  --db PATH           the SQLite file of request records, over the config's storage.sqlite\n"
    "                      (default ./kvgate.db; not with storage.postgres)\n";

constexpr char kEngineUsage[] =
    "usage: kvgate engine --model PATH [--port N] [--host H] [--name NAME] [--db PATH]\n"
    "                     [--device cpu|cuda] [--kv-cache-tokens N] [--gpu-memory-fraction F]\n"
    "                     [--kv-cache-dtype f16|bf16|int8|fp8]\n"
    "  the built-in engine alone as an OpenAI-compatible server, for other gateways or a kvgate\n"
    "  on another host\n"
    "  --model PATH              the GGUF model (required)\n"
    "  --port N                  the port (default 8000)\n"
    "  --host H                  the address to listen on (default 127.0.0.1)\n"
    "  --name NAME               the model name clients ask for (default smollm2)\n"
    "  --db PATH                 the SQLite file of request records (default ./kvgate.db)\n"
    "  --device cpu|cuda         where the model runs (default cpu)\n"
    "  --kv-cache-tokens N       the KV pool in tokens (default: 16384 on cpu; on cuda the\n"
    "                            --gpu-memory-fraction share)\n"
    "  --gpu-memory-fraction F   cuda: the share, in (0, 1], of the GPU memory left after the\n"
    "                            weights that the KV pool takes (default 0.9)\n"
    "  --kv-cache-dtype T        the KV cache's element type: f16 (default), bf16, or int8 / fp8\n"
    "                            (half the memory per token; cpu only)\n";

constexpr char kVersionUsage[] =
    "usage: kvgate version\n"
    "  print kvgate's version and which malloc serves it (it takes no flags)\n";

constexpr char kSigV4SignUsage[] =
    "usage: kvgate sigv4-sign < REQUEST.json\n"
    "  sign one request as kvgate signs its Bedrock calls (AWS SigV4) and print the result; it\n"
    "  takes no flags. stdin: {\"method\", \"host\", \"path\", \"query\", \"headers\": [[name,\n"
    "  value], ...], \"body\", \"access_key_id\", \"secret_access_key\", \"session_token\",\n"
    "  \"region\", \"service\", \"unix_seconds\"}; stdout: {\"headers\", \"canonical_request\",\n"
    "  \"string_to_sign\"}\n";

// Which malloc serves this process. The build may link mimalloc (KVGATE_ALLOCATOR); this checks that
// the dynamic linker really resolved malloc to it, which linking alone does not prove.
std::string MallocName() {
#ifdef KVGATE_WITH_MIMALLOC
  void* probe = std::calloc(1, 64);  // calloc: GCC 12 flags passing malloc'd bytes as const void*
  const bool interposed = mi_is_in_heap_region(probe);
  std::free(probe);
  const int v = mi_version();  // e.g. 209 for 2.0.9
  const std::string version =
      std::to_string(v / 100) + "." + std::to_string(v / 10 % 10) + "." + std::to_string(v % 10);
  return interposed ? "mimalloc " + version : "system (mimalloc " + version + " linked but not in use)";
#else
  return "system";
#endif
}

// The bundled model: next to the working directory, or next to the source tree of this binary
// (build/bin/kvgate -> ../../models).
std::string FindBundledModel(const char* argv0) {
  const std::string name = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::error_code ec;
  if (std::filesystem::exists(name, ec)) return name;
  auto exe = std::filesystem::weakly_canonical(std::filesystem::path(argv0), ec);
  if (!ec) {
    auto candidate = exe.parent_path().parent_path().parent_path() / name;
    if (std::filesystem::exists(candidate, ec)) return candidate.string();
  }
  return name;
}

// Runs the gateway with `config` until SIGTERM/SIGINT.
int RunGateway(gateway::GatewayConfig config);

// `kvgate engine`: a config with one local provider, served like the gateway (so usage, metrics and
// the lookup API are the same).
int Engine(int argc, char** argv) {
  gateway::GatewayConfig config;
  std::string model_path, name = "smollm2", host = "127.0.0.1", device = "cpu", kv_dtype = "f16";
  long port = 8000, kv_tokens = 0;  // 0: 16384 on cpu, gpu_memory_fraction on cuda
  double fraction = 0.9;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "kvgate engine: %s needs a value\n%s", arg.c_str(), kEngineUsage);
      return 2;
    }
    std::string value = argv[++i];
    char* end = nullptr;
    if (arg == "--model") {
      model_path = value;
    } else if (arg == "--name") {
      name = value;
    } else if (arg == "--host") {
      host = value;
    } else if (arg == "--db") {
      config.sqlite_path = value;
    } else if (arg == "--port" && (port = std::strtol(value.c_str(), &end, 10), *end == '\0') &&
               port >= 0 && port <= 65535) {
    } else if (arg == "--kv-cache-tokens" &&
               (kv_tokens = std::strtol(value.c_str(), &end, 10), *end == '\0') && kv_tokens > 0) {
    } else if (arg == "--device" && engine::ParseDevice(value)) {
      device = value;
    } else if (arg == "--kv-cache-dtype" && engine::ParseKvCacheDtype(value)) {
      kv_dtype = value;
    } else if (arg == "--gpu-memory-fraction" &&
               (fraction = std::strtod(value.c_str(), &end), *end == '\0') && fraction > 0.0 &&
               fraction <= 1.0) {
    } else {
      static constexpr std::string_view kKnown[] = {"--model", "--name", "--host", "--db", "--port",
                                                    "--kv-cache-tokens", "--device",
                                                    "--gpu-memory-fraction", "--kv-cache-dtype"};
      const bool known = std::find(std::begin(kKnown), std::end(kKnown), arg) != std::end(kKnown);
      std::fprintf(stderr, known ? "kvgate engine: bad value for %s: %s\n%s"
                                 : "kvgate engine: unknown option %s (value %s)\n%s",
                   arg.c_str(), value.c_str(), kEngineUsage);
      return 2;
    }
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "kvgate engine: --model PATH is required\n%s", kEngineUsage);
    return 2;
  }
  if (auto s = engine::CheckDevice(*engine::ParseDevice(device)); !s) {
    std::fprintf(stderr, "kvgate engine: %s; use --device cpu\n", s.error().message.c_str());
    return 1;
  }
  if (kv_tokens == 0 && device == "cpu") kv_tokens = 16384;
  config.source = "kvgate engine";
  config.listen_host = host;
  config.listen_port = static_cast<uint16_t>(port);
  config.providers.push_back(
      {.name = "local",
       .type = std::string(telemetry::ProviderTypeName(telemetry::ProviderType::kLocal)),
       .model_path = model_path,
       .kv_cache_tokens = kv_tokens,
       .kv_cache_dtype = kv_dtype,
       .device = device,
       .gpu_memory_fraction = fraction});
  config.models.push_back({.name = name, .provider = "local", .upstream_model = name});
  if (auto valid = gateway::ValidateConfig(config); !valid) {
    std::fprintf(stderr, "kvgate engine: %s\n", valid.error().message.c_str());
    return 2;
  }
  return RunGateway(std::move(config));
}

int Serve(int argc, char** argv) {
  std::string config_path, listen_override, db_override;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kvgate serve: %s needs a value\n", flag);
        return nullptr;
      }
      return argv[++i];
    };
    const char* v = nullptr;
    if (arg == "--config" && (v = value("--config"))) {
      config_path = v;
    } else if (arg == "--listen" && (v = value("--listen"))) {
      listen_override = v;
    } else if (arg == "--db" && (v = value("--db"))) {
      db_override = v;
    } else {
      if (v == nullptr && (arg == "--config" || arg == "--listen" || arg == "--db")) return 2;
      std::fprintf(stderr, "kvgate serve: unknown option %s\n%s", arg.c_str(), kServeUsage);
      return 2;
    }
  }

  auto env = gateway::ProcessEnv();
  gateway::GatewayConfig config;
  if (!config_path.empty()) {
    auto loaded = gateway::LoadConfigFile(config_path, env);
    if (!loaded) {
      std::fprintf(stderr, "kvgate: %s\n", loaded.error().message.c_str());
      return 2;
    }
    if (loaded->models.empty()) {  // an empty file, or a typo'd section name
      std::fprintf(stderr, "kvgate: %s: no models: the config needs a `models:` list "
                   "(docs/configuration.md)\n", config_path.c_str());
      return 2;
    }
    config = std::move(*loaded);
  } else {
    config = gateway::DefaultConfig(env, FindBundledModel(argv[0]));
  }
  if (!listen_override.empty()) {
    auto overridden = gateway::ParseConfig(
        "server: {listen: \"" + listen_override + "\"}", env, "--listen");
    if (!overridden) {
      std::fprintf(stderr, "kvgate: %s\n", overridden.error().message.c_str());
      return 2;
    }
    config.listen_host = overridden->listen_host;
    config.listen_port = overridden->listen_port;
  }
  if (!db_override.empty()) {
    if (!config.postgres.empty()) {
      std::fprintf(stderr, "kvgate: --db names a SQLite file, but %s sets storage.postgres\n",
                   config.source.c_str());
      return 2;
    }
    config.sqlite_path = db_override;
  }
  if (auto valid = gateway::ValidateConfig(config); !valid) {
    std::fprintf(stderr, "kvgate: %s\n", valid.error().message.c_str());
    return 2;
  }
  return RunGateway(std::move(config));
}

// A restarted gateway picks up where it left off: the last turn of each thread seen in the past day
// goes back to the thread tracker, so the thread's next turn is still diagnosed (a day is well past
// every provider's cache TTL, so older threads' next turns could only say "expired").
void RestoreThreads(const Clock& clock, gateway::Recorder& recorder) {
  constexpr int64_t kRestoreWindowUs = 24LL * 3600 * 1'000'000;
  auto restored = recorder.RestoreThreads(clock.NowUnixMicros() - kRestoreWindowUs);
  if (!restored) {  // not fatal: those threads' next turns are simply not diagnosed
    std::fprintf(stderr, "kvgate: warning: cannot restore threads for cache diagnosis: %s\n",
                 restored.error().message.c_str());
    return;
  }
  if (restored->threads > 0) {
    std::fprintf(stderr, "kvgate: restored the last turn of %zu threads for cache diagnosis\n",
                 restored->threads);
  }
  if (restored->unreadable > 0) {
    std::fprintf(stderr, "kvgate: warning: %d threads' stored prompt fingerprints do not parse; "
                         "their next turns are not diagnosed\n", restored->unreadable);
  }
}

int RunGateway(gateway::GatewayConfig config) {
  for (const auto& warning : config.warnings) {
    std::fprintf(stderr, "kvgate: warning: %s\n", warning.c_str());
  }

  auto catalog = telemetry::PriceCatalog::BuiltIn();
  if (!config.price_catalog_path.empty()) {
    std::ifstream in(config.price_catalog_path);
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = nlohmann::json::parse(text.str(), nullptr, false);
    if (!in || parsed.is_discarded()) {
      std::fprintf(stderr, "kvgate: cannot read price catalog %s (missing or not JSON)\n",
                   config.price_catalog_path.c_str());
      return 2;
    }
    if (auto merged = catalog.MergeJson(parsed); !merged) {
      std::fprintf(stderr, "kvgate: price catalog %s: %s\n", config.price_catalog_path.c_str(),
                   merged.error().message.c_str());
      return 2;
    }
  }

  if (!config.caching_rules.is_null()) {
    if (auto merged = catalog.MergeCachingRules(config.caching_rules); !merged) {
      std::fprintf(stderr, "kvgate: pricing.caching_rules: %s\n", merged.error().message.c_str());
      return 2;
    }
  }

  // Block the shutdown signals before any thread starts, so every thread inherits the mask and
  // only sigwait() below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // a closed terminal: drain and flush too, never just die
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  SystemClock clock;
  // The telemetry database: the SQLite file, or PostgreSQL (whose crash journal needs a local
  // path).
  const bool on_postgres = !config.postgres.empty();
  telemetry::StoreOptions store_options{.commit_interval = config.commit_interval,
                                        .journal = config.journal,
                                        .journal_path = config.journal_path};
  if (on_postgres && store_options.journal_path.empty()) {
    store_options.journal_path = "./kvgate-journal";
  }
  const std::string store_name =
      on_postgres ? "PostgreSQL " + telemetry::RedactConninfo(config.postgres) : config.sqlite_path;
  auto store = on_postgres
                   ? telemetry::TelemetryStore::OpenPostgres(config.postgres, clock, store_options)
                   : telemetry::TelemetryStore::Open(config.sqlite_path, clock, store_options);
  if (!store) {
    std::fprintf(stderr, "kvgate: telemetry store %s: %s\n", store_name.c_str(),
                 store.error().message.c_str());
    return 1;
  }
  // Keys made through /api/keys live in the telemetry database's api_keys table: the SQLite file,
  // or the PostgreSQL database every replica shares (each re-reads keys and spend from it).
  auto key_store = on_postgres ? telemetry::KeyStore::OpenPostgres(config.postgres)
                               : telemetry::KeyStore::Open(config.sqlite_path);
  if (!key_store) {
    std::fprintf(stderr, "kvgate: key store %s: %s\n", store_name.c_str(),
                 key_store.error().message.c_str());
    return 1;
  }
  telemetry::MetricsRegistry registry;
  auto metrics = telemetry::GatewayMetrics::Create(registry, gateway::MetricsScopeOf(config));
  if (!metrics) {
    std::fprintf(stderr, "kvgate: metrics: %s\n", metrics.error().message.c_str());
    return 1;
  }

  registry.AddSection(
      [s = store->get()](std::string& out) { telemetry::ExposeStoreStats(s->stats(), out); });

  std::unique_ptr<gateway::LocalEngines> engines;
  bool has_local = false;
  for (const auto& p : config.providers) has_local |= gateway::HostsEngine(p);
  if (has_local) {
    auto started = gateway::LocalEngines::Start(config);
    if (!started) {
      std::fprintf(stderr, "kvgate: %s\n", started.error().message.c_str());
      return 1;
    }
    engines = std::move(*started);
    registry.AddSection([e = engines.get()](std::string& out) { e->ExposeMetrics(out); });
  }

  // Monitors, incidents and alert deliveries sit beside the telemetry: in the SQLite file, or in
  // the PostgreSQL database every replica shares (so an alert is sent once).
  const gateway::AlertStoreLocation alerts_path{.sqlite_path = on_postgres ? "" : config.sqlite_path,
                                                .postgres = config.postgres};
  auto alerting = gateway::Alerting::Start(config.alerts, alerts_path, clock, metrics->get());
  if (!alerting) {
    std::fprintf(stderr, "kvgate: %s: %s\n", config.source.c_str(), alerting.error().message.c_str());
    return 2;
  }
  auto targets = gateway::BuildTargets(config, catalog, engines.get());
  if (!targets) {
    std::fprintf(stderr, "kvgate: %s\n", targets.error().message.c_str());
    return 2;
  }
  auto router = router::Router::Create(std::move(*targets), config.routing, clock, &registry);
  if (!router) {
    std::fprintf(stderr, "kvgate: %s: %s\n", config.source.c_str(), router.error().message.c_str());
    return 2;
  }
  // On PostgreSQL other replicas may serve a thread's turns: read each thread's latest from the
  // database (docs/deployment.md), unless storage.shared_threads turns that off.
  gateway::Recorder recorder(**store, **metrics, **router,
                             /*shared_threads=*/on_postgres && config.shared_threads);
  RestoreThreads(clock, recorder);
  recorder.AddListener([a = alerting->get()](const telemetry::RequestRecord& record) {
    a->Submit(record);
  });
  // OpenTelemetry (telemetry.otlp): every finished request's spans and GenAI metrics, exported by
  // the exporter's own thread.
  std::unique_ptr<telemetry::otlp::Exporter> otlp;
  if (config.otlp) {
    auto dropped = registry.AddCounter(
        "kvgate_otlp_dropped_total",
        "Requests whose OpenTelemetry spans or metric points were dropped: the export queue was "
        "full, or the collector did not take their spans after retries.",
        {});
    if (!dropped) {
      std::fprintf(stderr, "kvgate: metrics: %s\n", dropped.error().message.c_str());
      return 1;
    }
    if (auto s = telemetry::alerts::CurlGlobalInit(); !s) {
      std::fprintf(stderr, "kvgate: otlp: %s\n", s.error().message.c_str());
      return 1;
    }
    otlp = telemetry::otlp::Exporter::Start(*config.otlp,
                                           (*dropped)->WithLabels(std::span<const std::string>()));
    recorder.AddListener(
        [e = otlp.get()](const telemetry::RequestRecord& record) { e->Observe(record); });
    std::fprintf(stderr, "kvgate: exporting OpenTelemetry (%s%s) to %s\n",
                 config.otlp->traces ? "traces" : "",
                 config.otlp->traces && config.otlp->metrics ? " and metrics"
                 : config.otlp->metrics                      ? "metrics"
                                                             : "",
                 config.otlp->endpoint.c_str());
  }
  gateway::GatewayDeps deps{.store = store->get(),
                            .metrics = metrics->get(),
                            .recorder = &recorder,
                            .clock = &clock,
                            .router = router->get(),
                            .engines = engines.get(),
                            .alerting = alerting->get(),
                            .key_store = key_store->get(),
                            .shared_keys_refresh = on_postgres ? kSharedKeysRefresh
                                                               : std::chrono::milliseconds(0)};
  auto gw = gateway::Gateway::Create(config, deps);
  if (!gw) {
    std::fprintf(stderr, "kvgate: %s\n", gw.error().message.c_str());
    return 2;
  }

  http::ServerOptions options;
  options.host = config.listen_host;
  options.port = config.listen_port;
  options.threads = config.threads > 0
                        ? config.threads
                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  (*gw)->PrepareLoops(static_cast<size_t>(options.threads));
  options.on_thread_start = [g = gw->get()](size_t index, boost::asio::any_io_executor executor) {
    g->OnLoopStart(index, std::move(executor));
  };
  options.on_rejected = [g = gw->get()](const http::Rejection& rejection) {
    return g->OnRejected(rejection);
  };
  options.on_expect_continue = [g = gw->get()](const http::Request& request) {
    return g->OnExpectContinue(request);
  };
  options.on_drain_timeout = [&recorder, ms = config.drain_timeout.count()] {
    std::fprintf(stderr, "kvgate: drain timeout (%lld ms) passed: cutting the requests still in "
                 "flight\n", static_cast<long long>(ms));
    recorder.MarkShutdownCut();
  };
  options.body_limit = config.body_limit;
  options.drain_timeout = config.drain_timeout;
  auto server = http::Server::Start(options, (*gw)->handler());
  if (!server) {
    std::fprintf(stderr, "kvgate: %s\n", server.error().message.c_str());  // names the address
    return 1;
  }
  std::string host = config.listen_host.find(':') != std::string::npos
                         ? "[" + config.listen_host + "]"
                         : config.listen_host;
  std::fprintf(stderr, "kvgate: %zu models and %zu routers from %s; telemetry in %s; malloc: %s\n",
               config.models.size(), config.routing.routers.size(), config.source.c_str(),
               store_name.c_str(), MallocName().c_str());
  if (config.admin_token.empty()) {
    const std::string warning(gateway::OpenAdminApiWarning());
    std::fprintf(stderr, "kvgate: warning: %s\n", warning.c_str());
  }
  std::fprintf(stderr, "kvgate: listening on http://%s:%u\n", host.c_str(), (*server)->port());
  std::fflush(stderr);

  int received = 0;
  sigwait(&signals, &received);
  std::fprintf(stderr, "kvgate: %s received, draining %zu in-flight requests\n",
               received == SIGTERM ? "SIGTERM" : received == SIGINT ? "SIGINT" : "SIGHUP",
               (*server)->in_flight());
  (*server)->Stop();
  (*gw)->ReleaseClients();
  (*gw)->FinishBlockingWork();
  // The engines' threads stop before the event loops are destroyed: a token callback running on
  // one must not touch a request's channel while its loop goes away.
  if (engines) engines->Stop();
  // Destroying the server destroys its event loops and with them any request coroutine cut off
  // at the drain deadline; their RequestLogs record them now, while the store is still open.
  server->reset();
  if (otlp) otlp->Stop();  // what is queued goes out, one try each
  (*alerting)->Stop();
  (*store)->Close();
  auto stats = (*store)->stats();
  std::fprintf(stderr, "kvgate: stopped; %llu requests recorded, %llu written\n",
               static_cast<unsigned long long>(stats.recorded),
               static_cast<unsigned long long>(stats.written));
  if (stats.write_errors > 0) {
    std::fprintf(stderr, "kvgate: %llu request records could not be written to %s (last error: %s)\n",
                 static_cast<unsigned long long>(stats.write_errors), store_name.c_str(),
                 stats.last_error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // SQLite's allocation statistics take a global mutex on every one of its mallocs and frees (about
  // 70 per recorded request); kvgate never reads them. Only valid before SQLite's first use.
  sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string command = argv[1];
  // The engine tools parse their own flags from argv[1] on (argv[0] is the subcommand) and print
  // their own flags for --help.
  if (command == "generate") return engine::RunGenerateCommand(argc - 1, argv + 1);
  if (command == "kv-size") return engine::RunKvSizeCommand(argc - 1, argv + 1);
  // `kvgate serve|engine|version|help --help` (or -h) anywhere: that command's flags, on stdout,
  // success. Checked before parsing: engine's parser would read --help as an option needing a
  // value. An unknown command stays an error, --help or not.
  const char* own_usage = command == "serve"     ? kServeUsage
                          : command == "engine"  ? kEngineUsage
                          : command == "version" ? kVersionUsage
                          : command == "sigv4-sign" ? kSigV4SignUsage
                          : command == "help"    ? kUsage
                                                 : nullptr;
  for (int i = 2; own_usage != nullptr && i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::fputs(own_usage, stdout);
      return 0;
    }
  }
  if (command == "serve") return Serve(argc, argv);
  if (command == "engine") return Engine(argc, argv);
  if (command == "sigv4-sign") return gateway::RunSigV4SignCommand();
  if (command == "version" || command == "--version") {
    std::printf("kvgate 0.1.0\nmalloc: %s\n", MallocName().c_str());
    return 0;
  }
  if (command == "help" || command == "-h" || command == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "kvgate: unknown command \"%s\"\n%s", command.c_str(), kUsage);
  return 2;
}
