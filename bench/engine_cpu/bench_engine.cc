// kvgate_bench_engine: prompt processing and generation speed of the built-in engine.
//
//   kvgate_bench_engine --model PATH [--threads N] [--prompt-tokens 512] [--gen-tokens 128]
//                       [--reps 3]
//
// Protocol (the same as bench.py's llama.cpp side): one request whose prompt is `prompt-tokens`
// synthetic token ids, greedy, end-of-generation ignored. Prompt processing = the time of the step
// that prefills the prompt (one 512-token batch); generation = the time of the following
// gen-tokens decode steps. Prints one JSON object per repetition.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "local_engine/engine.h"

using namespace kvgate::engine;

// Deterministic token ids spread over the vocabulary (shared with bench.py).
std::vector<int32_t> SyntheticPrompt(int n, int64_t vocab) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(100 + (int64_t{i} * 7919) % (vocab - 200));
  return ids;
}

int main(int argc, char** argv) {
  std::string model;
  int threads = 2, prompt_tokens = 512, gen_tokens = 128, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model = v;
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--prompt-tokens") prompt_tokens = std::stoi(v);
    else if (a == "--gen-tokens") gen_tokens = std::stoi(v);
    else if (a == "--reps") reps = std::stoi(v);
  }
  EngineOptions opts;
  opts.model_path = model;
  opts.threads = threads;
  opts.max_batch_tokens = prompt_tokens;
  opts.num_kv_blocks = (prompt_tokens + gen_tokens) / 16 + 2;
  auto engine = Engine::Create(opts);
  if (!engine) {
    std::fprintf(stderr, "%s\n", engine.error().ToString().c_str());
    return 1;
  }
  Engine& e = **engine;
  using Clock = std::chrono::steady_clock;
  for (int r = 0; r < reps; ++r) {
    SamplingParams sp;
    sp.max_tokens = gen_tokens + 1;  // the first token comes from the prefill step
    sp.ignore_eos = true;
    int generated = 0;
    auto id = e.AddRequest(EngineRequest{SyntheticPrompt(prompt_tokens, e.dims().vocab), sp,
                                         [&](const TokenEvent& ev) { generated += ev.token_id >= 0; }});
    if (!id) return std::fprintf(stderr, "%s\n", id.error().ToString().c_str()), 1;
    const auto t0 = Clock::now();
    if (!e.Step()) return 1;  // prefill (+ first token)
    const auto t1 = Clock::now();
    while (e.HasWork()) {
      if (!e.Step()) return 1;
    }
    const auto t2 = Clock::now();
    const double pp = std::chrono::duration<double>(t1 - t0).count();
    const double tg = std::chrono::duration<double>(t2 - t1).count();
    std::printf("{\"backend\": \"%s\", \"threads\": %d, \"prompt_tokens\": %d, \"pp_s\": %.4f, "
                "\"pp_tok_s\": %.2f, \"gen_tokens\": %d, \"tg_s\": %.4f, \"tg_tok_s\": %.2f}\n",
                std::string(e.backend_name()).c_str(), threads, prompt_tokens, pp,
                prompt_tokens / pp, generated - 1, tg, (generated - 1) / tg);
    std::fflush(stdout);
  }
  return 0;
}
