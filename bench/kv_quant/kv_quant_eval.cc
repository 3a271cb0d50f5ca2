// kvgate_kv_quant_eval: what a KV cache dtype does to the model's output, against the f16 cache.
// bench/kv_quant/run.py drives it and turns its JSON lines into the table in docs/engine.md.
//
//   kvgate_kv_quant_eval score --model PATH --text FILE [--dtypes f16,bf16,int8,fp8] [--threads N]
//       Runs the text (BOS + its tokens) through the model once per dtype, as prefill chunks of
//       512 tokens, and prints one JSON line per dtype: for every position i, the negative
//       log-likelihood of token i + 1 ("nll"), the KL divergence KL(p_f16 || p_dtype) of the
//       next-token distributions ("kl", nats) and whether both argmaxes agree ("top1"). The
//       first dtype listed must be f16: it is the reference.
//   kvgate_kv_quant_eval generate --model PATH --prompts FILE [--max-tokens N] [--dtypes ...]
//       Greedy completions of every prompt (one per line, as a user message in the model's chat
//       template), all prompts batched in one engine per dtype, EOS ignored so that every
//       completion has exactly N tokens (default 64). One JSON line per (dtype, prompt):
//       {"dtype", "prompt", "tokens"}.
// Both run on the cpu backend (the only one that serves every dtype).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/model_eval/model_eval.h"
#include "kernels/cpu/thread_pool.h"
#include "local_engine/chat_template.h"
#include "local_engine/cpu_backend.h"
#include "local_engine/engine.h"
#include "local_engine/model.h"
#include "local_engine/tokenizer.h"

namespace kvgate::engine {
namespace {

using nlohmann::json;

constexpr const char* kUsage =
    "usage: kvgate_kv_quant_eval score --model PATH --text FILE [--dtypes f16,bf16,int8,fp8]\n"
    "                                  [--threads N]\n"
    "       kvgate_kv_quant_eval generate --model PATH --prompts FILE [--max-tokens N]\n"
    "                                  [--dtypes f16,bf16,int8,fp8] [--threads N]\n";

struct Args {
  std::string mode, model, text, prompts;
  std::vector<KvDtype> dtypes{KvDtype::kFp16, KvDtype::kBf16, KvDtype::kInt8, KvDtype::kFp8};
  int threads = 2;
  int max_tokens = 64;
};

int Fail(const std::string& what) {
  std::fprintf(stderr, "kvgate_kv_quant_eval: %s\n", what.c_str());
  return 1;
}

int Score(const Args& a) {
  if (a.dtypes.front() != KvDtype::kFp16) return Fail("score: the first dtype must be f16");
  std::string text;
  if (!bench::ReadTextFile(a.text, &text)) return Fail("cannot read " + a.text);
  auto file = GgufFile::Open(a.model);
  if (!file) return Fail(file.error().ToString());
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok) return Fail(tok.error().ToString());
  const std::vector<int32_t> ids = bench::TextTokenIds(**tok, text);
  kernels::cpu::ThreadPool pool(a.threads);
  auto backend = MakeCpuBackend(&pool, kernels::cpu::BestIsa());
  auto weights = LoadWeights(**file, *backend);
  if (!weights) return Fail(weights.error().ToString());
  const int64_t vocab = weights->dims.vocab;
  std::vector<float> ref;
  for (KvDtype dtype : a.dtypes) {
    auto lp = bench::TextLogProbs(*weights, *backend, dtype, ids);
    if (!lp) return Fail(std::string(KvDtypeName(dtype)) + ": " + lp.error().ToString());
    if (dtype == KvDtype::kFp16 && ref.empty()) ref = *lp;
    const json scores = bench::ScorePositions(ref, *lp, ids, vocab);
    std::cout << json{{"mode", "score"}, {"dtype", KvDtypeName(dtype)},
                      {"kv_bytes_per_token", KvBytesPerToken(weights->dims, dtype)},
                      {"tokens", ids.size()}, {"nll", scores["nll"]}, {"kl", scores["kl"]},
                      {"top1", scores["top1"]}}
                     .dump()
              << "\n" << std::flush;
  }
  return 0;
}

int Generate(const Args& a) {
  std::string all;
  if (!bench::ReadTextFile(a.prompts, &all)) return Fail("cannot read " + a.prompts);
  const auto lines = std::count(all.begin(), all.end(), '\n') + 1;  // >= the prompts: all in one batch
  for (KvDtype dtype : a.dtypes) {
    EngineOptions opts{.model_path = a.model, .threads = a.threads};
    opts.kv_cache_dtype = dtype;
    opts.max_running = static_cast<int32_t>(lines);
    auto engine = Engine::Create(opts);
    if (!engine) return Fail(engine.error().ToString());
    Engine& e = **engine;
    auto prompts = bench::ChatPromptIds(e.gguf(), e.tokenizer(), a.prompts);
    if (!prompts) return Fail(prompts.error().ToString());
    std::vector<std::vector<int32_t>> out(prompts->size());
    for (size_t p = 0; p < prompts->size(); ++p) {
      SamplingParams sp;
      sp.max_tokens = a.max_tokens;
      sp.ignore_eos = true;
      auto id = e.AddRequest(EngineRequest{(*prompts)[p], sp, [&out, p](const TokenEvent& ev) {
                                             if (ev.token_id >= 0) out[p].push_back(ev.token_id);
                                           }});
      if (!id) return Fail(id.error().ToString());
    }
    while (e.HasWork()) {
      if (auto s = e.Step(); !s) return Fail(s.error().ToString());
    }
    for (size_t p = 0; p < out.size(); ++p) {
      std::cout << json{{"mode", "generate"}, {"dtype", KvDtypeName(dtype)}, {"prompt", p},
                        {"tokens", out[p]}}
                       .dump()
                << "\n";
    }
    std::cout << std::flush;
  }
  return 0;
}

int Main(int argc, char** argv) {
  Args a;
  if (argc < 2) return std::fputs(kUsage, stderr), 2;
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return std::fputs(kUsage, stderr), 2;
    const std::string v = argv[++i];
    if (flag == "--model") {
      a.model = v;
    } else if (flag == "--text") {
      a.text = v;
    } else if (flag == "--prompts") {
      a.prompts = v;
    } else if (flag == "--threads") {
      a.threads = std::stoi(v);
    } else if (flag == "--max-tokens") {
      a.max_tokens = std::stoi(v);
    } else if (flag == "--dtypes") {
      a.dtypes.clear();
      std::istringstream names(v);
      for (std::string name; std::getline(names, name, ',');) {
        auto d = ParseKvCacheDtype(name);
        if (!d) return Fail("--dtypes: " + d.error().message);
        a.dtypes.push_back(*d);
      }
      if (a.dtypes.empty()) return Fail("--dtypes: none given");
    } else {
      return std::fputs(kUsage, stderr), 2;
    }
  }
  if (a.model.empty()) return std::fputs(kUsage, stderr), 2;
  if (a.mode == "score" && !a.text.empty()) return Score(a);
  if (a.mode == "generate" && !a.prompts.empty()) return Generate(a);
  return std::fputs(kUsage, stderr), 2;
}

}  // namespace
}  // namespace kvgate::engine

int main(int argc, char** argv) { return kvgate::engine::Main(argc, argv); }
