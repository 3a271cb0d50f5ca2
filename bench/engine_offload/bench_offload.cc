// kvgate_bench_offload: time to first token of one long prompt served four ways by the built-in
// engine: from the KV pool (a prefix hit), from the disk offload tier and from the host-memory
// tier (after the pool evicted it), and recomputed (cold).
//
//   kvgate_bench_offload --model PATH [--threads 2] [--prompt-tokens 1900] [--reps 3]
//                        [--tier /tmp/kvgate_bench_offload.tier]
//
// Protocol, per repetition, on one engine whose pool holds one such prompt and whose tier holds
// several: prompt P (new token ids each repetition) cold -> recompute; P again -> pool; an
// unrelated prompt of the same length (evicting P's blocks into the tier); P again -> disk, with
// the tier file in the page cache (it was just written); the unrelated prompt again and P once
// more after the tier file's pages were dropped (fdatasync + POSIX_FADV_DONTNEED on that file
// only) -> disk (cold). A second engine, the same but for a host-memory tier (offload.host_bytes)
// in place of the file, takes P, the unrelated prompt, and P again -> host. TTFT = AddRequest
// until the first token's callback; one token generated.
// Prints one JSON object per measurement and the medians.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "local_engine/engine.h"
#include "local_engine/offload_tier.h"

using namespace kvgate::engine;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<int32_t> SyntheticPrompt(int n, int64_t vocab, int seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ids[static_cast<size_t>(i)] =
        static_cast<int32_t>(100 + (int64_t{i} * 7919 + int64_t{seed} * 104729) % (vocab - 200));
  }
  return ids;
}

struct Run {
  double ttft_ms = 0;
  Usage usage;
};

Run Ttft(Engine& e, const std::vector<int32_t>& prompt) {
  Run run;
  SamplingParams sp;
  sp.max_tokens = 1;
  sp.ignore_eos = true;
  const auto start = Clock::now();
  bool first = false;
  auto id =
      e.AddRequest({prompt, sp, [&](const TokenEvent& ev) {
                      if (ev.token_id >= 0 && !first) {
                        first = true;
                        run.ttft_ms =
                            std::chrono::duration<double, std::milli>(Clock::now() - start).count();
                      }
                      run.usage = ev.usage;
                    }});
  if (!id) {
    std::fprintf(stderr, "%s\n", id.error().ToString().c_str());
    std::exit(1);
  }
  while (e.HasWork()) {
    if (!e.Step()) std::exit(1);
  }
  return run;
}

void DropPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, tier = "/tmp/kvgate_bench_offload.tier";
  int threads = 2, prompt_tokens = 1900, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model")
      model = v;
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--prompt-tokens")
      prompt_tokens = std::stoi(v);
    else if (a == "--reps")
      reps = std::stoi(v);
    else if (a == "--tier")
      tier = v;
  }
  ::unlink(tier.c_str());
  EngineOptions opts;
  opts.model_path = model;
  opts.threads = threads;
  // The pool holds one prompt (and its one generated token), so the next prompt evicts it all.
  opts.num_kv_blocks = (prompt_tokens + 1 + kBlockSize - 1) / kBlockSize + 1;
  EngineOptions host_opts = opts;
  opts.offload.disk_path = tier;
  opts.offload.bytes = int64_t{4} * opts.num_kv_blocks *
                       OffloadTier::SlotBytes(static_cast<size_t>(23040) * kBlockSize);
  host_opts.offload.host_bytes = int64_t{4} * opts.num_kv_blocks * 23040 * kBlockSize;
  auto engine = Engine::Create(opts);
  if (!engine) {
    std::fprintf(stderr, "%s\n", engine.error().ToString().c_str());
    return 1;
  }
  auto host_engine = Engine::Create(host_opts);
  if (!host_engine) {
    std::fprintf(stderr, "%s\n", host_engine.error().ToString().c_str());
    return 1;
  }
  Engine& e = **engine;
  Engine& h = **host_engine;
  std::printf(
      "{\"context_length\": %lld, \"prompt_tokens\": %d, \"threads\": %d, \"backend\": \"%s\"}\n",
      static_cast<long long>(e.dims().context_length), prompt_tokens, threads,
      std::string(e.backend_name()).c_str());
  const int64_t vocab = e.dims().vocab;
  std::map<std::string, std::vector<double>> ttft;
  auto report = [&](const char* kind, int rep, const Run& r) {
    ttft[kind].push_back(r.ttft_ms);
    std::printf(
        "{\"rep\": %d, \"kind\": \"%s\", \"ttft_ms\": %.1f, \"cached_tokens\": %d, "
        "\"cached_offload_tokens\": %d}\n",
        rep, kind, r.ttft_ms, r.usage.cached_tokens, r.usage.cached_offload_tokens);
    std::fflush(stdout);
  };
  for (int rep = 0; rep < reps; ++rep) {
    const auto p = SyntheticPrompt(prompt_tokens, vocab, 2 * rep + 1);
    const auto other = SyntheticPrompt(prompt_tokens, vocab, 2 * rep + 2);
    report("recompute", rep, Ttft(e, p));
    report("pool", rep, Ttft(e, p));
    Ttft(e, other);  // evicts p into the tier
    report("disk_page_cache", rep, Ttft(e, p));
    Ttft(e, other);  // other from the tier, evicting p from the pool again (p stays in the tier)
    DropPageCache(tier);
    report("disk_cold", rep, Ttft(e, p));
    Ttft(h, p);
    Ttft(h, other);  // evicts p into the host tier
    report("host", rep, Ttft(h, p));
  }
  const double recompute = Median(ttft["recompute"]);
  std::printf(
      "{\"median_ttft_ms\": {\"pool\": %.1f, \"host\": %.1f, \"disk_page_cache\": %.1f, "
      "\"disk_cold\": %.1f, \"recompute\": %.1f}, \"disk_cold_over_recompute\": %.3f}\n",
      Median(ttft["pool"]), Median(ttft["host"]), Median(ttft["disk_page_cache"]),
      Median(ttft["disk_cold"]), recompute,
      recompute > 0 ? Median(ttft["disk_cold"]) / recompute : 0.0);
  ::unlink(tier.c_str());
  return 0;
}
